"""zuul-web's JSON API over a real Gearman server and a fake scheduler.

Every response is checked against zuul/web/openapi.yaml by ``get``.
"""

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest
from cryptography.hazmat.primitives import serialization

from tests.fakes.scheduler_rpc import FINISHED_UUID
from zuul.web import openapi
from zuul.web.server import ZuulWeb


def get(web, path, raw=False):
    """(status, body) of GET path; the body is validated against the spec."""
    try:
        response = urllib.request.urlopen(web.base + path)
        status, body = response.status, response.read()
        ctype = response.headers['Content-Type']
    except urllib.error.HTTPError as e:
        status, body, ctype = e.code, e.read(), e.headers['Content-Type']
    spec = openapi.load_spec()
    bare = urllib.parse.urlsplit(path).path
    if ctype.startswith('application/json'):
        value = json.loads(body)
        schema = openapi.response_schema(spec, 'get', bare, status)
    else:
        value = body.decode()
        schema = openapi.response_schema(spec, 'get', bare, status, 'text/plain')
    assert openapi.validate(spec, schema, value) == [], (path, value)
    return status, value


def error_of(web, path, expected_status):
    status, body = get(web, path)
    assert status == expected_status, (path, body)
    return body['error']


def test_tenants(zuul_web):
    assert get(zuul_web, '/api/tenants') == (200, [
        {'name': 'tenant-one', 'projects': 3, 'queue': 4},
        {'name': 'tenant-two', 'projects': 2, 'queue': 0}])


def test_status_shows_the_gate_queue_and_only_its_tenant(zuul_web):
    status, body = get(zuul_web, '/api/tenant/tenant-one/status')
    assert status == 200
    gate = next(p for p in body['pipelines'] if p['name'] == 'gate')
    queue = gate['change_queues'][0]
    assert queue['name'] == 'integrated'
    assert [i['id'] for i in queue['heads'][0]] == ['1,2', '2,1', '4,1']
    _, other = get(zuul_web, '/api/tenant/tenant-two/status')
    assert 'org/project' not in json.dumps(other)


def test_status_of_one_change(zuul_web):
    status, items = get(zuul_web, '/api/tenant/tenant-one/status/change/2,1')
    assert status == 200 and [i['item_ahead'] for i in items] == ['1,2']
    assert get(zuul_web, '/api/tenant/tenant-two/status/change/2,1') == (200, [])
    assert 'NUMBER,PATCHSET' in error_of(zuul_web, '/api/tenant/tenant-one/status/change/2', 400)


@pytest.mark.parametrize('path', [
    '/api/tenant/nope/status', '/api/tenant/nope/jobs', '/api/tenant/nope/job/base',
    '/api/tenant/nope/projects', '/api/tenant/nope/project/org/project',
    '/api/tenant/nope/key/org/project.pub', '/api/tenant/nope/config-errors',
    '/api/tenant/nope/builds', '/api/tenant/nope/buildsets',
    f'/api/tenant/nope/build/{FINISHED_UUID}', '/api/tenant/nope/pipelines',
    '/api/tenant/nope/autohold',
])
def test_unknown_tenant_is_404_everywhere(zuul_web, path):
    assert error_of(zuul_web, path, 404) == 'Unknown tenant nope'


def test_unknown_endpoint_is_a_json_404(zuul_web):
    for path in ('/api/tenant/tenant-one/nothing', '/api/bogus'):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(zuul_web.base + path)
        assert e.value.code == 404
        assert json.loads(e.value.read())['error'].startswith('no such endpoint')


def test_pipelines(zuul_web):
    assert get(zuul_web, '/api/tenant/tenant-one/pipelines')[1] == [
        {'name': 'check', 'manager': 'independent'}, {'name': 'gate', 'manager': 'dependent'},
        {'name': 'post', 'manager': 'supercedent'}]


def test_jobs_and_variants(zuul_web):
    _, jobs = get(zuul_web, '/api/tenant/tenant-one/jobs')
    assert [j['name'] for j in jobs] == ['base', 'project-merge', 'project-test1']
    assert [v['branches'] for v in jobs[2]['variants']] == [[], ['stable/.*']]
    _, variants = get(zuul_web, '/api/tenant/tenant-one/job/project-test1')
    assert [v['source_context']['path'] for v in variants] == ['zuul.d/jobs.yaml'] * 2
    assert 'secret-job' not in json.dumps(jobs)  # tenant-two's job


