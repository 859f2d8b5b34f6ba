"""nodepool-launcher with the openstack provider: openstacksdk, unmodified,
against the fake cloud over HTTP, on a real ZooKeeper.  With netns hosts
behind the fake's servers, SSH checks, host key scans and logins are
real."""

from __future__ import annotations

import time

import pytest

from nodepool.driver.netns.host import available
from nodepool.zk.records import READY
from tests.fakes import openstack_cloud as fake_cloud
from tests.functional import test_nodepool_support as support
from tests.functional.test_nodepool_support import ssh_run, wait_until

launchers = support.launchers
requestor = support.requestor
zk = support.zk
openstack_cloud = fake_cloud.openstack_cloud

needs_netns = pytest.mark.skipif(available() is not None,
                                 reason=f'netns nodes unavailable: {available()}')

CONFIG = """
labels:
  - name: small
  - name: medium
providers:
  - name: cloud1
    cloud: fake
    region-name: RegionOne
    rate: {rate}
    boot-timeout: 20
    launch-timeout: 20
    launch-retries: 3
    cloud-images:
      - name: cirros
        username: root
    pools:
      - name: main
        max-servers: {max_servers}
        max-cores: {max_cores}
        host-key-checking: {host_key_checking}
        {pool_extra}
        labels:
          - name: small
            cloud-image: cirros
            min-ram: 1024
            key-name: nodepool
          - name: medium
            cloud-image: cirros
            flavor-name: m1.medium
            key-name: nodepool
"""


def config(rate=0, max_servers=10, max_cores=100, host_key_checking=False, pool_extra=''):
    return CONFIG.format(rate=rate, max_servers=max_servers, max_cores=max_cores,
                         host_key_checking=str(host_key_checking).lower(),
                         pool_extra=pool_extra)


@pytest.fixture
def cloud(openstack_cloud, ssh_keypair):
    openstack_cloud.add_keypair('nodepool', ssh_keypair.public_key)
    return openstack_cloud


def fulfilled(handle, timeout=20):
    assert handle.wait(timeout), f'request {handle.id} not done'
    assert handle.fulfilled, f'request {handle.id} failed'
    return handle.nodes


@needs_netns
def test_node_launched_end_to_end(launchers, requestor, zk, cloud, netns_manager,
                                  ssh_keypair, tmp_path, record_property):
    """A request is fulfilled with a node whose record carries what the
    cloud reported; the node's SSH answers with the keys recorded."""
    cloud.host_manager = netns_manager
    launcher = launchers.make(config(host_key_checking=True))
    adapter = launcher.adapters['cloud1']
    calls_before, started = adapter.api_calls, time.monotonic()
    handle = requestor.submit(['small'])
    [node] = fulfilled(handle)
    elapsed = time.monotonic() - started
    calls = adapter.api_calls - calls_before
    record_property('launch_seconds', round(elapsed, 3))
    record_property('api_calls_per_launch', calls)

    [server] = cloud.live_servers()
    assert node.external_id == server.id and node.provider == 'cloud1'
    assert node.type == 'small' and node.username == 'root'
    assert node.az == server.az and node.az in ('az1', 'az2')
    assert node.region == 'RegionOne' and node.cloud == 'fake'
    assert node.interface_ip == server.host.address == node.public_ipv4
    assert node.public_ipv6.startswith('2001:db8::')
    assert node.host_keys == server.host.host_keys
    assert server.flavor['name'] == 'm1.small'
    assert server.metadata['nodepool_node_id'] == node.id
    assert server.metadata['nodepool_pool_name'] == 'main'
    result = ssh_run(node.interface_ip, node.connection_port, node.username,
                     ssh_keypair.private_key_path, node.host_keys, tmp_path, 'hostname')
    assert result.returncode == 0, result.stderr
    # Auth, discovery, flavors, limits, AZs, networks, image, create,
    # polls: a handful, not dozens.
    assert 5 <= calls <= 25, calls
    # Once the connection and caches are warm: create and polls.
    calls_before = adapter.api_calls
    second = requestor.submit(['small'])
    fulfilled(second)
    record_property('api_calls_next_launch', adapter.api_calls - calls_before)
    assert adapter.api_calls - calls_before <= 10
    requestor.release(second)

    requestor.release(handle)
    cloud.wait_for(lambda: not cloud.servers, what='the used node deleted')
    wait_until(launcher, lambda: not zk.get_nodes(), 'node record deleted')


