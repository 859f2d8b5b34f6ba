"""Items that leave a pipeline at once (a lost requirement, abandoned, a
new patchset, a superseding pipeline), fail-fast, per-branch shared
queues and the early gate reset, driven through the pipeline managers'
collaborator interface (tests/unit/pipeline_support.py)."""

from dataclasses import replace
from types import SimpleNamespace

from tests.unit.pipeline_support import (
    Collaborators,
    MergeResult,
    _change,
    _pipeline,
    _setup,
    _start,
)
from zuul.manager import manager_for
from zuul.model import item as m
from zuul.model.change import Change
from zuul.scheduler.reporting import format_report

# -- leaving at once: requirements lost, abandoned, new patchset, supercedes --

def _event(event_id='ev-1', kind='comment-added'):
    return SimpleNamespace(event_id=event_id, type=kind)


def _running(ctx, manager):
    """Complete merges and node requests until every item's builds run."""
    _start(ctx, manager, nodes=True)


def _now(change, **changes):
    """``change`` as its source describes it after an event."""
    return replace(change, **changes)


def test_gate_item_that_loses_its_approval_leaves_at_once(caplog):
    ctx, manager = _setup(_pipeline(), nodes=True)
    first, second = _change(ctx, 1), _change(ctx, 2)
    manager.add_change(first)
    manager.add_change(second)
    _running(ctx, manager)
    builds = {b.tested[-1]: b for b in ctx.running}
    assert sorted(builds) == [1, 2] and builds[2].tested == [1, 2]
    ctx.change_meets_requirements = lambda pipeline, change: change.number != 1
    with caplog.at_level('INFO', logger='zuul.manager'):
        left = manager.recheck_change(_now(first), _event('ev-unapprove'))
    assert [i.change.number for i in left] == [1]
    assert left[0].dequeued_missing_requirements
    # released Zuul: the failure report (not the dequeue reporters), once
    assert ctx.reports == [(1, 'failure')]
    assert format_report(_pipeline(failure_message='Build failed.'), left[0], 'failure') == \
        'This change is unable to merge due to a missing merge requirement.'
    assert builds[1].canceled and builds[1].result == m.CANCELED
    assert 'nodes-1' in ctx.returned_nodes
    lines = [r.getMessage() for r in caplog.records if 'Dequeuing 1,1' in r.getMessage()]
    assert len(lines) == 1 and 'ev-unapprove' in lines[0] and 'requirements' in lines[0]
    # the change behind was reset and is tested (and merges) without it
    assert builds[2].canceled
    ctx.run()
    assert ctx.reports == [(1, 'failure'), (2, 'success')]
    assert ctx.history[-1] == ('job1', m.SUCCESS, (2,))
    assert not list(manager.all_items())


def test_any_pipeline_reports_a_lost_requirement_through_its_failure_actions():
    """The generic path (any driver may call it): an independent pipeline
    too, and the failure counts towards disable-after-consecutive-failures."""
    ctx, manager = _setup(_pipeline('check', 'independent',
                                    disable_after_consecutive_failures=5))
    first = _change(ctx, 1)
    manager.add_change(first)
    _running(ctx, manager)
    (item,) = list(manager.all_items())
    left = manager.dequeue_missing_requirements(item, _event('ev-label-removed'))
    assert [i.change.number for i in left] == [1]
    assert ctx.reports == [(1, 'failure')] and manager.consecutive_failures == 1
    assert not list(manager.all_items())


def test_a_quiet_or_already_reported_item_is_not_reported_twice():
    ctx, manager = _setup(_pipeline(), nodes=True)
    change = _change(ctx, 1)
    item = manager.add_change(change)
    item.reported = True
    manager.dequeue_missing_requirements(item)
    assert ctx.reports == []


def test_requirements_still_met_keep_the_item():
    ctx, manager = _setup(_pipeline(), nodes=True)
    change = _change(ctx, 1)
    manager.add_change(change)
    _running(ctx, manager)
    assert manager.recheck_change(_now(change), _event()) == []
    ctx.run()
    assert ctx.reports == [(1, 'success')]


