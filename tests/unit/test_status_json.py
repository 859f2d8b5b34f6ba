"""The scheduler's status JSON (zuul/scheduler/status.py): job and item
times from build history on a fixed clock, queue names, change URLs from
the connection's baseurl."""

import time
from types import SimpleNamespace

import pytest

from tests.unit.pipeline_support import MergeResult, _change, _pipeline, _setup
from zuul.driver.gerrit.changes import change_from_query, change_web_url
from zuul.driver.sql.history import BuildHistory
from zuul.model import item as m
from zuul.model.change import Change
from zuul.model.events import ResultEvent
from zuul.scheduler import status
from zuul.scheduler.build_times import BuildTimes
from zuul.scheduler.scheduler import Scheduler, TenantState

NOW = 10_000.0


def _item(enqueue_time=9_000.0):
    change = Change('gerrit', 'org/project', 'refs/changes/01/1/1', number=1, patchset=1,
                    branch_name='master', url='https://review.test/c/org/project/+/1')
    item = m.QueueItem(change=change, enqueue_time=enqueue_time)
    bs = item.current_build_set
    bs.jobs = [m.JobRef('merge'), m.JobRef('unit'), m.JobRef('lint', voting=False),
               m.JobRef('docs')]
    bs.builds['merge'] = m.Build(bs.job('merge'), bs, result='SUCCESS', start_time=9_100.0,
                                 end_time=9_130.0, url='finger://merge')
    bs.builds['unit'] = m.Build(bs.job('unit'), bs, start_time=NOW - 60, url='finger://unit')
    bs.builds['lint'] = m.Build(bs.job('lint'), bs, start_time=NOW - 10)
    return item


ESTIMATES = {'merge': 40.0, 'unit': 240.0, 'docs': 100.0}  # lint: never succeeded yet


def _estimates(item, job_name):
    assert item.change.project == 'org/project'
    return ESTIMATES.get(job_name)


def test_running_job_times_and_item_eta_on_a_fixed_clock():
    item = status.item_status(_item(), _estimates, now=NOW)
    jobs = {j['name']: j for j in item['jobs']}
    assert {k: jobs['unit'][k] for k in ('elapsed_time', 'remaining_time', 'estimated_time',
                                         'result', 'voting', 'url')} == {
        'elapsed_time': 60_000, 'remaining_time': 180_000, 'estimated_time': 240.0,
        'result': None, 'voting': True, 'url': 'finger://unit'}
    assert jobs['unit']['start_time'] == int((NOW - 60) * 1000)
    # finished: elapsed is its duration, nothing remains, the result shows
    assert (jobs['merge']['elapsed_time'], jobs['merge']['remaining_time'],
            jobs['merge']['result']) == (30_000, 0, 'SUCCESS')
    # running without an estimate: elapsed only
    assert (jobs['lint']['elapsed_time'], jobs['lint']['remaining_time'],
            jobs['lint']['estimated_time'], jobs['lint']['voting']) == (10_000, None, None, False)
    # not started: the estimate, no times
    assert (jobs['docs']['elapsed_time'], jobs['docs']['remaining_time'],
            jobs['docs']['estimated_time']) == (None, None, 100.0)
    assert item['remaining_time'] == 180_000  # the longest remaining job
    assert item['enqueue_time'] == 9_000_000
    assert item['url'] == 'https://review.test/c/org/project/+/1'
    assert item['id'] == '1,1' and item['project'] == 'org/project'


def test_a_running_job_past_its_estimate_has_nothing_left():
    item = status.item_status(_item(), _estimates, now=NOW + 1_000)
    unit = next(j for j in item['jobs'] if j['name'] == 'unit')
    assert unit['remaining_time'] == 0 and unit['elapsed_time'] == 1_060_000


def test_without_estimates_nothing_remains_known():
    item = status.item_status(_item(), None, now=NOW)
    assert item['remaining_time'] is None
    assert all(j['estimated_time'] is None for j in item['jobs'])


def test_check_queues_are_named_after_the_project_or_its_queue():
    ctx, manager = _setup(_pipeline('check', 'independent'),
                          queues={'integrated': ['org/project']})
    manager.add_change(_change(ctx, 1))
    manager.add_change(_change(ctx, 2, project='org/other'))
    body = status.pipeline_status(manager, _estimates, now=NOW)
    assert [q['name'] for q in body['change_queues']] == ['integrated', 'org/other']
    assert body['change_queues'][1]['heads'][0][0]['id'] == '2,1'


def test_a_queue_without_a_name_is_named_after_its_projects():
    queue = m.ChangeQueue('check')
    queue.enqueue_item(_item())
    assert status.queue_name(queue) == 'org/project'
    manager = SimpleNamespace(pipeline=_pipeline('check', 'independent'), queues=[queue])
    assert status.pipeline_status(manager, None, now=NOW)['change_queues'][0]['name'] \
        == 'org/project'


# -- build times ---------------------------------------------------------------


def test_build_times_average_recent_successes_per_project_and_branch():
    times = BuildTimes(keep=3)
    for duration in (10, 20, 30, 40):
        times.record('t', 'org/project', 'master', 'unit', 'SUCCESS', duration)
    times.record('t', 'org/project', 'master', 'unit', 'FAILURE', 1_000)
    times.record('t', 'org/project', 'master', 'unit', 'SUCCESS', None)
    assert times.estimate('t', 'org/project', 'master', 'unit') == 30.0  # last three
    assert times.estimate('t', 'org/project', 'stable', 'unit') is None
    assert times.estimate('t', 'org/other', 'master', 'unit') is None
    assert times.estimate('t2', 'org/project', 'master', 'unit') is None


