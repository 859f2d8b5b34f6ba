"""zuul-launcher end to end over a real ZooKeeper: requests submitted as
Zuul's scheduler submits them (canonical label names, /zuul/node-requests)
are fulfilled by the global request loop and the provider loops."""

from __future__ import annotations

import pytest

from nodepool.driver.netns.host import available
from nodepool.zk.records import FULFILLED, HOLD, READY, NodeRequest
from tests.functional import test_zuul_launcher_support as support
from tests.functional.test_zuul_launcher_support import (
    FailingDriver,
    canonical,
    failing_registry,
    provider,
    publish_providers,
    zuul_zk,
)
from tests.harness.waiting import wait_for

launchers = support.launchers
requestor = support.requestor

UBUNTU = canonical('ubuntu')

needs_netns = pytest.mark.skipif(available() is not None,
                                 reason=f'netns nodes unavailable: {available()}')


def test_one_node_request_is_fulfilled(zk_client, launchers, requestor):
    publish_providers(zk_client, provider('sim-a', ['ubuntu']))
    launchers()
    handle = requestor.submit([UBUNTU], event_id='ev-1')
    assert handle.wait(20)
    assert handle.fulfilled
    [node] = handle.nodes
    assert node.type == UBUNTU
    assert node.provider == canonical('sim-a')
    assert node.interface_ip
    requestor.release(handle)
    zk = zuul_zk(zk_client)
    wait_for(lambda: zk.get_nodes() == [], timeout=20, what='used node deleted')


def test_multi_node_request_keeps_node_types_order(zk_client, launchers, requestor):
    publish_providers(zk_client, provider('sim-a', ['ubuntu', 'centos']))
    launchers()
    types = [UBUNTU, canonical('centos'), UBUNTU]
    handle = requestor.submit(types)
    assert handle.wait(20) and handle.fulfilled
    assert [n.type for n in handle.nodes] == types
    assert len({n.id for n in handle.nodes}) == 3
    assert {n.provider for n in handle.nodes} == {canonical('sim-a')}
    requestor.release(handle)


def test_a_provider_that_fails_declines_the_node_and_another_serves_it(
        zk_client, launchers, requestor):
    bad = provider('sim-bad', ['ubuntu'], connection='bad',
                   settings={'priority': 1, 'launch-attempts': 2})
    good = provider('sim-good', ['ubuntu'], connection='good', settings={'priority': 2})
    publish_providers(zk_client, bad, good)
    launchers({'bad': {'driver': 'simulated'}, 'good': {'driver': 'simulated'}},
              registry=failing_registry(bad.canonical_name))
    handle = requestor.submit([UBUNTU, UBUNTU])
    assert handle.wait(20) and handle.fulfilled
    assert {n.provider for n in handle.nodes} == {good.canonical_name}
    # Each node was tried twice (launch-attempts) in the failing provider.
    assert FailingDriver.attempts.count(bad.canonical_name) == 4
    requestor.release(handle)


def test_request_fails_when_every_provider_declines(zk_client, launchers, requestor):
    bad = provider('sim-bad', ['ubuntu'], connection='bad', settings={'launch-attempts': 1})
    worse = provider('sim-worse', ['ubuntu'], connection='bad')
    publish_providers(zk_client, bad, worse)
    launchers({'bad': {'driver': 'simulated'}},
              registry=failing_registry(bad.canonical_name, worse.canonical_name))
    handle = requestor.submit([UBUNTU])
    assert handle.wait(20)
    assert handle.failed
    zk = zuul_zk(zk_client)
    wait_for(lambda: zk.get_nodes() == [], timeout=10, what='failed nodes removed')


def test_request_for_a_label_nobody_serves_fails(zk_client, launchers, requestor):
    publish_providers(zk_client, provider('sim-a', ['ubuntu']))
    launchers()
    handle = requestor.submit([canonical('windows')])
    assert handle.wait(20)
    assert handle.failed


