"""The openstack provider: its configuration, and its adapter driving
openstacksdk (unmodified) against the fake cloud over real HTTP."""

from __future__ import annotations

import glob
import os

import pytest

from nodepool.config import ConfigError, load_config_text, validate_config
from nodepool.driver import (
    ImageRef,
    InstanceSpec,
    LaunchError,
    ProviderError,
    Quota,
    UploadSpec,
    default_registry,
)
from nodepool.driver.openstack.adapter import pick_flavor
from tests.fakes import openstack_cloud as fake_cloud
from tests.harness import corpus

openstack_cloud = fake_cloud.openstack_cloud

CORPUS = str(corpus.path('nodepool-configs'))

CONFIG = """
labels:
  - name: small
  - name: built
diskimages:
  - name: ubuntu
    elements: [ubuntu-minimal]
providers:
  - name: cloud1
    cloud: fake
    region-name: RegionOne
    rate: {rate}
    boot-timeout: 5
    launch-timeout: {launch_timeout}
    diskimages:
      - name: ubuntu
        config-drive: true
        meta: {{purpose: ci}}
    cloud-images:
      - name: cirros
        image-name: cirros
        username: cirros
    pools:
      - name: main
        max-servers: 10
        max-cores: 8
        availability-zones: [az2]
        networks: [public]
        security-groups: [default]
        host-key-checking: false
        labels:
          - name: small
            cloud-image: cirros
            min-ram: 1024
            key-name: {key}
            userdata: "#cloud-config\\n"
            instance-properties: {{team: infra}}
            console-log: true
          - name: built
            diskimage: ubuntu
            flavor-name: m1.large
            boot-from-volume: true
            volume-size: 20
"""


def config(rate=0, launch_timeout=60, key='testkey'):
    return load_config_text(CONFIG.format(rate=rate, launch_timeout=launch_timeout, key=key))


def make_adapter(cloud, **kw):
    cfg = config(**kw)
    provider = cfg.providers['cloud1']
    adapter = default_registry().get('openstack').get_adapter(provider)
    adapter.start()
    return adapter


def spec(node_id='0000000001', label='small', az=None, image=None):
    return InstanceSpec(name=f'cloud1-{node_id}', node_id=node_id, provider='cloud1',
                        pool='main', label=label, az=az, image=image,
                        metadata={'nodepool_node_id': node_id})


def wait_ready(cloud, adapter, external_id):
    return cloud.wait_for(lambda: adapter.poll(external_id), what=f'{external_id} ready')


# -- configuration ---------------------------------------------------------------------


def test_provider_configuration_is_typed():
    provider = config(rate=0.5, launch_timeout=600).providers['cloud1']
    assert provider.driver == 'openstack'
    assert provider.settings['cloud'] == 'fake' and provider.rate == 0.5
    assert provider.settings['boot-timeout'] == 5 and provider.settings['launch-timeout'] == 600
    # The framework's overall deadline covers both of released Nodepool's.
    assert provider.boot_timeout == 605
    image = provider.diskimages['ubuntu']
    assert image.meta == {'purpose': 'ci'} and image.settings['config-drive'] is True
    pool = provider.pools['main']
    assert pool.max_servers == 10 and pool.max_cores == 8 and pool.max_ram is None
    assert pool.settings['availability-zones'] == ['az2']
    small, built = pool.labels['small'], pool.labels['built']
    assert small.username == 'cirros' and small.diskimage is None
    assert small.settings['min-ram'] == 1024 and small.settings['cloud-image'] == 'cirros'
    assert built.diskimage == 'ubuntu' and built.settings['volume-size'] == 20
    assert small.settings['instance-properties'] == {'team': 'infra'}


def test_defaults_follow_released_nodepool():
    provider = load_config_text("""
diskimages: [{name: img, elements: [vm]}]
providers:
  - name: c
    cloud: x
    diskimages: [{name: img}]
    pools:
      - name: p
        labels: [{name: l, diskimage: img, min-ram: 1}]
""").providers['c']
    assert provider.rate == 1.0
    assert provider.settings['hostname-format'] == '{label.name}-{provider.name}-{node.id}'
    assert provider.boot_timeout == 60 + 3600
    pool = provider.pools['p']
    assert pool.settings['host-key-checking'] is True
    assert pool.settings['auto-floating-ip'] is True
    assert pool.labels['l'].settings['volume-size'] == 50


