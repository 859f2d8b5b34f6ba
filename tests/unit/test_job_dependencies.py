"""Hard and soft job dependencies within one item (zuul/model/item.py):
which jobs may start, and which are skipped when a dependency fails."""

from __future__ import annotations

from zuul.model import item as m
from zuul.model.change import Change


def _item(jobs) -> m.QueueItem:
    change = Change('gerrit', 'org/p', 'refs/changes/01/1/1', number=1, patchset=1,
                    branch_name='master')
    item = m.QueueItem(change=change)
    item.current_build_set.jobs = list(jobs)
    return item


def _finish(item, name, result):
    bs = item.current_build_set
    bs.builds[name] = m.Build(bs.job(name), bs, result=result)


def _ready(item):
    return [j.name for j in item.ready_jobs()]


def test_a_soft_dependency_that_does_not_run_is_ignored():
    # soft-build's file matcher left it out of the graph
    item = _item([m.JobRef('dependent', soft_dependencies=('soft-build',))])
    assert _ready(item) == ['dependent']
    assert not item.skip_dependents_of_failures()


def test_a_soft_dependency_that_runs_is_waited_for_and_must_succeed():
    item = _item([m.JobRef('soft-build'),
                  m.JobRef('dependent', soft_dependencies=('soft-build',))])
    assert _ready(item) == ['soft-build']
    _finish(item, 'soft-build', m.SUCCESS)
    assert _ready(item) == ['dependent']


def test_a_soft_dependency_that_ran_and_failed_skips_the_dependent():
    item = _item([m.JobRef('soft-build'),
                  m.JobRef('dependent', soft_dependencies=('soft-build',)),
                  m.JobRef('grandchild', hard_dependencies=('dependent',))])
    _finish(item, 'soft-build', m.FAILURE)
    assert _ready(item) == []
    assert item.skip_dependents_of_failures()
    bs = item.current_build_set
    assert bs.skipped == {'dependent': 'Skipped due to failed job soft-build',
                          'grandchild': 'Skipped due to failed job dependent'}
    assert item.are_all_jobs_complete()


def test_a_failed_non_voting_soft_dependency_skips_too():
    item = _item([m.JobRef('soft-build', voting=False),
                  m.JobRef('dependent', soft_dependencies=('soft-build',))])
    _finish(item, 'soft-build', m.FAILURE)
    item.skip_dependents_of_failures()
    assert item.current_build_set.result_of('dependent') == m.SKIPPED


def test_a_hard_dependency_failure_skips_as_before():
    item = _item([m.JobRef('build'), m.JobRef('test', hard_dependencies=('build',))])
    _finish(item, 'build', m.POST_FAILURE)
    assert item.skip_dependents_of_failures()
    assert item.current_build_set.skipped == {'test': 'Skipped due to failed job build'}