def test_frozen_job_with_inheritance_path(zuul_web):
    path = '/api/tenant/tenant-one/job/project-test1?project=org/project&branch=stable/2'
    status, frozen = get(zuul_web, path)
    assert status == 200
    assert frozen['frozen']['timeout'] == 600  # the stable variant applied last
    assert [line.split()[0] for line in frozen['inheritance_path']] == [
        'base', 'project-test1', 'project-test1']
    _, master = get(zuul_web, '/api/tenant/tenant-one/job/project-test1?project=org/project')
    assert master['branch'] == 'master' and master['frozen']['timeout'] == 1800


def test_job_errors(zuul_web):
    assert error_of(zuul_web, '/api/tenant/tenant-one/job/missing', 404) == \
        'Unknown job missing in tenant tenant-one'
    # tenant-two's job is invisible from tenant-one
    assert error_of(zuul_web, '/api/tenant/tenant-one/job/secret-job', 404).startswith('Unknown')
    assert 'need a project' in error_of(
        zuul_web, '/api/tenant/tenant-one/job/base?branch=master', 400)
    assert 'unexpected parameter' in error_of(
        zuul_web, '/api/tenant/tenant-one/job/base?colour=red', 400)
    assert error_of(zuul_web, '/api/tenant/tenant-one/job/base?project=org/project2', 404) == \
        'Unknown project org/project2 in tenant tenant-one'


def test_projects_and_project(zuul_web):
    _, projects = get(zuul_web, '/api/tenant/tenant-one/projects')
    assert [(p['name'], p['type']) for p in projects] == [
        ('common-config', 'config'), ('org/project', 'untrusted'),
        ('org/project1', 'untrusted')]
    _, project = get(zuul_web, '/api/tenant/tenant-one/project/org/project')
    assert project['canonical_name'] == 'review.example.com/org/project'
    assert [p['name'] for p in project['configs'][0]['pipelines']] == ['check', 'gate']
    assert get(zuul_web, '/api/tenant/tenant-one/project/review.example.com/org/project')[0] \
        == 200
    assert error_of(zuul_web, '/api/tenant/tenant-one/project/org/project2', 404) == \
        'Unknown project org/project2 in tenant tenant-one'


def test_public_key(zuul_web):
    status, pem = get(zuul_web, '/api/tenant/tenant-one/key/org/project.pub')
    assert status == 200 and pem.startswith('-----BEGIN PUBLIC KEY-----')
    assert serialization.load_pem_public_key(pem.encode()).key_size == 2048
    assert error_of(zuul_web, '/api/tenant/tenant-one/key/org/project2.pub', 404) == \
        'Unknown project org/project2 in tenant tenant-one'
    assert get(zuul_web, '/api/tenant/tenant-two/key/org/project2.pub')[0] == 200


def test_config_errors_are_per_tenant(zuul_web):
    _, errors = get(zuul_web, '/api/tenant/tenant-one/config-errors')
    assert [(e['source_context']['project'], e['line']) for e in errors] == [
        ('org/project1', 3)]
    assert get(zuul_web, '/api/tenant/tenant-two/config-errors') == (200, [])


def test_builds_filters_and_paging(zuul_web):
    def changes(query):
        status, builds = get(zuul_web, '/api/tenant/tenant-one/builds' + query)
        assert status == 200
        return [(b['change'], b['patchset'], b['job_name']) for b in builds]

    assert changes('') == [(4, '1', 'project-merge'), (1, '2', 'project-test1'),
                           (1, '2', 'project-merge'), (1, '1', 'project-test1'),
                           (1, '1', 'project-merge')]
    assert changes('?project=org/project1') == [(4, '1', 'project-merge')]
    assert changes('?pipeline=gate') == [(4, '1', 'project-merge')]
    assert changes('?job=project-test1&result=FAILURE') == [(1, '1', 'project-test1')]
    assert changes('?job_name=project-test1&change=1&patchset=2') == [(1, '2', 'project-test1')]
    assert changes('?limit=2') == changes('')[:2]
    assert changes('?limit=2&skip=2') == changes('')[2:4]
    assert changes('?skip=5') == []
    assert changes('?project=org/project2') == []  # tenant-two's build stays hidden


