"""A tenant with ``access-rules`` is hidden from whoever does not match
them, on every read endpoint and in the tenant list; ``api-root``'s
access-rules guard the tenant list (real scheduler, real Gearman)."""

from __future__ import annotations

import pytest

from tests.unit import web_auth_support as s
from tests.unit.web_auth_support import call, token

READ_PATHS = ['status', 'jobs', 'job/app-test', 'projects', 'project/org/secret',
              'pipelines', 'config-errors', 'autohold', 'key/org/secret.pub',
              'status/change/1,1', 'images', 'labels']


@pytest.fixture
def system(tmp_path, gearman_server):
    system = s.start(tmp_path, gearman_server)
    try:
        yield system
    finally:
        system.stop()


def _names(system, **auth):
    status, tenants, _ = call(system, 'GET', '/api/tenants', **auth)
    assert status == 200
    return [t['name'] for t in tenants]


def test_tenant_list_leaves_out_what_the_caller_may_not_read(system):
    assert _names(system) == ['t1', 't3']
    assert _names(system, bearer=token(sub='carol')) == ['t1', 't3']
    reader = token(resources_access={'account': {'roles': ['reader', 'x']}})
    assert _names(system, bearer=reader) == ['t1', 't2', 't3']
    # t2's admins may read it too
    assert _names(system, bearer=token(groups=['t2'])) == ['t1', 't2', 't3']
    # a token that is not accepted is no one's
    assert _names(system, bearer=token(groups=['t2'], expires_in=-10)) == ['t1', 't3']


@pytest.mark.parametrize('path', READ_PATHS)
def test_every_read_endpoint_of_a_protected_tenant_is_guarded(system, path):
    url = f'/api/tenant/t2/{path}'
    status, answer, headers = call(system, 'GET', url)
    assert status == 401, answer
    assert headers['WWW-Authenticate'] == 'Bearer realm="zuul.example.com"'
    assert 'org/secret' not in str(answer)
    status, answer, headers = call(system, 'GET', url, bearer=token(expires_in=-1))
    assert status == 401 and 'error="invalid_token"' in headers['WWW-Authenticate']
    status, answer, _ = call(system, 'GET', url, bearer=token(sub='carol', groups=['t1']))
    assert status == 403 and 'not allowed to access tenant t2' in answer['error']
    status, answer, _ = call(system, 'GET', url, bearer=token(
        resources_access={'account': {'roles': 'reader'}}))
    assert status == 200, answer


def test_unprotected_tenants_ignore_tokens(system):
    for bearer in (None, token(expires_in=-100), token(sub='carol')):
        status, body, _ = call(system, 'GET', '/api/tenant/t1/projects', bearer=bearer)
        assert status == 200 and [p['name'] for p in body] == ['org/app', 'org/config']


def test_api_root_access_rules_guard_the_tenant_list(tmp_path, gearman_server, monkeypatch):
    monkeypatch.setattr(s, 'MAIN', s.MAIN + """
- api-root:
    authentication-realm: idp
    access-rules: [alice]
""")
    system = s.start(tmp_path, gearman_server)
    try:
        status, _, headers = call(system, 'GET', '/api/tenants')
        assert status == 401 and headers['WWW-Authenticate'] == 'Bearer realm="idp"'
        assert call(system, 'GET', '/api/tenants', bearer=token(sub='bob'))[0] == 403
        assert _names(system, bearer=token(sub='alice')) == ['t1', 't3']
        # api-root access is no pre-requisite for a tenant's own URLs
        assert call(system, 'GET', '/api/tenant/t1/pipelines')[0] == 200
    finally:
        system.stop()


def test_info_names_the_realms(system):
    status, info, _ = call(system, 'GET', '/api/info')
    assert status == 200
    assert info['info']['capabilities']['auth']['default_realm'] == 'zuul.example.com'
