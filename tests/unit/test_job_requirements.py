"""``provides``/``requires`` between changes: a requiring job waits for
the providing builds of the items ahead, gets their artifacts, and fails
unlaunched when one of them failed; a change ahead that is not tested in
the queue counts through the build history (real SQLite)."""

from __future__ import annotations

import queue

from tests.harness.waiting import wait_for
from zuul.driver.sql.history import BuildHistory
from zuul.executor.protocol import BuildResult, ExecuteRequest, JobSpec
from zuul.model import item as m
from zuul.model.change import Branch, Change
from zuul.model.freeze import FrozenJob
from zuul.scheduler.builds import ExecutorAdapter
from zuul.scheduler.requirements import FAIL, READY, WAIT, requirements_state

PIPELINE = type('Pipeline', (), {'name': 'gate', 'post_review': True})()


class FakeClient:
    """The Gearman boundary: records requests, keeps their callbacks."""

    def __init__(self):
        self.requests: list[ExecuteRequest] = []
        self.complete = {}

    def execute(self, request, on_progress=None, on_complete=None):
        self.requests.append(ExecuteRequest.from_json(request.to_json()))
        handle = type('Handle', (), {'url': None, 'uuid': request.uuid})()
        self.complete[request.uuid] = lambda result: on_complete(handle, result)
        return handle


class Scheduler:
    def __init__(self, history=None, layout=None):
        self.events: queue.Queue = queue.Queue()
        self.history = history
        self.tenants = {'t': type('T', (), {'layout': layout})()}

    def add_result_event(self, kind, **args):
        self.events.put((kind, args))


def job(name, provides=(), requires=()):
    attrs = {'provides': tuple(provides), 'requires': tuple(requires)}
    return m.JobRef(name, frozen=FrozenJob(name=name, attributes=attrs))


def change(number):
    return Change('gerrit', f'org/p{number}', f'refs/changes/0{number}/{number}/1',
                  number=number, patchset=1, branch_name='master')


def queue_of(*items):
    q = m.ChangeQueue('gate')
    for item in items:
        q.enqueue_item(item)
    return items


def setup(scheduler=None):
    client = FakeClient()
    adapter = ExecutorAdapter(client, scheduler or Scheduler(), canonical_hostnames={},
                              job_spec_for=lambda j, i: JobSpec(name=j.name))
    builder, user = queue_of(m.QueueItem(change(1)), m.QueueItem(change(2)))
    builder.current_build_set.jobs = [job('build-image', provides=['images']),
                                      job('lint')]
    user.current_build_set.jobs = [job('use-image', requires=['images'])]
    return adapter, client, builder, user


def launch(adapter, item, name):
    bs = item.current_build_set
    build = m.Build(bs.job(name), bs)
    adapter.execute('t', PIPELINE, item, bs.job(name), None, build)
    bs.builds[name] = build
    return build


def test_requiring_job_waits_for_the_provider_ahead_and_gets_its_artifacts():
    adapter, client, builder, user = setup()
    provider = launch(adapter, builder, 'build-image')
    launch(adapter, builder, 'lint')
    consumer = launch(adapter, user, 'use-image')
    # Not launched while the providing build runs.
    assert [r.job.name for r in client.requests] == ['build-image', 'lint']
    client.complete[provider.uuid](BuildResult(result=m.SUCCESS, data={'zuul': {
        'artifacts': [{'name': 'image', 'url': 'https://x/image.tar'}]}}))
    wait_for(lambda: len(client.requests) == 3, what='the requiring job launched')
    request = client.requests[-1]
    assert request.uuid == consumer.uuid
    assert request.zuul.artifacts == [{
        'project': 'org/p1', 'change': '1', 'patchset': '1', 'job': 'build-image',
        'name': 'image', 'url': 'https://x/image.tar', 'metadata': {}}]


def test_requiring_job_fails_unlaunched_when_the_provider_failed():
    scheduler = Scheduler()
    adapter, client, builder, user = setup(scheduler)
    provider = launch(adapter, builder, 'build-image')
    consumer = launch(adapter, user, 'use-image')
    client.complete[provider.uuid](BuildResult(result=m.FAILURE))
    events = [scheduler.events.get(timeout=30) for _ in range(2)]
    (kind, args), = [e for e in events if e[1]['build'] is consumer]
    assert kind == 'build-completed' and args['result'] == m.FAILURE
    assert 'build-image of' in args['error_detail'] and 'FAILURE' in args['error_detail']
    assert [r.job.name for r in client.requests] == ['build-image']


