"""Batched gating with bisection (pipeline ``batching``), driven through
the dependent manager with the deterministic collaborators of
test_pipeline_managers: a build fails when a "broken" change is among
the changes it tests (``build.tested``: the changes of its speculative
state, in merge order), so which run tested what is fully known."""

import pytest

from tests.unit.pipeline_support import MergeResult, _change, _pipeline, _setup
from zuul.configloader.pipeline import PipelineParser
from zuul.manager.batching import FailureRate, batch_size
from zuul.model import item as m
from zuul.model.errors import ConfigurationError, SourceContext
from zuul.model.pipeline import BatchingConfig


def _gate(maximum=8, adaptive=True, bisect='halves', **kw):
    return _pipeline(batching=BatchingConfig(max=maximum, adaptive=adaptive, bisect=bisect),
                     **kw)


def _enqueue(ctx, manager, numbers, project='org/project'):
    for n in numbers:
        assert manager.add_change(_change(ctx, n, project)) is not None


def merged_order(ctx) -> list[int]:
    return [n for n, action in ctx.reports if action == 'success']


def assert_tested_as_merged(ctx, merged: list[int]) -> None:
    """Every merged change was in a successful run whose speculative
    state is exactly a run of consecutive merges: the changes merged
    just before it are its base, and the run's changes merged right
    after it, in the order tested."""
    runs = [tested for job, result, tested in ctx.history if result == m.SUCCESS]
    for change in merged:
        ok = [t for t in runs if change in t and
              list(t) == merged[merged.index(t[0]):merged.index(t[0]) + len(t)]]
        assert ok, f'change {change} merged without a run that tested it as it merged'


def test_bisection_finds_the_failing_change_among_8_and_merges_the_other_7():
    ctx, manager = _setup(_gate(), broken={6})
    _enqueue(ctx, manager, range(1, 9))
    ctx.run()
    merged = merged_order(ctx)
    assert merged == [1, 2, 3, 4, 5, 7, 8]
    assert (6, 'failure') in ctx.reports and ctx.changes[6].status == 'NEW'
    assert all(ctx.changes[n].status == 'MERGED' for n in merged)
    assert_tested_as_merged(ctx, merged)
    # The batch, then its halves, one after the other. A run lists the
    # changes its speculative merge put on the branch: those that merged
    # meanwhile (exactly as tested) are still listed.
    assert [(result, tested) for _, result, tested in ctx.history] == [
        (m.FAILURE, (1, 2, 3, 4, 5, 6, 7, 8)),
        (m.SUCCESS, (1, 2, 3, 4)),              # first half: merges
        # The second half (5-8) would test the tree that failed: split
        # without a run; its first half (5-6) fails.
        (m.FAILURE, (1, 2, 3, 4, 5, 6)),
        (m.SUCCESS, (1, 2, 3, 4, 5)),           # 5 alone passes, merges
        (m.FAILURE, (5, 6)),                    # 6 alone fails: the culprit
        (m.SUCCESS, (7, 8)),                    # the rest, without 6
    ]
    assert not list(manager.all_items())


def test_culprit_at_the_head_and_at_the_tail_of_the_batch():
    for broken, good in ((1, [2, 3, 4, 5, 6, 7, 8]), (8, [1, 2, 3, 4, 5, 6, 7])):
        ctx, manager = _setup(_gate(), broken={broken})
        _enqueue(ctx, manager, range(1, 9))
        ctx.run()
        assert merged_order(ctx) == good
        assert (broken, 'failure') in ctx.reports
        assert_tested_as_merged(ctx, good)


def test_batch_success_merges_all_with_one_run():
    ctx, manager = _setup(_gate())
    _enqueue(ctx, manager, range(1, 9))
    ctx.run()
    assert ctx.history == [('job1', m.SUCCESS, (1, 2, 3, 4, 5, 6, 7, 8))]
    assert merged_order(ctx) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert all(ctx.changes[n].status == 'MERGED' for n in range(1, 9))


def test_riders_report_the_build_of_the_tail():
    ctx, manager = _setup(_gate())
    _enqueue(ctx, manager, (1, 2, 3))
    items = list(manager.all_items())
    reported = {}
    report = ctx.report

    def recording(pipeline, item, action):
        if action == 'success':
            reported[item.change.number] = item.current_build_set.build_for('job1')
        return report(pipeline, item, action)
    ctx.report = recording
    ctx.run()
    tail_build = reported[3]
    assert tail_build.build_set.item is items[2]
    assert reported[1] is tail_build and reported[2] is tail_build


