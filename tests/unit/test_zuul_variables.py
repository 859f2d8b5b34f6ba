"""The ``zuul`` variable: the scheduler fills the request (event id,
child jobs, artifacts of parent builds, tags) and the executor turns it into
the documented names and encodings (base64 ``zuul.message``, tag items)."""

from __future__ import annotations

import base64

from zuul.executor.jobdir import JobDir
from zuul.executor.protocol import ExecuteRequest, JobSpec, ZuulContext
from zuul.executor.vars import encode_message, zuul_vars
from zuul.model import item as m
from zuul.model.change import Change, Ref
from zuul.scheduler.builds import ExecutorAdapter, child_jobs, item_spec, parent_artifacts

HOST = 'review.example.org'


class FakeClient:
    def __init__(self):
        self.requests = []

    def execute(self, request, on_progress=None, on_complete=None):
        self.requests.append(ExecuteRequest.from_json(request.to_json()))
        return object()


def change_item() -> m.QueueItem:
    change = Change('gerrit', 'org/p', 'refs/changes/01/1/2', number=1, patchset=2,
                    branch_name='master', message='Fix it\n\nDetails ü\n', topic='t1',
                    url='https://review.example.org/1')
    event = type('Event', (), {'event_id': 'evt-42'})()
    return m.QueueItem(change=change, event=event)


def graph(item: m.QueueItem) -> dict:
    """build -> test -> (deploy, docs): a chain and a fan-out."""
    bs = item.current_build_set
    jobs = {
        'build': m.JobRef('build'),
        'test': m.JobRef('test', hard_dependencies=('build',)),
        'deploy': m.JobRef('deploy', hard_dependencies=('test',)),
        'docs': m.JobRef('docs', soft_dependencies=('test',)),
    }
    bs.jobs = list(jobs.values())
    return jobs


def finish(item, job, result, artifacts):
    build = m.Build(job=job, build_set=item.current_build_set, result=result,
                    result_data={'zuul': {'artifacts': artifacts}})
    item.current_build_set.builds[job.name] = build
    return build


def test_child_jobs_are_the_first_level_dependents():
    item = change_item()
    graph(item)
    bs = item.current_build_set
    assert child_jobs(bs, 'build') == ['test']
    assert child_jobs(bs, 'test') == ['deploy', 'docs']
    assert child_jobs(bs, 'deploy') == []


def test_artifacts_come_from_every_successful_ancestor_build():
    item = change_item()
    jobs = graph(item)
    finish(item, jobs['build'], m.SUCCESS,
           [{'name': 'tarball', 'url': 'https://x/t.tgz', 'metadata': {'type': 'tar'}}])
    finish(item, jobs['test'], m.SUCCESS, [{'name': 'report', 'url': 'https://x/r'},
                                           {'bogus': True}])
    arts = parent_artifacts(item, 'deploy')
    assert [a['name'] for a in arts] == ['tarball', 'report']
    assert arts[0] == {'project': 'org/p', 'change': '1', 'patchset': '2', 'job': 'build',
                       'name': 'tarball', 'url': 'https://x/t.tgz',
                       'metadata': {'type': 'tar'}}
    assert parent_artifacts(item, 'build') == []
    # A failed parent's artifacts are not passed on.
    item.current_build_set.builds['test'].result = m.FAILURE
    assert [a['name'] for a in parent_artifacts(item, 'deploy')] == ['tarball']


def test_executor_adapter_fills_event_id_children_artifacts_and_message():
    item = change_item()
    jobs = graph(item)
    finish(item, jobs['build'], m.SUCCESS, [{'name': 'tarball', 'url': 'https://x/t.tgz'}])
    client = FakeClient()
    adapter = ExecutorAdapter(client, scheduler=None, canonical_hostnames={'gerrit': HOST},
                              job_spec_for=lambda job, item: JobSpec(name=job.name,
                                                                     tags=['b', 'a']))
    pipeline = type('Pipeline', (), {'name': 'check', 'post_review': True})()
    build = m.Build(job=jobs['test'], build_set=item.current_build_set)
    adapter.execute('tenant-one', pipeline, item, jobs['test'], [], build)
    (request,) = client.requests
    ctx = request.zuul
    assert ctx.event_id == 'evt-42'
    assert ctx.child_jobs == ['deploy', 'docs']
    assert [a['name'] for a in ctx.artifacts] == ['tarball']
    assert ctx.post_review is True
    assert request.items[-1].message == 'Fix it\n\nDetails ü\n'
    assert request.items[-1].topic == 't1'


def _vars(tmp_path, items, **ctx_kw):
    request = ExecuteRequest(uuid='u1', job=JobSpec(name='j', tags=['z', 'a'], attempts=4),
                             items=items,
                             zuul=ZuulContext('t', 'post', 'bs',
                                              canonical_hostnames={'gerrit': HOST}, **ctx_kw))
    return zuul_vars(request, JobDir(str(tmp_path), 'u1'), 'ex1', {})


def test_message_is_base64_and_change_message_plain(tmp_path):
    it = item_spec(change_item(), {'gerrit': HOST}, 'merge-resolve')
    data = _vars(tmp_path, [it])
    assert base64.b64decode(data['message']).decode('utf8') == 'Fix it\n\nDetails ü\n'
    assert data['message'] == encode_message('Fix it\n\nDetails ü\n')
    assert data['change_message'] == 'Fix it\n\nDetails ü\n'
    assert data['items'][0]['change_message'] == 'Fix it\n\nDetails ü\n'
    assert data['topic'] == 't1'
    assert (data['jobtags'], data['max_attempts']) == (['a', 'z'], 4)
    assert 'tag' not in data and 'commit_id' not in data


def test_tag_and_branch_items(tmp_path):
    sha = 'a' * 40
    tag = item_spec(m.QueueItem(change=Ref('gerrit', 'org/p', 'refs/tags/v1.0',
                                           oldrev='0' * 40, newrev=sha)),
                    {'gerrit': HOST}, 'merge-resolve')
    data = _vars(tmp_path, [tag], event_id='e1')
    assert (data['tag'], data['newrev'], data['commit_id']) == ('v1.0', sha, sha)
    assert data['ref'] == 'refs/tags/v1.0'
    assert 'change' not in data and 'message' not in data and 'branch' not in data
    assert data['items'][0]['tag'] == 'v1.0'
    assert data['event_id'] == 'e1'
    old = 'b' * 40
    branch = item_spec(m.QueueItem(change=Ref('gerrit', 'org/p', 'refs/heads/master',
                                              oldrev=old, newrev=sha)),
                       {'gerrit': HOST}, 'merge-resolve')
    data = _vars(tmp_path, [branch])
    assert (data['branch'], data['oldrev'], data['newrev'], data['commit_id']) == (
        'master', old, sha, sha)
    assert 'tag' not in data
