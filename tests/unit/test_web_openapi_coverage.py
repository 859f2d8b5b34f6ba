"""zuul/web/openapi.yaml against the routes zuul-web actually serves.

The routing of zuul/web/api.py, config_api.py and actions.py is code,
not a table, so coverage is checked two ways:

* every path word the routing code compares a URL segment with (and
  every key of the route tables it looks segments up in) is a literal
  segment of a documented path;
* a list of sample requests, one per documented operation, is sent to a
  real zuul-web (a real scheduler over real Gearman, Nodepool's nodes in
  a real ZooKeeper, a SQLite build history, access rules enforced): each
  must be served (never ``no such endpoint``), match a documented path
  and method, and answer a documented status with a body of the
  documented schema; and together they cover every documented operation.

The query parameters of /builds and /buildsets (and config-errors) are
the code's filter lists, and every documented value is accepted.
"""

from __future__ import annotations

import ast
import inspect
import json
import textwrap
import urllib.parse

import pytest

from tests.fakes.scheduler_rpc import _history_item
from tests.functional import web_config_views_support as views
from tests.unit.web_auth_support import authenticators, call, token
from zuul.driver.sql.history import (
    BUILD_RESULTS,
    BUILD_SORT_KEYS,
    BUILDSET_RESULTS,
    BUILDSET_SORT_KEYS,
    BuildHistory,
)
from zuul.model import item as m
from zuul.web import actions, api, config_api, console, openapi, websocket
from zuul.web.server import ZuulWeb
from zuul.web.webhooks import WebhookReceiver

T = '/api/tenant/example'
PRIVATE = '/api/tenant/private'
NO_HOLD = '0000000001'
NOT_RUNNING = 'f' * 32
TENANT_ERRORS = {'400', '401', '403', '404'}


@pytest.fixture
def system(tmp_path, gearman_server, zk_client):
    """web_config_views_support's system, with a zuul-web that also has a
    build history (tenant ``example``: buildsets of changes 1,1, with a
    retried attempt of lint, and 2,1) and takes webhooks."""
    system = views.start(tmp_path, gearman_server, zk_client)
    history = BuildHistory(f'sqlite:///{tmp_path}/history.db')
    history.migrate()
    system.uuids = {}
    for n, (number, results, result) in enumerate((
            (1, {'build': 'SUCCESS', 'lint': 'FAILURE'}, 'failure'),
            (2, {'build': 'SUCCESS'}, 'success'))):
        item = _history_item('org/app', number, 1, results, 1_700_000_000 + n * 1000)
        history.record_buildset('example', 'check', item, result, f'Build {result}.')
        system.uuids[number] = item.current_build_set
    bs = system.uuids[1]
    retried = m.Build(bs.job('lint'), bs, result='RETRY', start_time=1_699_999_000,
                      end_time=1_699_999_010)
    assert history.record_build(bs.uuid, retried, final=False)
    system.retried = retried.uuid
    # What the lint build ran with (zuul reproduce), secrets left out.
    from zuul.executor.protocol import ExecuteRequest, JobSpec, PlaybookSpec, ZuulContext
    from zuul.executor.reproduction import public_request
    lint = bs.builds['lint'].uuid
    history.record_reproduction('example', lint, public_request(ExecuteRequest(
        uuid=lint, job=JobSpec(name='lint', run=[PlaybookSpec(
            'gerrit', 'org/app', 'master', 'playbooks/lint.yaml', secrets={'s': 'x'})]),
        zuul=ZuulContext(tenant='example', pipeline='check', buildset=bs.uuid))))
    web = ZuulWeb('127.0.0.1', 0, system.rpc, history, webhooks=WebhookReceiver({}),
                  authenticators=authenticators(), enforce_access=True)
    web.start()
    system.base = f'http://127.0.0.1:{web.port}'
    try:
        yield system
    finally:
        web.stop()
        system.stop()


def served(system, method, path, bearer=None, body=None):
    """(status, body): the request was routed (not ``no such endpoint``),
    its path and method are documented, and so are its status and body
    (web_auth_support.call checks JSON bodies; text bodies here)."""
    status, value, headers = call(system, method, path, body, bearer)
    if isinstance(value, dict) and 'error' in value:
        assert not value['error'].startswith('no such endpoint'), (method, path, value)
    spec = openapi.load_spec()
    bare = urllib.parse.urlsplit(path).path
    openapi.find_operation(spec, method, bare)
    if value is None:
        assert str(status) in openapi.find_operation(spec, method, bare)[1]['responses']
    elif not headers.get('Content-Type', '').startswith('application/json'):
        schema = openapi.response_schema(spec, method, bare, status, 'text/plain')
        assert openapi.validate(spec, schema, value) == []
    return status, value


