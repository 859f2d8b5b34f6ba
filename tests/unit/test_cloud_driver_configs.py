"""The cloud drivers' configuration: released keys accepted, malformed
stanzas refused with file, line and key (nodepool.yaml), and the same
drivers built from zuul-launcher's resolved providers."""

from __future__ import annotations

import pytest

from nodepool.config import ConfigError, load_config_text
from nodepool.driver.aws.adapter import AwsAdapter
from nodepool.driver.kubernetes.adapter import KubernetesAdapter, resource_name
from nodepool.driver.kubernetes.objects import pod_body
from zuul.launcher.providers import build_provider
from zuul.model.launcher import ResolvedImage, ResolvedLabel, ResolvedProvider

K8S = """
labels:
  - name: pod-fedora
  - name: k8s-ns
providers:
  - name: kubespray
    driver: kubernetes
    context: admin-cluster.local
    launch-retries: 5
    max-pods: 20
    pools:
      - name: main
        max-cores: 8
        max-ram: 8192
        node-attributes: {team: a}
        default-label-cpu: 1
        default-label-memory: 512
        labels:
          - name: k8s-ns
            type: namespace
          - name: pod-fedora
            type: pod
            image: docker.io/fedora:40
            image-pull: Always
            cpu: 2
            memory-limit: 2048
            gpu: 1
            gpu-resource: amd.com/gpu
            env: [{name: A, value: b}]
            node-selector: {disk: ssd}
            privileged: true
            scheduler-name: custom
            volumes: [{name: cache, emptyDir: {}}]
            volume-mounts: [{name: cache, mountPath: /cache}]
            labels: {team: a}
            annotations: {owner: zuul}
            python-path: /usr/bin/python3
            shell-type: sh
"""


def test_kubernetes_released_keys():
    provider = load_config_text(K8S).providers['kubespray']
    assert provider.launch_retries == 5
    assert provider.settings == {'kind': 'kubernetes', 'context': 'admin-cluster.local',
                                 'max-pods': 20}
    pool = provider.pools['main']
    assert (pool.max_cores, pool.max_ram, pool.node_attributes) == (8, 8192, {'team': 'a'})
    pod = pool.labels['pod-fedora']
    assert pod.python_path == '/usr/bin/python3' and pod.username == 'zuul-worker'
    assert pod.settings['memory'] == 512     # the pool's default-label-memory
    body = pod_body('pod-fedora', pod.settings, {'nodepool_node_id': '1'})
    container = body['spec']['containers'][0]
    assert container['image'] == 'docker.io/fedora:40'
    assert container['imagePullPolicy'] == 'Always'
    assert container['resources'] == {'requests': {'cpu': '2', 'memory': '512Mi'},
                                      'limits': {'memory': '2048Mi', 'amd.com/gpu': '1'}}
    assert container['securityContext'] == {'privileged': True}
    assert body['spec']['nodeSelector'] == {'disk': 'ssd'}
    assert body['spec']['schedulerName'] == 'custom'
    assert body['metadata']['labels'] == {'team': 'a', 'nodepool_node_id': '1'}
    assert body['metadata']['annotations'] == {'owner': 'zuul'}
    assert pool.labels['k8s-ns'].settings['type'] == 'namespace'
    assert isinstance(_adapter(provider), KubernetesAdapter)


def _adapter(provider):
    from nodepool.driver import default_registry
    return default_registry().get(provider.driver).get_adapter(provider)


def test_resource_names_are_dns_labels():
    assert resource_name('Ubuntu_Jammy.large', '0000000042') == 'ubuntu-jammy-large-0000000042'
    long = resource_name('x' * 80, '0000000042')
    assert len(long) <= 63 and long.endswith('0000000042')


@pytest.mark.parametrize('stanza,where,message', [
    ('    pools:\n      - name: main\n        labels:\n          - name: p\n'
     '            type: pod\n', 'providers[0].pools[0].labels[0]', 'needs an image'),
    ('    pools:\n      - name: main\n        labels:\n          - name: p\n'
     '            type: vm\n', 'providers[0].pools[0].labels[0].type', 'not a valid value'),
    ('    pools:\n      - name: main\n        labels:\n          - name: p\n'
     '            image: x\n            cpus: 2\n', 'providers[0].pools[0].labels[0].cpus',
     "unknown key 'cpus'"),
    ('    max-pods: many\n    pools: []\n', 'providers[0].max-pods', 'expected int'),
])
def test_malformed_kubernetes_stanza_refused_with_file_line_key(stanza, where, message):
    text = 'providers:\n  - name: k\n    driver: kubernetes\n' + stanza
    with pytest.raises(ConfigError) as e:
        load_config_text(text, path='nodepool.yaml')
    (issue,) = e.value.issues
    assert issue.path == 'nodepool.yaml' and issue.where == where and message in issue.message
    assert issue.line is not None and issue.line >= 4