def test_quota_makes_the_second_request_wait_for_the_first_node(
        zk_client, launchers, requestor):
    publish_providers(zk_client, provider('sim-a', ['ubuntu'],
                                          settings={'quota': {'instances': 1}}))
    launchers()
    first = requestor.submit([UBUNTU])
    assert first.wait(20) and first.fulfilled
    second = requestor.submit([UBUNTU])
    assert not second.wait(1.0)
    zk = zuul_zk(zk_client)
    building = [n for n in zk.get_nodes() if n.allocated_to == second.id]
    assert [n.launch_state for n in building] == ['queued']
    requestor.release(first)
    assert second.wait(20) and second.fulfilled
    assert second.nodes[0].id != first.nodes[0].id
    requestor.release(second)


def test_static_node_is_reused(zk_client, launchers, requestor):
    static = provider('static-a', ['ubuntu', 'small'], connection=None, settings={
        'nodes': [{'name': '192.0.2.10', 'labels': ['ubuntu', 'small', 'other'],
                   'host-key-checking': False, 'username': 'zuul'}]})
    publish_providers(zk_client, static)
    launchers()
    handle = requestor.submit([UBUNTU])
    assert handle.wait(20) and handle.fulfilled
    [node] = handle.nodes
    assert node.hostname == '192.0.2.10' and node.id.startswith('static-')
    assert set(node.labels) == {UBUNTU, canonical('small')}
    # Busy: a second request waits for the node to come back.
    second = requestor.submit([canonical('small')])
    assert not second.wait(1.0)
    requestor.release(handle)
    assert second.wait(20) and second.fulfilled
    assert second.nodes[0].id == node.id
    assert second.nodes[0].type == canonical('small')
    requestor.release(second)
    zk = zuul_zk(zk_client)
    wait_for(lambda: [(n.id, n.state) for n in zk.get_nodes()] == [(node.id, READY)],
             timeout=20, what='static node ready again')


def test_leaked_instances_are_deleted(zk_client, launchers, requestor, tmp_path):
    state = str(tmp_path / 'cloud')
    publish_providers(zk_client, provider('sim-a', ['ubuntu']))
    launcher = launchers({'sim': {'driver': 'simulated', 'options': {'state-dir': state}}})
    handle = requestor.submit([UBUNTU])
    assert handle.wait(20) and handle.fulfilled
    adapter = launcher.adapter_for(canonical('sim-a'))
    leaked = adapter.add_instance('9999999999')
    orphan = adapter.add_instance(None)
    wait_for(lambda: set(adapter.instances) == {handle.nodes[0].external_id},
             timeout=20, what='leaked instances deleted')
    assert leaked not in adapter.instances and orphan not in adapter.instances
    requestor.release(handle)
    wait_for(lambda: adapter.instances == {}, timeout=20, what='used node deleted')


def test_min_ready_nodes_are_launched_and_used_first(zk_client, launchers, requestor):
    publish_providers(zk_client, provider('sim-a', ['ubuntu'], min_ready={'ubuntu': 2}))
    launchers()
    zk = zuul_zk(zk_client)
    wait_for(lambda: len([n for n in zk.get_nodes() if n.state == READY]) == 2,
             timeout=20, what='min-ready nodes')
    ready = {n.id for n in zk.get_nodes()}
    handle = requestor.submit([UBUNTU])
    assert handle.wait(20) and handle.fulfilled
    assert handle.nodes[0].id in ready
    requestor.release(handle)
    # Topped up again.
    wait_for(lambda: len([n for n in zk.get_nodes()
                          if n.state == READY and n.allocated_to is None]) == 2,
             timeout=20, what='min-ready topped up')


