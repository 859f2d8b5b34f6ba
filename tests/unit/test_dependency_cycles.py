"""Dependency cycles between changes (queue ``allow-circular-dependencies``,
``dependencies-by-topic``) and job ``deduplicate``, driven through the
managers' collaborator interface (see test_pipeline_managers)."""

from types import SimpleNamespace

import pytest

from tests.unit.pipeline_support import _change, _pipeline, _setup
from zuul.manager.cycles import dependency_groups
from zuul.model import item as m
from zuul.scheduler.reporting import format_report

QUEUES = {'integrated': ['org/a', 'org/b', 'org/c']}


def _cycle_of_three(ctx):
    """1 needs 2, 2 needs 3, 3 needs 1 (Depends-On footers in a ring), in
    three projects."""
    ctx.needs.update({1: [2], 2: [3], 3: [1]})
    return [_change(ctx, 1, 'org/a'), _change(ctx, 2, 'org/b'), _change(ctx, 3, 'org/c')]


def _ids(changes):
    return [c.number for c in changes]


# -- finding cycles -----------------------------------------------------------------

def test_dependency_groups_put_dependencies_first_and_the_cycle_last():
    changes = {n: SimpleNamespace(key=n, number=n) for n in range(1, 6)}
    # 1 -> 2 -> 3 -> 1 (a cycle) and 3 -> 4 -> 5 (plain dependencies)
    needs = {1: [2], 2: [3], 3: [1, 4], 4: [5], 5: []}
    groups = dependency_groups(changes[1], lambda c: [changes[n] for n in needs[c.number]])
    assert [[c.number for c in g] for g in groups] == [[5], [4], [1, 2, 3]]


def test_dependency_groups_without_a_cycle_are_single_changes():
    changes = {n: SimpleNamespace(key=n, number=n) for n in range(1, 4)}
    needs = {1: [2, 3], 2: [3], 3: []}
    groups = dependency_groups(changes[1], lambda c: [changes[n] for n in needs[c.number]])
    assert [[c.number for c in g] for g in groups] == [[3], [2], [1]]


@pytest.mark.parametrize('needs', [
    # A needs B and C, C needs B: B is reached first through A, then again
    # through C after it finished -- a cross edge, not a cycle.
    {1: [2, 3], 3: [2], 2: []},
    # the same diamond walked in the other order
    {1: [3, 2], 3: [2], 2: []},
])
def test_a_diamond_of_depends_on_is_no_cycle(needs):
    changes = {n: SimpleNamespace(key=n, number=n) for n in needs}
    groups = dependency_groups(changes[1], lambda c: [changes[n] for n in needs[c.number]])
    assert all(len(g) == 1 for g in groups), [[c.number for c in g] for g in groups]
    order = [g[0].number for g in groups]
    assert order[-1] == 1 and order.index(2) < order.index(3)


def test_a_wider_diamond_with_a_real_cycle_beside_it():
    # 1 needs 2 and 4; 2 needs 3; 4 needs 3 (diamond); 3 and 5 need each other
    needs = {1: [2, 4], 2: [3], 4: [3], 3: [5], 5: [3]}
    changes = {n: SimpleNamespace(key=n, number=n) for n in needs}
    groups = dependency_groups(changes[1], lambda c: [changes[n] for n in needs[c.number]])
    assert sorted(sorted(c.number for c in g) for g in groups) == [[1], [2], [3, 5], [4]]


# -- gate -------------------------------------------------------------------------

def test_gate_enqueues_a_cycle_as_one_bundle_tested_together_and_merged_together():
    ctx, manager = _setup(_pipeline(), queues=QUEUES, allow_cycles=True)
    a, b, c = _cycle_of_three(ctx)
    item = manager.add_change(b)
    assert item is not None and item.bundle is not None
    queue = manager.queues[0]
    assert [i.change.number for i in queue.queue] == [2, 3, 1]
    assert all(i.live and i.bundle is item.bundle for i in queue.queue)
    ctx.run()
    # Each item's speculative state holds every change of the cycle.
    assert sorted(sorted(merge) for merge in ctx.merges) == [[1, 2, 3]] * 3
    assert [sorted(tested) for _, _, tested in ctx.history] == [[1, 2, 3]] * 3
    assert sorted(ctx.reports) == [(1, 'success'), (2, 'success'), (3, 'success')]
    assert all(x.is_merged for x in (a, b, c))
    assert not manager.queues[0].queue


