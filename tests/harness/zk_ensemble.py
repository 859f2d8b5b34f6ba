"""A real three-member ZooKeeper ensemble per test, for tests of member
and quorum loss (the session-wide single server of
tests/harness/zookeeper.py serves every other test).

Import the fixture into a test module (``from tests.harness import
zk_ensemble as harness``, then ``zk_ensemble = harness.zk_ensemble``);
it is not a conftest plugin, as only the ensemble tests need it.
"""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from nodepool.zk.api import connect
from nodepool.zk.localserver import LocalZooKeeperEnsemble


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