def samples(system) -> list[tuple[str, str, int]]:
    """(method, path, expected status): one request per documented operation."""
    build_uuid = system.uuids[1].builds['lint'].uuid
    buildset_uuid = system.uuids[1].uuid
    graph = f'{T}/pipeline/check/project/org/app/branch/master/freeze-jobs'
    return [
        ('GET', '/api/info', 200), ('GET', '/api/openapi.yaml', 200),
        ('GET', '/api/tenants', 200), ('POST', '/api/connection/github/payload', 404),
        ('GET', f'{T}/info', 200), ('GET', f'{T}/status', 200),
        ('GET', f'{T}/status/change/1,1', 200), ('GET', f'{T}/pipelines', 200),
        ('GET', graph, 200), ('GET', f'{T}/jobs', 200), ('GET', f'{T}/job/build', 200),
        ('GET', f'{T}/projects', 200), ('GET', f'{T}/project/org/app', 200),
        ('POST', f'{T}/project/org/app/enqueue', 401),
        ('POST', f'{T}/project/org/app/dequeue', 401),
        ('GET', f'{T}/project/org/app/autohold', 200),
        ('POST', f'{T}/project/org/app/autohold', 401), ('POST', f'{T}/promote', 401),
        ('GET', f'{T}/autohold/{NO_HOLD}', 404), ('DELETE', f'{T}/autohold/{NO_HOLD}', 401),
        ('GET', f'{T}/authorizations', 401), ('GET', f'{T}/key/org/app.pub', 200),
        ('GET', f'{T}/project-ssh-key/org/app.pub', 200),
        ('GET', f'{T}/config-errors', 200), ('GET', f'{T}/semaphores', 200),
        ('GET', f'{T}/nodes', 200), ('GET', f'{T}/autohold', 200),
        ('GET', f'{T}/images', 200), ('GET', f'{T}/flavors', 200),
        ('GET', f'{T}/labels', 200), ('GET', f'{T}/providers', 200),
        ('GET', f'{T}/builds', 200), ('GET', f'{T}/build/{build_uuid}', 200),
        ('GET', f'{T}/build/{build_uuid}/reproduction', 200),
        ('GET', f'{T}/buildsets', 200), ('GET', f'{T}/buildset/{buildset_uuid}', 200),
        ('GET', f'{T}/console-stream?uuid={NOT_RUNNING}', 404),
        # this scheduler has no image service (test_image_lifecycle_scheduler.py
        # checks the 200 answers against the document)
        ('GET', f'{T}/image-builds', 400), ('GET', f'{T}/image-uploads', 400),
    ]


def _operations(spec) -> set[tuple[str, str]]:
    return {(template, method) for template, item in spec['paths'].items()
            for method in item if method in ('get', 'post', 'put', 'delete')}


# -- routes --------------------------------------------------------------------------


def test_every_sample_is_served_as_documented_and_covers_the_document(system):
    spec = openapi.load_spec()
    covered = set()
    for method, path, expected in samples(system):
        status, body = served(system, method, path)
        assert status == expected, (method, path, body)
        covered.add((openapi.find_operation(spec, method, path.split('?')[0])[0],
                     method.lower()))
    assert _operations(spec) - covered == set(), 'documented but never requested'