def test_cloud_quota_pauses_the_pool_until_a_node_goes(launchers, requestor, zk, cloud):
    cloud.set_limits(instances=3)
    cloud.add_server('someone-elses')          # leaves room for two of ours
    launcher = launchers.make(config())
    first, second = requestor.submit(['small']), requestor.submit(['small'])
    fulfilled(first), fulfilled(second)
    third = requestor.submit(['small'])
    wait_until(launcher, lambda: launcher.paused_pools == ['cloud1/main'], 'pool paused')
    assert not third.done.is_set() and len(cloud.live_servers()) == 3
    requestor.release(first)
    fulfilled(third)
    assert launcher.paused_pools == []
    assert len(cloud.live_servers()) == 3
    # Nothing was refused by the cloud: the launcher kept within its quota.
    assert all(s.status == 'ACTIVE' for s in cloud.live_servers())


def test_pool_max_cores_counts_flavors(launchers, requestor, zk, cloud):
    # m1.medium has 2 vCPUs: two fit in 5 cores, a third waits.
    launcher = launchers.make(config(max_cores=5))
    handles = [requestor.submit(['medium']) for _ in range(2)]
    for handle in handles:
        fulfilled(handle)
    waiting = requestor.submit(['medium'])
    wait_until(launcher, lambda: launcher.paused_pools == ['cloud1/main'], 'pool paused')
    small = requestor.submit(['small'], priority=300)   # 1 core would fit, but paused
    requestor.release(handles[0])
    fulfilled(waiting)
    fulfilled(small)
    too_big = requestor.submit(['medium'] * 3)           # 6 cores: never
    assert too_big.wait(20) and too_big.failed


def test_boot_failure_is_replaced(launchers, requestor, zk, cloud):
    cloud.fail_next_servers(2, 'No valid host was found.')
    launcher = launchers.make(config())
    [node] = fulfilled(requestor.submit(['small']))
    assert len(cloud.requests) > 0
    creates = [r for r in cloud.requests if r[:2] == ('POST', '/compute/v2.1/servers')]
    assert len(creates) == 3
    # The failed servers were deleted; only the good one is left.
    cloud.wait_for(lambda: [s.id for s in cloud.live_servers()] == [node.external_id],
                   what='failed servers deleted')
    wait_until(launcher, lambda: [n.id for n in zk.get_nodes()] == [node.id],
               'failed node records deleted')


def test_boot_failures_past_launch_retries_decline_the_request(
        launchers, requestor, zk, cloud):
    cloud.fail_next_servers(4)
    launchers.make(config())
    handle = requestor.submit(['small'])
    assert handle.wait(20) and handle.failed
    cloud.wait_for(lambda: not cloud.servers, what='failed servers deleted')


def test_leaked_server_is_deleted(launchers, requestor, zk, cloud):
    launcher = launchers.make(config())
    [node] = fulfilled(requestor.submit(['small']))
    leaked = cloud.add_server('small-cloud1-0000009999', {
        'nodepool_provider_name': 'cloud1', 'nodepool_node_id': '0000009999'})
    foreign = cloud.add_server('other', {'nodepool_provider_name': 'cloud2',
                                         'nodepool_node_id': '0000009998'})
    unmanaged = cloud.add_server('pet', {})
    launcher.run_cleanup()
    cloud.wait_for(lambda: leaked not in cloud.servers, what='the leaked server deleted')
    assert {node.external_id, foreign, unmanaged} <= set(cloud.servers)


