"""Gearman over TLS: the embedded server with its certificate, and the
merger, the merge client and RPC speaking TLS with client certificates
from the same CA; clients without a certificate, or with one from
another CA, get nothing done."""

from __future__ import annotations

import textwrap

import gear
import pytest

from nodepool.zk.localserver import free_port
from tests.functional.test_merger_gearman import Results, queue_item
from tests.functional.test_merger_support import make_merger, upstream  # noqa: F401
from tests.harness.tls import TestCA
from zuul.configloader.zuulconf import ZuulConfError, load_zuul_conf
from zuul.lib.gearlib import GearClient, GearServer, GearTLS
from zuul.lib.rpc import RPCClient, RPCListener
from zuul.merger.client import MergeClient
from zuul.merger.server import MergeServer


@pytest.fixture
def tls_server(tmp_path):
    ca = TestCA(str(tmp_path / 'pki'))
    server_files = ca.issue('gearman-server')
    port = free_port()
    server = GearServer(port=port, host='127.0.0.1',
                        tls=GearTLS(server_files.ca, server_files.cert, server_files.key))
    try:
        yield server, port, ca
    finally:
        server.shutdown()


def _tls(files) -> GearTLS:
    return GearTLS(files.ca, files.cert, files.key)


def test_merger_and_client_over_tls(tls_server, make_merger, upstream):  # noqa: F811
    server, port, ca = tls_server
    upstream.create('org/project', {'a.txt': 'a\n'})
    upstream.add_change('org/project', 1, {'b.txt': 'b\n'})
    merger = MergeServer([('127.0.0.1', port)], make_merger(), tls=_tls(ca.issue('merger')))
    merger.start()
    client = MergeClient('127.0.0.1', port, tls=_tls(ca.issue('scheduler')))
    try:
        results = Results()
        client.merge_items([queue_item('org/project', 1)], results)
        assert results.wait().merged
    finally:
        client.stop()
        merger.stop()


def test_rpc_over_tls(tls_server):
    server, port, ca = tls_server
    listener = RPCListener('127.0.0.1', port, {'zuul:ping': lambda request: {'pong': True}},
                           tls=_tls(ca.issue('scheduler')))
    listener.start()
    client = RPCClient('127.0.0.1', port, timeout=30, tls=_tls(ca.issue('cli')))
    try:
        assert client.call('zuul:ping') == {'pong': True}
    finally:
        client.shutdown()
        listener.stop()


@pytest.mark.parametrize('how', ['plain', 'other-ca'])
def test_clients_without_a_trusted_certificate_get_no_connection(tls_server, tmp_path, how):
    server, port, ca = tls_server
    client = GearClient('intruder')
    if how == 'plain':
        client.addServer('127.0.0.1', port)
    else:
        other = TestCA(str(tmp_path / 'other'), 'other-ca').issue('intruder')
        client.addServer('127.0.0.1', port, **_tls(other).kwargs())
    try:
        # A plain client's TCP connection is accepted, then the handshake
        # fails: either way no job gets to the server.
        with pytest.raises((gear.TimeoutError, gear.NoConnectedServersError, OSError)):
            client.waitForServer(timeout=3)
            client.submitJob(gear.TextJob('zuul:ping', '{}'), timeout=3)
    finally:
        client.shutdown()
    # ... and the server goes on accepting trusted clients
    good = RPCClient('127.0.0.1', port, timeout=5, tls=_tls(ca.issue('good')))
    good.shutdown()


def test_a_silent_connection_does_not_block_the_server(tls_server, monkeypatch):
    import socket

    from zuul.lib import gearlib
    server, port, ca = tls_server
    monkeypatch.setattr(gearlib, 'HANDSHAKE_TIMEOUT', 1.0)
    silent = socket.create_connection(('127.0.0.1', port))   # never says a word
    try:
        client = RPCClient('127.0.0.1', port, timeout=5, tls=_tls(ca.issue('client')))
        client.shutdown()
    finally:
        silent.close()


def test_zuul_conf_tls_keys_go_together_and_must_exist(tmp_path):
    ca = TestCA(str(tmp_path / 'pki'))
    files = ca.issue('client')
    conf = tmp_path / 'zuul.conf'
    conf.write_text(textwrap.dedent(f"""
        [gearman]
        server = 127.0.0.1
        ssl_ca = {files.ca}
        ssl_cert = {files.cert}
        ssl_key = {files.key}
        """))
    loaded = load_zuul_conf(str(conf))
    assert GearTLS.of(loaded.gearman) == GearTLS(files.ca, files.cert, files.key)
    assert GearTLS.of(loaded.gearman_server) is None
    conf.write_text(f'[gearman_server]\nstart = true\nssl_cert = {files.cert}\n')
    with pytest.raises(ZuulConfError, match=r'\[gearman_server\] TLS needs .*missing ssl_ca, '
                                            r'ssl_key'):
        load_zuul_conf(str(conf))
    conf.write_text(f'[gearman]\nssl_ca = {files.ca}\nssl_cert = {files.cert}\n'
                    f'ssl_key = {tmp_path}/nope.key\n')
    with pytest.raises(ZuulConfError, match=r'\[gearman\] ssl_key: .*nope.key does not exist'):
        load_zuul_conf(str(conf))
