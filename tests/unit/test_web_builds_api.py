"""/api/tenant/<t>/builds and /buildsets: every released filter, sort,
paging, reruns, and the 400 answers to bad parameters; over a real
zuul-web, the fake scheduler (real Gearman) and a SQLite history."""

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest

from zuul.driver.sql.history import BuildHistory
from zuul.model import item as m
from zuul.model.change import Ref
from zuul.web.server import ZuulWeb

POST_NEWREV = 'a' * 40


def _post_item(project, start):
    """A ref-updated item (post pipeline): ref and newrev, no change."""
    ref = Ref('gerrit', project, 'refs/heads/master', oldrev='0' * 40, newrev=POST_NEWREV)
    item = m.QueueItem(change=ref)
    bs = item.current_build_set
    bs.jobs = [m.JobRef('publish', voting=False)]
    build = m.Build(bs.job('publish'), bs, result='POST_FAILURE', start_time=start,
                    end_time=start + 300)
    build.held = True
    build.nodeset = 'ubuntu-jammy'
    bs.builds['publish'] = build
    return item


@pytest.fixture
def history(build_history):
    """The canned history plus a post item (non-voting, held, nodeset)
    and an earlier, retried attempt of a job of change 1,1."""
    build_history.record_buildset('tenant-one', 'post', _post_item('org/project', 1_700_010_000),
                                  'failure')
    buildset = build_history.uuids[('tenant-one', '1,1', None)]
    item = m.QueueItem(change=Ref('gerrit', 'org/project', 'refs/changes/01/1/1'))
    retried = m.Build(m.JobRef('project-test1'), item.current_build_set, result='RETRY',
                      start_time=1_699_999_000, end_time=1_699_999_010)
    assert build_history.record_build(buildset, retried, final=False)
    assert not build_history.record_build('no-such-buildset', retried)
    build_history.retried_uuid = retried.uuid
    return build_history


@pytest.fixture
def web(rpc_client, history):
    server = ZuulWeb('127.0.0.1', 0, rpc_client, history)
    server.start()
    server.base = f'http://127.0.0.1:{server.port}/api/tenant/tenant-one'
    try:
        yield server
    finally:
        server.stop()


def get(web, path, **params):
    url = f'{web.base}/{path}'
    if params:
        url += '?' + urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(url) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def jobs(web, **params):
    status, builds = get(web, 'builds', **params)
    assert status == 200, builds
    return [(b['change'], b['patchset'], b['job_name']) for b in builds]


# newest buildset first, newest build first in each (the retried attempt,
# recorded last, is the first of change 1,1's)
ALL = [(None, None, 'publish'), (4, '1', 'project-merge'), (1, '2', 'project-test1'),
       (1, '2', 'project-merge'), (1, '1', 'project-test1'), (1, '1', 'project-test1'),
       (1, '1', 'project-merge')]


@pytest.mark.parametrize('params, expected', [
    ({}, ALL),
    ({'project': 'org/project1'}, [(4, '1', 'project-merge')]),
    ({'pipeline': 'post'}, [(None, None, 'publish')]),
    ({'job_name': 'project-merge', 'change': '1'}, [(1, '2', 'project-merge'),
                                                    (1, '1', 'project-merge')]),
    ({'job': 'project-merge', 'patchset': '2'}, [(1, '2', 'project-merge')]),
    ({'ref': 'refs/heads/master'}, [(None, None, 'publish')]),
    ({'newrev': POST_NEWREV}, [(None, None, 'publish')]),
    ({'result': 'FAILURE'}, [(1, '1', 'project-test1')]),
    ({'result': 'RETRY'}, [(1, '1', 'project-test1')]),
    ({'result': 'post_failure'}, [(None, None, 'publish')]),   # case-insensitive
    ({'voting': 'false'}, [(None, None, 'publish')]),
    ({'voting': '1', 'pipeline': 'gate'}, [(4, '1', 'project-merge')]),
    ({'held': 'true'}, [(None, None, 'publish')]),
    ({'nodeset': 'ubuntu-jammy'}, [(None, None, 'publish')]),
    ({'final': 'false'}, [(1, '1', 'project-test1')]),
    ({'final': 'true', 'change': '1', 'patchset': '1'}, [(1, '1', 'project-test1'),
                                                          (1, '1', 'project-merge')]),
    ({'complete': 'true', 'pipeline': 'gate'}, [(4, '1', 'project-merge')]),
    ({'complete': 'false'}, []),
    ({'branch': 'master', 'pipeline': 'gate'}, [(4, '1', 'project-merge')]),
    ({'limit': '2', 'skip': '1'}, ALL[1:3]),
    ({'sort': 'id'}, ALL[::-1]),
    ({'sort': '-duration', 'limit': '1'}, [(None, None, 'publish')]),   # 300 s
    ({'sort': 'duration', 'limit': '1'}, [(1, '1', 'project-test1')]),  # the 10 s retry
    ({'sort': 'change', 'pipeline': 'check', 'job_name': 'project-merge'},
     [(1, '1', 'project-merge'), (1, '2', 'project-merge')]),
])
def test_build_filters(web, params, expected):
    assert jobs(web, **params) == expected


