"""Resolved providers as nodepool drivers see them (no ZooKeeper)."""

from __future__ import annotations

import pytest

from nodepool.driver.netns.adapter import NetnsAdapter
from nodepool.driver.openstack.driver import OpenStackDriver
from nodepool.driver.simulated.adapter import SimulatedAdapter
from nodepool.driver.static.adapter import StaticAdapter
from nodepool.zk.records import Node
from zuul.launcher.providers import (
    ProviderTranslationError,
    build_provider,
    is_static,
    raw_provider,
)
from zuul.launcher.quota import ProviderQuota
from zuul.model.launcher import ResolvedImage, ResolvedLabel, ResolvedProvider

P = 'review.example.org/org/config'


def resolved(connection='cloud', settings=None, labels=None, images=None):
    provider = ResolvedProvider(canonical_name=f'{P}/prov', name='prov',
                                section=f'{P}/sec', connection=connection,
                                settings=settings or {})
    for name, label_settings in (labels or {'ubuntu': {}}).items():
        provider.labels[f'{P}/{name}'] = ResolvedLabel(
            canonical_name=f'{P}/{name}', name=name, image=label_settings.pop('_image', None),
            flavor=None, settings=label_settings)
    provider.images = images or {}
    return provider


def test_simulated_provider_gets_one_pool_of_canonical_labels():
    conns = {'cloud': {'driver': 'simulated', 'options': {'state_dir': '/tmp/x',
                                                          'boot-delay': '0.5'}}}
    served = build_provider(resolved(settings={'quota': {'instances': 4},
                                               'boot-timeout': 30, 'launch-attempts': 5}),
                            conns)
    assert isinstance(served.adapter, SimulatedAdapter)
    assert served.name == f'{P}/prov'
    assert list(served.pool.labels) == [f'{P}/ubuntu']
    assert served.pool.max_servers == 4
    assert served.config.boot_timeout == 30
    assert served.config.settings['state-dir'] == '/tmp/x'
    assert served.config.settings['boot-delay'] == 0.5
    assert served.launch_attempts == 5


def test_connection_objects_from_zuul_conf_work_too():
    from zuul.configloader.zuulconf import ConnectionConfig
    conns = {'cloud': ConnectionConfig('cloud', 'simulated', {'quota': '3'})}
    served = build_provider(resolved(), conns)
    assert served.config.settings['quota'] == 3


def test_netns_labels_carry_rootfs_and_username():
    conns = {'cloud': {'driver': 'netns', 'options': {'state-dir': '/var/tmp/ns'}}}
    served = build_provider(resolved(labels={'ubuntu': {'rootfs': '/srv/root',
                                                        'username': 'zuul'}}), conns)
    assert isinstance(served.adapter, NetnsAdapter)
    label = served.pool.labels[f'{P}/ubuntu']
    assert label.settings['rootfs'] == '/srv/root'
    assert label.username == 'zuul'
    assert served.config.settings['state-dir'] == '/var/tmp/ns'


def test_netns_zuul_image_becomes_a_diskimage():
    image = ResolvedImage(canonical_name=f'{P}/debian', name='debian', type='zuul')
    provider = resolved(labels={'ubuntu': {'_image': f'{P}/debian', 'username': 'root'}},
                        images={f'{P}/debian': image})
    served = build_provider(provider, {'cloud': {'driver': 'netns'}})
    assert served.pool.labels[f'{P}/ubuntu'].diskimage == f'{P}/debian'
    assert list(served.config.diskimages) == [f'{P}/debian']


