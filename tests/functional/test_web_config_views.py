"""zuul-web's configuration views over a real scheduler, Gearman and
ZooKeeper (tests/functional/web_config_views_support.py): jobs, job,
projects, project, freeze-jobs (the job graph), semaphores with their
holders, nodes, autoholds, config errors, tenant info and keys; bad
parameters (400), unknown names (404) and a private tenant (401 for
anonymous callers)."""

from __future__ import annotations

import pytest

from tests.functional import web_config_views_support as support
from tests.functional.web_config_views_support import get
from zuul.lib import rpc_protocol as p
from zuul.scheduler.autohold import AutoholdRequest

T = '/api/tenant/example'
GRAPH = '/pipeline/{}/project/{}/branch/{}/freeze-jobs'


@pytest.fixture
def system(tmp_path, gearman_server, zk_client):
    system = support.start(tmp_path, gearman_server, zk_client)
    try:
        yield system
    finally:
        system.stop()


def error(system, path, status, bearer=None) -> str:
    got, body = get(system, path, bearer)
    assert got == status, (path, got, body)
    return body['error']


def test_jobs_list_and_job_variants(system):
    status, jobs = get(system, f'{T}/jobs')
    assert status == 200
    assert [j['name'] for j in jobs] == ['base', 'build', 'docs', 'integration', 'lint',
                                         'unit']
    integration = next(j for j in jobs if j['name'] == 'integration')
    assert [(v['parent'], v['branches']) for v in integration['variants']] == [
        ('build', []), (None, ['^stable/.*$'])]
    status, variants = get(system, f'{T}/job/integration')
    assert status == 200
    first, stable = variants
    assert (first['nodeset'], first['run'], first['required_projects'],
            first['semaphores']) == ('single', ['playbooks/integration.yaml'], ['org/lib'],
                                     ['db-lock'])
    assert (stable['branches'], stable['timeout']) == (['^stable/.*$'], 600)


def test_job_frozen_for_a_project_branch(system):
    status, frozen = get(system, f'{T}/job/integration?project=org/app&branch=stable/2.0')
    assert status == 200
    assert frozen['inheritance_path'] == [
        'variant job base@org/config:master:zuul.yaml:21',
        'variant job build@org/config:master:zuul.yaml:26',
        'variant job integration@org/config:master:zuul.yaml:42',
        'variant job integration@org/config:master:zuul.yaml:49']
    job = frozen['frozen']
    assert job['timeout'] == 600
    assert [pb['path'] for pb in job['pre_run']] == ['playbooks/base-pre.yaml']
    assert job['variables'] == {'flavor': 'fast'}
    _, master = get(system, f'{T}/job/integration?project=org/app')
    assert master['branch'] == 'master' and master['frozen']['timeout'] is None


def test_job_errors(system):
    assert 'Unknown job' in error(system, f'{T}/job/nope', 404)
    assert 'unexpected parameter' in error(system, f'{T}/job/build?color=red', 400)
    assert 'need a project' in error(system, f'{T}/job/build?branch=master', 400)
    assert error(system, '/api/tenant/nope/jobs', 404).startswith('Unknown tenant')


def test_freeze_jobs_gives_the_job_graph(system):
    status, graph = get(system, T + GRAPH.format('check', 'org/app', 'master'))
    assert status == 200
    assert graph == [
        {'name': 'build', 'dependencies': []},
        {'name': 'lint', 'dependencies': []},
        {'name': 'unit', 'dependencies': [{'name': 'build', 'soft': False}]},
        {'name': 'docs', 'dependencies': [{'name': 'lint', 'soft': True}]}]
    _, gate = get(system, T + GRAPH.format('gate', 'review.example.org/org/app', 'master'))
    assert gate == [{'name': 'build', 'dependencies': []},
                    {'name': 'integration',
                     'dependencies': [{'name': 'build', 'soft': False}]}]
    # a project without jobs in the pipeline has an empty graph
    assert get(system, T + GRAPH.format('check', 'org/lib', 'master')) == (200, [])


def test_freeze_jobs_errors(system):
    assert 'Unknown pipeline' in error(system, T + GRAPH.format('nope', 'org/app',
                                                                'master'), 404)
    assert 'org/nope' in error(system, T + GRAPH.format('check', 'org/nope', 'master'), 404)
    assert 'no such endpoint' in error(system, f'{T}/pipeline/check/project/org/app', 404)
    assert 'unexpected parameter' in error(
        system, T + GRAPH.format('check', 'org/app', 'master') + '?x=1', 400)


