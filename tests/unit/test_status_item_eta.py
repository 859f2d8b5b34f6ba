"""The status JSON's item ETA follows the job graph (a job not started
counts its whole estimate after the jobs it depends on), and an item
behind a failing one says so (zuul/scheduler/status.py)."""

from zuul.model import item as m
from zuul.model.change import Change
from zuul.scheduler import status

NOW = 10_000.0
ESTIMATES = {'build': 100.0, 'test': 300.0, 'docs': 50.0, 'deploy': 60.0}


def _item(number, jobs, ahead=None):
    change = Change('gerrit', 'org/project', f'refs/changes/0{number}/{number}/1',
                    number=number, patchset=1, branch_name='master')
    item = m.QueueItem(change=change, enqueue_time=NOW - 100, item_ahead=ahead)
    bs = item.current_build_set
    bs.jobs = [m.JobRef(name, hard_dependencies=tuple(deps)) for name, deps in jobs]
    return item


def _estimates(item, name):
    return ESTIMATES.get(name)


def test_eta_is_the_longest_chain_of_unfinished_jobs():
    item = _item(1, [('build', ()), ('test', ('build',)), ('docs', ())])
    bs = item.current_build_set
    bs.builds['build'] = m.Build(bs.job('build'), bs, start_time=NOW - 40)
    got = status.item_status(item, _estimates, now=NOW)
    # build has 60 s left, test runs 300 s after it; docs (50 s) is shorter
    assert got['remaining_time'] == 360_000
    # once build ends, only test's estimate is left
    bs.builds['build'].end_time, bs.builds['build'].result = NOW, 'SUCCESS'
    assert status.item_status(item, _estimates, now=NOW)['remaining_time'] == 300_000


def test_eta_is_unknown_without_any_estimate_and_none_once_all_finished():
    item = _item(1, [('lint', ())])
    assert status.item_status(item, _estimates, now=NOW)['remaining_time'] is None
    item = _item(2, [('docs', ())])
    bs = item.current_build_set
    bs.builds['docs'] = m.Build(bs.job('docs'), bs, result='SUCCESS', start_time=NOW - 9,
                                end_time=NOW - 1)
    assert status.item_status(item, _estimates, now=NOW)['remaining_time'] is None


def test_an_item_behind_a_failing_item_is_failing_too():
    head = _item(1, [('test', ())])
    behind = _item(2, [('test', ())], ahead=head)
    head.items_behind.append(behind)
    assert status.item_status(behind, now=NOW)['failing_reasons'] == []
    bs = head.current_build_set
    bs.builds['test'] = m.Build(bs.job('test'), bs, result='FAILURE', start_time=NOW - 9,
                                end_time=NOW)
    assert status.item_status(head, now=NOW)['failing_reasons'] == ['at least one job failed']
    got = status.item_status(behind, now=NOW, pipeline='gate')
    assert got['failing_reasons'] == ['a needed change is failing']
    assert got['pipeline'] == 'gate'


def test_behind_failing_in_a_long_queue_through_the_pipeline_status():
    from types import SimpleNamespace
    queue = m.ChangeQueue('gate', name='integrated')
    for number in range(1, 401):
        queue.enqueue_item(_item(number, [('test', ())]))
    failed = queue.queue[99]   # change 100
    bs = failed.current_build_set
    bs.builds['test'] = m.Build(bs.job('test'), bs, result='FAILURE', start_time=NOW - 9,
                                end_time=NOW)
    manager = SimpleNamespace(pipeline=SimpleNamespace(name='gate', manager='dependent'),
                              queues=[queue])
    (got,) = status.pipeline_status(manager, now=NOW)['change_queues']
    reasons = [i['failing_reasons'] for i in got['heads'][0]]
    assert reasons[:99] == [[]] * 99
    assert reasons[99] == ['at least one job failed']
    assert reasons[100:] == [['a needed change is failing']] * 300
