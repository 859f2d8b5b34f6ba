"""A real Scheduler (tests/unit/scheduler_support.py) serving the RPC on a
real Gearman server, and zuul-web over it with authenticators, for tests
of the authenticated actions and of access rules.

Tenants: ``t1`` (a gate, admin-rules by group and by user), ``t2``
(access-rules: only readers see it), ``t3`` (no rules at all)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from types import SimpleNamespace

from zuul.lib import jwt
from zuul.lib.auth import AuthenticatorConfig, Authenticators
from zuul.lib.rpc import RPCClient, RPCListener
from zuul.model.change import Change
from zuul.scheduler.rpc_handlers import handlers
from zuul.web import openapi
from zuul.web.server import ZuulWeb

SECRET = 'NoDanaOnlyZuul'

MAIN = """
- authorization-rule:
    name: tenant-group
    conditions:
      - groups: "{tenant.name}"
- authorization-rule:
    name: alice
    conditions:
      - zuul_uid: alice
- authorization-rule:
    name: readers
    conditions:
      - resources_access:
          account:
            roles: reader
- tenant:
    name: t1
    admin-rules: [tenant-group, alice]
    source:
      gerrit:
        config-projects: [org/config]
        untrusted-projects: [org/app]
- tenant:
    name: t2
    admin-rules: [tenant-group]
    access-rules: [readers]
    source:
      gerrit:
        config-projects: [org/config]
        untrusted-projects: [org/secret]
- tenant:
    name: t3
    source:
      gerrit:
        config-projects: [org/config]
"""

CONFIG = """
- pipeline:
    name: gate
    manager: dependent
    trigger: {}
- pipeline:
    name: post
    manager: independent
    trigger: {}
- job:
    name: base
    parent: null
- job:
    name: app-test
- project:
    name: ^org/(app|secret)$
    gate:
      jobs: [app-test]
    post:
      jobs: [app-test]
"""

REPOS = {'org/config': {'master': CONFIG}, 'org/app': {'master': ''},
         'org/secret': {'master': ''}}


class ChangeSource:
    """The ``gerrit`` connection as far as enqueue needs it: any N,P is an
    open change on master."""

    name = 'gerrit'
    driver_name = 'gerrit'

    def lookup_change(self, project, spec):
        number, patchset = (int(x) for x in spec.split(','))
        return Change('gerrit', project, f'refs/changes/{number % 100:02d}/{number}/{patchset}',
                      number=number, patchset=patchset, branch_name='master',
                      subject=f'change {number}')

    def get_needed_changes(self, change, connections):
        return []

    def is_merged(self, change, head=None):
        return False


def authenticators(rs256_public: str | None = None) -> Authenticators:
    configs = {
        'zuul_operator': AuthenticatorConfig(
            name='zuul_operator', driver='HS256', realm='zuul.example.com', default=True,
            allow_authz_override=True, client_id='zuul.example.com',
            issuer_id='zuul_operator', secret=SECRET),
        'idp': AuthenticatorConfig(
            name='idp', driver='HS256', realm='idp', client_id='zuul',
            issuer_id='https://idp.example.com', secret='another-secret')}
    return Authenticators(configs)


def token(sub='bob', issuer='https://idp.example.com', secret='another-secret',
          audience='zuul', expires_in=600, **claims) -> str:
    now = int(time.time())
    body = {'iss': issuer, 'aud': audience, 'sub': sub, 'iat': now,
            'exp': now + expires_in, **claims}
    return jwt.encode(body, secret, 'HS256')


def operator_token(tenant: str, **claims) -> str:
    return token(sub='operator', issuer='zuul_operator', secret=SECRET,
                 audience='zuul.example.com', zuul={'admin': [tenant]}, **claims)


class KeyStore:
    """Every project's secrets key is this one (no ZooKeeper here)."""

    PEM = '-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n'

    def get_public_key_pem(self, connection, project):
        return self.PEM


def start(tmp_path, gearman_server):
    """SimpleNamespace(scheduler, executor, web, rpc, listener, base, stop)."""
    from tests.unit.scheduler_support import start_system
    scheduler, executor = start_system(tmp_path, MAIN, REPOS, connections=[ChangeSource()])
    listener = RPCListener('127.0.0.1', gearman_server.port,
                           handlers(scheduler, scheduler.layouts, KeyStore()),
                           name='zuul-scheduler')
    listener.start()
    rpc = RPCClient('127.0.0.1', gearman_server.port, timeout=60)
    web = ZuulWeb('127.0.0.1', 0, rpc, authenticators=authenticators(),
                  enforce_access=True)
    web.start()

    def stop():
        web.stop()
        rpc.shutdown()
        listener.stop()
        executor.finish_all()
        scheduler.stop()
    return SimpleNamespace(scheduler=scheduler, executor=executor, web=web, rpc=rpc,
                           base=f'http://127.0.0.1:{web.port}', stop=stop)


def call(system, method: str, path: str, body=None, bearer: str | None = None,
         raw_auth: str | None = None):
    """(status, body (JSON decoded, else text; None when empty), headers)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(system.base + path, data=data, method=method)
    if data is not None:
        request.add_header('Content-Type', 'application/json')
    if bearer is not None:
        request.add_header('Authorization', f'Bearer {bearer}')
    if raw_auth is not None:
        request.add_header('Authorization', raw_auth)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            status, payload, headers = response.status, response.read(), response.headers
    except urllib.error.HTTPError as e:
        status, payload, headers = e.code, e.read(), e.headers
    if not payload:
        return status, None, headers
    if headers.get('Content-Type', '').startswith('application/json'):
        value = json.loads(payload)
        if status != 405:   # refused methods are not operations of the spec
            _check_spec(method, path, status, value)
        return status, value, headers
    return status, payload.decode(), headers


def _check_spec(method: str, path: str, status: int, value) -> None:
    """Every JSON answer is what zuul/web/openapi.yaml documents."""
    spec = openapi.load_spec()
    bare = urllib.parse.urlsplit(path).path
    schema = openapi.response_schema(spec, method.lower(), bare, status)
    assert openapi.validate(spec, schema, value) == [], (method, path, value)


def queue(system, tenant='t1', pipeline='gate') -> list[str]:
    """Item ids in the pipeline, head first."""
    manager = system.scheduler.get_manager(tenant, pipeline)
    return [item.change.number if hasattr(item.change, 'number') else item.change.ref
            for item in manager.all_items()]