def test_batches_hold_at_most_max_changes():
    ctx, manager = _setup(_gate(maximum=3))
    _enqueue(ctx, manager, range(1, 8))
    ctx.run()
    assert sorted(tested for _, _, tested in ctx.history) == [(1, 2, 3), (1, 2, 3, 4, 5, 6),
                                                              (1, 2, 3, 4, 5, 6, 7)]
    assert merged_order(ctx) == list(range(1, 8))


def test_batches_behind_a_failed_batch_wait_for_its_bisection():
    ctx, manager = _setup(_gate(maximum=4, adaptive=False), broken={2})
    _enqueue(ctx, manager, range(1, 9))
    ctx.run()
    assert merged_order(ctx) == [1, 3, 4, 5, 6, 7, 8]
    assert_tested_as_merged(ctx, merged_order(ctx))
    # No run holding the culprit started after its batch failed, and
    # the second batch ran again only once the culprit was out.
    first_failure = next(i for i, h in enumerate(ctx.history) if h[1] == m.FAILURE)
    later = [tested for _, _, tested in ctx.history[first_failure + 1:]]
    assert [t for t in later if 2 in t and len(t) > 2] == []
    job, result, tested = ctx.history[-1]
    assert result == m.SUCCESS and tested[-4:] == (5, 6, 7, 8) and 2 not in tested


def test_rider_of_another_project_runs_its_job_itself():
    """The tail's job does not check out the rider's project: the
    rider's change is not tested by it, so the rider runs its job."""
    ctx, manager = _setup(_gate(), queues={'shared': ['org/a', 'org/b']})
    manager.add_change(_change(ctx, 1, 'org/a'))
    manager.add_change(_change(ctx, 2, 'org/b'))
    ctx.run()
    assert sorted(tested for _, _, tested in ctx.history) == [(1,), (1, 2)]
    assert merged_order(ctx) == [1, 2]


def test_rider_covered_by_a_tail_job_with_its_project_required():
    ctx, manager = _setup(_gate(), queues={'shared': ['org/a', 'org/b']},
                          job_attrs={'job1': {'required_projects': [{'name': 'org/a'}]}})
    manager.add_change(_change(ctx, 1, 'org/a'))
    manager.add_change(_change(ctx, 2, 'org/b'))
    ctx.run()
    assert [tested for _, _, tested in ctx.history] == [(1, 2)]
    assert merged_order(ctx) == [1, 2]


def test_merge_conflict_in_a_batch_is_reported_and_the_rest_merge():
    ctx, manager = _setup(_gate(), conflicting={3})
    _enqueue(ctx, manager, range(1, 6))
    ctx.run()
    assert (3, 'merge-failure') in ctx.reports
    assert merged_order(ctx) == [1, 2, 4, 5]
    assert_tested_as_merged(ctx, merged_order(ctx))


def test_adaptive_batch_size_shrinks_after_failures_and_grows_after_successes():
    ctx, manager = _setup(_gate(), broken={3, 12})
    _enqueue(ctx, manager, range(1, 9))
    ctx.run()
    state = next(iter(manager.batching.queues.values()))
    assert state.sizes == [8]
    # 1 failure among 8 reported (rate 1/10): 0.9^6 >= 1/2 > 0.9^7.
    assert state.size == 6
    _enqueue(ctx, manager, range(9, 17))
    ctx.run()
    assert state.sizes[1] == 6
    first_run_of_second_group = next(t for _, _, t in ctx.history if 9 in t)
    assert first_run_of_second_group == (9, 10, 11, 12, 13, 14)
    assert (12, 'failure') in ctx.reports
    shrunk = state.size
    assert shrunk == 5              # a second failure: 2 of 16
    _enqueue(ctx, manager, range(17, 80))
    ctx.run()
    assert state.size == 8          # successes grow it again (2 of the last 50)
    assert_tested_as_merged(ctx, merged_order(ctx))
    assert len(merged_order(ctx)) == 77


def test_fixed_batch_size_without_adaptive():
    ctx, manager = _setup(_gate(maximum=4, adaptive=False), broken={2})
    _enqueue(ctx, manager, range(1, 5))
    ctx.run()
    _enqueue(ctx, manager, range(5, 13))
    ctx.run()
    state = next(iter(manager.batching.queues.values()))
    assert state.sizes and set(state.sizes) == {4}


def test_batch_size_from_failure_rate():
    assert batch_size(8, True, 0.0) == 8
    assert batch_size(8, True, 0.05) == 8
    assert batch_size(8, True, 0.15) == 4
    assert batch_size(8, True, 0.5) == 1
    assert batch_size(8, False, 0.5) == 8
    rate = FailureRate()
    rate.record(True)
    assert rate.rate() == 0.1      # one failure counts over at least 10 changes