def test_builder_configuration_without_pools_validates():
    config = load_config_text('diskimages: [{name: img, elements: [vm]}]\n'
                              'providers:\n  - name: c\n    cloud: x\n'
                              '    diskimages: [{name: img, pause: true}]\n')
    assert config.providers['c'].pools == {}
    assert config.providers['c'].diskimages['img'].pause is True


def test_label_image_references_are_checked_with_lines(tmp_path):
    path = tmp_path / 'nodepool.yaml'
    path.write_text("""diskimages: [{name: img, elements: [vm]}]
providers:
  - name: c
    cloud: x
    diskimages:
      - name: img
    cloud-images:
      - name: cirros
    pools:
      - name: p
        labels:
          - name: a
            diskimage: other
            min-ram: 1
          - name: b
            cloud-image: nope
            min-ram: 1
          - name: c
            diskimage: img
            cloud-image: cirros
            min-ram: 1
          - name: d
            diskimage: img
""")
    issues = [i for i in validate_config(str(path)) if i.severity == 'error']
    by_line = {i.line: i.message for i in issues}
    assert "diskimage 'other', which provider 'c' does not list" in by_line[13]
    assert "cloud-image 'nope', which provider 'c' does not define" in by_line[16]
    assert 'both diskimage and cloud-image' in by_line[20]
    assert "label 'd' needs flavor-name or min-ram" in by_line[22]
    assert len(issues) == 4


def test_formats_and_duplicates_are_errors():
    with pytest.raises(ConfigError) as e:
        load_config_text("""
providers:
  - name: c
    hostname-format: '{label.nme}'
    image-name-format: '{image}'
    diskimages: [{name: a}, {name: a}]
""")
    message = str(e.value)
    assert 'hostname-format' in message and "'{label.nme}'" in message
    assert 'image-name-format' in message
    assert "diskimages entry 'a' is defined twice" in message


@pytest.mark.corpus
def test_released_documentation_example():
    """The driver page's example lists labels whose diskimage the second
    provider does not take: those two, and only those, are errors of
    this driver."""
    paths = glob.glob(os.path.join(CORPUS, '**', 'openstack.block01.yaml'), recursive=True)
    assert paths, f'no openstack.block01.yaml under {CORPUS}'
    issues = [i for i in validate_config(paths[0])
              if i.severity == 'error' and 'does not list under diskimages' in i.message]
    assert [(i.line, i.where) for i in issues] == [
        (56, 'providers[1].pools[0].labels[0].diskimage'),
        (62, 'providers[1].pools[0].labels[2].diskimage')]


# -- flavors -----------------------------------------------------------------------------


def test_flavor_rules(openstack_cloud):
    adapter = make_adapter(openstack_cloud)
    flavors = adapter._flavor_list()
    assert pick_flavor(flavors, None, 1024).name == 'm1.small'
    assert pick_flavor(flavors, None, 4096).name == 'm1.medium'
    assert pick_flavor(flavors, 'large', 1024).name == 'm1.large'
    assert pick_flavor(flavors, 'm1.tiny', None).name == 'm1.tiny'
    assert pick_flavor(flavors, '4', None).name == 'm1.large'      # by id
    assert pick_flavor(flavors, None, 100000) is None
    with pytest.raises(LaunchError, match='no flavor with at least 100000 MiB'):
        adapter.flavor_for({'min-ram': 100000})
    pool = adapter.provider.pools['main']
    assert adapter.label_quota(pool, 'small') == Quota(instances=1, cores=1, ram=2048)
    assert adapter.label_quota(pool, 'built') == Quota(instances=1, cores=4, ram=8192)


# -- launching -----------------------------------------------------------------------------


