"""The loop's save after a batch (Scheduler.save_batch) sends the
changed pipelines' writes and does not wait for ZooKeeper's answer; what
follows the save (acknowledging the trigger events it holds, forgetting
the build records whose results are saved, the last-saved mark) is sent
on the same session once the writes landed, and held for the next save
when one did not. Real ZooKeeper; the waits are counted where kazoo waits
for an answer."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import pytest
from kazoo.handlers.threading import AsyncResult

from tests.harness.waiting import wait_for
from tests.unit.scheduler_support import ONE_CONFIG_PROJECT, check_config, start_system
from zuul.model.events import TriggerEvent
from zuul.zk.builds import BUILD_ROOT, BuildRecords
from zuul.zk.pipeline_state import ALIVE_PATH, PipelineStateStore, TriggerEventQueue

MAIN = ONE_CONFIG_PROJECT

CONFIG = check_config(jobs=())


class _CountingResult(AsyncResult):
    waits: list = []

    def get(self, block=True, timeout=None):
        if block:
            _CountingResult.waits.append(threading.current_thread().name)
        return super().get(block, timeout)


@pytest.fixture
def saving(tmp_path, zk_chroot):
    client = zk_chroot.client()
    scheduler, _ = start_system(tmp_path, MAIN, {'org/config': {'master': CONFIG}})
    scheduler.loop.stop()       # save_state is driven from the test's thread
    scheduler.state_store = PipelineStateStore(client)
    scheduler.event_queue = TriggerEventQueue(client)
    scheduler.executor.records = BuildRecords(client)
    scheduler.save_state()      # the first save reads what is there, marks
    yield SimpleNamespace(scheduler=scheduler, client=client)
    scheduler.stop()


def test_a_saves_follow_ups_cost_the_loop_no_wait(saving, monkeypatch):
    scheduler, client = saving.scheduler, saving.client
    paths = [scheduler.event_queue.put({'type': 'x', 'event_id': str(i)}) for i in range(3)]
    client.create(f'{BUILD_ROOT}/b-1', b'{}', makepath=True)
    scheduler._acks.extend(paths)
    scheduler._forget.append(SimpleNamespace(uuid='b-1'))
    scheduler._latest_changed = True        # a mark is due
    before = client.get(ALIVE_PATH)[0]
    monkeypatch.setattr(client.handler, 'async_result',
                        lambda: _CountingResult(client.handler))
    _CountingResult.waits.clear()
    time.sleep(0.01)                        # the mark's time differs
    scheduler.save_batch()
    me = threading.current_thread().name
    assert [w for w in _CountingResult.waits if w == me] == []
    # All of it landed (a read on the same session comes after them).
    monkeypatch.undo()
    assert scheduler.event_queue.pending() == []
    assert not client.exists(f'{BUILD_ROOT}/b-1')
    assert client.get(ALIVE_PATH)[0] != before


def test_an_acknowledgement_of_an_event_already_gone_still_removes_the_others(saving):
    scheduler, client = saving.scheduler, saving.client
    paths = [scheduler.event_queue.put({'type': 'x', 'event_id': str(i)}) for i in range(3)]
    client.delete(paths[1])     # acknowledged meanwhile (another scheduler)
    scheduler.event_queue.ack_many(paths, wait=False)
    deadline = time.monotonic() + 30
    while scheduler.event_queue.pending() and time.monotonic() < deadline:
        client.sync('/')
    assert scheduler.event_queue.pending() == []


@pytest.fixture
def changing(monkeypatch):
    """The pipelines' snapshot is ``{'n': n}``: bump ``n`` for a change."""
    state = {'n': 0}
    monkeypatch.setattr('zuul.scheduler.state.encode_snapshot',
                        lambda manager, nodes: json.dumps(state).encode('utf8'))
    return state


def _landed(scheduler):
    wait_for(lambda: scheduler.state_store.in_flight == 0, timeout=30, what='the writes')


def test_the_loops_save_sends_the_writes_without_waiting(saving, changing, monkeypatch):
    scheduler, client = saving.scheduler, saving.client
    scheduler.save_state()
    paths = [scheduler.event_queue.put({'type': 'x', 'event_id': str(i)}) for i in range(2)]
    scheduler._acks.extend(paths)
    changing['n'] = 1
    scheduler.mark_dirty('t1')
    monkeypatch.setattr(client.handler, 'async_result',
                        lambda: _CountingResult(client.handler))
    _CountingResult.waits.clear()
    assert scheduler.save_batch() == 1
    me = threading.current_thread().name
    assert [w for w in _CountingResult.waits if w == me] == []
    monkeypatch.undo()
    _landed(scheduler)
    assert PipelineStateStore(saving.client).load('t1', 'check') == {'n': 1}
    wait_for(lambda: scheduler.event_queue.pending() == [], timeout=30, what='the acks')


