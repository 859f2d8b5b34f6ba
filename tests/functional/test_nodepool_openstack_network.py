"""nodepool-launcher's openstack provider and Neutron, on a real
ZooKeeper with openstacksdk (unmodified) against the fake cloud:
``auto-floating-ip``, ``clean-floating-ips``, ``port-cleanup-interval``
and ``dynamic-instance-properties``."""

from __future__ import annotations

import ipaddress

import pytest

from tests.fakes import openstack_cloud as fake_cloud
from tests.functional import test_nodepool_support as support
from tests.functional.test_nodepool_support import wait_until

launchers = support.launchers
requestor = support.requestor
zk = support.zk
openstack_cloud = fake_cloud.openstack_cloud

CONFIG = """
labels:
  - name: small
providers:
  - name: cloud1
    cloud: fake
    rate: 0
    boot-timeout: 10
    launch-timeout: 10
    launch-retries: 2
    {provider_extra}
    cloud-images:
      - name: cirros
        username: root
    pools:
      - name: main
        max-servers: 5
        host-key-checking: false
        networks: [{network}]
        {pool_extra}
        labels:
          - name: small
            cloud-image: cirros
            min-ram: 1024
            {label_extra}
"""


def config(network='private', provider_extra='', pool_extra='', label_extra=''):
    return CONFIG.format(network=network, provider_extra=provider_extra,
                         pool_extra=pool_extra, label_extra=label_extra)


def fulfilled(handle, timeout=20):
    assert handle.wait(timeout), f'request {handle.id} not done'
    assert handle.fulfilled, f'request {handle.id} failed'
    return handle.nodes


def test_auto_floating_ip_is_made_for_a_private_server_and_released_with_it(
        launchers, requestor, zk, openstack_cloud):
    cloud = openstack_cloud
    launcher = launchers.make(config(network='private'))
    handle = requestor.submit(['small'])
    [node] = fulfilled(handle)

    [server] = cloud.live_servers()
    [fip] = cloud.floating_ips.values()
    port = cloud.ports[fip.port_id]
    assert port.device_id == server.id
    assert cloud.networks[fip.network_id]['name'] == 'public'
    assert node.public_ipv4 == fip.address == node.interface_ip
    assert ipaddress.ip_address(node.private_ipv4) in ipaddress.ip_network('10.0.0.0/8')
    assert fip.fixed_ip == node.private_ipv4
    # Nova shows it among the server's addresses, as floating.
    assert any(e['OS-EXT-IPS:type'] == 'floating' and e['addr'] == fip.address
               for e in cloud._addresses_of(server)['private'])

    requestor.release(handle)
    cloud.wait_for(lambda: not cloud.servers, what='the used node deleted')
    wait_until(launcher, lambda: not zk.get_nodes(), 'node record deleted')
    assert cloud.floating_ips == {} and cloud.ports == {}


def test_auto_floating_ip_false_leaves_the_private_address(
        launchers, requestor, zk, openstack_cloud):
    launchers.make(config(network='private', pool_extra='auto-floating-ip: false'))
    [node] = fulfilled(requestor.submit(['small']))
    assert openstack_cloud.floating_ips == {}
    assert node.public_ipv4 is None
    assert node.interface_ip == node.private_ipv4
    assert ipaddress.ip_address(node.interface_ip) in ipaddress.ip_network('10.0.0.0/8')


def test_a_server_on_an_external_network_needs_no_floating_ip(
        launchers, requestor, zk, openstack_cloud):
    launchers.make(config(network='public'))
    [node] = fulfilled(requestor.submit(['small']))
    assert openstack_cloud.floating_ips == {}
    assert node.public_ipv4.startswith('203.0.113.')


def test_without_an_external_network_the_launch_fails(
        launchers, requestor, zk, openstack_cloud, caplog):
    cloud = openstack_cloud
    for net in cloud.networks.values():
        net['external'] = False
    launcher = launchers.make(config(network='private'))
    handle = requestor.submit(['small'])
    assert handle.wait(30) and not handle.fulfilled
    assert 'auto-floating-ip: the cloud has no external network' in caplog.text
    # The failed attempts' servers are gone again.
    cloud.wait_for(lambda: not cloud.servers, what='failed servers deleted')
    wait_until(launcher, lambda: not zk.get_nodes(), 'failed node records deleted')