def test_off_by_default_every_change_runs_its_own_jobs():
    ctx, manager = _setup(_pipeline(), broken={2})
    assert manager.batching is None
    _enqueue(ctx, manager, (1, 2, 3))
    ctx.run()
    # Each change ran its own job (3 again, without 2).
    assert sorted(t[-1] for _, _, t in ctx.history) == [1, 2, 3]
    assert [t for _, _, t in ctx.history if t[-1] == 3] == [(3,)]
    assert merged_order(ctx) == [1, 3]


# -- configuration --------------------------------------------------------

def _parse(**conf):
    return PipelineParser(None).parse({'name': 'gate', 'manager': 'dependent', **conf},
                                      SourceContext())


def test_batching_key_parsed():
    assert _parse().batching is None
    assert _parse(batching={}).batching == BatchingConfig(max=8, adaptive=True)
    assert _parse(batching={'max': 4, 'adaptive': False}).batching == \
        BatchingConfig(max=4, adaptive=False)
    assert _parse(batching={'bisect': 'parallel'}).batching.bisect == 'parallel'
    assert _parse(batching={}).batching.bisect == 'parallel'


@pytest.mark.parametrize('conf, message', [
    ({'manager': 'independent', 'batching': {'max': 4}}, 'only a dependent pipeline'),
    ({'manager': 'serial', 'batching': {}}, 'only a dependent pipeline'),
    ({'batching': {'max': 0}}, 'max'),
    ({'batching': {'size': 3}}, 'size'),
    ({'batching': {'bisect': 'thirds'}}, 'bisect'),
])
def test_bad_batching_config_is_refused(conf, message):
    with pytest.raises((ConfigurationError, Exception), match=message):
        _parse(**conf)


def _until_running(ctx, manager):
    """Process merges until a build runs (without finishing any)."""
    for _ in range(50):
        manager.process_queues()
        if ctx.running:
            return
        if ctx.pending_merges:
            bs, numbers = ctx.pending_merges.pop(0)
            manager.on_merge_completed(bs, MergeResult(True, {'changes': numbers}))
    raise AssertionError('no build started')


def test_rider_dequeued_while_its_tail_runs_the_tail_runs_again_without_it():
    ctx, manager = _setup(_gate())
    _enqueue(ctx, manager, (1, 2, 3, 4))
    _until_running(ctx, manager)
    assert [b.tested for b in ctx.running] == [[1, 2, 3, 4]]
    assert manager.dequeue_change(ctx.changes[2])
    ctx.run()
    assert merged_order(ctx) == [1, 3, 4]
    assert ctx.history[-1] == ('job1', m.SUCCESS, (1, 3, 4))
    assert_tested_as_merged(ctx, [1, 3, 4])


def test_a_window_shrinking_under_a_batch_makes_its_last_item_inside_the_tail():
    """Failures shrink the window (halved, floor 1) while batches formed
    under the larger one wait: the items now outside leave their batch,
    so no rider waits for a tail that may not run."""
    ctx, manager = _setup(_gate(adaptive=False, window=8, window_floor=1), broken={1, 2, 3})
    _enqueue(ctx, manager, range(1, 17))
    ctx.run()
    assert merged_order(ctx) == list(range(4, 17))
    assert_tested_as_merged(ctx, merged_order(ctx))
    assert not list(manager.all_items())


def test_a_second_half_runs_when_the_changes_ahead_are_no_longer_those_it_failed_with():
    # 1-4 fail as a batch (2 is broken); the first half (1-2) fails and
    # is split, so 3-4's failure was with a culprit ahead that is gone:
    # 3-4 runs again and passes.
    ctx, manager = _setup(_gate(maximum=4, adaptive=False), broken={2})
    _enqueue(ctx, manager, range(1, 5))
    ctx.run()
    assert merged_order(ctx) == [1, 3, 4]
    assert (2, 'failure') in ctx.reports
    assert_tested_as_merged(ctx, [1, 3, 4])
    assert [(result, tested) for _, result, tested in ctx.history] == [
        (m.FAILURE, (1, 2, 3, 4)),
        (m.FAILURE, (1, 2)),        # first half fails: 3-4 is not known to fail
        (m.SUCCESS, (1,)),
        (m.FAILURE, (1, 2)),        # 2 alone: the culprit
        (m.SUCCESS, (3, 4)),        # 3-4 ran, on a tree without 2
    ]