def test_gate_cycle_with_one_failing_job_merges_nothing_and_reports_failure_to_all():
    ctx, manager = _setup(_pipeline(), queues=QUEUES, allow_cycles=True,
                          jobs=('job1', 'job2'), deps={'job2': ['job1']},
                          fail_own={(3, 'job1')})
    a, b, c = _cycle_of_three(ctx)
    manager.add_change(a)
    reported = {}
    real_report = ctx.report

    def report(pipeline, item, action):
        if action not in ('enqueue', 'start'):
            reported[item.change.number] = format_report(pipeline, item, action)
        return real_report(pipeline, item, action)
    ctx.report = report
    ctx.run()
    assert sorted(ctx.reports) == [(1, 'failure'), (2, 'failure'), (3, 'failure')]
    assert not any(x.is_merged for x in (a, b, c))
    # job2 of the failing item was skipped; the others' results count.
    assert ('job2', m.FAILURE, (1, 2, 3)) not in ctx.history
    assert 'job1' in reported[3] and 'FAILURE' in reported[3]
    for number in (1, 2):
        assert 'part of a dependency cycle that failed' in reported[number]
        assert '3,1 failed' in reported[number] or 'failed: ' in reported[number]
    assert not manager.queues[0].queue


def test_gate_refuses_a_cycle_without_allow_circular_dependencies():
    ctx, manager = _setup(_pipeline(), queues=QUEUES, allow_cycles=False)
    a, b, c = _cycle_of_three(ctx)
    messages = []
    real_report = ctx.report

    def report(pipeline, item, action):
        messages.append(format_report(pipeline, item, action))
        return real_report(pipeline, item, action)
    ctx.report = report
    assert manager.add_change(a) is None
    ctx.run()
    assert not list(manager.all_items())
    assert ctx.reports == [(1, 'failure')] and not ctx.history
    assert "Dependency cycle detected and project org/a doesn't allow circular " \
           "dependencies" in messages[0]


def test_gate_cycle_waits_until_every_change_meets_the_requirements():
    ctx, manager = _setup(_pipeline(), queues=QUEUES, allow_cycles=True)
    a, b, c = _cycle_of_three(ctx)
    approved = {1, 2}
    ctx.change_meets_requirements = lambda pipeline, change: change.number in approved
    assert manager.add_change(a) is None
    assert not list(manager.all_items()) and not ctx.reports
    approved.add(3)
    assert manager.add_change(c) is not None
    assert len(list(manager.all_items())) == 3


def test_gate_cycle_is_retested_without_a_failing_change_ahead_of_it():
    ctx, manager = _setup(_pipeline(), queues=QUEUES, allow_cycles=True, broken={9},
                          fail_own=set())
    ahead = _change(ctx, 9, 'org/a')
    manager.add_change(ahead)
    a, b, c = _cycle_of_three(ctx)
    manager.add_change(a)
    ctx.run()
    assert ctx.reports[0] == (9, 'failure')
    assert sorted(ctx.reports[1:]) == [(1, 'success'), (2, 'success'), (3, 'success')]
    # The last builds of the cycle did not include the failed change.
    last = [tested for job, result, tested in ctx.history if 1 in tested][-3:]
    assert all(9 not in tested and sorted(tested) == [1, 2, 3] for tested in last)


def test_a_change_of_a_cycle_leaving_takes_the_whole_cycle_along():
    ctx, manager = _setup(_pipeline(), queues=QUEUES, allow_cycles=True)
    a, b, c = _cycle_of_three(ctx)
    manager.add_change(a)
    item = manager.find_item(b)
    left = manager.dequeue_item(item, 'abandoned')
    assert sorted(i.change.number for i in left) == [1, 2, 3]
    assert not list(manager.all_items())


