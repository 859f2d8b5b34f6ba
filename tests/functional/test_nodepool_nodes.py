"""Real nodes: the netns provider launches sshd hosts a requestor can log
in to, and the static driver registers real hosts and hands them out
again after use."""

from __future__ import annotations

import itertools
import os

import pytest

from nodepool.driver.netns.host import NetnsHostManager, available
from nodepool.driver.sshutil import keyscan
from nodepool.zk.records import FAILED, IN_USE, READY
from tests.functional import test_nodepool_support as support
from tests.functional.test_nodepool_support import (
    netns_settings,
    remove_bridge,
    request_state,
    ssh_run,
    wait_until,
)

launchers = support.launchers
requestor = support.requestor
zk = support.zk

_providers = itertools.count(1)

needs_netns = pytest.mark.skipif(available() is not None,
                                 reason=f'netns nodes unavailable: {available()}')

NETNS = """
labels:
  - name: netns-node
providers:
  - name: {name}
    driver: netns
    boot-timeout: 60
    authorized-keys:
      - {key}
    subnet: {subnet}
    bridge: {bridge}
    state-dir: {state_dir}
    pools:
      - name: main
        max-servers: 2
        labels:
          - name: netns-node
            username: root
"""

STATIC = """
labels:
  - name: static-node
providers:
  - name: rack
    driver: static
    pools:
      - name: main
        nodes:
          - name: {address}
            labels: [static-node]
            username: root
            max-parallel-jobs: {slots}
{extra}
"""


@pytest.fixture
def netns_provider(tmp_path):
    """A provider name, subnet, bridge and state dir of this test's own;
    every namespace left behind is removed afterwards."""
    settings = netns_settings(tmp_path)
    # Unique on this machine: parallel test runs share the namespaces.
    settings['name'] = f'np{os.getpid()}-{next(_providers)}'
    yield settings
    manager = NetnsHostManager(base_dir=settings['state-dir'], subnet=settings['subnet'],
                               bridge=settings['bridge'])
    manager.cleanup_all(settings['name'] + '-')
    remove_bridge(settings['bridge'])


def netns_config(settings, key) -> str:
    return NETNS.format(key=key, state_dir=settings['state-dir'], subnet=settings['subnet'],
                        bridge=settings['bridge'], name=settings['name'])


@needs_netns
def test_netns_nodes_are_real_and_reachable(netns_provider, launchers, requestor, zk,
                                            ssh_keypair, tmp_path):
    launcher = launchers.make(netns_config(netns_provider, ssh_keypair.public_key))
    handle = requestor.submit(['netns-node', 'netns-node'])
    assert handle.wait(120)
    assert handle.fulfilled
    a, b = handle.nodes
    assert a.interface_ip != b.interface_ip
    for node in (a, b):
        assert node.state == IN_USE and node.username == 'root'
        assert node.provider == netns_provider['name']
        out = ssh_run(node.interface_ip, node.connection_port, node.username,
                      ssh_keypair.private_key_path, node.host_keys, tmp_path,
                      'ip -4 -o addr show dev eth0')
        assert out.returncode == 0, out.stderr
        assert node.interface_ip in out.stdout
        assert keyscan(node.interface_ip) == sorted(node.host_keys)
    manager = launcher.adapters[netns_provider['name']].manager
    names = manager.list(netns_provider['name'] + '-')
    assert sorted(names) == sorted(n.external_id for n in (a, b))

    requestor.release(handle)
    wait_until(launcher, lambda: not zk.get_nodes(), 'nodes deleted', timeout=60)
    assert manager.list(netns_provider['name'] + '-') == []


@needs_netns
def test_leaked_namespace_is_removed(netns_provider, launchers, ssh_keypair):
    launcher = launchers.make(netns_config(netns_provider, ssh_keypair.public_key))
    manager = launcher.adapters[netns_provider['name']].manager
    leaked = f'{netns_provider["name"]}-0000077777'
    manager.create(leaked, [ssh_keypair.public_key])
    launcher.run_cleanup()
    wait_until(launcher, lambda: leaked not in manager.list(), 'leak removed', timeout=60)