def test_openstack_cloud_image_flavor_region_and_quota():
    image = ResolvedImage(canonical_name=f'{P}/ubuntu-img', name='ubuntu-img', type='cloud',
                          settings={'image-name': 'Ubuntu 22.04', 'username': 'ubuntu'})
    provider = resolved(settings={'region': 'DFW', 'quota': {'instances': 10, 'cores': 40,
                                                             'ram': 8192},
                                  'key-name': 'infra-root'},
                        labels={'ubuntu': {'_image': f'{P}/ubuntu-img',
                                           'cloud-flavor': 'Performance 8G'}},
                        images={f'{P}/ubuntu-img': image})
    conns = {'rax': {'driver': 'openstack', 'options': {'cloud': 'rax', 'rate': '0.5'}}}
    provider.connection = 'rax'
    driver, raw = raw_provider(provider, conns)
    assert driver == 'openstack'
    assert raw['cloud'] == 'rax' and raw['region-name'] == 'DFW' and raw['rate'] == 0.5
    [pool] = raw['pools']
    assert (pool['max-servers'], pool['max-cores'], pool['max-ram']) == (10, 40, 8192)
    [label] = pool['labels']
    assert label['flavor-name'] == 'Performance 8G' and label['key-name'] == 'infra-root'
    assert label['cloud-image'] == f'{P}/ubuntu-img'
    assert raw['cloud-images'] == [{'name': f'{P}/ubuntu-img', 'image-name': 'Ubuntu 22.04',
                                    'username': 'ubuntu'}]
    config = OpenStackDriver().load_provider(OpenStackDriver().provider_schema()(raw))
    assert config.pools['main'].labels[f'{P}/ubuntu'].username == 'ubuntu'


def test_openstack_zuul_image_becomes_a_diskimage():
    image = ResolvedImage(canonical_name=f'{P}/debian', name='debian', type='zuul')
    provider = resolved(labels={'ubuntu': {'_image': f'{P}/debian', 'flavor-name': 'm1'}},
                        images={f'{P}/debian': image})
    _, raw = raw_provider(provider, {'cloud': {'driver': 'openstack'}})
    assert raw['diskimages'] == [{'name': f'{P}/debian'}]
    assert raw['pools'][0]['labels'][0]['diskimage'] == f'{P}/debian'


def test_static_nodes_map_short_labels_to_canonical():
    provider = resolved(connection=None, labels={'big': {}, 'small': {}}, settings={
        'nodes': [{'name': 'static.example.com', 'labels': ['big', 'unknown'],
                   'host-key-checking': False, 'max-parallel-jobs': 2},
                  {'name': 'other.example.com', 'labels': 'unknown'}]})
    assert is_static(provider, {})
    served = build_provider(provider, {})
    assert isinstance(served.adapter, StaticAdapter)
    hosts = served.adapter.static_hosts()
    assert [(h.name, h.slot, h.labels) for h in hosts] == [
        ('static.example.com', 0, [f'{P}/big']), ('static.example.com', 1, [f'{P}/big'])]


@pytest.mark.parametrize('conns,message', [
    ({}, "connection 'cloud' is not defined"),
    ({'cloud': {'driver': 'gerrit'}}, "driver 'gerrit' cannot serve"),
])
def test_unusable_connections_are_reported(conns, message):
    with pytest.raises(ProviderTranslationError, match=message):
        build_provider(resolved(), conns)


def test_settings_the_driver_refuses_name_the_provider():
    provider = resolved(settings={'quota': {'instances': 'many'}})
    with pytest.raises(ProviderTranslationError, match='prov'):
        build_provider(provider, {'cloud': {'driver': 'simulated'}})
    provider = resolved(labels={'ubuntu': {}})
    with pytest.raises(ProviderTranslationError, match='flavor-name or min-ram'):
        build_provider(provider, {'cloud': {'driver': 'openstack'}})


def test_quota_is_the_smaller_of_configured_and_reported():
    conns = {'cloud': {'driver': 'simulated', 'options': {'quota': '2'}}}
    provider = resolved(settings={'quota': {'instances': 5}})
    served = build_provider(provider, conns)
    nodes = [Node(id='1', provider=provider.canonical_name, type=f'{P}/ubuntu'),
             Node(id='2', provider='elsewhere', type=f'{P}/ubuntu')]
    assert ProviderQuota(provider, served).free(nodes, f'{P}/ubuntu') == 1
    assert ProviderQuota(provider).free(nodes, f'{P}/ubuntu') == 4
    nodes[0].launch_state = 'queued'
    assert ProviderQuota(provider, served).free(nodes, f'{P}/ubuntu',
                                                count_queued=False) == 2