def test_manually_enqueued_item_is_not_held_to_the_requirements():
    ctx, manager = _setup(_pipeline())
    change = _change(ctx, 1)
    manager.add_change(change, _event(kind='zuul-enqueue'), ignore_requirements=True)
    ctx.change_meets_requirements = lambda pipeline, change: False
    assert manager.recheck_change(_now(change), _event()) == []
    # ...but abandoning it still takes it out
    assert len(manager.recheck_change(_now(change, status='ABANDONED'), _event())) == 1


def test_abandoned_change_leaves_check_and_its_node_request_is_canceled():
    ctx, manager = _setup(_pipeline('check', 'independent'), nodes=True)
    change = _change(ctx, 1)
    manager.add_change(change)
    _start(ctx, manager)
    (request,) = ctx.node_requests
    left = manager.recheck_change(_now(change, status='ABANDONED'),
                                  _event(kind='change-abandoned'))
    assert [i.change.number for i in left] == [1]
    assert ctx.canceled == [request] and ctx.reports == [(1, 'dequeue')]
    assert not list(manager.all_items())


def test_new_patchset_dequeues_by_default():
    ctx, manager = _setup(_pipeline())
    change = _change(ctx, 1)
    manager.add_change(change)
    _running(ctx, manager)
    (build,) = ctx.running
    newer = _now(change, patchset=2, ref='refs/changes/01/1/2')
    assert len(manager.recheck_change(newer, _event(kind='patchset-created'))) == 1
    assert build.canceled and ctx.reports == [(1, 'dequeue')]


def test_new_patchset_keeps_the_item_when_dequeue_on_new_patchset_is_false():
    ctx, manager = _setup(_pipeline('check', 'independent', dequeue_on_new_patchset=False))
    change = _change(ctx, 1)
    manager.add_change(change)
    _running(ctx, manager)
    newer = _now(change, patchset=2, ref='refs/changes/01/1/2')
    assert manager.recheck_change(newer, _event(kind='patchset-created')) == []
    # the new patchset is tested alongside; the old one still reports
    manager.add_change(newer)
    ctx.run()
    assert sorted(ctx.reports) == [(1, 'success'), (1, 'success')]
    assert not any(b.canceled for b in ctx.running)


def test_depends_on_target_abandoned_takes_the_gate_items_needing_it():
    ctx, manager = _setup(_pipeline(), needs={2: [1]})
    target, dependent, other = _change(ctx, 1), _change(ctx, 2), _change(ctx, 3)
    for change in (target, dependent, other):
        manager.add_change(change)
    _running(ctx, manager)
    left = manager.recheck_change(_now(target, status='ABANDONED'),
                                  _event(kind='change-abandoned'))
    assert [i.change.number for i in left] == [1, 2]
    assert ctx.reports == [(1, 'dequeue'), (2, 'dequeue')]
    ctx.run()
    assert ctx.reports[-1] == (3, 'success') and ctx.history[-1][2] == (3,)
    assert 'failure' not in {action for _, action in ctx.reports}


def test_depends_on_target_new_patchset_takes_the_check_item_tested_on_it():
    ctx, manager = _setup(_pipeline('check', 'independent'), needs={2: [1]})
    target, dependent = _change(ctx, 1), _change(ctx, 2)
    manager.add_change(dependent)
    _running(ctx, manager)
    assert [(i.change.number, i.live) for i in manager.all_items()] == [(1, False), (2, True)]
    newer = _now(target, patchset=2, ref='refs/changes/01/1/2')
    left = manager.recheck_change(newer, _event(kind='patchset-created'))
    assert [i.change.number for i in left] == [1, 2]
    # the target was only the base of the test: only the dependent reports
    assert ctx.reports == [(2, 'dequeue')]
    assert all(b.canceled for b in ctx.running)
    assert not list(manager.all_items())