@needs_netns
def test_static_host_is_registered_handed_out_and_returned(launchers, requestor, zk,
                                                           node_factory, ssh_keypair,
                                                           tmp_path):
    host = node_factory.make()
    launcher = launchers.make(STATIC.format(address=host.address, slots=1, extra=''))
    launcher.run_cleanup()
    wait_until(launcher, lambda: len(zk.get_nodes()) == 1, 'static node registered')
    record = zk.get_nodes()[0]
    assert (record.state, record.hostname, record.username) == (READY, host.address, 'root')
    assert record.host_keys == sorted(host.host_keys)     # scanned from the host

    handle = requestor.submit(['static-node'])
    assert handle.wait(30)
    node = handle.nodes[0]
    assert node.id == record.id
    out = ssh_run(node.interface_ip, node.connection_port, node.username,
                  ssh_keypair.private_key_path, node.host_keys, tmp_path, 'true')
    assert out.returncode == 0, out.stderr

    waiting = requestor.submit(['static-node'])
    wait_until(launcher, lambda: launcher.paused_pools == ['rack/main'], 'waits for the host')
    requestor.release(handle)
    assert waiting.wait(30)
    assert waiting.nodes[0].id == record.id                # the same node, reused
    requestor.release(waiting)
    wait_until(launcher, lambda: (zk.get_node(record.id).state,
                                  zk.get_node(record.id).allocated_to) == (READY, None),
               'back to ready')

    too_many = requestor.submit(['static-node', 'static-node'])
    assert too_many.wait(30)
    assert too_many.failed


@needs_netns
def test_static_host_with_wrong_host_key_is_not_registered(launchers, zk, node_factory):
    host = node_factory.make()
    other = node_factory.make()
    extra = f'            host-key: "{other.host_keys[0]}"\n'
    launcher = launchers.make(STATIC.format(address=host.address, slots=1, extra=extra))
    launcher.run_cleanup()
    assert zk.get_nodes() == []


def test_static_slots_without_host_key_checking(launchers, requestor, zk):
    extra = ('            host-key-checking: false\n'
             '            host-key: ssh-ed25519 AAAAexample\n')
    launcher = launchers.make(STATIC.format(address='192.0.2.10', slots=2, extra=extra))
    launcher.run_cleanup()
    wait_until(launcher, lambda: len(zk.get_nodes()) == 2, 'two slots registered')
    assert sorted(n.slot for n in zk.get_nodes()) == [0, 1]
    assert all(n.host_keys == ['ssh-ed25519 AAAAexample'] for n in zk.get_nodes())
    assert all(n.public_ipv4 == '192.0.2.10' for n in zk.get_nodes())
    launcher.run_cleanup()
    assert len(zk.get_nodes()) == 2                         # registered once

    handle = requestor.submit(['static-node', 'static-node'])
    assert handle.wait(30) and handle.fulfilled
    assert sorted(n.slot for n in handle.nodes) == [0, 1]
    requestor.release(handle)
    wait_until(launcher, lambda: sorted(n.state for n in zk.get_nodes()) == [READY, READY],
               'both back to ready')
    unknown = requestor.submit(['netns-node'])
    assert unknown.wait(30) and unknown.failed
    assert request_state(zk, unknown.request.id) in (None, FAILED)


def _mac(link: str) -> str:
    import subprocess
    out = subprocess.run(['ip', '-o', 'link', 'show', link], capture_output=True, text=True)
    return out.stdout.split('link/ether ')[1].split()[0]


@needs_netns
def test_the_bridge_keeps_its_address_when_nodes_come_and_go(netns_provider, ssh_keypair):
    """The nodes' gateway (the executor's side of their connections) keeps
    one MAC address: a bridge that took its lowest port's would change it
    when that node goes, and every other node's traffic to the executor
    would stall until its ARP entry is renewed."""
    from nodepool.driver.netns.host import bridge_mac
    manager = NetnsHostManager(base_dir=netns_provider['state-dir'],
                               subnet=netns_provider['subnet'],
                               bridge=netns_provider['bridge'])
    first = manager.create(f'{netns_provider["name"]}-1', [ssh_keypair.public_key])
    second = manager.create(f'{netns_provider["name"]}-2', [ssh_keypair.public_key])
    bridge = netns_provider['bridge']
    assert _mac(bridge) == bridge_mac(bridge)
    assert _mac(bridge) not in (_mac(first.veth), _mac(second.veth))
    manager.delete(first)
    third = manager.create(f'{netns_provider["name"]}-3', [ssh_keypair.public_key])
    assert _mac(bridge) == bridge_mac(bridge)
    manager.delete(second)
    manager.delete(third)
