"""Pipeline and tenant limits acting on the managers:
``disable-after-consecutive-failures`` with the ``disabled`` reporters,
and the tenant's ``max-changes-per-pipeline`` and ``max-dependencies``."""

import logging

from tests.unit.pipeline_support import Collaborators, _change, _pipeline
from zuul.manager import manager_for
from zuul.scheduler.reporting import format_report


class LimitedCollaborators(Collaborators):
    def __init__(self, limits=None, **kw):
        super().__init__(**kw)
        self.limits = {'max_changes_per_pipeline': None, 'max_dependencies': None,
                       **(limits or {})}
        self.messages = []

    def tenant_limits(self):
        return dict(self.limits)

    def report(self, pipeline, item, action):
        if action == 'disabled':
            self.messages.append(format_report(pipeline, item, action))
        return super().report(pipeline, item, action)


def _setup(pipeline, **kw):
    ctx = LimitedCollaborators(**kw)
    ctx.manager = manager_for(pipeline, ctx)
    return ctx, ctx.manager


def _check(**kw):
    return _pipeline('check', 'independent', **kw)


# -- disable-after-consecutive-failures ----------------------------------------

def test_pipeline_disabled_after_consecutive_failures_reports_only_to_disabled():
    ctx, manager = _setup(_check(disable_after_consecutive_failures=2), broken={1, 2, 3, 4})
    for n in (1, 2):
        manager.add_change(_change(ctx, n))
        ctx.run()
    assert ctx.reports == [(1, 'failure'), (2, 'failure')]
    assert manager.disabled
    ctx.notices.clear()
    # Disabled: jobs still run, but results go to the disabled reporters
    # only (never success/failure) and no start report is made.
    manager.add_change(_change(ctx, 3))
    manager.add_change(_change(ctx, 5))   # succeeds
    ctx.run()
    assert sorted(ctx.reports[2:]) == [(3, 'disabled'), (5, 'disabled')]
    assert (5, 'start') not in ctx.notices and (3, 'start') not in ctx.notices
    assert [job for job, _, tested in ctx.history if tested == (5,)] == ['job1']
    # The disabled report carries the result it replaces.
    assert any(msg.startswith('Build failed.') for msg in ctx.messages)
    assert any(msg.startswith('Build succeeded.') for msg in ctx.messages)
    assert manager.disabled   # a success does not re-enable it


def test_success_resets_the_consecutive_failure_count():
    ctx, manager = _setup(_check(disable_after_consecutive_failures=2), broken={1, 3, 4})
    for n in (1, 2, 3):
        manager.add_change(_change(ctx, n))
        ctx.run()
    assert ctx.reports == [(1, 'failure'), (2, 'success'), (3, 'failure')]
    assert not manager.disabled and manager.consecutive_failures == 1
    manager.add_change(_change(ctx, 4))
    ctx.run()
    assert manager.disabled
    manager.add_change(_change(ctx, 6))
    ctx.run()
    assert ctx.reports[-1] == (6, 'disabled')


def test_without_the_key_failures_never_disable():
    ctx, manager = _setup(_check(), broken={1, 2, 3, 4})
    for n in (1, 2, 3, 4):
        manager.add_change(_change(ctx, n))
        ctx.run()
    assert not manager.disabled
    assert [a for _, a in ctx.reports] == ['failure'] * 4


def test_disabled_gate_merges_nothing_and_reconfiguration_reenables():
    pipeline = _pipeline(disable_after_consecutive_failures=1)
    ctx, manager = _setup(pipeline, broken={1})
    manager.add_change(_change(ctx, 1))
    ctx.run()
    assert manager.disabled
    manager.add_change(_change(ctx, 2))
    ctx.run()
    # Success went to the disabled reporters: no submit, no merge-failure report.
    assert ctx.reports == [(1, 'failure'), (2, 'disabled')]
    assert ctx.changes[2].status == 'NEW'
    # A reconfiguration builds a new manager (keeping the queues): enabled.
    new = manager_for(pipeline, ctx)
    new.queues = manager.queues
    ctx.manager = new
    new.add_change(_change(ctx, 3))
    ctx.run()
    assert ctx.reports[-1] == (3, 'success') and ctx.changes[3].status == 'MERGED'


# -- max-changes-per-pipeline --------------------------------------------------

def test_max_changes_per_pipeline_refuses_enqueue_beyond_limit(caplog):
    ctx, manager = _setup(_check(), limits={'max_changes_per_pipeline': 2})
    assert manager.add_change(_change(ctx, 1)) is not None
    assert manager.add_change(_change(ctx, 2)) is not None
    with caplog.at_level(logging.WARNING, logger='zuul.manager'):
        assert manager.add_change(_change(ctx, 3)) is None
    assert 'max-changes-per-pipeline' in caplog.text and '3,1' in caplog.text
    assert manager.changes_in_pipeline() == 2
    ctx.run()
    assert sorted(ctx.reports) == [(1, 'success'), (2, 'success')]  # 3: not reported
    # Once the pipeline has room again, the change is accepted.
    assert manager.add_change(_change(ctx, 3)) is not None


