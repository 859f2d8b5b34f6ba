"""``provides``/``requires`` between changes: a requiring job waits (no
nodes, no build) until the providing builds of the items ahead ended,
gets their artifacts, and fails unrun when one of them failed; a change
ahead that is not tested in the queue counts through the build history
(real SQLite)."""

from __future__ import annotations

import queue

from tests.unit.pipeline_support import MergeResult, _change, _pipeline, _setup
from zuul.driver.sql.history import BuildHistory
from zuul.executor.protocol import ExecuteRequest, JobSpec
from zuul.manager.requirements import FAIL, READY, WAIT, requirements_state
from zuul.model import item as m
from zuul.model.change import Branch, Change
from zuul.model.freeze import FrozenJob
from zuul.scheduler.builds import ExecutorAdapter

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


def _gate(**kw):
    """Two changes in a gate (the managers' collaborator interface of
    test_pipeline_managers): 1 runs build-image (provides images), 2 runs
    use-image (requires images)."""
    attrs = {'build-image': {'provides': ('images',)}, 'use-image': {'requires': ('images',)}}
    ctx, manager = _setup(_pipeline(), jobs=('build-image', 'use-image'), job_attrs=attrs,
                          **kw)
    return ctx, manager, [manager.add_change(_change(ctx, n)) for n in (1, 2)]


def test_requiring_job_starts_only_after_the_provider_ahead_ended():
    ctx, manager, (first, second) = _gate()
    # Run until nothing but builds are left: the first item's builds run,
    # the second's use-image waits (no build, no node request).
    for _ in range(20):
        if not manager.process_queues() and not ctx.pending_merges:
            break
        while ctx.pending_merges:
            bs, numbers = ctx.pending_merges.pop(0)
            manager.on_merge_completed(bs, MergeResult(True, {'changes': numbers}))
    started = {(b.build_set.item.change.number, b.job.name) for b in ctx.running}
    assert (1, 'build-image') in started and (2, 'use-image') not in started
    assert 'use-image' not in second.current_build_set.builds
    ctx.run()
    order = [(job, tested[-1]) for job, _, tested in ctx.history]
    assert order.index(('build-image', 1)) < order.index(('use-image', 2))
    assert sorted(ctx.reports) == [(1, 'success'), (2, 'success')]


def test_a_failed_provider_ahead_resets_the_gate_and_the_job_runs_without_it():
    ctx, manager, (first, second) = _gate(fail_own={(1, 'build-image')})
    ctx.run()
    assert (1, 'failure') in ctx.reports and (2, 'success') in ctx.reports
    # 2's use-image never ran on top of the failed provider.
    assert [t for job, _, t in ctx.history if job == 'use-image' and t[-1] == 2] == [(2,)]


def test_requiring_job_fails_unrun_when_a_provider_ahead_failed():
    # (A provider that does not make its item fail, e.g. non-voting.)
    ctx, manager, (first, second) = _gate()
    provider = m.JobRef('build-image', voting=False, frozen={'provides': ('images',)})
    first.current_build_set.jobs = [provider]
    first.current_build_set.builds['build-image'] = m.Build(
        provider, first.current_build_set, result=m.FAILURE)
    consumer = m.JobRef('use-image', frozen={'requires': ('images',)})
    second.current_build_set.jobs = [consumer]
    assert not manager._requirements_met(second, consumer)
    build = second.current_build_set.builds['use-image']
    assert build.result == m.FAILURE and not ctx.running
    assert 'build-image of 1,1' in build.error_detail and 'ended FAILURE' in build.error_detail


def test_artifacts_of_the_providers_ahead_go_with_the_launch():
    adapter, client, builder, user = setup()
    provider = launch(adapter, builder, 'build-image')
    provider.result = m.SUCCESS
    provider.result_data = {'zuul': {'artifacts': [{'name': 'image',
                                                    'url': 'https://x/image.tar'}]}}
    consumer = launch(adapter, user, 'use-image')
    request = client.requests[-1]
    assert request.uuid == consumer.uuid
    assert request.zuul.artifacts == [{
        'project': 'org/p1', 'change': '1', 'patchset': '1', 'job': 'build-image',
        'name': 'image', 'url': 'https://x/image.tar', 'metadata': {}}]


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
