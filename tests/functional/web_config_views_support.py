"""A real Scheduler (tests/unit/scheduler_support.py) serving the RPC on a
real Gearman server, Nodepool's node records in a real ZooKeeper, and
zuul-web over them with access rules enforced: the system the
configuration views (zuul/web/config_api.py and the config pages) are
tested against.

Tenants: ``example`` (public: jobs with variants, a project whose check
and gate pipelines have job dependencies, a semaphore, a broken
untrusted project) and ``private`` (``access-rules``: only a token with
the ``reader`` role may read it); both share the global semaphore
``licenses``."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from types import SimpleNamespace

from nodepool.zk.api import NodepoolZooKeeper
from nodepool.zk.records import Node
from nodepool.zk.requestor import NodeRequestClient
from tests.unit.scheduler_support import enqueue_ref, start_system
from tests.unit.web_auth_support import authenticators, token
from zuul.lib.rpc import RPCClient, RPCListener
from zuul.scheduler.nodes import NodesAdapter
from zuul.scheduler.rpc_handlers import handlers
from zuul.web.server import ZuulWeb
from zuul.zk.keys import ZooKeeperKeyStore

MAIN = """
- authorization-rule:
    name: readers
    conditions:
      - resources_access:
          account:
            roles: reader
- global-semaphore:
    name: licenses
    max: 3
- tenant:
    name: example
    semaphores: [licenses]
    source:
      gerrit:
        config-projects: [org/config]
        untrusted-projects: [org/app, org/lib, org/broken]
- tenant:
    name: private
    access-rules: [readers]
    semaphores: [licenses]
    source:
      gerrit:
        config-projects: [org/config]
        untrusted-projects: [org/secret]
"""

CONFIG = """
- pipeline:
    name: check
    manager: independent
    trigger: {}
- pipeline:
    name: gate
    manager: dependent
    trigger: {}
- image: {name: fedora, type: cloud, description: Stock Fedora}
- flavor: {name: large}
- label: {name: fedora-large, image: fedora, flavor: large, min-ready: 1}
- semaphore:
    name: db-lock
    max: 2
- nodeset:
    name: single
    nodes:
      - name: controller
        label: debian
- job:
    name: base
    parent: null
    pre-run: playbooks/base-pre.yaml
    post-run: playbooks/base-post.yaml
- job:
    name: build
    description: Build the thing.
    run: playbooks/build.yaml
    vars:
      flavor: fast
- job:
    name: lint
    run: playbooks/lint.yaml
    semaphore: db-lock
- job:
    name: unit
    run: playbooks/unit.yaml
- job:
    name: docs
    run: playbooks/docs.yaml
- job:
    name: integration
    parent: build
    nodeset: single
    run: playbooks/integration.yaml
    required-projects: [org/lib]
    semaphores: [db-lock]
- job:
    name: integration
    branches: ^stable/.*$
    timeout: 600
- project:
    name: org/app
    check:
      jobs:
        - build
        - lint
        - unit:
            dependencies: [build]
        - docs:
            dependencies:
              - name: lint
                soft: true
    gate:
      jobs:
        - build
        - integration:
            dependencies: [build]
- project:
    name: org/secret
    check:
      jobs: [build]
"""

BROKEN = """
- job:
    name: broken-job
    no-such-key: 1
"""

REPOS = {'org/config': {'master': CONFIG}, 'org/app': {'master': ''},
         'org/lib': {'master': ''}, 'org/broken': {'master': BROKEN},
         'org/secret': {'master': ''}}


def reader_token() -> str:
    return token(resources_access={'account': {'roles': ['reader']}})


def start(tmp_path, gearman_server, zk_client):
    """SimpleNamespace(scheduler, executor, web, rpc, base, zk, stop)."""
    scheduler, executor = start_system(tmp_path, MAIN, REPOS)
    zk = NodepoolZooKeeper(zk_client)
    scheduler.nodes = NodesAdapter(NodeRequestClient(zk), scheduler)
    # Project keys in the real ZooKeeper (2048-bit keys keep it quick).
    keystore = ZooKeeperKeyStore(zk_client, key_bits=2048)
    listener = RPCListener('127.0.0.1', gearman_server.port,
                           handlers(scheduler, scheduler.layouts, keystore),
                           name='zuul-scheduler')
    listener.start()
    rpc = RPCClient('127.0.0.1', gearman_server.port, timeout=60)
    web = ZuulWeb('127.0.0.1', 0, rpc, authenticators=authenticators(), enforce_access=True)
    web.start()

    def stop():
        web.stop()
        rpc.shutdown()
        listener.stop()
        executor.finish_all()
        scheduler.stop()
    return SimpleNamespace(scheduler=scheduler, executor=executor, web=web, zk=zk, rpc=rpc,
                           base=f'http://127.0.0.1:{web.port}', stop=stop)


def add_nodes(system) -> None:
    """A ready node, a held one of ``example`` and one in use by ``private``."""
    for label, state, tenant, hold in (('debian', 'ready', None, None),
                                       ('debian', 'hold', 'example', 'example/app/lint'),
                                       ('ubuntu', 'in-use', 'private', None)):
        system.zk.store_node(Node(type=label, provider='cloud-one', state=state,
                                  tenant_name=tenant, hold_job=hold,
                                  external_id=f'server-{label}-{state}'))


def run_check(system) -> None:
    """org/app's check jobs start: build and lint run (lint holds
    db-lock), unit and docs wait for them."""
    enqueue_ref(system.scheduler, 'example', 'check', 'org/app')


def get(system, path: str, bearer: str | None = None):
    """(status, JSON body or text)."""
    request = urllib.request.Request(system.base + path)
    if bearer:
        request.add_header('Authorization', f'Bearer {bearer}')
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            status, payload, kind = response.status, response.read(), \
                response.headers.get('Content-Type', '')
    except urllib.error.HTTPError as e:
        status, payload, kind = e.code, e.read(), e.headers.get('Content-Type', '')
    if kind.startswith('application/json'):
        return status, json.loads(payload)
    return status, payload.decode()