AWS = """
labels:
  - name: debian
providers:
  - name: ec2
    driver: aws
    region-name: us-west-2
    profile-name: ci
    boot-timeout: 120
    launch-timeout: 300
    cloud-images:
      - name: debian12
        image-filters:
          - name: name
            values: [debian-12-*]
        username: admin
    pools:
      - name: main
        max-servers: 5
        subnet-id: subnet-0123
        security-group-id: sg-0123
        public-ipv4: true
        labels:
          - name: debian
            cloud-image: debian12
            instance-type: t3.medium
            key-name: zuul
            iam-instance-profile: {arn: 'arn:aws:iam::123456789012:instance-profile/ro'}
            volume-type: gp3
            volume-size: 80
            iops: 3000
            throughput: 250
            userdata: "#!/bin/sh\\ntrue\\n"
            tags: {team: ci}
            dynamic-tags: {request: '{request.id}'}
            use-spot: true
            imdsv2: required
"""


def test_aws_released_keys_make_the_run_request():
    from nodepool.driver import InstanceSpec
    provider = load_config_text(AWS).providers['ec2']
    assert provider.boot_timeout == 420
    adapter = _adapter(provider)
    assert isinstance(adapter, AwsAdapter)
    adapter._filtered_image = lambda image: 'ami-found'
    request, _ = adapter.run_request(InstanceSpec(
        name='ec2-0000000001', node_id='0000000001', provider='ec2', pool='main',
        label='debian', request={'id': '100-0000000007'}))
    assert request['ImageId'] == 'ami-found' and request['InstanceType'] == 't3.medium'
    assert request['NetworkInterfaces'] == [{'DeviceIndex': 0, 'SubnetId': 'subnet-0123',
                                             'Groups': ['sg-0123'],
                                             'AssociatePublicIpAddress': True}]
    assert request['BlockDeviceMappings'][0]['Ebs'] == {
        'VolumeSize': 80, 'VolumeType': 'gp3', 'Iops': 3000, 'Throughput': 250,
        'DeleteOnTermination': True}
    assert request['IamInstanceProfile'] == {'Arn': 'arn:aws:iam::123456789012:'
                                                    'instance-profile/ro'}
    assert request['InstanceMarketOptions']['MarketType'] == 'spot'
    assert request['MetadataOptions']['HttpTokens'] == 'required'
    tags = {t['Key']: t['Value'] for t in request['TagSpecifications'][0]['Tags']}
    assert tags == {'team': 'ci', 'request': '100-0000000007', 'Name': 'ec2-0000000001',
                    'nodepool_node_id': '0000000001', 'nodepool_provider_name': 'ec2',
                    'nodepool_pool_name': 'main', 'nodepool_node_label': 'debian'}
    assert provider.pools['main'].labels['debian'].username == 'admin'


@pytest.mark.parametrize('change,where,message', [
    (('    region-name: us-west-2\n', ''), 'providers[0].region-name', 'required key'),
    (('            instance-type: t3.medium\n', ''), 'providers[0].pools[0].labels[0]',
     'needs an instance-type'),
    (('cloud-image: debian12\n', 'cloud-image: nope\n'),
     'providers[0].pools[0].labels[0].cloud-image', 'not under cloud-images'),
    (('            use-spot: true\n', '            use-spot: sometimes\n'),
     'providers[0].pools[0].labels[0].use-spot', 'expected bool'),
])
def test_malformed_aws_stanza_refused_with_file_line_key(change, where, message):
    text = AWS.replace(*change)
    with pytest.raises(ConfigError) as e:
        load_config_text(text, path='nodepool.yaml')
    (issue,) = e.value.issues
    assert issue.where == where and message in issue.message, str(e.value)
    assert issue.line is not None


P = 'review.example.org/org/config'