def test_cycle_with_a_change_outside_the_queue_is_refused():
    ctx, manager = _setup(_pipeline(), queues={'integrated': ['org/a', 'org/b']},
                          allow_cycles=True)
    a, b, c = _cycle_of_three(ctx)      # org/c is in no shared queue
    assert manager.add_change(a) is None
    assert ctx.reports == [(1, 'failure')]
    assert not list(manager.all_items())


# -- check --------------------------------------------------------------------------

def test_check_tests_a_cycle_as_one_bundle_and_reports_each_change():
    ctx, manager = _setup(_pipeline('check', 'independent'), allow_cycles=True)
    ctx.needs.update({1: [2, 5], 2: [1]})
    a, b = _change(ctx, 1, 'org/a'), _change(ctx, 2, 'org/b')
    _change(ctx, 5, 'org/c')        # needed by the cycle, not part of it
    manager.add_change(a)
    queue = manager.queues[0]
    assert [(i.change.number, i.live) for i in queue.queue] == \
        [(5, False), (1, True), (2, True)]
    manager.add_change(b)       # its own event: the bundle is there already
    assert len(manager.queues) == 1
    ctx.run()
    assert sorted(ctx.merges) == [[5, 1, 2], [5, 1, 2]]
    assert sorted(ctx.reports) == [(1, 'success'), (2, 'success')]


def test_check_cycle_failure_is_reported_on_every_change():
    ctx, manager = _setup(_pipeline('check', 'independent'), allow_cycles=True,
                          fail_own={(2, 'job1')})
    ctx.needs.update({1: [2], 2: [1]})
    a, _b = _change(ctx, 1, 'org/a'), _change(ctx, 2, 'org/b')
    manager.add_change(a)
    ctx.run()
    assert sorted(ctx.reports) == [(1, 'failure'), (2, 'failure')]


def test_check_replaces_an_item_tested_before_the_cycle_closed():
    ctx, manager = _setup(_pipeline('check', 'independent'), allow_cycles=True)
    _a, b = _change(ctx, 1, 'org/a'), _change(ctx, 2, 'org/b')
    ctx.needs.update({2: [1]})
    manager.add_change(b)       # 2 needs 1: tested on top of it
    ctx.needs.update({1: [2]})  # 1 now needs 2: the cycle closes
    a2 = _change(ctx, 1, 'org/a')
    manager.add_change(a2)
    items = list(manager.all_items())
    assert [(i.change.number, i.live) for i in items] == [(1, True), (2, True)]
    assert items[0].bundle is items[1].bundle


# -- dependencies-by-topic -------------------------------------------------------

def test_changes_sharing_a_topic_are_one_bundle_with_dependencies_by_topic():
    ctx, manager = _setup(_pipeline(), queues=QUEUES, allow_cycles=True, by_topic=True,
                          topics={1: 'feature', 2: 'feature', 3: 'other'})
    a, _b, _c = _change(ctx, 1, 'org/a'), _change(ctx, 2, 'org/b'), _change(ctx, 3, 'org/c')
    manager.add_change(a)
    assert [i.change.number for i in manager.all_items()] == [1, 2]
    ctx.run()
    assert sorted(ctx.reports) == [(1, 'success'), (2, 'success')]
    assert sorted(sorted(merge) for merge in ctx.merges) == [[1, 2], [1, 2]]


def test_topic_is_no_dependency_without_dependencies_by_topic():
    ctx, manager = _setup(_pipeline(), queues=QUEUES, allow_cycles=True, by_topic=False,
                          topics={1: 'feature', 2: 'feature'})
    a, _b = _change(ctx, 1, 'org/a'), _change(ctx, 2, 'org/b')
    manager.add_change(a)
    assert [i.change.number for i in manager.all_items()] == [1]
    assert manager.find_item(a).bundle is None


# -- deduplicate --------------------------------------------------------------------

def _two_in_one_project(ctx):
    ctx.needs.update({1: [2], 2: [1]})
    return _change(ctx, 1, 'org/a'), _change(ctx, 2, 'org/a')


def _builds_of(ctx, job):
    return [tested for name, _, tested in ctx.history if name == job]