def test_a_finished_provider_ahead_launches_at_once_and_a_retried_one_is_waited_for():
    adapter, client, builder, user = setup()
    provider = launch(adapter, builder, 'build-image')
    provider.result = m.RETRY
    state = requirements_state(user, user.current_build_set.job('use-image'))
    assert state.state == WAIT
    provider.result = m.SUCCESS
    state = requirements_state(user, user.current_build_set.job('use-image'))
    assert state.state == READY
    launch(adapter, user, 'use-image')
    assert [r.job.name for r in client.requests] == ['build-image', 'use-image']


def test_a_canceled_waiting_build_ends_canceled_and_never_launches():
    scheduler = Scheduler()
    adapter, client, builder, user = setup(scheduler)
    provider = launch(adapter, builder, 'build-image')
    consumer = launch(adapter, user, 'use-image')
    adapter.cancel(consumer)
    kind, args = scheduler.events.get(timeout=30)
    assert args['build'] is consumer and args['result'] == m.CANCELED
    client.complete[provider.uuid](BuildResult(result=m.SUCCESS))
    scheduler.events.get(timeout=30)     # the provider's own completion
    assert [r.job.name for r in client.requests] == ['build-image']


def test_jobs_without_requires_and_non_change_items_are_not_held():
    _, _, builder, user = setup()
    assert requirements_state(builder, builder.current_build_set.job('lint')).state == READY
    branch_item, = queue_of(m.QueueItem(Branch('gerrit', 'org/p', 'master')))
    branch_item.current_build_set.jobs = [job('use-image', requires=['images'])]
    assert requirements_state(branch_item, branch_item.current_build_set.jobs[0]).state \
        == READY


class _Layout:
    def __init__(self):
        from zuul.configloader.job_parser import JobParser
        from zuul.lib import yamlutil
        from zuul.model.errors import SourceContext
        sc = SourceContext(project='org/config', branch='master', path='zuul.yaml',
                           trusted=True)
        self.jobs = {}
        for obj in yamlutil.load('''
- job: {name: base, parent: null}
- job: {name: build-image, provides: images}
- job: {name: lint}
''', 'zuul.yaml'):
            j = JobParser().parse_job(obj['job'], sc)
            self.jobs.setdefault(j.name, []).append(j)


def _record(history, item, results):
    bs = item.current_build_set
    bs.jobs = [job(name) for name in results]
    for name, (result, artifacts) in results.items():
        bs.builds[name] = m.Build(bs.job(name), bs, result=result,
                                  result_data={'zuul': {'artifacts': artifacts}})
    history.record_buildset('t', PIPELINE, item, 'success')


def test_a_dependency_not_tested_in_the_queue_counts_through_the_build_history():
    history = BuildHistory()
    history.migrate()
    dependency = m.QueueItem(change(1))
    _record(history, dependency, {
        'build-image': (m.SUCCESS, [{'name': 'image', 'url': 'https://x/i',
                                     'metadata': {'arch': 'x86'}}]),
        'lint': (m.SUCCESS, [{'name': 'unrelated', 'url': 'https://x/u'}])})
    ahead, user = queue_of(m.QueueItem(change(1), live=False), m.QueueItem(change(2)))
    user.current_build_set.jobs = [job('use-image', requires=['images'])]
    state = requirements_state(user, user.current_build_set.jobs[0], history, 't',
                               _Layout())
    assert state.state == READY
    assert [(a['job'], a['name'], a['metadata']) for a in state.artifacts] == [
        ('build-image', 'image', {'arch': 'x86'})]
    # A newer failed build of the provider fails the requiring job.
    _record(history, dependency, {'build-image': (m.FAILURE, [])})
    state = requirements_state(user, user.current_build_set.jobs[0], history, 't',
                               _Layout())
    assert state.state == FAIL and 'ended FAILURE' in state.reason