def test_undeletable_server_keeps_its_record_until_it_goes(launchers, requestor, zk, cloud):
    launcher = launchers.make(config())
    launcher.adapters['cloud1'].delete_timeout = 0.5
    handle = requestor.submit(['small'])
    [node] = fulfilled(handle)
    cloud.make_undeletable(node.external_id)
    requestor.release(handle)
    wait_until(launcher, lambda: [n.state for n in zk.get_nodes()] == ['deleting']
               and not launcher.is_deleting(node.id), 'the delete given up')
    assert node.external_id in cloud.servers
    cloud.make_undeletable(node.external_id, False)
    launcher.run_cleanup()
    wait_until(launcher, lambda: not zk.get_nodes(), 'record deleted after a retry')
    assert node.external_id not in cloud.servers


def test_multinode_request_gets_one_availability_zone(launchers, requestor, zk, cloud):
    """The fake spreads servers over az1 and az2 when not told; the nodes
    of one request still share a zone."""
    launcher = launchers.make(config())
    for _ in range(3):
        handle = requestor.submit(['small', 'small', 'medium'])
        nodes = fulfilled(handle)
        zones = {n.az for n in nodes}
        assert len(zones) == 1, zones
        servers = [cloud.servers[n.external_id] for n in nodes]
        assert {s.az for s in servers} == zones
        requestor.release(handle)
    wait_until(launcher, lambda: not zk.get_nodes(), 'used nodes deleted')
    # A pool's availability-zones list confines them further.
    launchers.stop(launcher)
    launcher = launchers.make(config(pool_extra='availability-zones: [az2]'))
    nodes = fulfilled(requestor.submit(['small', 'small']))
    assert {n.az for n in nodes} == {'az2'}


def test_ready_nodes_are_reused_in_the_requests_zone(launchers, requestor, zk, cloud):
    """min-ready keeps a node ready in each zone; a two-node request takes
    the older one and launches its second node in that zone too, even
    when the adapter would now pick the other zone."""
    text = config().replace('  - name: small\n', '  - name: small\n    min-ready: 2\n', 1)
    launcher = launchers.make(text, start=False)
    zones = iter(['az1', 'az2'])
    later: list[str] = []
    launcher.start()
    adapter = launcher.adapters['cloud1']
    adapter.choose_az = lambda pool: next(zones, None) or later[0]
    wait_until(launcher, lambda: sorted(n.az for n in zk.get_nodes() if n.state == READY
                                        and n.allocated_to is None) == ['az1', 'az2'],
               'a ready node in each zone')
    oldest, other = sorted(zk.get_nodes(), key=lambda n: (n.state_time, n.id))
    later.append(other.az)
    nodes = fulfilled(requestor.submit(['small', 'small']))
    assert nodes[0].id == oldest.id
    assert nodes[1].az == oldest.az and nodes[1].id != other.id
    assert zk.get_node(other.id).allocated_to is None


def test_rate_spaces_the_launchers_api_calls(launchers, requestor, zk, cloud):
    launcher = launchers.make(config(rate=0.05))
    adapter = launcher.adapters['cloud1']
    start = len(cloud.requests)
    fulfilled(requestor.submit(['small', 'small']))
    calls = cloud.requests[start:]
    assert len(calls) >= 8, calls
    # Every request the cloud saw went through the limiter ...
    launchers.stop(launcher)
    assert adapter.api_calls == len(cloud.requests)
    # ... which lets them leave ``rate`` apart (they arrive so, give or
    # take the scheduling jitter of either side).
    gaps = sorted(b[2] - a[2] for a, b in zip(calls, calls[1:], strict=False))
    assert calls[-1][2] - calls[0][2] >= (len(calls) - 1) * 0.05 - 0.05, gaps
    assert gaps[len(gaps) // 2] >= 0.05 * 0.8, gaps


def test_unreachable_cloud_fails_launches_and_then_the_request(
        launchers, requestor, zk, cloud):
    cloud.stop()          # the API is gone (clouds.yaml still names it)
    launcher = launchers.make(config())
    handle = requestor.submit(['small'])
    assert handle.wait(20) and handle.failed
    assert launcher.paused_pools == []
    wait_until(launcher, lambda: not zk.get_nodes(), 'failed node records deleted')
