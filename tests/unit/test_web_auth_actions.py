"""zuul-web's authenticated actions against a real scheduler (over a real
Gearman server): every action with no token, a token that is not
accepted (bad signature, expired, from an unknown issuer), a token of
another tenant's admin, an accepted token that is no admin, and an admin
token. Only the last changes anything."""

from __future__ import annotations

import pytest

from tests.unit import web_auth_support as s
from tests.unit.web_auth_support import call, operator_token, queue, token

OLD, NEW = '0' * 40, 'b' * 40


@pytest.fixture
def system(tmp_path, gearman_server):
    system = s.start(tmp_path, gearman_server)
    try:
        yield system
    finally:
        system.stop()


def _enqueue(system, number):
    system.scheduler.management('enqueue', tenant='t1', pipeline='gate', project='org/app',
                                change=f'{number},1')
    assert system.scheduler.loop.wait_idle(60)


def refused() -> list:
    """(what the caller sends, status): tokens made now, so that they
    have not expired by the time a test late in a long run sends them."""
    return [
        ({}, 401),
        ({'raw_auth': 'Basic YWxpY2U6c2VjcmV0'}, 401),
        ({'bearer': 'not.a.token'}, 401),
        ({'bearer': token(groups=['t1'], secret='wrong')}, 401),           # bad signature
        ({'bearer': token(groups=['t1'], expires_in=-60)}, 401),          # expired
        ({'bearer': token(groups=['t1'], issuer='https://evil.example')}, 401),
        ({'bearer': token(groups=['t1'], audience='someone-else')}, 401),
        ({'bearer': token(groups=['t2'])}, 403),                          # t2's admin
        ({'bearer': token(sub='carol', groups=['other'])}, 403),          # no admin
        # a zuul.admin claim from an issuer not allowed to override
        ({'bearer': token(zuul={'admin': ['t1']})}, 401),
    ]

ACTIONS = {
    'enqueue': ('POST', '/api/tenant/t1/project/org/app/enqueue',
                {'pipeline': 'gate', 'change': '5,1'}),
    'enqueue-ref': ('POST', '/api/tenant/t1/project/org/app/enqueue',
                    {'pipeline': 'post', 'ref': 'refs/heads/master', 'oldrev': OLD,
                     'newrev': NEW}),
    'dequeue': ('POST', '/api/tenant/t1/project/org/app/dequeue',
                {'pipeline': 'gate', 'change': '1,1'}),
    'promote': ('POST', '/api/tenant/t1/promote', {'pipeline': 'gate', 'changes': ['2,1']}),
    'autohold': ('POST', '/api/tenant/t1/project/org/app/autohold',
                 {'job': 'app-test', 'change': None, 'ref': None, 'reason': 'debug',
                  'count': 1, 'node_hold_expiration': 3600}),
}


def _state(system):
    return (queue(system), queue(system, pipeline='post'),
            [h.id for h in system.scheduler.autoholds.list('t1')])


@pytest.mark.parametrize('action', sorted(ACTIONS))
def test_refused_callers_change_nothing(system, action):
    _enqueue(system, 1)
    _enqueue(system, 2)
    before = _state(system)
    method, path, body = ACTIONS[action]
    for sent, status in refused():
        got, answer, headers = call(system, method, path, body, **sent)
        assert got == status, (sent, answer)
        if status == 401:
            challenge = headers['WWW-Authenticate']
            assert challenge.startswith('Bearer realm="zuul.example.com"'), challenge
            if sent:
                assert 'error="invalid_token"' in challenge
    assert system.scheduler.loop.wait_idle(60)
    assert _state(system) == before == ([1, 2], [], [])


def test_enqueue_and_dequeue_by_admins(system):
    _enqueue(system, 1)
    by_group = token(groups=['t1', 'other'])
    assert call(system, *ACTIONS['enqueue'], bearer=by_group)[:2] == (200, True)
    assert system.scheduler.loop.wait_idle(60)
    assert queue(system) == [1, 5]
    by_uid = token(sub='alice')        # the "alice" rule matches zuul_uid
    assert call(system, *ACTIONS['dequeue'], bearer=by_uid)[:2] == (200, True)
    assert system.scheduler.loop.wait_idle(60)
    assert queue(system) == [5]
    assert call(system, *ACTIONS['enqueue-ref'], bearer=operator_token('t1'))[:2] == \
        (200, True)
    assert system.scheduler.loop.wait_idle(60)
    assert queue(system, pipeline='post') == ['refs/heads/master']