def test_semaphores_show_their_holders(system):
    nobody = {'count': 0, 'this_tenant': [], 'other_tenants': 0}
    idle = [{'name': 'db-lock', 'global': False, 'max': 2, 'holders': nobody},
            {'name': 'licenses', 'global': True, 'max': 3, 'holders': nobody}]
    assert get(system, f'{T}/semaphores') == (200, idle)
    support.run_check(system)
    _, sems = get(system, f'{T}/semaphores')
    holders = sems[0]['holders']
    assert holders['count'] == 1 and holders['other_tenants'] == 0
    [holder] = holders['this_tenant']
    assert holder['job_name'] == 'lint' and len(holder['buildset_uuid']) == 32
    lint = next(r for r in system.executor.requests if r.job.name == 'lint')
    system.executor.finish(lint)
    assert system.scheduler.loop.wait_idle(60)
    assert get(system, f'{T}/semaphores') == (200, idle)
    assert 'unexpected parameter' in error(system, f'{T}/semaphores?all=1', 400)


def test_semaphore_holders_of_playbooks_and_other_tenants(system):
    """Playbook semaphores are taken over the executor's RPC; a global
    semaphore held in another tenant is only counted."""
    for tenant, build, names in (('example', 'b1', ['db-lock', 'licenses']),
                                 ('private', 'b2', ['licenses'])):
        assert system.rpc.call(p.SEMAPHORE_ACQUIRE, p.RPCRequest(
            tenant=tenant, build=build, playbook='run 0', semaphores=names))['acquired']
    _, sems = get(system, f'{T}/semaphores')
    by_name = {s['name']: s for s in sems}
    assert by_name['db-lock']['holders'] == {
        'count': 1, 'this_tenant': [{'build_uuid': 'b1', 'playbook': 'run 0'}],
        'other_tenants': 0}
    assert (by_name['licenses']['global'], by_name['licenses']['max']) == (True, 3)
    assert by_name['licenses']['holders'] == {
        'count': 2, 'this_tenant': [{'build_uuid': 'b1', 'playbook': 'run 0'}],
        'other_tenants': 1}
    # the private tenant's own view names its holder
    _, private = get(system, '/api/tenant/private/semaphores', support.reader_token())
    # (its db-lock, from the same config project, is its own: not held there)
    assert private == [
        {'name': 'db-lock', 'global': False, 'max': 2,
         'holders': {'count': 0, 'this_tenant': [], 'other_tenants': 0}},
        {'name': 'licenses', 'global': True, 'max': 3, 'holders': {
            'count': 2, 'this_tenant': [{'build_uuid': 'b2', 'playbook': 'run 0'}],
            'other_tenants': 1}}]


def test_nodes_of_the_tenant(system):
    assert get(system, f'{T}/nodes') == (200, [])
    support.add_nodes(system)
    _, nodes = get(system, f'{T}/nodes')
    assert [(n['type'], n['state'], n['provider'], n['hold_job']) for n in nodes] == [
        (['debian'], 'ready', 'cloud-one', None),
        (['debian'], 'hold', 'cloud-one', 'example/app/lint')]
    # the private tenant's node is not listed for example
    assert 'server-ubuntu-in-use' not in str(nodes)
    assert 'unexpected parameter' in error(system, f'{T}/nodes?label=x', 400)
    assert error(system, '/api/tenant/nope/nodes', 404).startswith('Unknown tenant')


def test_config_errors_with_filters(system):
    status, errors = get(system, f'{T}/config-errors')
    assert status == 200
    assert [(e['source_context']['project'], e['line']) for e in errors] == [
        ('org/broken', 2), ('org/config', 70)]
    assert 'no-such-key' in errors[0]['error']
    for project in ('org/broken', 'review.example.org/org/broken'):
        _, only = get(system, f'{T}/config-errors?project={project}')
        assert [e['source_context']['project'] for e in only] == ['org/broken']
    assert get(system, f'{T}/config-errors?branch=stable') == (200, [])
    assert get(system, f'{T}/config-errors?severity=warning') == (200, [])
    _, second = get(system, f'{T}/config-errors?skip=1&limit=1')
    assert [e['source_context']['project'] for e in second] == ['org/config']
    assert 'severity must be one of' in error(system, f'{T}/config-errors?severity=bad', 400)
    assert 'limit must be an integer' in error(system, f'{T}/config-errors?limit=x', 400)
    assert 'give project once' in error(
        system, f'{T}/config-errors?project=a&project=b', 400)
    assert 'unexpected parameter' in error(system, f'{T}/config-errors?path=x', 400)