@pytest.mark.parametrize('query, message', [
    ('?change=1,2', 'change must be a number'), ('?change=abc', 'change must be a number'),
    ('?limit=lots', 'limit must be an integer'), ('?limit=0', 'limit must be between'),
    ('?skip=-1', 'skip must be between'), ('?colour=red', 'unknown filter(s): colour'),
    ('?result=not-a-result', 'invalid result'),
])
def test_builds_bad_input_is_400(zuul_web, query, message):
    assert message in error_of(zuul_web, '/api/tenant/tenant-one/builds' + query, 400)


def test_build_and_its_artifacts(zuul_web, build_history):
    uuid = build_history.uuids[('tenant-one', '1,1', 'project-test1')]
    status, build = get(zuul_web, f'/api/tenant/tenant-one/build/{uuid}')
    assert status == 200 and build['result'] == 'FAILURE' and build['duration'] == 60.0
    assert build['artifacts'][0]['name'] == 'test report'
    other = build_history.uuids[('tenant-two', '10,1', 'secret-job')]
    assert 'no build' in error_of(zuul_web, f'/api/tenant/tenant-one/build/{other}', 404)
    assert get(zuul_web, f'/api/tenant/tenant-two/build/{other}')[0] == 200


def test_buildsets(zuul_web, build_history):
    _, sets = get(zuul_web, '/api/tenant/tenant-one/buildsets?project=org/project')
    assert [(s['change'], s['patchset'], s['result']) for s in sets] == [
        (1, '2', 'SUCCESS'), (1, '1', 'FAILURE')]
    uuid = build_history.uuids[('tenant-one', '1,1', None)]
    _, buildset = get(zuul_web, f'/api/tenant/tenant-one/buildset/{uuid}')
    assert sorted(b['job_name'] for b in buildset['builds']) == ['project-merge',
                                                                 'project-test1']
    assert 'no buildset' in error_of(zuul_web, f'/api/tenant/tenant-two/buildset/{uuid}', 404)
    assert 'change must be a number' in error_of(
        zuul_web, '/api/tenant/tenant-one/buildsets?change=x', 400)


def test_history_endpoints_without_a_database(rpc_client):
    web = ZuulWeb('127.0.0.1', 0, rpc_client, history=None)
    web.start()
    web.base = f'http://127.0.0.1:{web.port}'
    try:
        assert 'not configured' in error_of(web, '/api/tenant/tenant-one/builds', 404)
        assert get(web, '/api/info')[1]['info']['capabilities']['job_history'] is False
    finally:
        web.stop()


def test_autohold_list(zuul_web, fake_scheduler):
    assert get(zuul_web, '/api/tenant/tenant-one/autohold') == (200, [])
    fake_scheduler.autoholds.append({
        'id': '1', 'tenant': 'tenant-two', 'project': 'org/project2', 'job': 'secret-job',
        'ref_filter': '.*', 'reason': 'debug', 'max_count': 1, 'current_count': 0})
    assert get(zuul_web, '/api/tenant/tenant-one/autohold') == (200, [])
    assert len(get(zuul_web, '/api/tenant/tenant-two/autohold')[1]) == 1


def test_openapi_document_is_served_and_the_validator_rejects(zuul_web):
    with urllib.request.urlopen(zuul_web.base + '/api/openapi.yaml') as r:
        assert r.read().decode() == openapi.spec_text()
    spec = openapi.load_spec()
    schema = openapi.response_schema(spec, 'get', '/api/tenants', 200)
    assert openapi.validate(spec, schema, [{'name': 't', 'projects': 1, 'queue': 0}]) == []
    assert openapi.validate(spec, schema, [{'name': 't', 'projects': '1', 'queue': 0}]) == [
        '$[0].projects: expected integer, got str']
    assert openapi.validate(spec, schema, [{'name': 't'}]) == [
        "$[0]: missing required property 'projects'",
        "$[0]: missing required property 'queue'"]
    with pytest.raises(LookupError):
        openapi.find_operation(spec, 'get', '/api/undocumented')