def test_uuid_filter_and_tenants_do_not_mix(web, history):
    uuid = history.uuids[('tenant-one', '4,1', 'project-merge')]
    assert jobs(web, uuid=uuid) == [(4, '1', 'project-merge')]
    other = history.uuids[('tenant-two', '10,1', 'secret-job')]
    assert jobs(web, uuid=other) == []


def test_build_lists_its_reruns(web, history):
    final = history.uuids[('tenant-one', '1,1', 'project-test1')]
    status, build = get(web, f'build/{final}')
    assert status == 200
    assert [(r['uuid'], r['result'], r['final']) for r in build['reruns']] == [
        (history.retried_uuid, 'RETRY', False)]
    _, retried = get(web, f'build/{history.retried_uuid}')
    assert [(r['uuid'], r['final']) for r in retried['reruns']] == [(final, True)]
    other = history.uuids[('tenant-one', '1,1', 'project-merge')]
    assert get(web, f'build/{other}')[1]['reruns'] == []


def test_buildset_holds_all_its_builds(web, history):
    uuid = history.uuids[('tenant-one', '1,1', None)]
    status, buildset = get(web, f'buildset/{uuid}')
    assert status == 200
    assert [(b['job_name'], b['final']) for b in buildset['builds']] == [
        ('project-merge', True), ('project-test1', True), ('project-test1', False)]
    assert buildset['duration'] == 61.0


def sets(web, **params):
    status, body = get(web, 'buildsets', **params)
    assert status == 200, body
    return [(s['change'], s['patchset'], s['result']) for s in body]


@pytest.mark.parametrize('params, expected', [
    ({}, [(None, None, 'FAILURE'), (4, '1', 'SUCCESS'), (1, '2', 'SUCCESS'),
          (1, '1', 'FAILURE')]),
    ({'project': 'org/project', 'pipeline': 'check'}, [(1, '2', 'SUCCESS'),
                                                       (1, '1', 'FAILURE')]),
    ({'change': '1', 'patchset': '1'}, [(1, '1', 'FAILURE')]),
    ({'ref': 'refs/heads/master'}, [(None, None, 'FAILURE')]),
    ({'newrev': POST_NEWREV}, [(None, None, 'FAILURE')]),
    ({'result': 'success'}, [(4, '1', 'SUCCESS'), (1, '2', 'SUCCESS')]),
    ({'branch': 'master', 'limit': '1', 'skip': '1'}, [(4, '1', 'SUCCESS')]),
    ({'complete': 'false'}, []),
    ({'sort': 'change', 'pipeline': 'check'}, [(1, '1', 'FAILURE'), (1, '2', 'SUCCESS')]),
    ({'sort': '-duration', 'limit': '1'}, [(None, None, 'FAILURE')]),
])
def test_buildset_filters(web, params, expected):
    assert sets(web, **params) == expected


@pytest.mark.parametrize('path, params, message', [
    ('builds', {'limit': 'lots'}, 'limit must be an integer, not "lots"'),
    ('builds', {'limit': '0'}, 'limit must be between 1 and 1000'),
    ('builds', {'skip': 'x'}, 'skip must be an integer'),
    ('builds', {'result': 'GREAT'}, 'invalid result "GREAT"; one of ABORTED, '),
    ('builds', {'voting': 'maybe'}, 'voting must be true or false, not "maybe"'),
    ('builds', {'held': '2'}, 'held must be true or false'),
    ('builds', {'final': 'yes please'}, 'final must be true or false'),
    ('builds', {'complete': ''}, None),     # empty means "any": not an error
    ('builds', {'colour': 'red'}, 'unknown filter(s): colour'),
    ('builds', {'change': '1,1'}, 'change must be a number, not "1,1"'),
    ('builds', {'sort': 'colour'}, 'cannot sort by "colour"'),
    ('builds', {'sort': '-first_build_start_time'}, 'cannot sort by'),
    ('buildsets', {'job_name': 'x'}, 'unknown filter(s): job_name'),
    ('buildsets', {'voting': 'true'}, 'unknown filter(s): voting'),
    ('buildsets', {'result': 'nope'}, 'invalid result "nope"'),
    ('buildsets', {'complete': 'sometimes'}, 'complete must be true or false'),
    ('buildsets', {'sort': 'job_name'}, 'cannot sort by "job_name"'),
])
def test_bad_parameters_are_400_with_a_message(web, path, params, message):
    status, body = get(web, path, **params)
    if message is None:
        assert status == 200
        return
    assert status == 400, body
    assert message in body['error']


def test_a_parameter_given_twice_is_400(web):
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f'{web.base}/builds?project=a&project=b')
    assert e.value.code == 400
    assert json.loads(e.value.read())['error'] == 'give project once'


def test_history_keyword_filters_are_checked(tmp_path):
    history = BuildHistory(f'sqlite:///{tmp_path}/h.db')
    history.migrate()
    with pytest.raises(TypeError, match='unknown build filter'):
        history.get_builds('t', colour='red')
    with pytest.raises(ValueError, match='cannot sort'):
        history.get_builds('t', sort='colour')
