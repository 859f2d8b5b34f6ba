"""zuul.conf in the released format, parsed into typed settings."""

import textwrap

import pytest

from zuul.configloader.zuulconf import ZuulConfError, load_zuul_conf
from zuul.driver.registry import DriverRegistry

SAMPLE = '''
[gearman]
server=gear.example.com
port=4731

[gearman_server]
start=true

[zookeeper]
hosts=zk1:2181,zk2:2181
session_timeout=40
tls_ca=ssl/ca.pem
tls_cert=ssl/zuul.pem
tls_key=ssl/zuul.key

[scheduler]
tenant_config=main.yaml
state_dir=~/state

[executor]
load_multiplier=4.5
private_key_file=/keys/id

[web]
port=9001

[database]
dburi=sqlite:////tmp/x.db

[connection review]
driver=gerrit
server=review.example.com
user=zuul

[connection opendev]
driver=git
baseurl=https://opendev.org
'''


def _write(tmp_path, text):
    path = tmp_path / 'zuul.conf'
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_sample_parses_with_types_defaults_and_paths(tmp_path):
    (tmp_path / 'ssl').mkdir()
    for name in ('ca.pem', 'zuul.pem', 'zuul.key'):
        (tmp_path / 'ssl' / name).write_text('pem\n')
    conf = load_zuul_conf(_write(tmp_path, SAMPLE))
    assert conf.gearman.server == 'gear.example.com' and conf.gearman.port == 4731
    assert conf.gearman_server.start is True
    assert conf.zookeeper.hosts == 'zk1:2181,zk2:2181'
    assert conf.zookeeper.session_timeout == 40.0
    assert conf.zookeeper.tls_ca == str(tmp_path / 'ssl' / 'ca.pem')
    assert conf.zookeeper.tls() == {'cert': str(tmp_path / 'ssl' / 'zuul.pem'),
                                    'key': str(tmp_path / 'ssl' / 'zuul.key'),
                                    'ca': str(tmp_path / 'ssl' / 'ca.pem')}
    assert conf.scheduler.tenant_config == str(tmp_path / 'main.yaml')
    assert not conf.scheduler.state_dir.startswith('~')
    assert conf.executor.load_multiplier == 4.5 and conf.executor.default_username == 'zuul'
    assert conf.web.port == 9001 and conf.web.listen_address == '127.0.0.1'
    assert conf.merger.git_dir == '/var/lib/zuul/merger-git'
    assert conf.connections['review'].driver == 'gerrit'
    assert conf.connections['review'].options['server'] == 'review.example.com'
    assert conf.connections['opendev'].options == {'baseurl': 'https://opendev.org'}


def test_shipped_sample_parses(tmp_path):
    """The sample, with its certificate files present, parses; it reaches
    ZooKeeper over TLS and sets a keystore password (the scheduler refuses
    to start without one)."""
    import pathlib

    from zuul.lib.tlsgen import LocalCA
    sample = pathlib.Path(__file__).resolve().parents[2] / 'etc' / 'zuul.conf'
    files = LocalCA(str(tmp_path / 'ssl')).issue('zk-client')
    text = sample.read_text()
    for name, path in (('zk-client.pem', files.cert), ('zk-client.key', files.key),
                       ('zk-ca.pem', files.ca)):
        text = text.replace(f'/etc/zuul/ssl/{name}', path)
    conf = load_zuul_conf(_write(tmp_path, text))
    assert set(conf.connections) == {'review', 'opendev', 'smtp'}
    assert conf.zookeeper.tls() and conf.zookeeper.hosts == '127.0.0.1:2281'
    assert conf.keystore.password


@pytest.mark.parametrize('text,message', [
    ('[gearman]\nport=many\n', '[gearman] port: "many" is not an integer'),
    ('[gearman_server]\nstart=perhaps\n', 'is not a boolean'),
    ('[connection x]\nserver=a\n', '[connection x] has no "driver"'),
])
def test_bad_values_name_section_and_key(tmp_path, text, message):
    with pytest.raises(ZuulConfError) as e:
        load_zuul_conf(_write(tmp_path, text))
    assert message in str(e.value) and 'zuul.conf' in str(e.value)


def test_unknown_driver_with_a_registry(tmp_path):
    class Fake:
        name = 'gerrit'

        def connection_schema(self):
            return None
    path = _write(tmp_path, '[connection gh]\ndriver=github\n')
    with pytest.raises(ZuulConfError, match='unknown driver "github"'):
        load_zuul_conf(path, DriverRegistry([Fake()]))


def test_missing_file(tmp_path):
    with pytest.raises(ZuulConfError, match='no such file'):
        load_zuul_conf(str(tmp_path / 'nope.conf'))


def test_quoted_connection_names_as_the_released_docs_write_them(tmp_path):
    from zuul.configloader.zuulconf import load_zuul_conf
    path = tmp_path / 'zuul.conf'
    path.write_text('[connection "review"]\ndriver = gerrit\nserver = review.example.org\n'
                    'user = zuul\n')
    conf = load_zuul_conf(str(path))
    assert list(conf.connections) == ['review']