def test_bodies_of_the_new_views_are_checked(system):
    """The schemas bite: the new views' answers carry what they document."""
    views.add_nodes(system)
    views.run_check(system)
    _, nodes = served(system, 'GET', f'{T}/nodes')
    assert {n['state'] for n in nodes} == {'ready', 'hold'}   # not private's node
    _, sems = served(system, 'GET', f'{T}/semaphores')
    assert sems[0]['holders']['this_tenant'][0]['job_name'] == 'lint'
    _, status = served(system, 'GET', f'{T}/status')
    items = [i for pl in status['pipelines'] for q in pl['change_queues']
             for head in q['heads'] for i in head]
    assert items and all(i['pipeline'] == 'check' for i in items)
    _, build = served(system, 'GET', f'{T}/build/{system.uuids[1].builds["lint"].uuid}')
    assert [(r['uuid'], r['final']) for r in build['reruns']] == [(system.retried, False)]
    assert build['artifacts'][0]['name'] == 'test report'
    _, buildset = served(system, 'GET', f'{T}/buildset/{system.uuids[1].uuid}')
    assert buildset['duration'] == 61.0
    assert sorted(b['final'] for b in buildset['builds']) == [False, True, True]
    spec = openapi.load_spec()
    schema = openapi.response_schema(spec, 'get', f'{T}/build/x', 200)
    assert openapi.validate(spec, schema, {**build, 'reruns': [{'uuid': 'u'}]}) != []
    assert openapi.validate(spec, schema, {k: v for k, v in build.items()
                                           if k != 'reruns'}) != []


@pytest.mark.parametrize('tenant, with_token, status', [
    ('%01', False, 400), ('private', False, 401), ('private', True, 403),
    ('nope', False, 404)])
def test_tenant_errors_of_every_tenant_path_are_documented(system, tenant, with_token, status):
    # made now: a token made when the tests are collected may have expired
    bearer = token() if with_token else None
    for method, path, usual in samples(system):
        if not path.startswith(T + '/') or (method != 'GET' and status != 400):
            continue
        path = f'/api/tenant/{tenant}/' + path[len(T) + 1:]
        got, body = served(system, method, path, bearer)
        # /authorizations asks for a token before it looks at the tenant
        expected = 401 if status == 404 and usual == 401 else status
        assert got == expected, (method, path, body)


def test_every_tenant_operation_documents_the_tenant_errors():
    spec = openapi.load_spec()
    for template, method in _operations(spec):
        if template.startswith('/api/tenant/{tenant}/'):
            responses = set(spec['paths'][template][method]['responses'])
            assert TENANT_ERRORS <= responses, (template, method)


def _route_words() -> set[str]:
    """Path words of the routing code: the string constants it compares
    URL segments with, the keys of the handler tables (dict literals of
    bound methods) it looks them up in, and the keys of the module-level
    route tables it names in a comparison."""
    words = set()
    functions = [api.ZuulWebAPI._dispatch, api.ZuulWebAPI._tenant_route,
                 api.APIRoot.default, config_api.ConfigViewsAPI.route,
                 config_api.ConfigViewsAPI.freeze_jobs, actions.AdminActions.route]
    for function in functions:
        module = inspect.getmodule(function)
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                for part in ast.walk(node):
                    if isinstance(part, ast.Constant) and isinstance(part.value, str):
                        words.add(part.value)
                    elif isinstance(part, ast.Name) and isinstance(
                            getattr(module, part.id, None), (dict, tuple, frozenset)):
                        words.update(getattr(module, part.id))
            elif isinstance(node, ast.Dict) and all(isinstance(v, ast.Attribute)
                                                    for v in node.values):
                words.update(k.value for k in node.keys if isinstance(k, ast.Constant))
    # HTTP methods and file suffixes are not path words
    return {w for w in words if w.islower() and '/' not in w and not w.startswith('.')}


def test_every_path_word_of_the_routing_code_is_documented():
    words = _route_words()
    # the route tables are read (a regression of the AST walk shows here)
    assert {'semaphores', 'freeze-jobs', 'enqueue', 'images', 'image-builds',
            'console-stream', 'payload'} <= words
    documented = {segment for template in openapi.load_spec()['paths']
                  for segment in template.split('/') if '{' not in segment}
    assert words - documented == set()


# -- query parameters ----------------------------------------------------------------


def _query_parameters(template: str) -> dict[str, dict]:
    """name -> resolved schema of the documented query parameters."""
    spec = openapi.load_spec()
    out = {}
    for param in spec['paths'][template]['get']['parameters']:
        if '$ref' in param:
            param = spec['components']['parameters'][param['$ref'].rsplit('/', 1)[-1]]
        if param['in'] == 'query':
            schema = param['schema']
            if '$ref' in schema:
                schema = spec['components']['schemas'][schema['$ref'].rsplit('/', 1)[-1]]
            out[param['name']] = schema
    return out


def _values(schema: dict) -> list[str]:
    """Every value a schema documents: its enum, an integer's bounds, a string."""
    if 'enum' in schema:
        return [str(v) for v in schema['enum']]
    if schema['type'] == 'integer':
        return [str(schema.get('minimum', 1)), str(schema.get('maximum', 1))]
    return ['x']


