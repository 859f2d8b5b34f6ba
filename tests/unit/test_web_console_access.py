"""The console-stream websocket honours a tenant's ``access-rules``
before the upgrade (real scheduler, real Gearman, zuul-web enforcing
access; tests/unit/web_auth_support.py)."""

import json

import pytest

from tests.unit.web_auth_support import start, token
from zuul.web.websocket import ConnectionClosedError, HandshakeError, connect


@pytest.fixture
def system(tmp_path, gearman_server):
    running = start(tmp_path, gearman_server)
    yield running
    running.stop()


def _open(system, tenant, bearer=None):
    headers = {'Authorization': f'Bearer {bearer}'} if bearer else {}
    return connect('127.0.0.1', system.web.port, f'/api/tenant/{tenant}/console-stream',
                   headers)


def _refused(system, tenant, bearer=None):
    with pytest.raises(HandshakeError) as e:
        _open(system, tenant, bearer)
    return e.value.status, json.loads(e.value.message)['error'], e.value.headers


def _reason(ws):
    ws.send_text(json.dumps({'uuid': 'f' * 32, 'logfile': 'console.log'}))
    with pytest.raises(ConnectionClosedError) as e:
        ws.receive()
    ws.shutdown()
    return e.value.code, e.value.reason


def test_protected_tenant_needs_a_reader(system):
    status, error, headers = _refused(system, 't2')
    assert status == 401 and headers['www-authenticate'] == 'Bearer realm="zuul.example.com"'
    status, error, _ = _refused(system, 't2', token(sub='carol', groups=['t1']))
    assert status == 403 and 'not allowed to access tenant t2' in error
    reader = token(resources_access={'account': {'roles': 'reader'}})
    assert _reason(_open(system, 't2', reader)) == (4011, f'no running build {"f" * 32} '
                                                          'in tenant t2')


def test_open_tenants_and_unknown_ones(system):
    assert _reason(_open(system, 't3'))[0] == 4011
    status, error, _ = _refused(system, 'nope')
    assert status == 404 and 'nope' in error