def test_image_upload_request_launches_from_that_upload(zk_client, launchers):
    publish_providers(zk_client, provider('sim-a', ['ubuntu']))
    registry = failing_registry()
    launcher = launchers({'sim': {'driver': 'simulated'}}, registry=registry)
    zk = zuul_zk(zk_client)
    request = NodeRequest(node_types=[UBUNTU], requestor='zuul-test',
                          image_upload={'image': canonical('ubuntu-image'), 'build': '7',
                                        'upload': '3', 'external_id': 'img-xyz'})
    zk.submit_request(request)
    wait_for(lambda: (zk.get_request(request.id) or request).state == FULFILLED,
             timeout=20, what='validation request fulfilled')
    [spec] = launcher.adapter_for(canonical('sim-a')).specs
    assert spec.image.external_id == 'img-xyz'
    assert spec.image.build_id == '7' and spec.image.upload_id == '3'
    node = zk.get_node(zk.get_request(request.id).nodes[0])
    assert node.image_id == f'{canonical("ubuntu-image")}-7-3'


def test_a_provider_the_launcher_cannot_build_declines_its_nodes(zk_client, launchers,
                                                                 requestor):
    # An openstack label without flavor-name/min-ram: the driver refuses it.
    broken = provider('cloud', ['ubuntu'], connection='cloud', settings={'priority': 1})
    publish_providers(zk_client, broken)
    launcher = launchers({'cloud': {'driver': 'openstack'}, 'sim': {'driver': 'simulated'}})
    assert canonical('cloud') in launcher.broken
    handle = requestor.submit([UBUNTU])
    assert handle.wait(20) and handle.failed
    publish_providers(zk_client, broken, provider('sim-a', ['ubuntu'],
                                                  settings={'priority': 2}))
    handle = requestor.submit([UBUNTU])
    assert handle.wait(20) and handle.fulfilled
    assert handle.nodes[0].provider == canonical('sim-a')
    requestor.release(handle)


@needs_netns
def test_static_provider_on_a_real_host_scans_its_keys(zk_client, launchers, requestor,
                                                       node_factory):
    host = node_factory.make()
    static = provider('static-real', ['ubuntu'], connection=None, settings={
        'nodes': [{'name': host.address, 'labels': ['ubuntu'], 'username': host.username,
                   'connection-port': host.port, 'host-key-checking': True}]})
    publish_providers(zk_client, static)
    launchers()
    handle = requestor.submit([UBUNTU])
    assert handle.wait(30) and handle.fulfilled
    [node] = handle.nodes
    assert node.interface_ip == host.address and node.connection_port == host.port
    assert node.host_keys and all(key.split()[0].startswith(('ssh-', 'ecdsa'))
                                  for key in node.host_keys)
    requestor.release(handle)


def test_idle_nodes_past_max_ready_age_are_replaced(zk_client, launchers):
    publish_providers(zk_client, provider('sim-a', ['ubuntu'], min_ready={'ubuntu': 1},
                                          max_ready_age={'ubuntu': 1}))
    launchers()
    zk = zuul_zk(zk_client)
    wait_for(lambda: [n.state for n in zk.get_nodes()] == [READY], timeout=20,
             what='a min-ready node')
    [first] = zk.get_nodes()
    wait_for(lambda: [n.id for n in zk.get_nodes() if n.state == READY] not in ([], [first.id]),
             timeout=20, what='the old node replaced by a new one')


def test_held_nodes_are_deleted_when_their_hold_expires(zk_client, launchers, requestor):
    publish_providers(zk_client, provider('sim-a', ['ubuntu']))
    launcher = launchers()
    handle = requestor.submit([UBUNTU])
    assert handle.wait(20) and handle.fulfilled
    [node] = handle.nodes
    zk = zuul_zk(zk_client)
    node.set_state(HOLD)          # what autohold does, then lets go of the node
    node.hold_expiration = 1
    zk.store_node(node)
    zk.unlock_node(node)
    adapter = launcher.adapter_for(canonical('sim-a'))
    assert node.external_id in adapter.instances
    wait_for(lambda: zk.get_nodes() == [] and adapter.instances == {}, timeout=20,
             what='the held node deleted after its expiry')
