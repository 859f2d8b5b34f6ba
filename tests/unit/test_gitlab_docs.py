"""doc/source/reference/gitlab.rst loads as printed: its zuul.conf
connection (and a connection made from it), its pipelines (triggers,
requirements, rejections, reporters) and its tenant, with no
configuration error; and it names every key the driver's schemas take."""

from __future__ import annotations

import re

from tests.harness.docs import TOP, code_blocks
from zuul.configloader.layout import ConfigFile, LayoutLoader
from zuul.configloader.tenant import load_tenant_config
from zuul.configloader.zuulconf import load_zuul_conf
from zuul.driver.registry import default_registry
from zuul.merger.repos import gitlab_remote
from zuul.model.tenant import Tenant, TenantProject

PAGE = 'doc/source/reference/gitlab.rst'


def test_the_documented_connection_loads(tmp_path):
    (ini,) = code_blocks(PAGE, 'ini')
    path = tmp_path / 'zuul.conf'
    path.write_text(ini)
    registry = default_registry()
    conf = load_zuul_conf(str(path), registry)
    gitlab = conf.connections['gitlab']
    assert gitlab.driver == 'gitlab'
    connection = registry.get('gitlab').get_connection('gitlab', gitlab.options)
    assert connection.baseurl == 'https://gitlab.example.org'
    assert connection.client.prefix == '/api/v4' and connection.canonical_hostname == \
        'gitlab.example.org'
    assert connection.webhook_token == 'the-webhook-secret'
    remote = gitlab_remote(gitlab.options, 'acme/widget')
    assert remote.url == 'https://gitlab.example.org/acme/widget.git'
    assert 'GIT_CONFIG_VALUE_0' in remote.env


def test_the_documented_pipelines_and_tenant_load(tmp_path):
    blocks = code_blocks(PAGE, 'yaml')
    pipelines = [b for b in blocks if '- pipeline:' in b]
    assert len(pipelines) == 1
    text = pipelines[0] + '- job:\n    name: base\n    parent: null\n'
    config = TenantProject('gitlab', 'acme/zuul-config', trusted=True)
    layout = LayoutLoader(default_registry(), {'gitlab': 'gitlab'},
                          {'gitlab': 'gitlab.example.org'}).load(
        Tenant(name='example', projects=[config]),
        [ConfigFile(path='zuul.yaml', text=text, project=config, branch='main')])
    assert [str(e) for e in layout.errors] == []
    assert sorted(layout.pipelines) == ['check', 'gate', 'post', 'tag']
    gate = layout.pipelines['gate']
    assert gate.manager == 'dependent' and 'gitlab' in gate.require
    (tenant_block,) = [b for b in blocks if '- tenant:' in b]
    main = tmp_path / 'main.yaml'
    main.write_text(tenant_block)
    tenants = load_tenant_config(str(main), {'gitlab': 'gitlab'})
    assert tenants.errors == []
    assert [p.name for p in tenants.tenants['example'].projects] == [
        'acme/zuul-config', 'acme/widget', 'acme/lib']


def test_the_page_names_every_key_the_schemas_accept():
    driver = default_registry().get('gitlab')
    text = (TOP / PAGE).read_text()
    schemas = [driver.connection_schema(), driver.get_require_schema()]
    keys = {str(k) for schema in schemas for k in schema.schema}
    keys |= {str(k) for k in driver.get_trigger_schema().validators[0].schema}
    keys |= {str(k) for k in driver.get_reporter_schema().validators[1].schema}
    missing = [k for k in keys if not re.search(rf'``{re.escape(k)}``', text)]
    assert missing == []