def test_merged_change_is_not_taken_out_of_an_independent_pipeline():
    # e.g. a promote pipeline holds merged changes
    ctx, manager = _setup(_pipeline('promote', 'independent'))
    change = _change(ctx, 1)
    change.status = 'MERGED'
    manager.add_change(change)
    assert manager.recheck_change(_now(change), _event()) == []


def test_entering_a_superseding_pipeline_leaves_the_superseded_one():
    from zuul.scheduler.context import SchedulerContext
    check_ctx, check = _setup(_pipeline('check', 'independent'))
    gate_ctx, gate = _setup(_pipeline(supercedes=['check']))
    change = _change(check_ctx, 1)
    gate_ctx.changes[1] = change
    other = _change(check_ctx, 2)
    check.add_change(change)
    check.add_change(other)
    _running(check_ctx, check)
    tenant = SimpleNamespace(name='tenant', managers={'check': check, 'gate': gate})
    scheduler = SimpleNamespace(layouts=None, stats=None)
    context = SchedulerContext(scheduler, tenant)
    gate_ctx.item_enqueued = context.item_enqueued
    gate.add_change(change, _event(kind='comment-added'))
    assert [i.change.number for i in check.all_items()] == [2]
    assert [i.change.number for i in gate.all_items()] == [1]
    # superseded, not reported
    assert check_ctx.reports == [] and check_ctx.running[0].canceled


class _FailFast(Collaborators):
    """A project-pipeline with ``fail-fast: true``."""

    def freeze_jobs(self, pipeline, item):
        item.current_build_set.fail_fast = True
        return super().freeze_jobs(pipeline, item)


def test_fail_fast_cancels_running_builds_skips_the_rest_and_reports_at_once():
    ctx = _FailFast(jobs=('job1', 'jobA', 'jobB'), broken={1}, deps={'jobB': ['jobA']})
    mgr = ctx.manager = manager_for(_pipeline('check', 'independent'), ctx)
    item = mgr.add_change(_change(ctx, 1))
    ctx.run()
    bs = item.current_build_set
    assert ctx.reports == [(1, 'failure')]
    assert bs.builds['job1'].result == m.FAILURE
    assert bs.builds['jobA'].result == m.CANCELED          # was running: canceled
    assert bs.result_of('jobB') == m.SKIPPED               # never started
    assert 'fail-fast' in bs.skipped['jobB'] and 'job1' in bs.skipped['jobB']
    # jobA's build ended after the cancel: its result did not count
    assert ('jobA', m.SUCCESS, (1,)) in ctx.history and bs.builds['jobA'].canceled


def test_without_fail_fast_every_job_runs_to_the_end():
    ctx = Collaborators(jobs=('job1', 'jobA', 'jobB'), broken={1}, deps={'jobB': ['jobA']})
    mgr = ctx.manager = manager_for(_pipeline('check', 'independent'), ctx)
    item = mgr.add_change(_change(ctx, 1))
    ctx.run()
    bs = item.current_build_set
    assert ctx.reports == [(1, 'failure')]
    assert [bs.result_of(j) for j in ('job1', 'jobA', 'jobB')] == \
        [m.FAILURE, m.SUCCESS, m.SUCCESS]


def test_fail_fast_ignores_a_failing_non_voting_job():
    ctx = _FailFast(jobs=('job1', 'jobA'), broken={1})

    def freeze(pipeline, item):
        item.current_build_set.fail_fast = True
        jobs, errors = Collaborators.freeze_jobs(ctx, pipeline, item)
        jobs[0].voting = False
        return jobs, errors
    ctx.freeze_jobs = freeze
    mgr = ctx.manager = manager_for(_pipeline('check', 'independent'), ctx)
    item = mgr.add_change(_change(ctx, 1))
    ctx.run()
    bs = item.current_build_set
    assert bs.builds['jobA'].result == m.SUCCESS      # ran to the end
    assert ctx.reports == [(1, 'success')]            # only a non-voting job failed


