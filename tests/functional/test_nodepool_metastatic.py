"""nodepool-launcher with the metastatic driver: nodes that are slots of
backing nodes another provider (netns: real hosts) launches, asked for
through the launcher's own node requests."""

from __future__ import annotations

import pytest

from nodepool.driver.netns.host import NetnsHostManager, available
from tests.functional import test_nodepool_support as support
from tests.functional.test_nodepool_support import (
    netns_settings,
    remove_bridge,
    ssh_run,
    wait_until,
)

launchers = support.launchers
requestor = support.requestor
zk = support.zk

pytestmark = pytest.mark.skipif(available() is not None,
                                reason=f'netns nodes unavailable: {available()}')

CONFIG = """
labels:
  - name: big
  - name: meta
providers:
  - name: backing
    driver: netns
    subnet: {subnet}
    bridge: {bridge}
    state-dir: {state}
    authorized-keys: ['{key}']
    pools:
      - name: main
        max-servers: {backing_max}
        labels:
          - name: big
            username: root
  - name: meta
    driver: metastatic
    pools:
      - name: main
        max-servers: 10
        labels:
          - name: meta
            backing-label: big
            max-parallel-jobs: 2
            grace-time: {grace}
"""


@pytest.fixture
def netns(tmp_path):
    settings = netns_settings(tmp_path)
    yield settings
    NetnsHostManager(settings['state-dir'], settings['subnet'],
                     settings['bridge']).cleanup_all('backing-')
    remove_bridge(settings['bridge'])


def config(netns, ssh_keypair, grace=0.5, backing_max=4):
    return CONFIG.format(subnet=netns['subnet'], bridge=netns['bridge'],
                         state=netns['state-dir'], key=ssh_keypair.public_key.strip(),
                         grace=grace, backing_max=backing_max)


def fulfilled(handle, timeout=60):
    assert handle.wait(timeout), f'request {handle.id} not done'
    assert handle.fulfilled, f'request {handle.id} failed'
    return handle.nodes


def test_slots_share_a_backing_node_and_it_goes_after_grace(launchers, requestor, zk, netns,
                                                            ssh_keypair, tmp_path):
    launcher = launchers.make(config(netns, ssh_keypair))
    handles = [requestor.submit(['meta']) for _ in range(3)]
    nodes = [fulfilled(h)[0] for h in handles]
    backing = [n for n in zk.get_nodes() if n.type == 'big']
    assert len(backing) == 2 and all(b.state == 'in-use' for b in backing)
    by_backing = {}
    for node in nodes:
        record = zk.get_node(node.id)
        by_backing.setdefault(record.host_id, []).append(record)
    assert sorted(len(v) for v in by_backing.values()) == [1, 2]
    for backing_id, records in by_backing.items():
        host = zk.get_node(backing_id)
        for record in records:
            assert (record.interface_ip, record.host_keys, record.username) == \
                (host.interface_ip, host.host_keys, host.username)
    pair = next(v for v in by_backing.values() if len(v) == 2)
    for record in pair:
        done = ssh_run(record.interface_ip, 22, 'root', ssh_keypair.private_key_path,
                       record.host_keys, tmp_path, 'true')
        assert done.returncode == 0, done.stderr
    # Releasing one slot of the shared node keeps it; releasing the
    # rest gives every backing node back after the grace time.
    for handle in handles:
        requestor.release(handle)
    wait_until(launcher, lambda: not zk.get_nodes(), 'metastatic and backing nodes gone',
               timeout=60)


def test_backing_node_failure_fails_the_slot(launchers, requestor, zk, netns, ssh_keypair):
    """No backing node can be had (its provider allows none): the
    metastatic node fails, and the request with it."""
    launchers.make(config(netns, ssh_keypair, backing_max=0))
    handle = requestor.submit(['meta'])
    assert handle.wait(60) and handle.failed
    assert 'backing node' in (zk.get_request(handle.id) or handle.request).failure_reason