def test_launch_sends_what_the_label_asks_for(openstack_cloud):
    cloud = openstack_cloud
    cloud.add_keypair('testkey', 'ssh-ed25519 AAAAfake test')
    adapter = make_adapter(cloud)
    external_id = adapter.create(spec(az='az2'))
    server = cloud.servers[external_id]
    assert server.name == 'small-cloud1-0000000001'
    assert server.flavor['name'] == 'm1.small' and server.az == 'az2'
    assert server.key_name == 'testkey' and server.security_groups == ['default']
    assert server.image_id == cloud.image_id('cirros')
    assert server.user_data == 'I2Nsb3VkLWNvbmZpZwo='     # base64 of the userdata
    assert server.metadata == {
        'team': 'infra', 'groups': 'cloud1,small', 'nodepool_provider_name': 'cloud1',
        'nodepool_pool_name': 'main', 'nodepool_node_id': '0000000001',
        'nodepool_node_label': 'small'}
    inst = wait_ready(cloud, adapter, external_id)
    assert inst.ready and inst.node_id == '0000000001' and inst.az == 'az2'
    assert inst.public_ipv4.startswith('203.0.113.') and inst.interface_ip == inst.public_ipv4
    assert inst.public_ipv6.startswith('2001:db8::')
    assert inst.private_ipv4 == inst.public_ipv4    # no private address: the public one
    assert inst.region == 'RegionOne' and inst.cloud == 'fake'
    assert inst.username == 'cirros' and inst.host_keys == []   # host-key-checking off
    adapter.delete(external_id)
    assert external_id not in cloud.servers


def test_launch_from_an_upload_boots_from_volume(openstack_cloud):
    cloud = openstack_cloud
    image_id = cloud.add_image('ubuntu-0000000001')
    adapter = make_adapter(cloud)
    ref = ImageRef('ubuntu', '0000000001', '0000000001', image_id, 'ubuntu-1-1')
    external_id = adapter.create(spec(label='built', image=ref))
    server = cloud.servers[external_id]
    assert server.image_id is None and server.config_drive is True
    assert server.block_devices == [{'boot_index': 0, 'uuid': image_id,
                                     'source_type': 'image', 'destination_type': 'volume',
                                     'volume_size': 20, 'delete_on_termination': True}]
    assert server.metadata['nodepool_image_name'] == 'ubuntu'
    assert server.metadata['groups'] == 'cloud1,ubuntu,built'
    with pytest.raises(LaunchError, match="diskimage 'ubuntu' has no ready upload"):
        adapter.create(spec(node_id='0000000002', label='built'))


def test_server_in_error_fails_the_launch_with_its_fault(openstack_cloud, caplog):
    cloud = openstack_cloud
    cloud.add_keypair('testkey', 'ssh-ed25519 AAAAfake test')
    cloud.fail_next_servers(1, 'No valid host was found. There are not enough hosts.')
    adapter = make_adapter(cloud)
    external_id = adapter.create(spec())
    caplog.set_level('INFO', logger='nodepool.driver.openstack')

    def failed():
        try:
            adapter.poll(external_id)
        except LaunchError as e:
            return str(e)
    message = cloud.wait_for(failed, what='the launch to fail')
    assert 'went to ERROR: No valid host was found' in message
    # console-log: the server's console is logged.
    assert 'console of server' in caplog.text and 'failed: No valid host' in caplog.text


def test_bad_requests_are_launch_errors(openstack_cloud):
    adapter = make_adapter(openstack_cloud, key='missing')
    with pytest.raises(LaunchError, match='Invalid key_name'):
        adapter.create(spec())
    adapter = make_adapter(openstack_cloud)
    openstack_cloud.add_keypair('testkey', 'ssh-ed25519 AAAAfake test')
    with pytest.raises(LaunchError, match='availability zone is not available'):
        adapter.create(spec(az='az9'))


def test_launch_timeout_bounds_the_wait_for_active(openstack_cloud):
    cloud = openstack_cloud
    cloud.add_keypair('testkey', 'ssh-ed25519 AAAAfake test')
    cloud.hold_boots()
    adapter = make_adapter(cloud, launch_timeout=0.3)
    external_id = adapter.create(spec())
    assert adapter.poll(external_id) is None

    def failed():
        try:
            adapter.poll(external_id)
        except LaunchError as e:
            return str(e)
    assert 'not ACTIVE within launch-timeout' in cloud.wait_for(failed, what='timeout')


def test_delete_waits_until_gone_and_reports_a_stuck_server(openstack_cloud):
    cloud = openstack_cloud
    cloud.delete_delay = 0.2
    cloud.add_keypair('testkey', 'ssh-ed25519 AAAAfake test')
    adapter = make_adapter(cloud)
    first, second = adapter.create(spec()), adapter.create(spec('0000000002'))
    wait_ready(cloud, adapter, first)
    adapter.delete(first)
    assert first not in cloud.servers
    adapter.delete(first)        # gone already: nothing to do
    cloud.make_undeletable(second)
    adapter.delete_timeout = 0.5
    with pytest.raises(ProviderError, match='still exists'):
        adapter.delete(second)