def _refused(schema: dict) -> list[str]:
    """Values outside the schema (the API must answer 400)."""
    if 'enum' in schema:
        return ['not-a-value']
    if schema['type'] == 'integer':
        return ['abc'] + ([str(schema['maximum'] + 1)] if 'maximum' in schema else [])
    return []


HISTORY = [
    ('builds', set(api.BUILD_FILTERS) | {'job', 'limit', 'skip', 'sort'},
     BUILD_RESULTS, BUILD_SORT_KEYS),
    ('buildsets', set(api.BUILDSET_FILTERS) | {'limit', 'skip', 'sort'},
     BUILDSET_RESULTS, BUILDSET_SORT_KEYS),
]


@pytest.mark.parametrize('what, names, results, sort_keys', HISTORY)
def test_history_parameters_are_the_codes_filters(what, names, results, sort_keys):
    params = _query_parameters(f'/api/tenant/{{tenant}}/{what}')
    assert set(params) == names
    assert set(params['result']['enum']) == results
    assert set(params['sort']['enum']) == {k for key in sort_keys for k in (key, '-' + key)}
    for boolean in {'voting', 'held', 'final', 'complete'} & names:
        assert set(params[boolean]['enum']) == set(api._BOOLEANS)


@pytest.mark.parametrize('what', ['builds', 'buildsets', 'config-errors'])
def test_every_documented_query_value_is_accepted(system, what):
    params = _query_parameters(f'/api/tenant/{{tenant}}/{what}')
    assert params, what
    for name, schema in params.items():
        for value in _values(schema):
            query = urllib.parse.urlencode({name: value})
            status, body = served(system, 'GET', f'{T}/{what}?{query}')
            assert status == 200, (name, value, body)
        for value in _refused(schema):
            query = urllib.parse.urlencode({name: value})
            status, body = served(system, 'GET', f'{T}/{what}?{query}')
            assert status == 400, (name, value, body)
    assert served(system, 'GET', f'{T}/{what}?undocumented=1')[0] == 400


def test_config_error_parameters_are_the_codes_filters():
    params = _query_parameters('/api/tenant/{tenant}/config-errors')
    assert set(params) == set(config_api.CONFIG_ERROR_FILTERS)
    assert params['severity']['enum'] == list(config_api.SEVERITIES)


def test_documented_filters_filter(system):
    """Accepted is not enough: a documented filter changes the answer."""
    lint = system.uuids[1].builds['lint'].uuid
    _, failed = served(system, 'GET', f'{T}/builds?result=failure&sort=job_name')
    assert [b['uuid'] for b in failed] == [lint]
    _, sets = served(system, 'GET', f'{T}/buildsets?change=2&complete=true')
    assert [s['uuid'] for s in sets] == [system.uuids[2].uuid]


# -- the console websocket -------------------------------------------------------------


def _close(system, path, message=None, bearer=None):
    port = int(system.base.rsplit(':', 1)[1])
    headers = {'Authorization': f'Bearer {bearer}'} if bearer else None
    ws = websocket.connect('127.0.0.1', port, path, headers)
    try:
        if message is not None:
            ws.send_text(json.dumps(message))
        with pytest.raises(websocket.ConnectionClosedError) as closed:
            while True:
                ws.receive()
    finally:
        ws.shutdown()
    return closed.value.code


def test_console_websocket_closes_with_documented_codes(system):
    operation = openapi.load_spec()['paths']['/api/tenant/{tenant}/console-stream']['get']
    codes = set(operation['x-websocket']['close-codes'])
    assert codes == {str(c) for c in (websocket.NORMAL, websocket.GOING_AWAY,
                                      console.MISSING_KEY, console.STREAM_ERROR)}
    path = f'{T}/console-stream'
    assert _close(system, path, {'uuid': NOT_RUNNING}) == console.MISSING_KEY
    assert _close(system, path, {'uuid': NOT_RUNNING, 'logfile': 'console.log'}) == \
        console.STREAM_ERROR
    with pytest.raises(websocket.HandshakeError) as refused:
        websocket.connect('127.0.0.1', int(system.base.rsplit(':', 1)[1]),
                          f'{PRIVATE}/console-stream')
    assert str(refused.value.status) in operation['responses']
    assert refused.value.status == 401
