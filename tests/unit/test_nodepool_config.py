"""nodepool.yaml: the released format, our drivers, the corpus of real
configs, and errors that say where and what."""

from __future__ import annotations

import glob
import os

import pytest
import yaml

from nodepool.cmd import client
from nodepool.config import (
    WARNING,
    ConfigError,
    load_config,
    load_config_text,
    validate_config,
)
from nodepool.driver import UNSUPPORTED, default_registry
from tests.harness import corpus

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = str(corpus.path('nodepool-configs'))
SUPPORTED = set(default_registry().names())


def errors_of(issues):
    return [i for i in issues if i.severity != WARNING]


def test_sample_config_validates():
    config = load_config(os.path.join(ROOT, 'etc', 'nodepool.yaml'))
    assert config.warnings == []
    assert config.zookeeper_hosts() == '127.0.0.1:2281'
    assert config.zookeeper_tls == {'cert': '/etc/nodepool/ssl/client.pem',
                                    'key': '/etc/nodepool/ssl/client.key',
                                    'ca': '/etc/nodepool/ssl/ca.pem'}
    assert set(config.providers) == {'local-netns', 'static-rack'}
    netns = config.providers['local-netns']
    assert netns.driver == 'netns'
    assert netns.pools['main'].max_servers == 6
    assert netns.pools['main'].labels['ubuntu-jammy'].username == 'root'
    static = config.providers['static-rack']
    nodes = static.pools['main'].settings['nodes']
    assert nodes[0]['max-parallel-jobs'] == 2 and nodes[0]['username'] == 'zuul'
    assert list(static.pools['main'].labels) == ['static-builder']
    assert config.labels['ubuntu-jammy'].min_ready == 2


def _drivers_in(doc) -> set[str]:
    providers = doc.get('providers') if isinstance(doc, dict) else doc
    if not isinstance(providers, list):
        return set()
    return {p.get('driver', 'openstack') for p in providers
            if isinstance(p, dict) and 'name' in p}


# Whole nodepool.yaml files (not fragments of a provider's section) that
# use no driver we lack: these must validate.
VALID_CORPUS = {
    'configuration.block01.yaml', 'configuration.block02.yaml', 'configuration.block03.yaml',
    'configuration.block04.yaml', 'static.block01.yaml', 'openstack.block02.yaml',
    'aws.block04.yaml', 'azure.block04.yaml', 'nb01-test.opendev.org.yaml',
    # The cloud drivers' own examples (issue 30 added the drivers).
    'aws.block01.yaml', 'azure.block01.yaml', 'kubernetes.block01.yaml',
    'metastatic.block01.yaml', 'openshift.block01.yaml', 'openshift-pods.block01.yaml',
    # OpenDev's launchers and builders: openstack providers.
    'nl01.opendev.org.yaml', 'nl02.opendev.org.yaml', 'nl03.opendev.org.yaml',
    'nl04.opendev.org.yaml', 'nb03.opendev.org.yaml', 'nodepool.yaml',
}


def _corpus_files():
    return sorted(glob.glob(os.path.join(CORPUS, '**', '*.yaml'), recursive=True))


@pytest.mark.corpus
@pytest.mark.parametrize('path', corpus.cases('nodepool configs (nodepool-configs/**/*.yaml)',
                                             lambda root: _corpus_files()),
                         ids=lambda p: os.path.relpath(p, CORPUS))
def test_corpus_config(path):
    with open(path) as f:
        doc = yaml.safe_load(f)
    issues = validate_config(path)
    messages = '\n'.join(str(i) for i in errors_of(issues))
    unsupported = _drivers_in(doc) - SUPPORTED
    for driver in unsupported:
        # Configs for drivers we do not have fail, naming them.
        assert f"driver '{driver}' is not supported" in messages, messages
    if os.path.basename(path) in VALID_CORPUS:
        assert not unsupported
        assert errors_of(issues) == [], messages
    else:
        # An unsupported driver, or a documentation fragment of a
        # provider's section: errors, each with its file and line.
        assert errors_of(issues), 'expected errors'
        assert all(i.path == path and i.line for i in errors_of(issues)), messages


@pytest.mark.corpus
def test_corpus_covers_both_outcomes():
    valid = [p for p in _corpus_files() if not errors_of(validate_config(p))]
    names = {os.path.basename(p) for p in valid}
    assert {'static.block01.yaml', 'configuration.block02.yaml',
            'nb01-test.opendev.org.yaml', 'nl01.opendev.org.yaml'} <= names
    assert 'fake.yaml' not in names


@pytest.mark.corpus
def test_static_doc_example_warns_about_undeclared_label():
    path = [p for p in _corpus_files() if os.path.basename(p) == 'static.block01.yaml']
    assert path, f'no static.block01.yaml under {CORPUS}'
    issues = validate_config(path[0])
    assert [i.severity for i in issues] == [WARNING]
    assert "'trusty-static'" in issues[0].message and issues[0].line == 5
    config = load_config(path[0])
    node = config.providers['static-rack'].pools['main'].settings['nodes'][0]
    assert node['connection-port'] == 22022 and node['host-key'] == ['fake-key']
    assert node['timeout'] == 13 and node['host-key-checking'] is True