@pytest.mark.parametrize('clean', [True, False])
def test_clean_floating_ips_removes_only_unattached_ones(
        launchers, requestor, zk, openstack_cloud, clean):
    cloud = openstack_cloud
    provider_extra = '' if clean else 'clean-floating-ips: false'
    launcher = launchers.make(config(network='private', provider_extra=provider_extra))
    [node] = fulfilled(requestor.submit(['small']))
    leaked = cloud.add_floating_ip()
    other_port = cloud.add_port('private', status='ACTIVE', device_owner='compute:nova',
                                device_id='someone-elses-server')
    attached = cloud.add_floating_ip(port_id=other_port)
    launcher.run_cleanup()
    left = set(cloud.floating_ips)
    assert attached in left
    assert (leaked in left) is not clean
    # The node's own floating IP is attached: kept either way.
    assert any(f.address == node.public_ipv4 for f in cloud.floating_ips.values())


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _ports_after_cleanup(launcher, cloud, clock, at):
    """The ports left after a cleanup pass at ``at`` (the clock is set
    first: background passes see the same time)."""
    clock.now = at
    launcher.run_cleanup()
    return set(cloud.ports)


def test_port_cleanup_interval_removes_ports_down_that_long(
        launchers, requestor, zk, openstack_cloud):
    cloud = openstack_cloud
    launcher = launchers.make(config(network='public', provider_extra='port-cleanup-interval: 60'))
    clock = _Clock()
    launcher.adapters['cloud1'].neutron.clock = clock
    leaked = cloud.add_port('private', status='DOWN', device_owner='compute:nova')
    router = cloud.add_port('private', status='DOWN', device_owner='network:router_interface')
    active = cloud.add_port('private', status='ACTIVE')
    flapping = cloud.add_port('private', status='DOWN', device_owner='')
    everything = {leaked, router, active, flapping}

    assert _ports_after_cleanup(launcher, cloud, clock, 1000) == everything   # first seen
    cloud.set_port_status(flapping, 'ACTIVE')
    assert _ports_after_cleanup(launcher, cloud, clock, 1059) == everything
    clock.now = 1060
    cloud.set_port_status(flapping, 'DOWN')                 # DOWN again: counted anew
    assert _ports_after_cleanup(launcher, cloud, clock, 1060) == everything - {leaked}
    assert _ports_after_cleanup(launcher, cloud, clock, 1119) == everything - {leaked}
    assert _ports_after_cleanup(launcher, cloud, clock, 1120) == {router, active}


def test_port_cleanup_interval_zero_keeps_down_ports(launchers, requestor, zk, openstack_cloud):
    cloud = openstack_cloud
    launcher = launchers.make(config(network='public', provider_extra='port-cleanup-interval: 0'))
    clock = _Clock()
    launcher.adapters['cloud1'].neutron.clock = clock
    leaked = cloud.add_port('private', status='DOWN')
    _ports_after_cleanup(launcher, cloud, clock, 1000)
    assert _ports_after_cleanup(launcher, cloud, clock, 10 ** 6) == {leaked}


def test_dynamic_instance_properties_carry_the_request(
        launchers, requestor, zk, openstack_cloud):
    label_extra = """dynamic-instance-properties:
              request_info: "Created for request {request.id}"
              labels: "{request.labels}"
              who: "{request.requestor} for {request.requestor_data[who]}"
              tenant: "{request.tenant_name}"
              event: "{request.event_id}"
              missing: "{request.requestor_data[nope]}"
            instance-properties:
              team: infra"""
    launchers.make(config(network='public', label_extra=label_extra))
    handle = requestor.submit(['small'], requestor_data={'who': 'alice', 'tenant': 'acme'},
                              event_id='ev-1')
    fulfilled(handle)
    [server] = openstack_cloud.live_servers()
    meta = server.metadata
    assert meta['request_info'] == f'Created for request {handle.id}'
    assert meta['labels'] == "['small']"
    assert meta['who'] == 'test-zuul for alice'
    assert meta['tenant'] == 'acme' and meta['event'] == 'ev-1'
    assert meta['team'] == 'infra'
    # A key the requestor did not give leaves that property out.
    assert 'missing' not in meta