def test_projects_and_project(system):
    _, projects = get(system, f'{T}/projects')
    assert [(p['name'], p['type']) for p in projects] == [
        ('org/app', 'untrusted'), ('org/broken', 'untrusted'), ('org/config', 'config'),
        ('org/lib', 'untrusted')]
    status, project = get(system, f'{T}/project/org/app')
    assert status == 200 and project['canonical_name'] == 'review.example.org/org/app'
    [config] = project['configs']
    assert {pl['name']: [v[0]['name'] for v in pl['jobs']] for pl in config['pipelines']} == {
        'check': ['build', 'lint', 'unit', 'docs'], 'gate': ['build', 'integration']}
    assert 'org/nope' in error(system, f'{T}/project/org/nope', 404)


def test_labels(system):
    status, labels = get(system, f'{T}/labels')
    assert status == 200
    assert [(lb['name'], lb['image'], lb['flavor'], lb['min_ready']) for lb in labels] == [
        ('fedora-large', 'fedora', 'large', 1)]
    assert 'unexpected parameter' in error(system, f'{T}/labels?x=1', 400)


def test_autoholds_by_project(system):
    system.scheduler.autoholds.add(AutoholdRequest(
        tenant='example', project='org/app', job='lint', ref_filter='.*', reason='debug',
        max_count=1, node_hold_expiration=3600))
    _, holds = get(system, f'{T}/autohold')
    assert [(h['project'], h['job'], h['reason']) for h in holds] == [
        ('org/app', 'lint', 'debug')]
    assert get(system, f'{T}/autohold?project=review.example.org/org/app')[1] == holds
    assert get(system, f'{T}/autohold?project=org/lib') == (200, [])
    assert get(system, f'{T}/autohold/{holds[0]["id"]}') == (200, holds[0])
    assert 'no autohold request' in error(system, f'{T}/autohold/0000000999', 404)
    assert 'unexpected parameter' in error(system, f'{T}/autohold?job=lint', 400)


def test_tenant_info_and_keys(system):
    assert get(system, f'{T}/info') == (200, {'info': {
        'capabilities': {'job_history': False,
                         'auth': {'realms': {}, 'default_realm': 'zuul.example.com'}},
        'tenant': 'example'}})
    assert error(system, '/api/tenant/nope/info', 404) == 'Unknown tenant nope'
    assert 'unexpected parameter' in error(system, f'{T}/info?x=1', 400)
    status, pem = get(system, f'{T}/key/org/app.pub')
    assert status == 200 and pem.startswith('-----BEGIN PUBLIC KEY-----')
    assert 'org/nope' in error(system, f'{T}/key/org/nope.pub', 404)
    status, line = get(system, f'{T}/project-ssh-key/org/app.pub')
    assert status == 200 and line.startswith('ssh-rsa ') and line.endswith('\n')
    assert get(system, f'{T}/project-ssh-key/review.example.org/org/app.pub') == (200, line)
    assert get(system, f'{T}/project-ssh-key/org/lib.pub')[1] != line
    assert 'org/nope' in error(system, f'{T}/project-ssh-key/org/nope.pub', 404)
    assert 'project-ssh-key/<project>.pub' in error(
        system, f'{T}/project-ssh-key/org/app', 404)


PRIVATE_VIEWS = ['info', 'jobs', 'job/build', 'projects', 'project/org/secret', 'semaphores',
                 'nodes', 'labels', 'config-errors', 'autohold', 'pipelines',
                 'key/org/secret.pub',
                 GRAPH.format('check', 'org/secret', 'master').lstrip('/')]


@pytest.mark.parametrize('view', PRIVATE_VIEWS)
def test_private_tenant_views_need_a_reader(system, view):
    path = f'/api/tenant/private/{view}'
    assert error(system, path, 401) == 'Missing "Authorization" header'
    status, body = get(system, path, support.reader_token())
    assert status == 200, body
    status, _ = get(system, path, support.token(sub='nobody'))
    assert status == 403


def test_private_tenant_is_not_listed_for_anonymous(system):
    _, tenants = get(system, '/api/tenants')
    assert [t['name'] for t in tenants] == ['example']
    _, tenants = get(system, '/api/tenants', support.reader_token())
    assert [t['name'] for t in tenants] == ['example', 'private']
