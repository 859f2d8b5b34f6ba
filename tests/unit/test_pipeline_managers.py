"""Queue logic of the pipeline managers, driven through the collaborator
interface the scheduler gives them (tests/unit/pipeline_support.py); the
end-to-end tests run the same managers on real daemons. Items leaving a
pipeline early, fail-fast and the early gate reset are in
test_pipeline_leaving.py."""


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
from zuul.model.change import Change, Ref


def test_gate_middle_change_fails_others_merge_and_third_retested_without_it():
    ctx, manager = _setup(_pipeline(), broken={2})
    for n in (1, 2, 3):
        manager.add_change(_change(ctx, n))
    ctx.run()
    assert ctx.reports.count((1, 'success')) == 1
    assert (2, 'failure') in ctx.reports and (2, 'success') not in ctx.reports
    assert (3, 'success') in ctx.reports
    assert [c.status for c in (ctx.changes[1], ctx.changes[2], ctx.changes[3])] == \
        ['MERGED', 'NEW', 'MERGED']
    # change 3 was first merged on top of 1 and 2, then re-tested without 2
    assert [1, 2, 3] in ctx.merges
    tested_3 = [tested for job, result, tested in ctx.history if tested[-1] == 3]
    assert 2 not in tested_3[-1]
    assert not list(manager.all_items())


def test_gate_reports_in_queue_order():
    ctx, manager = _setup(_pipeline())
    for n in (1, 2, 3):
        manager.add_change(_change(ctx, n))
    ctx.run()
    assert [r for r in ctx.reports if r[1] == 'success'] == \
        [(1, 'success'), (2, 'success'), (3, 'success')]


def test_gate_merge_conflict_reported_and_skipped_by_others():
    ctx, manager = _setup(_pipeline(), conflicting={2})
    for n in (1, 2, 3):
        manager.add_change(_change(ctx, n))
    ctx.run()
    assert (2, 'merge-failure') in ctx.reports
    assert {(1, 'success'), (3, 'success')} <= set(ctx.reports)
    assert ctx.changes[2].status == 'NEW'


def test_check_tests_each_change_alone():
    ctx, manager = _setup(_pipeline('check', 'independent'), broken={2})
    for n in (1, 2, 3):
        manager.add_change(_change(ctx, n))
    ctx.run()
    assert sorted(ctx.reports) == [(1, 'success'), (2, 'failure'), (3, 'success')]
    assert sorted(t for _, _, t in ctx.history) == [(1,), (2,), (3,)]


def test_check_tests_change_on_top_of_unmerged_dependency():
    ctx, manager = _setup(_pipeline('check', 'independent'), needs={2: [1]})
    _change(ctx, 1)
    manager.add_change(_change(ctx, 2))
    ctx.run()
    assert ctx.history == [('job1', m.SUCCESS, (1, 2))]
    assert ctx.reports == [(2, 'success')]   # the dependency is not reported


def test_gate_dependency_enqueued_ahead_and_dequeued_with_it():
    ctx, manager = _setup(_pipeline(), needs={2: [1]}, broken={1})
    _change(ctx, 1)
    item = manager.add_change(_change(ctx, 2))
    assert item is not None
    assert [i.change.number for i in manager.all_items()] == [1, 2]
    ctx.run()
    assert (1, 'failure') in ctx.reports
    # 2 needed 1, which failed: 2 must not merge
    assert ctx.changes[2].status == 'NEW'
    assert (2, 'success') not in ctx.reports


def test_gate_refuses_change_needing_change_in_another_queue():
    ctx, manager = _setup(_pipeline(), needs={2: [1]})
    _change(ctx, 1, project='org/other')
    manager.add_change(ctx.changes[1])
    assert manager.add_change(_change(ctx, 2)) is None


def test_shared_queue_across_projects():
    ctx, manager = _setup(_pipeline(), queues={'integrated': ['org/a', 'org/b']}, broken={1})
    manager.add_change(_change(ctx, 1, 'org/a'))
    manager.add_change(_change(ctx, 2, 'org/b'))
    assert len(manager.queues) == 1
    ctx.run()
    assert ctx.merges[:2] == [[1], [1, 2]]
    tested_2 = [t for _, _, t in ctx.history if t[-1] == 2]
    assert tested_2[-1] == (2,)
    assert ctx.changes[2].status == 'MERGED'


