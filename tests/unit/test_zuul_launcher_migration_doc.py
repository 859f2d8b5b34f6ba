"""The examples of doc/source/operations/zuul-launcher-migration.rst load
as printed: the zuul.conf sections, the node objects (and they route the
label to zuul-launcher under its canonical name), and the tenant with
``use-nodepool: false``."""

from __future__ import annotations

import os

import pytest

from tests.harness import docs
from zuul.configloader.layout import ConfigFile, LayoutLoader
from zuul.configloader.tenant import load_tenant_config
from zuul.configloader.zuulconf import load_zuul_conf
from zuul.driver.registry import default_registry
from zuul.model.tenant import Tenant, TenantProject
from zuul.scheduler.nodes import NODEPOOL, ZUUL_LAUNCHER, route_labels

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGE = os.path.join(TOP, 'doc', 'source', 'operations', 'zuul-launcher-migration.rst')

PIPELINES = """
- pipeline:
    name: check
    manager: independent
- job:
    name: base
    parent: null
"""


def code_blocks(language: str) -> list[str]:
    return docs.code_blocks(PAGE, language)


def test_the_page_has_the_examples():
    assert len(code_blocks('ini')) == 2
    assert len(code_blocks('yaml')) == 3


def test_zuul_conf_examples_load(tmp_path):
    path = tmp_path / 'zuul.conf'
    path.write_text('\n'.join(code_blocks('ini')))
    conf = load_zuul_conf(str(path), default_registry())
    assert conf.launcher.state_dir == '/var/lib/zuul/launcher'
    assert conf.launcher.connection_names() == {'netns-local', 'cloud-east'}
    assert conf.connections['netns-local'].driver == 'netns'
    assert conf.connections['cloud-east'].driver == 'openstack'


CONFIG = TenantProject('gerrit', 'org/project-config', trusted=True)


def _layout(text: str, use_nodepool: bool = True):
    tenant = Tenant(name='example', projects=[CONFIG], use_nodepool=use_nodepool)
    loader = LayoutLoader(default_registry(),
                          connections={'gerrit': 'gerrit', 'netns-local': 'netns',
                                       'cloud-east': 'openstack'},
                          canonical_hostnames={'gerrit': 'review.example.org'})
    layout = loader.load(tenant, [ConfigFile(path='zuul.d/nodes.yaml', text=PIPELINES + text,
                                             project=CONFIG, branch='master')])
    layout.tenant = tenant
    return layout


@pytest.mark.parametrize('index', [0, 1], ids=['netns-label', 'static-nodes'])
def test_node_object_examples_load_and_route(index):
    blocks = [b for b in code_blocks('yaml') if '- tenant:' not in b]
    layout = _layout(blocks[index])
    assert [str(e) for e in layout.errors] == []
    label = 'ubuntu-jammy' if index == 0 else 'big-static-node'
    assert route_labels(layout, [label, 'centos-9']) == [
        (ZUUL_LAUNCHER, f'review.example.org/org/project-config/{label}'),
        (NODEPOOL, 'centos-9')]
    (provider,) = layout.resolved_providers.values()
    assert provider.label_by_name(label) is not None
    assert provider.tenants == ['example']


def test_tenant_example_turns_nodepool_off(tmp_path):
    (block,) = [b for b in code_blocks('yaml') if '- tenant:' in b]
    path = tmp_path / 'main.yaml'
    path.write_text(block)
    config = load_tenant_config(str(path), {'gerrit'})
    assert config.errors == []
    assert config.tenants['example'].use_nodepool is False