def test_max_changes_per_pipeline_counts_non_live_dependencies():
    ctx, manager = _setup(_check(), needs={2: [1]}, limits={'max_changes_per_pipeline': 2})
    _change(ctx, 1)
    assert manager.add_change(_change(ctx, 2)) is not None   # 1 (non-live) + 2
    assert manager.add_change(_change(ctx, 3)) is None
    assert not ctx.notices or all(n != 3 for n, _ in ctx.notices)


def test_max_changes_per_pipeline_in_gate_counts_changes_it_would_pull_in():
    ctx, manager = _setup(_pipeline(), needs={3: [2]}, limits={'max_changes_per_pipeline': 2})
    manager.add_change(_change(ctx, 1))
    _change(ctx, 2)
    assert manager.add_change(_change(ctx, 3)) is None     # would add 2 and 3
    assert [i.change.number for i in manager.all_items()] == [1]


def test_max_changes_per_pipeline_zero_allows_nothing():
    ctx, manager = _setup(_check(), limits={'max_changes_per_pipeline': 0})
    assert manager.add_change(_change(ctx, 1)) is None


# -- max-dependencies -----------------------------------------------------------

def test_max_dependencies_refuses_change_with_more_dependencies(caplog):
    ctx, manager = _setup(_pipeline(), needs={3: [2], 2: [1]},
                          limits={'max_dependencies': 1})
    _change(ctx, 1)
    ctx.needs[3] = [1, 2]   # the collaborator lists needed changes transitively
    _change(ctx, 2)
    with caplog.at_level(logging.WARNING, logger='zuul.manager'):
        assert manager.add_change(_change(ctx, 3)) is None
    assert 'max-dependencies' in caplog.text
    assert not list(manager.all_items())
    assert ctx.reports == [] and ctx.notices == []
    # One dependency is within the limit.
    assert manager.add_change(ctx.changes[2]) is not None


def test_max_dependencies_zero_limits_to_no_dependencies():
    ctx, manager = _setup(_check(), needs={2: [1]}, limits={'max_dependencies': 0})
    _change(ctx, 1)
    assert manager.add_change(_change(ctx, 2)) is None
    assert manager.add_change(ctx.changes[1]) is not None


# -- from the tenant file to the manager --------------------------------------

def test_tenant_limits_load_and_reach_the_managers(tmp_path):
    from types import SimpleNamespace

    from tests.unit.test_tenant_config import _write
    from zuul.configloader.tenant import load_tenant_config
    from zuul.scheduler.context import SchedulerContext

    result = load_tenant_config(_write(tmp_path, '''
        - tenant:
            name: t1
            max-changes-per-pipeline: 0
            max-dependencies: 3
            source: {}
        - tenant:
            name: t2
            source: {}
        '''))
    assert result.errors == []
    t1, t2 = result.tenants['t1'], result.tenants['t2']
    assert (t1.max_changes_per_pipeline, t1.max_dependencies) == (0, 3)
    assert (t2.max_changes_per_pipeline, t2.max_dependencies) == (None, None)
    scheduler = SimpleNamespace(layouts=None)
    ctx = SchedulerContext(scheduler, SimpleNamespace(layout=SimpleNamespace(tenant=t1)))
    assert ctx.tenant_limits() == {'max_changes_per_pipeline': 0, 'max_dependencies': 3}


# -- allow-other-connections ---------------------------------------------------

def _other(ctx, number, project='org/other'):
    change = _change(ctx, number, project)
    change.connection = 'github'
    return change


def test_allow_other_connections_false_refuses_changes_of_other_connections():
    for pipeline in (_pipeline(), _check()):
        pipeline.allow_other_connections = False
        pipeline.connection_drivers = {'gerrit': 'gerrit'}
        ctx, manager = _setup(pipeline, needs={3: [2]})
        assert manager.add_change(_other(ctx, 1)) is None
        # Nor as a dependency: the change needing it is not enqueued either.
        _other(ctx, 2)
        assert manager.add_change(_change(ctx, 3)) is None
        assert manager.add_change(_change(ctx, 4)) is not None
        assert [i.change.number for i in manager.all_items()] == [4]


def test_allow_other_connections_default_accepts_any_connection():
    pipeline = _check(connection_drivers={'gerrit': 'gerrit'})
    ctx, manager = _setup(pipeline, needs={3: [2]})
    assert manager.add_change(_other(ctx, 1)) is not None
    _other(ctx, 2)
    assert manager.add_change(_change(ctx, 3)) is not None


def test_a_change_failed_because_its_dependency_left_counts_as_a_failure():
    ctx, manager = _setup(_pipeline(disable_after_consecutive_failures=2),
                          needs={2: [1]}, broken={1})
    _change(ctx, 1)
    manager.add_change(_change(ctx, 2))   # 1 is enqueued ahead of it
    ctx.run()
    assert ctx.reports == [(1, 'failure'), (2, 'failure')]
    assert manager.disabled