def test_job_dependencies_skip_children_of_failed_job():
    ctx, manager = _setup(_pipeline('check', 'independent'), jobs=('job1', 'job3', 'job4'),
                          deps={'job3': ['job1'], 'job4': ['job3']}, broken={1})
    item = manager.add_change(_change(ctx, 1))
    ctx.run()
    assert [(j, r) for j, r, _ in ctx.history] == [('job1', m.FAILURE)]
    assert item.current_build_set.skipped == {'job3': 'Skipped due to failed job job1',
                                              'job4': 'Skipped due to failed job job3'}
    assert ctx.reports == [(1, 'failure')]


def test_retry_until_attempts_then_retry_limit():
    ctx, manager = _setup(_pipeline('check', 'independent'))
    item = manager.add_change(_change(ctx, 1))
    manager.process_queues()
    bs, numbers = ctx.pending_merges.pop(0)
    manager.on_merge_completed(bs, MergeResult(True))
    for attempt in range(3):
        manager.process_queues()
        build = ctx.running.pop(0)
        manager.on_build_completed(build, m.RETRY)
    manager.process_queues()
    assert item.current_build_set.tries['job1'] == 3
    assert ctx.reports == [(1, 'failure')]
    assert build.result == m.RETRY_LIMIT


def test_new_patchset_leaves_pipeline_and_cancels_nodes():
    ctx, manager = _setup(_pipeline('check', 'independent'), nodes=True)
    change = _change(ctx, 1)
    manager.add_change(change)
    manager.process_queues()
    bs, _ = ctx.pending_merges.pop(0)
    manager.on_merge_completed(bs, MergeResult(True))
    manager.process_queues()
    assert len(ctx.node_requests) == 1
    newer = Change('gerrit', 'org/project', 'refs/changes/01/1/2', number=1, patchset=2,
                   branch_name='master')
    manager.recheck_change(newer)
    assert not list(manager.all_items())
    assert ctx.canceled == [ctx.node_requests[0]]


def test_supercedent_keeps_only_newest_waiting_ref():
    ctx, manager = _setup(_pipeline('post', 'supercedent'))
    refs = [Ref('gerrit', 'org/project', 'refs/heads/master', newrev=f'{n:040d}')
            for n in (1, 2, 3)]
    for ref in refs:
        manager.add_change(ref)
    assert [i.change.newrev for i in manager.all_items()] == [refs[0].newrev, refs[2].newrev]


def test_window_shrinks_on_failure_and_limits_actionable_items():
    ctx, manager = _setup(_pipeline(window=2, window_floor=1), broken={1})
    for n in (1, 2, 3, 4):
        manager.add_change(_change(ctx, n))
    manager.process_queues()
    # only the first two items in the window asked for a merge
    assert [numbers[-1] for _, numbers in ctx.pending_merges] == [1, 2]
    ctx.run()
    assert manager.queues[0].window >= 1


def test_serial_pipelines_are_dependent_with_their_window():
    from zuul.manager.dependent import DependentPipelineManager
    manager = manager_for(_pipeline(manager='serial', window=1), Collaborators())
    assert isinstance(manager, DependentPipelineManager)


# -- semaphores ---------------------------------------------------------------


def test_semaphore_max_one_serialises_a_job_across_changes():
    ctx, manager = _setup(_pipeline('check', 'independent'), jobs=('job1', 'free'),
                          semaphores={'lock': 1}, job_semaphores={'job1': ['lock']})
    for n in (1, 2, 3):
        manager.add_change(_change(ctx, n))
    _start(ctx, manager)
    # every change merged; only one of the three job1 builds may start
    started = [(b.job.name, b.tested[-1]) for b in ctx.running]
    assert sum(1 for name, _ in started if name == 'job1') == 1
    assert sum(1 for name, _ in started if name == 'free') == 3
    ctx.run()
    assert sorted(ctx.reports) == [(1, 'success'), (2, 'success'), (3, 'success')]
    assert ctx.max_holding['lock'] == 1
    assert [t for job, _, t in ctx.history if job == 'job1'] == [(1,), (2,), (3,)]
    assert ctx.sem.held('lock') == 0