def _resolved(connection, settings, labels, images=None):
    provider = ResolvedProvider(canonical_name=f'{P}/prov', name='prov',
                                section=f'{P}/sec', connection=connection,
                                settings=settings)
    for name, (image, label_settings) in labels.items():
        provider.labels[f'{P}/{name}'] = ResolvedLabel(
            canonical_name=f'{P}/{name}', name=name, image=image, flavor=None,
            settings=label_settings)
    provider.images = images or {}
    return provider


def test_zuul_launcher_aws_provider():
    conns = {'ec2': {'driver': 'aws', 'options': {'access_key_id': 'AKID',
                                                  'secret_access_key': 's3cret',
                                                  'endpoint_url': 'http://127.0.0.1:1'}}}
    image = ResolvedImage(canonical_name=f'{P}/debian', name='debian', type='cloud',
                          settings={'image-id': 'ami-1', 'username': 'admin'})
    served = build_provider(_resolved('ec2', {'region': 'eu-west-1', 'subnet-id': 'subnet-1',
                                              'security-group-id': 'sg-1',
                                              'quota': {'instances': 3, 'cores': 12}},
                                      {'small': (f'{P}/debian', {'instance-type': 't3.small',
                                                                 'key-name': 'zuul',
                                                                 'market-type': 'spot'})},
                                      {f'{P}/debian': image}), conns)
    assert isinstance(served.adapter, AwsAdapter)
    config = served.config
    assert config.settings['region-name'] == 'eu-west-1'
    assert config.settings['cloud-images'][f'{P}/debian']['image-id'] == 'ami-1'
    assert config.settings['connection']['access-key-id'] == 'AKID'
    pool = served.pool
    assert (pool.max_servers, pool.max_cores) == (3, 12)
    assert pool.settings['subnet-id'] == 'subnet-1'
    label = pool.labels[f'{P}/small']
    assert label.username == 'admin'
    assert label.settings['instance-type'] == 't3.small' and label.settings['use-spot']


def test_zuul_launcher_kubernetes_provider():
    conns = {'k8s': {'driver': 'kubernetes', 'options': {'context': 'admin'}}}
    image = ResolvedImage(canonical_name=f'{P}/fedora', name='fedora', type='cloud',
                          settings={'image-name': 'docker.io/fedora:40'})
    served = build_provider(_resolved('k8s', {}, {
        'pod': (f'{P}/fedora', {'cpu': 2}), 'space': (None, {'type': 'namespace'})},
        {f'{P}/fedora': image}), conns)
    assert isinstance(served.adapter, KubernetesAdapter)
    labels = served.pool.labels
    assert labels[f'{P}/pod'].settings['image'] == 'docker.io/fedora:40'
    assert labels[f'{P}/pod'].settings['cpu'] == 2
    assert labels[f'{P}/space'].settings['type'] == 'namespace'
    assert served.config.settings['connection'] == {'context': 'admin'}


def test_zuul_launcher_metastatic_provider():
    from nodepool.driver.metastatic.adapter import MetastaticAdapter
    conns = {'meta': {'driver': 'metastatic', 'options': {}}}
    served = build_provider(_resolved('meta', {'quota': {'instances': 6}}, {
        'small': (None, {'backing-label': 'big', 'max-parallel-jobs': 3, 'grace-time': 30})}),
        conns)
    assert isinstance(served.adapter, MetastaticAdapter)
    label = served.pool.labels[f'{P}/small']
    assert label.settings == {'backing-label': f'{P}/big', 'max-parallel-jobs': 3,
                              'grace-time': 30, 'min-retention-time': 0}
    assert served.pool.max_servers == 6


def test_metastatic_label_cannot_back_itself():
    text = ('providers:\n  - name: m\n    driver: metastatic\n    pools:\n      - name: main\n'
            '        labels:\n          - name: a\n            backing-label: a\n')
    with pytest.raises(ConfigError) as e:
        load_config_text(text, path='nodepool.yaml')
    (issue,) = e.value.issues
    assert issue.where == 'providers[0].pools[0].labels[0].backing-label'
    assert 'own backing label' in issue.message and issue.line == 8


def test_hostile_label_names_make_plain_resource_names():
    """A label or provider name with path or shell characters never
    reaches the cluster or a cloud as anything but a DNS label."""
    for hostile in ('../../etc', 'a b;rm -rf /', 'UPPER/../x', '{{ lookup("pipe","id") }}'):
        name = resource_name(hostile, '0000000001')
        assert all(c.isalnum() or c == '-' for c in name), name
        assert name.endswith('0000000001') and len(name) <= 63