def test_list_names_this_providers_servers_by_metadata(openstack_cloud):
    cloud = openstack_cloud
    cloud.add_keypair('testkey', 'ssh-ed25519 AAAAfake test')
    adapter = make_adapter(cloud)
    ours = adapter.create(spec())
    leaked = cloud.add_server('leak', {'nodepool_provider_name': 'cloud1',
                                       'nodepool_node_id': '0000000099'})
    cloud.add_server('someone-else', {'owner': 'bob'})
    cloud.add_server('other-provider', {'nodepool_provider_name': 'cloud2',
                                        'nodepool_node_id': '0000000001'})
    listed = {i.external_id: i.node_id for i in adapter.list()}
    assert listed == {ours: '0000000001', leaked: '0000000099'}


# -- quota -------------------------------------------------------------------------------


def test_quota_is_the_limits_less_what_others_use(openstack_cloud):
    cloud = openstack_cloud
    cloud.add_keypair('testkey', 'ssh-ed25519 AAAAfake test')
    adapter = make_adapter(cloud)
    assert adapter.quota() == Quota()          # unlimited
    cloud.set_limits(instances=10, cores=20, ram=40960)
    cloud.add_server('someone-else', flavor='m1.medium')     # 2 cores, 4096 MiB
    adapter.create(spec())                                   # ours: not subtracted
    assert adapter.quota() == Quota()          # still the cached answer
    adapter.invalidate_quota()
    assert adapter.quota() == Quota(instances=9, cores=18, ram=36864)


def test_quota_refusal_is_a_launch_error_and_drops_the_cache(openstack_cloud):
    cloud = openstack_cloud
    cloud.add_keypair('testkey', 'ssh-ed25519 AAAAfake test')
    cloud.set_limits(instances=1)
    adapter = make_adapter(cloud)
    adapter.create(spec())
    assert adapter.quota().instances == 1
    with pytest.raises(LaunchError, match='Quota exceeded for instances'):
        adapter.create(spec('0000000002'))
    assert adapter._quota is None


def test_availability_zone_choice(openstack_cloud):
    adapter = make_adapter(openstack_cloud)
    pool = adapter.provider.pools['main']
    assert {adapter.choose_az(pool) for _ in range(5)} == {'az2'}   # the pool's list
    pool.settings['availability-zones'] = []
    seen = {adapter.choose_az(pool) for _ in range(40)}             # the cloud's zones
    assert seen == {'az1', 'az2'}


# -- images --------------------------------------------------------------------------------


def upload_spec(tmp_path, formats=('qcow2',)):
    files = {}
    for fmt in formats:
        path = tmp_path / f'ubuntu-0000000007.{fmt}'
        path.write_bytes(b'disk image ' * 100)
        files[fmt] = str(path)
    return UploadSpec(image_name='ubuntu', build_id='0000000007', upload_id='0000000001',
                      upload_name='ubuntu-0000000007', files=files,
                      meta={'purpose': 'ci', 'nodepool_build_id': '0000000007'})


def test_image_upload_and_delete_through_glance(openstack_cloud, tmp_path):
    cloud = openstack_cloud
    cloud.upload_delay = 0.1
    adapter = make_adapter(cloud)
    assert adapter.image_formats()[0] == 'qcow2'
    image_id = adapter.upload_image(upload_spec(tmp_path, ('raw', 'qcow2')))
    image = cloud.images[image_id]
    assert image.status == 'active' and image.disk_format == 'qcow2'
    assert image.name == 'ubuntu-0000000007' and image.size == 1100
    assert image.properties['purpose'] == 'ci'
    assert image.properties['nodepool_build_id'] == '0000000007'
    adapter.delete_image(image_id)
    assert image_id not in cloud.images
    adapter.delete_image(image_id)     # already gone: quietly


def test_failed_upload_is_removed_and_reported(openstack_cloud, tmp_path):
    cloud = openstack_cloud
    cloud.fail_next_uploads(1)
    adapter = make_adapter(cloud)
    before = set(cloud.images)
    with pytest.raises(ProviderError, match='the image is killed'):
        adapter.upload_image(upload_spec(tmp_path))
    assert set(cloud.images) == before
    with pytest.raises(ProviderError, match='takes qcow2'):
        adapter.upload_image(upload_spec(tmp_path, ('tar',)))


