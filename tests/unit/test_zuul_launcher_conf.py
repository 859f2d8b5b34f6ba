"""zuul.conf for zuul-launcher: the [launcher] section, provider
connections, the command line."""

from __future__ import annotations

import textwrap

from zuul.cmd import launcher as cmd
from zuul.configloader.zuulconf import load_zuul_conf
from zuul.driver.registry import default_registry
from zuul.launcher.provider_loop import provider_lock_path, static_node_id

CONF = """
[zookeeper]
hosts = 127.0.0.1:1

[launcher]
connections = cloud1, null
poll_interval = 0.2
lock_hold = 5

[connection cloud1]
driver = openstack
cloud = example
region = RegionOne
rate = 1.0

[connection sim]
driver = simulated
state-dir = /tmp/sim

[connection review]
driver = gerrit
server = review.example.org
user = zuul
"""


def write(tmp_path, text=CONF) -> str:
    path = tmp_path / 'zuul.conf'
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_launcher_section_and_provider_connections(tmp_path):
    conf = load_zuul_conf(write(tmp_path), default_registry())
    assert conf.launcher.connection_names() == {'cloud1', 'null'}
    assert conf.launcher.poll_interval == 0.2 and conf.launcher.lock_hold == 5
    assert conf.connections['cloud1'].driver == 'openstack'
    assert conf.connections['cloud1'].options['cloud'] == 'example'
    assert conf.connections['sim'].options['state-dir'] == '/tmp/sim'


def test_no_launcher_section_means_every_connection(tmp_path):
    conf = load_zuul_conf(write(tmp_path, '[zookeeper]\nhosts = 127.0.0.1:1\n'),
                          default_registry())
    assert conf.launcher.connection_names() is None
    assert conf.launcher.lock_hold == 30.0


def test_provider_connections_have_no_trigger_or_source():
    registry = default_registry()
    for name in ('openstack', 'static', 'netns', 'simulated'):
        driver = registry.get(name)
        assert not hasattr(driver, 'get_connection')
        assert not hasattr(driver, 'get_trigger_schema')


def test_connections_option_must_name_known_connections(tmp_path, capsys):
    assert cmd.main(['-c', write(tmp_path), '-d', '--connections', 'cloud1,nope']) == 2
    assert 'nope' in capsys.readouterr().err


def test_bad_zuul_conf_is_refused(tmp_path, capsys):
    path = write(tmp_path, '[launcher]\npoll_interval = often\n')
    assert cmd.main(['-c', path, '-d']) == 2
    assert 'poll_interval' in capsys.readouterr().err


def test_static_node_ids_are_stable_and_distinct():
    one = static_node_id('p', 'host.example.org', 22, 0)
    assert one == static_node_id('p', 'host.example.org', 22, 0)
    assert len({one, static_node_id('p', 'host.example.org', 22, 1),
                static_node_id('p', 'host.example.org', 2222, 0),
                static_node_id('q', 'host.example.org', 22, 0)}) == 4


def test_provider_lock_path_quotes_the_canonical_name():
    assert provider_lock_path('review.example.org/org/config/sim') == \
        '/zuul/provider/review.example.org%2Forg%2Fconfig%2Fsim'
