"""A pass over the pipelines takes the tenants something happened to
(an event, a result, the previous pass's changes), every tenant at least
every FULL_PASS_INTERVAL, and every tenant after a global semaphore was
released (another tenant's item may take it)."""

from types import SimpleNamespace

from zuul.scheduler import scheduler as scheduler_module
from zuul.scheduler.scheduler import Scheduler, TenantState


class Manager:
    def __init__(self, log, name, changes=0):
        self.log, self.name, self.changes = log, name, changes
        self.pipeline = SimpleNamespace(name='check')

    def process_queues(self):
        self.log.append(self.name)
        if self.changes:
            self.changes -= 1
            return True
        return False


def _scheduler(log):
    scheduler = Scheduler(None, None, None, None, None)
    for name in ('t1', 't2', 't3'):
        state = TenantState(name, None)
        state.managers = {'check': Manager(log, name, changes=1 if name == 't2' else 0)}
        scheduler.tenants[name] = state
    return scheduler


def test_a_pass_takes_the_tenants_touched_and_all_now_and_then(monkeypatch):
    log = []
    scheduler = _scheduler(log)
    assert scheduler.process_pipelines()        # the first pass takes every tenant
    assert log == ['t1', 't2', 't3']
    log.clear()
    assert not scheduler.process_pipelines()    # t2 changed in the last pass
    assert log == ['t2']
    log.clear()
    scheduler.mark_dirty('t3', 'check')         # e.g. an event for t3
    assert not scheduler.process_pipelines() and log == ['t3']
    log.clear()
    assert not scheduler.process_pipelines() and log == []
    monkeypatch.setattr(scheduler_module, 'FULL_PASS_INTERVAL', 0.0)
    assert not scheduler.process_pipelines() and log == ['t1', 't2', 't3']


def test_a_released_global_semaphore_has_every_tenant_processed():
    log = []
    scheduler = _scheduler(log)
    scheduler.process_pipelines()
    scheduler.process_pipelines()
    log.clear()
    handler = scheduler.semaphore_handler('t1')
    key = ('buildset-uuid', 'job')
    handler.shared = SimpleNamespace(holders={'shared-sem': [key]}, tenants={key: 't1'})
    assert handler.release_key(key)
    assert not scheduler.process_pipelines() and log == ['t1', 't2', 't3']
    log.clear()
    handler.holders['own'] = [key]              # a tenant's own semaphore: no
    assert handler.release_key(key)
    assert not scheduler.process_pipelines() and log == []