def test_errors_name_file_line_and_place(tmp_path):
    path = tmp_path / 'nodepool.yaml'
    path.write_text('labels:\n  - name: a\nproviders:\n  - name: p\n    driver: netns\n'
                    '    pools:\n      - name: main\n        max-server: 3\n'
                    '        labels:\n          - name: a\n')
    issues = validate_config(str(path))
    assert len(issues) == 1
    issue = issues[0]
    assert issue.path == str(path) and issue.line == 8
    assert issue.where == 'providers[0].pools[0].max-server'
    assert "unknown key 'max-server'" in issue.message
    with pytest.raises(ConfigError) as e:
        load_config(str(path))
    assert f'{path}:8:' in str(e.value)


def test_every_unsupported_driver_is_named_and_openstack_is_the_default():
    for driver in ['ibmvpc', 'fake']:
        text = f'providers:\n  - name: p\n    driver: {driver}\n    pools: []\n'
        with pytest.raises(ConfigError) as e:
            load_config_text(text)
        assert f"driver '{driver}' is not supported" in str(e.value)
    assert 'openstack' not in UNSUPPORTED and 'openstack' in SUPPORTED
    # No driver key means openstack, as in released Nodepool.
    config = load_config_text('providers:\n  - name: cloud\n    cloud: x\n')
    assert config.providers['cloud'].driver == 'openstack'
    with pytest.raises(ConfigError,
                       match=r"unknown driver 'bogus' \(available: aws, azure, gce, "):
        load_config_text('providers:\n  - name: p\n    driver: bogus\n')


def test_duplicates_and_bad_values_are_errors():
    text = """
labels:
  - name: a
  - name: a
providers:
  - name: s
    driver: static
    pools:
      - name: main
        nodes:
          - name: h1
            labels: [a]
          - name: h1
            labels: a
  - name: n
    driver: netns
    subnet: not-a-subnet
    pools:
      - name: main
        labels: [{name: a}]
      - name: main
        labels: [{name: a}]
"""
    with pytest.raises(ConfigError) as e:
        load_config_text(text)
    message = str(e.value)
    assert "label 'a' is defined twice" in message
    assert 'static node h1 port 22 is defined twice' in message
    assert 'not a subnet' in message


def test_pool_labels_must_be_declared_or_warn():
    config = load_config_text("""
labels: [{name: a}]
providers:
  - name: sim
    driver: simulated
    pools:
      - name: main
        max-servers: 2
        labels: [{name: a}, {name: b}]
""")
    assert len(config.warnings) == 1
    assert "'b'" in config.warnings[0].message


def test_static_nodes_expand_to_slots():
    config = load_config_text("""
zookeeper-servers:
  - host: zk1
    port: 2281
    chroot: /nodepool
  - host: zk2
labels: [{name: a}, {name: b}]
providers:
  - name: rack
    driver: static
    pools:
      - name: main
        node-attributes: {rack: r1}
        nodes:
          - name: 192.0.2.5
            labels: [a, b]
            host-key: [ssh-ed25519 AAAA, ssh-rsa BBBB]
            host-key-checking: false
            max-parallel-jobs: 3
            connection-type: winrm
""")
    assert config.zookeeper_hosts() == 'zk1:2281,zk2:2181/nodepool'
    provider = config.providers['rack']
    adapter = default_registry().get('static').get_adapter(provider)
    hosts = adapter.static_hosts()
    assert [h.slot for h in hosts] == [0, 1, 2]
    assert hosts[0].labels == ['a', 'b'] and hosts[0].connection_port == 5986
    assert hosts[0].attributes == {'rack': 'r1'}
    assert adapter.scan_host_keys(hosts[0]) == ['ssh-ed25519 AAAA', 'ssh-rsa BBBB']
    assert adapter.quota().instances == 3


def test_not_yaml_and_not_a_mapping(tmp_path):
    bad = tmp_path / 'bad.yaml'
    bad.write_text('labels: [\n')
    issues = validate_config(str(bad))
    assert 'not valid YAML' in issues[0].message and issues[0].line
    assert 'cannot read' in validate_config(str(tmp_path / 'missing.yaml'))[0].message
    scalar = tmp_path / 'scalar.yaml'
    scalar.write_text('just a string\n')
    assert 'mapping of sections' in validate_config(str(scalar))[0].message


def test_config_validate_command(tmp_path, capsys):
    assert client.main(['-c', os.path.join(ROOT, 'etc', 'nodepool.yaml'),
                        'config-validate']) == 0
    assert 'configuration is valid' in capsys.readouterr().out
    path = tmp_path / 'cloud.yaml'
    path.write_text('providers:\n  - name: c\n    driver: ibmvpc\n    pools: []\n')
    assert client.main(['-c', str(path), 'config-validate']) == 1
    err = capsys.readouterr().err
    assert "driver 'ibmvpc' is not supported" in err and f'{path}:3' in err


def test_launch_timeout_on_a_static_provider_warns(tmp_path):
    path = tmp_path / 'nodepool.yaml'
    path.write_text('labels:\n  - name: a\nproviders:\n  - name: rack\n    driver: static\n'
                    '    launch-timeout: 60\n    pools:\n      - name: main\n'
                    '        nodes:\n          - name: host1\n            labels: [a]\n')
    issues = validate_config(str(path))
    assert [(i.severity, i.where) for i in issues] == [
        (WARNING, 'providers[0].launch-timeout')]
    assert 'never launched' in issues[0].message
    load_config(str(path))   # a warning, not an error
