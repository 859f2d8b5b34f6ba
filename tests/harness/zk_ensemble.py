"""A real three-member ZooKeeper ensemble per test, for tests of member
and quorum loss (the session-wide single server of
tests/harness/zookeeper.py serves every other test).

Import the fixture into a test module (``zk_ensemble =
zk_ensemble_fixture.zk_ensemble``); it is not a conftest plugin because
only the ensemble tests pay for three JVMs.
"""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from nodepool.zk.api import connect
from nodepool.zk.localserver import LocalZooKeeperEnsemble
from tests.harness.waiting import Signal


class EnsembleFixture:
    """The running ensemble (``.ensemble``), its ``hosts`` string, and
    clients the test can watch through outages."""

    def __init__(self, ensemble: LocalZooKeeperEnsemble):
        self.ensemble = ensemble
        self._clients: list[KazooClient] = []

    @property
    def hosts(self) -> str:
        return self.ensemble.hosts

    def client(self, timeout: float = 10.0, **kw) -> KazooClient:
        """A started client that knows every member (made as the daemons
        make theirs)."""
        return self.adopt(connect(self.hosts, timeout=timeout, **kw))

    def adopt(self, client: KazooClient) -> KazooClient:
        """Close ``client`` with the fixture."""
        self._clients.append(client)
        return client

    def member_of(self, client: KazooClient) -> int | None:
        """The index of the member ``client`` is connected to now."""
        connection = client._connection
        sock = getattr(connection, '_socket', None)
        if sock is None:
            return None
        try:
            port = sock.getpeername()[1]
        except OSError:
            return None
        for index, member in enumerate(self.ensemble.members):
            if member.port == port:
                return index
        return None

    def close(self) -> None:
        for client in self._clients:
            try:
                client.stop()
                client.close()
            except Exception:
                pass


class SessionWatch:
    """Records a client's session states (SUSPENDED, CONNECTED, LOST)."""

    def __init__(self, client: KazooClient):
        self.states: list[str] = []
        self.lost = Signal()
        self.suspended = Signal()
        self.reconnected = Signal()
        client.add_listener(self._listen)

    def _listen(self, state) -> None:
        self.states.append(state)
        if state == KazooState.LOST:
            self.lost.set()
        elif state == KazooState.SUSPENDED:
            self.suspended.set()
        elif state == KazooState.CONNECTED:
            self.reconnected.set()


@pytest.fixture
def zk_ensemble(tmp_path):
    """A fresh three-member ensemble (about 1.5 s to start here)."""
    ensemble = LocalZooKeeperEnsemble(base_dir=str(tmp_path / 'zk-ensemble'), size=3)
    ensemble.start()
    fixture = EnsembleFixture(ensemble)
    try:
        yield fixture
    finally:
        fixture.close()
        ensemble.stop()