def test_a_known_failure_saves_runs_at_every_level():
    # The culprit last: each second half is known to fail once its first
    # half passed; only the batch of one (8) runs to fail on its own.
    ctx, manager = _setup(_gate(), broken={8})
    _enqueue(ctx, manager, range(1, 9))
    ctx.run()
    assert merged_order(ctx) == [1, 2, 3, 4, 5, 6, 7]
    assert [len(tested) for _, _, tested in ctx.history] == [8, 4, 6, 7, 8]
    assert [result for _, result, _ in ctx.history] == [
        m.FAILURE, m.SUCCESS, m.SUCCESS, m.SUCCESS, m.FAILURE]


def test_parallel_bisection_tests_every_change_of_a_failed_batch_at_once():
    ctx, manager = _setup(_gate(adaptive=False, bisect='parallel'), broken={6})
    _enqueue(ctx, manager, range(1, 9))
    ctx.run()
    merged = merged_order(ctx)
    assert merged == [1, 2, 3, 4, 5, 7, 8]
    assert (6, 'failure') in ctx.reports and ctx.changes[6].status == 'NEW'
    assert_tested_as_merged(ctx, merged)
    # One round finds the culprit: each change on top of those before it
    # (the first failing one is it); 7 and 8 then run without it.
    assert [(result, tested) for _, result, tested in ctx.history] == [
        (m.FAILURE, (1, 2, 3, 4, 5, 6, 7, 8)),
        (m.SUCCESS, (1,)), (m.SUCCESS, (1, 2)), (m.SUCCESS, (1, 2, 3)),
        (m.SUCCESS, (1, 2, 3, 4)), (m.SUCCESS, (1, 2, 3, 4, 5)),
        (m.FAILURE, (1, 2, 3, 4, 5, 6)),
        (m.SUCCESS, (7,)), (m.SUCCESS, (7, 8)),
    ]
    assert not list(manager.all_items())


def test_parallel_bisection_parts_run_together_and_hold_the_batches_behind():
    ctx, manager = _setup(_gate(maximum=4, adaptive=False, bisect='parallel'), broken={3})
    _enqueue(ctx, manager, range(1, 9))
    ctx.run()
    assert merged_order(ctx) == [1, 2, 4, 5, 6, 7, 8]
    assert_tested_as_merged(ctx, merged_order(ctx))
    # Nothing behind the failed batch (5-8) ran again before the culprit
    # was out: its last run is on top of 4, without 3.
    first_failure = next(i for i, h in enumerate(ctx.history) if h[1] == m.FAILURE)
    later = [tested for _, _, tested in ctx.history[first_failure + 1:]]
    assert [t for t in later if 3 in t and t[-1] > 4] == []
    assert ctx.history[-1][1] == m.SUCCESS and ctx.history[-1][2][-4:] == (5, 6, 7, 8)


def test_the_documented_example_parses():
    import pathlib

    import yaml
    text = (pathlib.Path(__file__).parents[2] / 'doc/source/reference/batching.rst').read_text()
    block = text.split('.. code-block:: yaml\n', 1)[1].split('\nHow a batch', 1)[0]
    (entry,) = yaml.safe_load('\n'.join(line[6:] for line in block.splitlines()))
    conf = entry['pipeline']
    assert _parse(**{k: v for k, v in conf.items() if k not in ('name', 'manager')}) \
        .batching == BatchingConfig(max=8, adaptive=True, bisect='parallel')


class _LastFirst(list):
    def pop(self, index=-1):
        return super().pop(-1)


@pytest.mark.parametrize('broken, maximum', [({3}, 4), ({6}, 8), ({2, 7}, 4), ({5}, 3)])
def test_batches_stay_in_queue_order(broken, maximum):
    # Items behind a culprit come back (batched anew) ahead of batches
    # that wait: bisection and holding go by this order.
    ctx, manager = _setup(_gate(maximum=maximum, adaptive=False, bisect='parallel'),
                          broken=broken)
    ctx.running = _LastFirst()      # builds end newest first: followers before culprits
    plan = manager.batching.plan
    seen = []

    def checked():
        changed = plan()
        for queue in manager.queues:
            order = [queue.queue.index(b.items[0])
                     for b in manager.batching.of(queue).batches]
            seen.append(order)
            assert order == sorted(order)
        return changed
    manager.batching.plan = checked
    _enqueue(ctx, manager, range(1, 13))
    ctx.run(limit=5000)
    assert merged_order(ctx) == [n for n in range(1, 13) if n not in broken]
    assert_tested_as_merged(ctx, merged_order(ctx))
    assert any(len(order) > 1 for order in seen)
