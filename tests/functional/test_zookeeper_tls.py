"""ZooKeeper over TLS with client certificates: a real ZooKeeper serving
TLS (Netty, PEM key and trust stores), reached by the scheduler's
settings from zuul.conf and by Nodepool's ``zookeeper-tls``; clients
without a certificate from the server's CA are refused."""

from __future__ import annotations

import textwrap

import pytest
from kazoo.handlers.threading import KazooTimeoutError

from nodepool.config import load_config_text
from nodepool.zk.api import NodepoolZooKeeper, connect
from nodepool.zk.localserver import LocalZooKeeper
from tests.harness.tls import TestCA
from zuul.configloader.zuulconf import ZuulConfError, load_zuul_conf


@pytest.fixture(scope='module')
def tls_zookeeper(tmp_path_factory):
    pki = tmp_path_factory.mktemp('pki')
    ca = TestCA(str(pki))
    server = ca.issue('zookeeper')
    keystore = pki / 'zookeeper-keystore.pem'
    keystore.write_text(open(server.key).read() + open(server.cert).read())
    zk = LocalZooKeeper(base_dir=str(tmp_path_factory.mktemp('zk')),
                        tls=(str(keystore), server.ca))
    zk.start()
    try:
        yield zk, ca, pki
    finally:
        zk.stop()


def test_zuul_conf_tls_reaches_a_tls_zookeeper(tls_zookeeper, tmp_path):
    zk, ca, _ = tls_zookeeper
    files = ca.issue('scheduler')
    conf = tmp_path / 'zuul.conf'
    conf.write_text(textwrap.dedent(f"""
        [zookeeper]
        hosts = {zk.secure_hosts}
        tls_cert = {files.cert}
        tls_key = {files.key}
        tls_ca = {files.ca}
        """))
    settings = load_zuul_conf(str(conf)).zookeeper
    client = NodepoolZooKeeper.from_hosts(settings.hosts, tls=settings.tls())
    try:
        client.client.ensure_path('/zuul/tls-check')
        assert 'tls-check' in client.client.get_children('/zuul')
    finally:
        client.close()


def test_nodepool_zookeeper_tls_reaches_a_tls_zookeeper(tls_zookeeper):
    zk, ca, _ = tls_zookeeper
    files = ca.issue('launcher')
    host, port = zk.secure_hosts.split(':')
    config = load_config_text(textwrap.dedent(f"""
        zookeeper-servers:
          - host: {host}
            port: {port}
        zookeeper-tls:
          cert: {files.cert}
          key: {files.key}
          ca: {files.ca}
        labels: []
        providers: []
        """))
    client = connect(config.zookeeper_hosts(), tls=config.zookeeper_tls)
    try:
        client.ensure_path('/nodepool/tls-check')
    finally:
        client.stop()
        client.close()


def test_clients_without_a_trusted_certificate_are_refused(tls_zookeeper, tmp_path):
    zk, ca, _ = tls_zookeeper
    with pytest.raises(KazooTimeoutError):
        connect(zk.secure_hosts, start_timeout=3)
    stranger = TestCA(str(tmp_path / 'other'), 'other-ca').issue('stranger')
    with pytest.raises(KazooTimeoutError):
        connect(zk.secure_hosts, start_timeout=3,
                tls={'cert': stranger.cert, 'key': stranger.key, 'ca': ca.ca_path})


def test_zookeeper_tls_keys_go_together(tmp_path):
    conf = tmp_path / 'zuul.conf'
    conf.write_text(f'[zookeeper]\nhosts = 127.0.0.1:2281\ntls_cert = {tmp_path}/c.pem\n')
    with pytest.raises(ZuulConfError, match=r'\[zookeeper\] TLS needs tls_ca, tls_cert and '
                                            r'tls_key together; missing tls_ca, tls_key'):
        load_zuul_conf(str(conf))
