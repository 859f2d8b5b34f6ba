"""The GitHub section of doc/source/reference/drivers.rst loads as printed:
its zuul.conf connection and its pipelines (triggers, requirements,
reporters) with no configuration error."""

from __future__ import annotations

from tests.harness.docs import code_blocks
from zuul.configloader.layout import ConfigFile, LayoutLoader
from zuul.configloader.zuulconf import load_zuul_conf
from zuul.driver.registry import default_registry
from zuul.lib import yamlutil
from zuul.model.tenant import Tenant, TenantProject

PAGE = 'doc/source/reference/drivers.rst'


def test_the_documented_connection_loads(tmp_path):
    (ini,) = code_blocks(PAGE, 'ini')
    path = tmp_path / 'zuul.conf'
    path.write_text(ini)
    conf = load_zuul_conf(str(path), default_registry())
    github = conf.connections['github']
    assert github.driver == 'github' and int(github.options['app_id']) == 31337
    assert github.options['webhook_token'] == 'the-webhook-secret'


def test_the_documented_pipelines_load():
    blocks = [b for b in code_blocks(PAGE, 'yaml') if 'github:' in b and '- pipeline:' in b]
    assert len(blocks) == 2
    text = '\n'.join(blocks) + '- job:\n    name: base\n    parent: null\n'
    names = [obj['pipeline']['name'] for obj in yamlutil.load(text, 'docs.yaml')
             if 'pipeline' in obj]
    config = TenantProject('github', 'acme/config', trusted=True)
    layout = LayoutLoader(default_registry(), {'github': 'github'},
                          {'github': 'github.com'}).load(
        Tenant(name='t', projects=[config]),
        [ConfigFile(path='zuul.yaml', text=text, project=config, branch='main')])
    assert [str(e) for e in layout.errors] == []
    assert sorted(layout.pipelines) == sorted(names) == ['check', 'gate']
    gate = layout.pipelines['gate']
    assert 'github' in gate.triggers and gate.manager == 'dependent'