@pytest.fixture
def history(tmp_path):
    h = BuildHistory(f'sqlite:///{tmp_path}/history.db')
    h.migrate()
    return h


def _reported(history, branch, results):
    change = Change('gerrit', 'org/project', 'refs/changes/01/1/1', number=1, patchset=1,
                    branch_name=branch)
    item = m.QueueItem(change=change)
    bs = item.current_build_set
    bs.jobs = [m.JobRef(name) for name, _, _ in results]
    for name, result, duration in results:
        bs.builds[name] = m.Build(bs.job(name), bs, result=result, start_time=1_000.0,
                                  end_time=1_000.0 + duration)
    history.record_buildset('t', SimpleNamespace(name='check'), item, 'success')


def test_build_times_start_from_the_sql_history_then_add_new_builds(history):
    _reported(history, 'master', [('unit', 'SUCCESS', 100), ('lint', 'SUCCESS', 5)])
    _reported(history, 'master', [('unit', 'SUCCESS', 200), ('lint', 'FAILURE', 50)])
    _reported(history, 'stable', [('unit', 'SUCCESS', 900)])
    assert history.recent_durations('t', 'unit', project='org/project',
                                    branch='master') == [200.0, 100.0]
    times = BuildTimes(history)
    assert times.estimate('t', 'org/project', 'master', 'unit') == 150.0
    assert times.estimate('t', 'org/project', 'master', 'lint') == 5.0
    assert times.estimate('t', 'org/project', 'stable', 'unit') == 900.0
    # a build that completes now counts at once (it reaches SQL only when
    # its item is reported) and the history is not read again
    times.record('t', 'org/project', 'master', 'unit', 'SUCCESS', 300)
    _reported(history, 'master', [('unit', 'SUCCESS', 300)])
    assert times.estimate('t', 'org/project', 'master', 'unit') == 200.0


def test_build_times_survive_an_unreadable_history():
    class Broken:
        def recent_durations(self, *args, **kw):
            raise RuntimeError('database is down')
    times = BuildTimes(Broken())
    assert times.estimate('t', 'p', 'master', 'unit') is None
    times.record('t', 'p', 'master', 'unit', 'SUCCESS', 12)
    assert times.estimate('t', 'p', 'master', 'unit') == 12.0


# -- change URLs -----------------------------------------------------------------


def test_change_url_comes_from_the_connection_baseurl():
    row = {'project': 'org/project', 'branch': 'master', 'number': '7', 'id': 'I7',
           'url': 'http://review.example.com/c/org/project/+/7',
           'currentPatchSet': {'number': '2', 'ref': 'refs/changes/07/7/2', 'revision': 'a'}}
    change = change_from_query(row, 'gerrit', baseurl='http://127.0.0.1:8081/')
    assert change.url == 'http://127.0.0.1:8081/c/org/project/+/7'
    assert change_from_query(row, 'gerrit').url == row['url']  # no baseurl: the row's
    assert change_web_url('https://review.test/r', 'a/b', 3) == \
        'https://review.test/r/c/a/b/+/3'


# -- the scheduler's wiring ----------------------------------------------------


def _running_build(ctx, manager, number):
    """Enqueue change ``number`` in check and drive it until its build runs."""
    manager.add_change(_change(ctx, number))
    for _ in range(20):
        manager.process_queues()
        if ctx.pending_merges:
            bs, numbers = ctx.pending_merges.pop(0)
            manager.on_merge_completed(bs, MergeResult(True, {'changes': numbers}))
        if ctx.running:
            return ctx.running.pop(0)
    raise AssertionError('no build started')


def test_the_scheduler_estimates_from_the_builds_it_saw_succeed():
    ctx, manager = _setup(_pipeline('check', 'independent'), jobs=('unit',))
    scheduler = Scheduler(None, None, None, None, None)
    scheduler.tenants['t'] = TenantState('t', None)
    scheduler.tenants['t'].managers = {'check': manager}
    first = _running_build(ctx, manager, 1)
    scheduler.handle_result(ResultEvent('build-started', {'build': first,
                                                          'start_time': 1_000.0}))
    scheduler.handle_result(ResultEvent('build-completed', {
        'build': first, 'result': 'SUCCESS', 'end_time': 1_100.0}))
    manager.process_queues()
    assert (1, 'success') in ctx.reports
    second = _running_build(ctx, manager, 2)
    started = time.time() - 30
    scheduler.handle_result(ResultEvent('build-started', {'build': second,
                                                          'start_time': started}))
    body = scheduler._mgmt_status_get('t')
    queue, = body['pipelines'][0]['change_queues']
    item, = queue['heads'][0]
    job, = item['jobs']
    assert queue['name'] == 'org/project'
    assert job['estimated_time'] == 100.0 and job['start_time'] == int(started * 1000)
    assert 30_000 <= job['elapsed_time'] < 40_000
    assert 60_000 < job['remaining_time'] <= 70_000
    assert item['remaining_time'] == job['remaining_time']


def test_jobs_carry_their_failure_class_and_reused_build():
    item = _item()
    bs = item.current_build_set
    bs.builds['merge'].reused_from = {'uuid': 'f' * 32, 'log_url': 'http://logs/f'}
    bs.builds['lint'].failure_class = 'infra:unreachable'
    jobs = {j['name']: j for j in status.item_status(item, _estimates, now=NOW)['jobs']}
    assert (jobs['merge']['reused_from'], jobs['merge']['failure_class']) == ('f' * 32, None)
    assert (jobs['lint']['reused_from'], jobs['lint']['failure_class']) == \
        (None, 'infra:unreachable')
    assert (jobs['docs']['reused_from'], jobs['docs']['failure_class']) == (None, None)