def test_semaphore_max_two_runs_two_at_once():
    ctx, manager = _setup(_pipeline('check', 'independent'),
                          semaphores={'pair': 2}, job_semaphores={'job1': ['pair']})
    for n in (1, 2, 3):
        manager.add_change(_change(ctx, n))
    _start(ctx, manager)
    assert len(ctx.running) == 2
    ctx.run()
    assert ctx.max_holding['pair'] == 2
    assert len(ctx.reports) == 3 and ctx.sem.held('pair') == 0


def test_semaphores_are_all_or_nothing():
    # job1 needs a and b; job2 holds b: job1 must not sit on a meanwhile
    ctx, manager = _setup(_pipeline('check', 'independent'), jobs=('job2', 'job1'),
                          semaphores={'a': 1, 'b': 1},
                          job_semaphores={'job1': ['a', 'b'], 'job2': ['b']})
    manager.add_change(_change(ctx, 1))
    _start(ctx, manager)
    assert [b.job.name for b in ctx.running] == ['job2']
    assert ctx.sem.held('a') == 0 and ctx.sem.held('b') == 1
    ctx.run()
    assert ctx.reports == [(1, 'success')]
    assert ctx.sem.holders == {}


def test_semaphore_released_when_node_request_fails():
    ctx, manager = _setup(_pipeline('check', 'independent'), nodes=True, failed_nodes={1},
                          semaphores={'lock': 1}, job_semaphores={'job1': ['lock']})
    manager.add_change(_change(ctx, 1))
    manager.add_change(_change(ctx, 2))
    ctx.run()
    assert sorted(ctx.reports) == [(1, 'failure'), (2, 'success')]
    assert ctx.sem.held('lock') == 0


def test_semaphore_released_when_item_is_dequeued_and_on_gate_reset():
    ctx, manager = _setup(_pipeline('check', 'independent'),
                          semaphores={'lock': 1}, job_semaphores={'job1': ['lock']})
    manager.add_change(_change(ctx, 1))
    manager.add_change(_change(ctx, 2))
    _start(ctx, manager)
    assert [b.tested[-1] for b in ctx.running] == [1]
    assert manager.dequeue_change(ctx.changes[1])
    assert ctx.sem.held('lock') == 0
    manager.process_queues()
    assert [b.tested[-1] for b in ctx.running if not b.canceled] == [2]
    ctx.run()
    assert (2, 'success') in ctx.reports and ctx.sem.holders == {}

    # in a gate, a failure ahead resets the items behind; what they held
    # is given back and taken again by the new build sets
    ctx, manager = _setup(_pipeline(), broken={1}, semaphores={'lock': 2},
                          job_semaphores={'job1': ['lock']})
    for n in (1, 2, 3):
        manager.add_change(_change(ctx, n))
    ctx.run()
    assert (1, 'failure') in ctx.reports
    assert {(2, 'success'), (3, 'success')} <= set(ctx.reports)
    assert ctx.max_holding['lock'] == 2 and ctx.sem.holders == {}


def test_hold_following_changes_waits_for_the_job_ahead():
    ctx, manager = _setup(_pipeline(), jobs=('job1', 'job2'), hold_jobs={'job1'}, broken={1})
    for n in (1, 2):
        manager.add_change(_change(ctx, n))
    _start(ctx, manager)
    # item 1 runs both jobs; item 2 waits for job1 of item 1
    assert sorted((b.tested[-1], b.job.name) for b in ctx.running) == \
        [(1, 'job1'), (1, 'job2')]
    ctx.run()
    # job1 failed on item 1: item 2 was re-tested without it, and merged
    assert (1, 'failure') in ctx.reports and (2, 'success') in ctx.reports
    assert all(t == (2,) for job, _, t in ctx.history if t[-1] == 2)


def test_hold_following_changes_releases_items_behind_on_success():
    ctx, manager = _setup(_pipeline(), jobs=('job1',), hold_jobs={'job1'})
    for n in (1, 2, 3):
        manager.add_change(_change(ctx, n))
    _start(ctx, manager)
    assert [b.tested for b in ctx.running] == [[1]]
    ctx.run()
    assert [r for r in ctx.reports if r[1] == 'success'] == \
        [(1, 'success'), (2, 'success'), (3, 'success')]
    # each item started only once the one ahead had succeeded: no resets
    assert [t for _, _, t in ctx.history] == [(1,), (1, 2), (1, 2, 3)]