def _until_builds_run(ctx, mgr, count):
    for _ in range(50):
        mgr.process_queues()
        if len(ctx.running) >= count:
            return
        if ctx.pending_merges:
            bs, numbers = ctx.pending_merges.pop(0)
            mgr.on_merge_completed(bs, MergeResult(True, {'changes': numbers}))
        elif ctx.node_requests:
            req = ctx.node_requests.pop(0)
            mgr.on_nodes_provisioned(req.item, req.job, req, f'nodes-{req.job}', False)
    raise AssertionError(f'{count} builds never ran')


def test_fail_fast_acts_when_a_build_pre_fails_and_reports_when_it_ends():
    ctx = _FailFast(jobs=('job1', 'jobA', 'jobB'), deps={'jobB': ['jobA']})
    mgr = ctx.manager = manager_for(_pipeline('check', 'independent'), ctx)
    item = mgr.add_change(_change(ctx, 1))
    _until_builds_run(ctx, mgr, 2)
    bs = item.current_build_set
    failing = bs.builds['job1']
    failing.pre_fail = True            # failure-output matched; it still runs
    mgr.on_build_pre_fail(failing)
    assert bs.builds['jobA'].canceled and bs.builds['jobA'].result == m.CANCELED
    assert 'job1 is failing' in bs.skipped['jobB']
    assert not failing.canceled and failing.result is None
    mgr.process_queues()
    assert ctx.reports == []           # reported once the failing build has ended
    mgr.on_build_completed(failing, m.FAILURE)
    mgr.process_queues()
    assert ctx.reports == [(1, 'failure')]


def test_a_pre_fail_without_fail_fast_cancels_nothing():
    ctx = Collaborators(jobs=('job1', 'jobA'))
    mgr = ctx.manager = manager_for(_pipeline('check', 'independent'), ctx)
    item = mgr.add_change(_change(ctx, 1))
    _until_builds_run(ctx, mgr, 2)
    bs = item.current_build_set
    bs.builds['job1'].pre_fail = True
    mgr.on_build_pre_fail(bs.builds['job1'])
    assert not bs.builds['jobA'].canceled and bs.skipped == {}


def test_a_merge_reported_off_the_loop_holds_the_gate_head_without_resetting_behind():
    """A connection that merges on its own worker (GitHub) answers
    REPORT_PENDING: the item stays at the head, the items behind keep
    their builds, and the outcome arriving later completes the report."""
    ctx, manager = _setup(_pipeline())
    pending = []
    plain_report = ctx.report

    def report(pipeline, item, action):
        if action == 'success':
            ctx.reports.append((item.change.number, action))
            pending.append(item)
            return m.REPORT_PENDING
        return plain_report(pipeline, item, action)
    ctx.report = report
    for n in (1, 2, 3):
        manager.add_change(_change(ctx, n))
    ctx.run()
    assert [i.change.number for i in pending] == [1]
    head = pending[0]
    assert [i.change.number for i in manager.all_items()] == [1, 2, 3]
    builds = {i.change.number: i.current_build_set for i in manager.all_items()}
    # A closed event for the change being merged does not take it out.
    merged = replace(ctx.changes[1], status='MERGED')
    assert manager.recheck_change(merged) == []
    ctx.run()
    assert {i.change.number: i.current_build_set for i in manager.all_items()} == builds
    manager.on_report_completed(head, True)
    ctx.run()
    assert [n for n, action in ctx.reports if action == 'success'] == [1, 2]
    assert [i.change.number for i in pending] == [1, 2]
    assert len([h for h in ctx.history if h[2][-1] == 2]) == 1    # not tested again
    # GitHub refuses the second: it is reported so, the third is tested
    # again without it, then merges.
    manager.on_report_completed(pending[1], False)
    ctx.run()
    assert (2, 'merge-failure') in ctx.reports
    assert pending[-1].change.number == 3
    assert 2 not in [h for h in ctx.history if h[2][-1] == 3][-1][2]
    manager.on_report_completed(pending[-1], True)
    ctx.run()
    assert not list(manager.all_items())


# -- per-branch shared queues ----------------------------------------------------

