"""``tenant-resource-limits``: a tenant's nodes across every provider
count against its limits; a request that would exceed them waits
(``requested``, not declined), other tenants are served meanwhile, and
it is served once the tenant's nodes are gone."""

from __future__ import annotations

import pytest

from nodepool.config import ConfigError, load_config_text
from nodepool.zk.records import REQUESTED
from tests.functional import test_nodepool_support as support
from tests.functional.test_nodepool_support import wait_until

launchers = support.launchers
requestor = support.requestor
zk = support.zk

CONFIG = """
tenant-resource-limits:
  - tenant-name: tenant-one
    max-servers: 2
labels:
  - name: small
providers:
  - name: sim-a
    driver: simulated
    pools:
      - name: main
        max-servers: 10
        labels:
          - name: small
  - name: sim-b
    driver: simulated
    pools:
      - name: main
        max-servers: 10
        labels:
          - name: small
"""


def test_request_over_the_tenant_limit_waits_across_providers(launchers, requestor, zk):
    launcher = launchers.make(CONFIG)
    first = requestor.submit(['small', 'small'], requestor_data={'tenant': 'tenant-one'})
    assert first.wait(30) and first.fulfilled
    assert {n.tenant_name for n in first.nodes} == {'tenant-one'}
    assert all(n.resources == {'instances': 1} for n in first.nodes)
    # Both providers have room; the tenant has none left.
    waiting = requestor.submit(['small'], request_fields={'tenant_name': 'tenant-one'})
    other = requestor.submit(['small'], requestor_data={'tenant': 'tenant-two'})
    untagged = requestor.submit(['small'])
    assert other.wait(30) and other.fulfilled
    assert untagged.wait(30) and untagged.fulfilled
    request = zk.get_request(waiting.id)
    assert request.state == REQUESTED and request.declined_by == []
    assert not waiting.done.is_set()

    requestor.release(first)       # the tenant's nodes go: the request is served
    assert waiting.wait(30) and waiting.fulfilled
    assert waiting.nodes[0].tenant_name == 'tenant-one'
    for handle in (waiting, other, untagged):
        requestor.release(handle)
    wait_until(launcher, lambda: not zk.get_nodes(), 'used nodes deleted')


def test_request_within_the_limit_is_served_at_once(launchers, requestor, zk):
    launcher = launchers.make(CONFIG)
    handle = requestor.submit(['small'], requestor_data={'tenant': 'tenant-one'})
    assert handle.wait(30) and handle.fulfilled
    second = requestor.submit(['small'], requestor_data={'tenant': 'tenant-one'})
    assert second.wait(30) and second.fulfilled
    for h in (handle, second):
        requestor.release(h)
    wait_until(launcher, lambda: not zk.get_nodes(), 'used nodes deleted')


def test_a_tenant_listed_twice_is_an_error():
    with pytest.raises(ConfigError, match="tenant 'x' has resource limits twice"):
        load_config_text("""
tenant-resource-limits:
  - tenant-name: x
    max-servers: 1
  - tenant-name: x
    max-cores: 1
""")
