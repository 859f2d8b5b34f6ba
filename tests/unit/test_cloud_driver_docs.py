"""The cloud driver pages' examples load as printed: nodepool.yaml
examples through the nodepool config loader, zuul.conf connections
through the zuul.conf loader, seed 001 objects through the layout loader
and on to the same drivers' adapters (zuul-launcher's path)."""

from __future__ import annotations

import configparser
import textwrap

import pytest
import yaml

from nodepool.config import load_config_text
from nodepool.driver.aws.adapter import AwsAdapter
from nodepool.driver.kubernetes.adapter import KubernetesAdapter
from nodepool.driver.metastatic.adapter import MetastaticAdapter
from tests.harness import docs
from zuul.configloader.layout import ConfigFile, LayoutLoader
from zuul.driver.builtin import PROVIDER_DRIVERS
from zuul.driver.registry import default_registry
from zuul.launcher.providers import build_provider
from zuul.model.tenant import Tenant, TenantProject

PAGES = 'doc/source/reference/drivers/'
HOST = 'review.example.org'
NODES = TenantProject('gerrit', 'infra/nodes', trusted=True)


def blocks(page, language='yaml'):
    return docs.code_blocks(PAGES + page, language)


def layout_of(text: str, connections: dict):
    loader = LayoutLoader(default_registry(), connections={'gerrit': 'gerrit', **connections},
                          canonical_hostnames={'gerrit': HOST})
    tenant = Tenant(name='t1', projects=[NODES])
    layout = loader.load(tenant, [ConfigFile(path='zuul.d/nodes.yaml',
                                             text=textwrap.dedent(text), project=NODES,
                                             branch='master')])
    assert [e for e in layout.errors if e.severity == 'error'] == []
    return layout


def served(layout, name: str, conns: dict):
    resolved = layout.resolved_providers[f'{HOST}/infra/nodes/{name}']
    return build_provider(resolved, conns)


def connection(page) -> tuple[str, dict]:
    (text,) = blocks(page, 'ini')
    parser = configparser.ConfigParser()
    parser.read_string(text)
    (section,) = parser.sections()
    options = dict(parser[section])
    assert options['driver'] in PROVIDER_DRIVERS
    return section.split()[1], options


def test_kubernetes_page():
    nodepool_yaml, openshift_yaml, objects, playbook = blocks('kubernetes.rst')
    provider = load_config_text(nodepool_yaml).providers['kubespray']
    labels = provider.pools['main'].labels
    assert labels['pod-fedora'].settings['memory-limit'] == 4096
    assert labels['kubernetes-namespace'].settings['type'] == 'namespace'
    config = load_config_text(openshift_yaml)
    assert config.providers['cluster'].driver == 'openshift'
    assert list(config.providers['shared'].pools) == ['zuul-ci']
    name, options = connection('kubernetes.rst')
    conns = {name: {'driver': options.pop('driver'), 'options': options}}
    layout = layout_of(objects, {name: 'kubernetes'})
    main = served(layout, 'cluster-main', conns)
    assert isinstance(main.adapter, KubernetesAdapter)
    pod = main.pool.labels[f'{HOST}/infra/nodes/fedora-pod'].settings
    assert (pod['type'], pod['image'], pod['cpu']) == ('pod', 'docker.io/fedora:40', 1)
    assert main.pool.labels[f'{HOST}/infra/nodes/k8s-namespace'].settings['type'] == \
        'namespace'
    assert main.config.settings['connection']['context'] == 'admin-cluster.local'
    assert yaml.safe_load(playbook)[0]['hosts'] == 'localhost'   # run by test_e2e_kubernetes


def test_aws_page():
    nodepool_yaml, objects = blocks('aws.rst')
    provider = load_config_text(nodepool_yaml).providers['ec2-us-west-2']
    label = provider.pools['main'].labels['debian-small']
    assert label.username == 'admin' and label.settings['instance-type'] == 't3.medium'
    name, options = connection('aws.rst')
    conns = {name: {'driver': options.pop('driver'), 'options': options}}
    main = served(layout_of(objects, {name: 'aws'}), 'aws-main', conns)
    assert isinstance(main.adapter, AwsAdapter)
    assert main.config.settings['region-name'] == 'us-west-2'
    images = main.config.settings['cloud-images']
    (image,) = images.values()
    assert image['image-filters'] == [{'name': 'name', 'values': ['debian-12-amd64-*']}]
    assert main.pool.settings['security-group-id'] == 'sg-01234567890abcdef'


@pytest.mark.parametrize('page', ['metastatic.rst'])
def test_metastatic_page(page):
    nodepool_yaml, objects = blocks(page)
    config = load_config_text(nodepool_yaml)
    label = config.providers['meta'].pools['main'].labels['small-node']
    assert label.settings['backing-label'] == 'large-node'
    main = served(layout_of(objects, {'metastatic': 'metastatic'}), 'shared-main',
                  {'metastatic': {'driver': 'metastatic', 'options': {}}})
    assert isinstance(main.adapter, MetastaticAdapter)
    settings = main.pool.labels[f'{HOST}/infra/nodes/shared-small'].settings
    assert settings['backing-label'] == f'{HOST}/infra/nodes/large'
    assert settings['max-parallel-jobs'] == 4


def test_gce_page():
    from nodepool.driver.gce.adapter import GceAdapter
    nodepool_yaml, objects = blocks('gce.rst')
    provider = load_config_text(nodepool_yaml).providers['gcloud']
    assert provider.settings['zone'] == 'us-central1-a'
    conns = {'gcloud': {'driver': 'gce', 'options': {}}}
    main = served(layout_of(objects, {'gcloud': 'gce'}), 'gce-main', conns)
    assert isinstance(main.adapter, GceAdapter)
    assert (main.config.settings['project'], main.config.settings['region']) == \
        ('my-project', 'us-central1')
    (image,) = main.config.settings['cloud-images'].values()
    assert image['image-family'] == 'debian-12' and image['image-project'] == 'debian-cloud'
    label = main.pool.labels[f'{HOST}/infra/nodes/debian-gce']
    assert label.settings['instance-type'] == 'e2-medium' and label.username == 'zuul'


def test_azure_page():
    from nodepool.driver.azure.adapter import AzureAdapter
    nodepool_yaml, objects = blocks('azure.rst')
    provider = load_config_text(nodepool_yaml).providers['azure-central']
    label = provider.pools['main'].labels['ubuntu-azure']
    assert label.settings['hardware-profile'] == {'vm-size': 'Standard_B2s'}
    conns = {'azure': {'driver': 'azure', 'options': {'auth_path': '/etc/zuul/azure.json'}}}
    main = served(layout_of(objects, {'azure': 'azure'}), 'azure-main', conns)
    assert isinstance(main.adapter, AzureAdapter)
    assert main.config.settings['location'] == 'centralus'
    assert main.config.settings['auth-path'] == '/etc/zuul/azure.json'
    (image,) = main.config.settings['cloud-images'].values()
    assert image['image-reference']['sku'] == '22_04-lts'
    label = main.pool.labels[f'{HOST}/infra/nodes/ubuntu-azure']
    assert label.settings['hardware-profile'] == {'vm-size': 'Standard_B2s'}