def test_per_branch_queue_tests_a_stable_change_alone_behind_nothing():
    """``- queue: {name: integrated, per-branch: true}``: the scheduler
    names the queue with the branch; a stable change does not join the
    master change's queue (it is tested alone and merges while the master
    change is still running, and is not reset when that one fails)."""
    ctx, manager = _setup(_pipeline(), queues={'integrated': ['org/a', 'org/b']},
                          broken={1}, nodes=True)
    ctx.get_queue_config = lambda pipeline, change: (
        f'integrated:{change.branch}', ['org/a', 'org/b'])
    ctx.queue_settings = lambda pipeline, change: SimpleNamespace(per_branch=True)
    master = _change(ctx, 1, 'org/a')
    stable = Change('gerrit', 'org/b', 'refs/changes/02/2/1', number=2, patchset=1,
                    branch_name='stable/1')
    ctx.changes[2] = stable
    manager.add_change(master)
    manager.add_change(stable)
    assert [(q.name, q.branch, [i.change.number for i in q.queue])
            for q in manager.queues] == [('integrated:master', 'master', [1]),
                                         ('integrated:stable/1', 'stable/1', [2])]
    _running(ctx, manager)
    assert sorted(b.tested for b in ctx.running) == [[1], [2]]
    # the stable change finishes first and merges; the master one is running
    stable_build = next(b for b in ctx.running if b.tested == [2])
    manager.on_build_completed(stable_build, m.SUCCESS)
    manager.process_queues()
    assert ctx.reports == [(2, 'success')] and stable.status == 'MERGED'
    master_build = next(b for b in ctx.running if b.tested == [1])
    assert not master_build.finished
    manager.on_build_completed(master_build, m.FAILURE)
    manager.process_queues()
    assert ctx.reports == [(2, 'success'), (1, 'failure')]
    assert len(ctx.merges) == 2      # nobody was re-merged: no reset


def test_shared_queue_without_per_branch_holds_every_branch():
    ctx, manager = _setup(_pipeline(), queues={'integrated': ['org/a', 'org/b']})
    manager.add_change(_change(ctx, 1, 'org/a'))
    stable = Change('gerrit', 'org/b', 'refs/changes/02/2/1', number=2, patchset=1,
                    branch_name='stable/1')
    ctx.changes[2] = stable
    manager.add_change(stable)
    assert [(q.name, [i.change.number for i in q.queue]) for q in manager.queues] == \
        [('integrated', [1, 2])]


# -- the early gate reset ---------------------------------------------------------

def test_gate_resets_the_items_behind_as_soon_as_a_job_ahead_fails():
    """The first failing voting job of an item makes it failing at once:
    the items behind are re-tested without it right then, while its other
    jobs still run (they are not waited for), and it is reported only when
    they end."""
    ctx, manager = _setup(_pipeline(), jobs=('job1', 'job2'), nodes=True)
    for n in (1, 2, 3):
        manager.add_change(_change(ctx, n))
    _running(ctx, manager)
    first = {b.job.name: b for b in ctx.running if b.tested == [1]}
    behind = [b for b in ctx.running if b.tested != [1]]
    assert sorted(b.tested for b in behind) == [[1, 2], [1, 2], [1, 2, 3], [1, 2, 3]]
    merges_before = len(ctx.merges)
    manager.on_build_completed(first['job1'], m.FAILURE)
    manager.process_queues()
    # reset now: the builds behind are canceled, new merges without 1
    assert all(b.canceled for b in behind)
    assert ctx.merges[merges_before:] == [[2], [2, 3]]
    assert not first['job2'].finished and not first['job2'].canceled
    assert ctx.reports == []                 # item 1 waits for its job2
    _running(ctx, manager)
    assert sorted(b.tested for b in ctx.running if not b.finished and not b.canceled
                  and b.tested != [1]) == [[2], [2], [2, 3], [2, 3]]
    manager.on_build_completed(first['job2'], m.SUCCESS)
    manager.process_queues()
    assert ctx.reports == [(1, 'failure')]