def test_post_upload_hook_sees_the_image_and_can_refuse_it(openstack_cloud, tmp_path):
    adapter = make_adapter(openstack_cloud)
    seen = tmp_path / 'seen'
    hook = tmp_path / 'hook'
    hook.write_text(f'#!/bin/sh\necho "$@" > {seen}\nexit ${{HOOK_EXIT:-0}}\n')
    hook.chmod(0o755)
    adapter.settings['post-upload-hook'] = str(hook)
    spec = upload_spec(tmp_path)
    image_id = adapter.upload_image(spec)
    assert seen.read_text().split() == ['cloud1', image_id, spec.files['qcow2']]
    hook.write_text('#!/bin/sh\necho no thanks >&2\nexit 3\n')
    before = set(openstack_cloud.images)
    with pytest.raises(ProviderError, match='exited 3: no thanks'):
        adapter.upload_image(spec)
    assert set(openstack_cloud.images) == before


def test_image_name_format_names_uploads(openstack_cloud, tmp_path):
    adapter = make_adapter(openstack_cloud)
    adapter.settings['image-name-format'] = '{image_name}-{timestamp}'
    image_id = adapter.upload_image(upload_spec(tmp_path))
    name = openstack_cloud.images[image_id].name
    assert name.startswith('ubuntu-') and name[len('ubuntu-'):].isdigit()


# -- rate and connection -----------------------------------------------------------------


def test_every_api_call_waits_for_the_rate(openstack_cloud):
    cloud = openstack_cloud
    cloud.add_keypair('testkey', 'ssh-ed25519 AAAAfake test')
    adapter = make_adapter(cloud, rate=0.05)
    start = len(cloud.requests)
    external_id = adapter.create(spec())
    wait_ready(cloud, adapter, external_id)
    adapter.delete(external_id)
    calls = cloud.requests[start:]
    # Every request the cloud saw went through the limiter ...
    assert adapter.api_calls == len(calls) >= 8
    # ... which lets them leave ``rate`` apart (they arrive so, give or
    # take the scheduling jitter of either side).
    gaps = sorted(b[2] - a[2] for a, b in zip(calls, calls[1:], strict=False))
    assert calls[-1][2] - calls[0][2] >= (len(calls) - 1) * 0.05 - 0.05, gaps
    assert gaps[len(gaps) // 2] >= 0.05 * 0.8, gaps


def test_a_revoked_token_is_replaced(openstack_cloud):
    cloud = openstack_cloud
    adapter = make_adapter(cloud)
    assert adapter.list() == []
    cloud.revoke_tokens()
    start = len(cloud.requests)
    assert adapter.list() == []
    # Refused, authenticated again, asked again.
    assert [r[:2] for r in cloud.requests[start:]] == [
        ('GET', '/compute/v2.1/servers/detail'), ('POST', '/identity/v3/auth/tokens'),
        ('GET', '/compute/v2.1/servers/detail')]


def test_a_cloud_missing_from_clouds_yaml_is_a_provider_error(openstack_cloud):
    provider = load_config_text(
        'providers:\n  - name: c\n    cloud: nowhere\n').providers['c']
    adapter = default_registry().get('openstack').get_adapter(provider)
    with pytest.raises(ProviderError, match="cloud 'nowhere'"):
        adapter.start()


OPENDEV = corpus.cases('OpenDev nodepool configs', lambda root: sorted(glob.glob(os.path.join(
    root, 'nodepool-configs', 'openstack-infra+project-config', 'nodepool', '*.yaml'))))


@pytest.mark.corpus
@pytest.mark.parametrize('path', OPENDEV, ids=os.path.basename)
def test_opendev_configs_pass_config_validate(path, capsys):
    """OpenDev's launchers and builders (openstack providers, no driver
    key) pass ``nodepool config-validate``."""
    from nodepool.cmd import client
    assert client.main(['-c', path, 'config-validate']) == 0, capsys.readouterr().err
    with open(path) as f:
        config = load_config_text(f.read())
    for provider in config.providers.values():
        assert provider.driver == 'openstack'
        for pool in provider.pools.values():
            for label in pool.labels.values():
                assert label.diskimage in provider.diskimages