def test_deduplicate_auto_runs_a_job_once_for_changes_of_one_project():
    ctx, manager = _setup(_pipeline(), queues=QUEUES, allow_cycles=True,
                          job_attrs={'job1': {'name': 'job1'}})
    _two_in_one_project(ctx)
    manager.add_change(ctx.changes[1])
    ctx.run()
    assert len(_builds_of(ctx, 'job1')) == 1
    assert sorted(ctx.reports) == [(1, 'success'), (2, 'success')]


def test_deduplicate_false_runs_the_job_for_each_change():
    ctx, manager = _setup(_pipeline(), queues=QUEUES, allow_cycles=True,
                          job_attrs={'job1': {'name': 'job1', 'deduplicate': False}})
    _two_in_one_project(ctx)
    manager.add_change(ctx.changes[1])
    ctx.run()
    assert len(_builds_of(ctx, 'job1')) == 2


def test_deduplicate_auto_needs_required_projects_across_projects():
    ctx, manager = _setup(_pipeline(), queues=QUEUES, allow_cycles=True,
                          job_attrs={'job1': {'name': 'job1'}})
    ctx.needs.update({1: [2], 2: [1]})
    a, _b = _change(ctx, 1, 'org/a'), _change(ctx, 2, 'org/b')
    manager.add_change(a)
    ctx.run()
    assert len(_builds_of(ctx, 'job1')) == 2


def test_deduplicate_auto_with_required_projects_and_true_run_once():
    for attrs in ({'name': 'job1', 'required_projects': ['org/a', 'org/b']},
                  {'name': 'job1', 'deduplicate': True}):
        ctx, manager = _setup(_pipeline(), queues=QUEUES, allow_cycles=True,
                              job_attrs={'job1': attrs})
        ctx.needs.update({1: [2], 2: [1]})
        _change(ctx, 1, 'org/a'), _change(ctx, 2, 'org/b')
        manager.add_change(ctx.changes[1])
        ctx.run()
        assert len(_builds_of(ctx, 'job1')) == 1, attrs


def test_jobs_frozen_differently_are_not_deduplicated():
    ctx, manager = _setup(_pipeline(), queues=QUEUES, allow_cycles=True)
    _two_in_one_project(ctx)
    real = ctx.freeze_jobs

    def freeze(pipeline, item):
        jobs, errors = real(pipeline, item)
        for job in jobs:
            job.frozen = {'name': job.name, 'vars': {'change': item.change.number}}
        return jobs, errors
    ctx.freeze_jobs = freeze
    manager.add_change(ctx.changes[1])
    ctx.run()
    assert len(_builds_of(ctx, 'job1')) == 2


def test_a_failed_deduplicated_build_fails_every_item_of_the_bundle():
    ctx, manager = _setup(_pipeline(), queues=QUEUES, allow_cycles=True,
                          job_attrs={'job1': {'name': 'job1'}}, fail_own={(1, 'job1')})
    a, b = _two_in_one_project(ctx)
    manager.add_change(a)
    ctx.run()
    assert len(_builds_of(ctx, 'job1')) == 1
    assert sorted(ctx.reports) == [(1, 'failure'), (2, 'failure')]
    assert not a.is_merged and not b.is_merged


def test_gate_cycle_whose_second_change_does_not_submit_stops_the_rest():
    ctx, manager = _setup(_pipeline(), queues=QUEUES, allow_cycles=True)
    a, b, c = _cycle_of_three(ctx)
    real_report = ctx.report
    messages = {}

    def report(pipeline, item, action):
        if action not in ('enqueue', 'start'):
            messages.setdefault(item.change.number, []).append(
                format_report(pipeline, item, action))
        if action == 'success' and item.change.number == 3:
            ctx.reports.append((3, 'success'))
            return False        # Gerrit refused the submit
        return real_report(pipeline, item, action)
    ctx.report = report
    manager.add_change(b)       # queue order 2, 3, 1
    ctx.run()
    assert ctx.reports == [(2, 'success'), (3, 'success'), (3, 'merge-failure'),
                           (1, 'merge-failure')]
    assert b.is_merged and not c.is_merged and not a.is_merged
    assert 'failed to merge: 3,1' in messages[1][-1] and 'merged already' in messages[1][-1]