def test_promote_by_another_tenants_operator_is_refused(system):
    for number in (1, 2, 3):
        _enqueue(system, number)
    method, path, _ = ACTIONS['promote']
    assert call(system, method, path, {'pipeline': 'gate', 'changes': ['3,1']},
                bearer=operator_token('t2'))[0] == 403
    assert queue(system) == [1, 2, 3]


def test_promote_by_an_operator_token(system):
    for number in (1, 2, 3):
        _enqueue(system, number)
    method, path, _ = ACTIONS['promote']
    body = {'pipeline': 'gate', 'changes': ['3,1']}
    assert call(system, method, path, body, bearer=operator_token('t1'))[:2] == (200, True)
    assert system.scheduler.loop.wait_idle(60)
    assert queue(system) == [3, 1, 2]


def test_autohold_create_list_and_delete(system):
    admin = token(groups=['t1'])
    assert call(system, *ACTIONS['autohold'], bearer=admin)[:2] == (200, True)
    (hold,) = system.scheduler.autoholds.list('t1')
    assert (hold.job, hold.reason, hold.node_hold_expiration) == ('app-test', 'debug', 3600)
    status, listed, _ = call(system, 'GET', '/api/tenant/t1/project/org/app/autohold')
    assert status == 200 and [h['id'] for h in listed] == [hold.id]
    assert call(system, 'GET', f'/api/tenant/t1/autohold/{hold.id}')[1]['reason'] == 'debug'
    path = f'/api/tenant/t1/autohold/{hold.id}'
    for sent, status in refused():
        assert call(system, 'DELETE', path, **sent)[0] == status, sent
    assert [h.id for h in system.scheduler.autoholds.list('t1')] == [hold.id]
    status, answer, _ = call(system, 'DELETE', path, bearer=admin)
    assert (status, answer) == (204, None)
    assert system.scheduler.autoholds.list('t1') == []
    assert call(system, 'DELETE', path, bearer=admin)[0] == 404
    assert call(system, 'GET', path)[0] == 404


@pytest.mark.parametrize('body, message', [
    ({'change': '5,1'}, 'Missing "pipeline"'),
    ({'pipeline': 'gate'}, 'give "change" or "ref"'),
    ({'pipeline': 'gate', 'change': '5,1', 'ref': 'refs/heads/master'}, 'mutually exclusive'),
    ({'pipeline': 'nope', 'change': '5,1'}, 'Unknown pipeline "nope"'),
    ({'pipeline': 'gate', 'change': 5}, '"change" must be a string'),
])
def test_bad_request_bodies_are_400_with_a_reason(system, body, message):
    status, answer, _ = call(system, 'POST', '/api/tenant/t1/project/org/app/enqueue', body,
                             bearer=token(groups=['t1']))
    assert status in (400, 404) and message in answer['error'], answer
    assert queue(system) == []


def test_a_body_that_is_not_json_is_400(system):
    import urllib.request
    request = urllib.request.Request(system.base + '/api/tenant/t1/promote', data=b'{nope',
                                     method='POST')
    request.add_header('Authorization', f'Bearer {token(groups=["t1"])}')
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(request, timeout=30)
    assert e.value.code == 400


def test_authorizations_say_what_the_caller_may_do(system):
    path = '/api/tenant/t1/authorizations'
    status, _, headers = call(system, 'GET', path)
    assert status == 401 and headers['WWW-Authenticate'].startswith('Bearer realm=')
    assert call(system, 'GET', path, bearer=token(groups=['t1']))[1] == \
        {'zuul': {'admin': True, 'scope': ['t1']}}
    assert call(system, 'GET', path, bearer=token(sub='carol'))[1] == \
        {'zuul': {'admin': False, 'scope': ['t1']}}
    assert call(system, 'GET', path, bearer=operator_token('t1'))[1]['zuul']['admin'] is True
    assert call(system, 'GET', path, bearer=token(expires_in=-5))[0] == 401


def test_other_methods_on_read_endpoints_are_refused(system):
    status, answer, headers = call(system, 'POST', '/api/tenant/t1/status', {},
                                   bearer=token(groups=['t1']))
    assert status == 405 and headers['Allow'] == 'GET'
    assert call(system, 'DELETE', '/api/tenants')[0] == 405
