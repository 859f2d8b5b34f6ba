"""ZooKeeper fixtures: one real server per test session (or the one named by
$TEST_ZOOKEEPER_HOSTS), a chroot per test, and fault injection."""

from __future__ import annotations

import os
import socket
import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from nodepool.zk.localserver import LocalZooKeeper
from tests.harness.waiting import Signal

ENV_HOSTS = 'TEST_ZOOKEEPER_HOSTS'


@pytest.fixture(scope='session')
def zookeeper_server(tmp_path_factory):
    """host:port of a running ZooKeeper for the whole session."""
    hosts = os.environ.get(ENV_HOSTS)
    if hosts:
        yield hosts
        return
    server = LocalZooKeeper(base_dir=str(tmp_path_factory.mktemp('zookeeper')))
    server.start()
    try:
        yield server.hosts
    finally:
        server.stop()


class ZooKeeperChroot:
    """A private chroot for one test, with fault injection helpers."""

    def __init__(self, server_hosts: str):
        self.server_hosts = server_hosts
        self.chroot = f'/test-{uuid.uuid4().hex[:12]}'
        self.hosts = f'{server_hosts}{self.chroot}'
        self._clients: list[KazooClient] = []
        admin = KazooClient(server_hosts)
        admin.start(timeout=30)
        admin.ensure_path(self.chroot)
        admin.stop()
        admin.close()

    def client(self, timeout: float = 10.0, **kw) -> KazooClient:
        """A started client rooted in this test's chroot."""
        kw.setdefault('timeout', timeout)
        client = KazooClient(self.hosts, **kw)
        client.start(timeout=30)
        self._clients.append(client)
        return client

    def expire_session(self, client: KazooClient, timeout: float = 30.0) -> None:
        """Expire ``client``'s session on the server (a real expiry: its
        ephemeral nodes and locks vanish) and wait until it has noticed."""
        lost = Signal()
        client.add_listener(lambda state: lost.set() if state == KazooState.LOST else None)
        session_id, password = client.client_id
        # Closing a second connection that uses the same session id and
        # password ends the session on the server: the original owner then
        # sees it expire, exactly as after a long network partition.
        killer = KazooClient(self.server_hosts, client_id=(session_id, password))
        killer.start(timeout=30)
        killer.stop()
        killer.close()
        if not lost.wait(timeout):
            raise TimeoutError('session did not expire')

    def drop_connection(self, client: KazooClient) -> None:
        """Cut the client's TCP connection; the session survives and kazoo
        reconnects (SUSPENDED then CONNECTED)."""
        sock = client._connection._socket
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        for c in self._clients:
            try:
                c.stop()
                c.close()
            except Exception:
                pass
        admin = KazooClient(self.server_hosts)
        admin.start(timeout=30)
        try:
            admin.delete(self.chroot, recursive=True)
        except Exception:
            pass
        admin.stop()
        admin.close()


@pytest.fixture
def zk_chroot(zookeeper_server):
    """A per-test chroot: ``.hosts`` for daemons, ``.client()`` for the test."""
    chroot = ZooKeeperChroot(zookeeper_server)
    try:
        yield chroot
    finally:
        chroot.close()


@pytest.fixture
def zk_client(zk_chroot):
    """A started KazooClient in the test's chroot."""
    return zk_chroot.client()