def test_events_of_a_save_that_did_not_land_are_acknowledged_after_the_next(saving, changing):
    scheduler, client = saving.scheduler, saving.client
    store = scheduler.state_store
    scheduler.save_state()
    path = store.path('t1', 'check')
    events = [scheduler.event_queue.put({'type': 'x', 'event_id': str(i)}) for i in range(2)]
    scheduler._acks.extend(events)
    # What this process believes of the pipeline's znode is stale (as
    # after a write whose answer was lost): the transaction is refused.
    store._current[path] = (999, 1)
    changing['n'] = 2
    scheduler.mark_dirty('t1')
    scheduler.save_batch()
    _landed(scheduler)
    client.sync('/')
    assert [p for p, _ in scheduler.event_queue.pending()] == events     # not acknowledged
    assert PipelineStateStore(saving.client).load('t1', 'check') != {'n': 2}
    # The next save reads the header, writes, and acknowledges them.
    scheduler.save_batch()
    _landed(scheduler)
    assert PipelineStateStore(saving.client).load('t1', 'check') == {'n': 2}
    wait_for(lambda: scheduler.event_queue.pending() == [], timeout=30, what='the acks')


MAIN_TWO = """
- tenant:
    name: t1
    source:
      gerrit:
        config-projects: [org/config]
- tenant:
    name: t2
    source:
      gerrit:
        config-projects: [org/config]
"""


CONFIG_TWO = CONFIG + """
- pipeline:
    name: nightly
    manager: independent
    trigger: {}
"""


@pytest.fixture
def two_tenants(tmp_path, zk_chroot, monkeypatch):
    client = zk_chroot.client()
    scheduler, _ = start_system(tmp_path, MAIN_TWO, {'org/config': {'master': CONFIG_TWO}})
    scheduler.loop.stop()
    scheduler.state_store = PipelineStateStore(client)
    scheduler.event_queue = TriggerEventQueue(client)
    scheduler.save_state()
    taken = []
    real = __import__('zuul.scheduler.state', fromlist=['encode_snapshot']).encode_snapshot

    def snapshot(manager, nodes):
        taken.append(next(t.name for t in scheduler.tenants.values()
                          if manager in t.managers.values()))
        taken_pipelines.append((taken[-1], manager.name))
        return real(manager, nodes)
    taken_pipelines = scheduler.taken_pipelines = []
    monkeypatch.setattr('zuul.scheduler.state.encode_snapshot', snapshot)
    yield scheduler, taken
    scheduler.stop()


def test_the_loops_save_snapshots_only_the_tenants_it_touched(two_tenants):
    scheduler, taken = two_tenants
    scheduler.mark_dirty('t2')                  # e.g. an event of t2 handled
    scheduler.save_batch()
    assert sorted(scheduler.taken_pipelines) == [('t2', 'check'), ('t2', 'nightly')]
    taken.clear()
    scheduler.save_batch()                      # nothing touched: nothing taken
    assert taken == []
    event = TriggerEvent(type='patchset-created', connection='gerrit', project='org/config',
                         change_number=1)
    event._tenant = 't1'
    scheduler.handle_trigger(event)
    scheduler.save_batch()
    assert sorted(set(taken)) == ['t1']
    # A result event of an item: only its pipeline.
    scheduler.taken_pipelines.clear()
    manager = scheduler.tenants['t1'].managers['nightly']
    item = SimpleNamespace(queue=manager.queues[0] if manager.queues else object())
    assert scheduler._pipeline_of_result({'item': item}) == (
        ('t1', 'nightly') if manager.queues else (None, None))
    scheduler.mark_dirty('t1', 'nightly')
    scheduler.mark_dirty('t1', 'nightly')
    scheduler.save_batch()
    assert scheduler.taken_pipelines == [('t1', 'nightly')]


def test_every_tenant_is_saved_now_and_then_and_after_a_write_did_not_land(two_tenants,
                                                                          monkeypatch):
    import zuul.scheduler.durable as scheduler_module
    scheduler, taken = two_tenants
    # A change the loop made without saying so is saved within the interval.
    monkeypatch.setattr(scheduler_module, 'FULL_SAVE_INTERVAL', 0.0)
    scheduler.save_batch()
    assert sorted(set(taken)) == ['t1', 't2']
    monkeypatch.setattr(scheduler_module, 'FULL_SAVE_INTERVAL', 3600.0)
    taken.clear()
    scheduler._after_save(([], [], None, []), wait=False, ok=False)
    scheduler.save_batch()
    assert sorted(set(taken)) == ['t1', 't2']
    # A management request may touch any tenant.
    taken.clear()
    scheduler.handle_management(SimpleNamespace(kind='tenant-list', args={},
                                                done=lambda **kw: None))
    scheduler.save_batch()
    assert sorted(set(taken)) == ['t1', 't2']


def test_a_pipeline_never_saved_is_first_written_without_waiting(zk_chroot, monkeypatch):
    client = zk_chroot.client()
    store = PipelineStateStore(client)
    # Restoring a tenant reads each pipeline: nothing there yet.
    assert store.load('t9', 'check') is None
    monkeypatch.setattr(client.handler, 'async_result',
                        lambda: _CountingResult(client.handler))
    _CountingResult.waits.clear()
    landed = threading.Event()
    assert store.save_many([('t9', 'check', {'a': 1})], then=lambda ok: ok and landed.set())
    me = threading.current_thread().name
    assert [w for w in _CountingResult.waits if w == me] == []
    monkeypatch.undo()
    assert landed.wait(30)
    assert PipelineStateStore(zk_chroot.client()).load('t9', 'check') == {'a': 1}
