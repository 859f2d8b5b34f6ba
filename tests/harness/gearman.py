"""A real Gearman server (GearServer) on a free loopback port, which a test
can stop and start again on the same port (a server restart)."""

from __future__ import annotations

import pytest

from nodepool.zk.localserver import free_port
from tests.harness.waiting import wait_for
from zuul.lib.gearlib import GearServer


class GearmanService:
    """A GearServer on ``host:port`` that survives being restarted:
    ``stop()`` closes every connection as a dying server would, ``start()``
    listens on the same port again.  Other attributes are the running
    server's."""

    def __init__(self, port: int | None = None, host: str = '127.0.0.1'):
        self.port = port or free_port()
        self.host = host
        self.server: GearServer | None = None
        self.restarts = 0
        self.start()

    def start(self) -> None:
        assert self.server is None, 'already running'
        self.server = GearServer(port=self.port, host=self.host)

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server = None

    def restart(self, down=None) -> None:
        """Stop, call ``down()`` (if given) while no server runs, start."""
        self.stop()
        if down is not None:
            down()
        self.start()
        self.restarts += 1

    def registered(self) -> dict[str, int]:
        """Function name -> how many connections (workers) can do it."""
        counts: dict[str, int] = {}
        server = self.server
        for conn in list(server.active_connections) if server else ():
            for name in list(getattr(conn, 'functions', ())):
                name = name.decode('utf8') if isinstance(name, bytes) else name
                counts[name] = counts.get(name, 0) + 1
        return counts

    def wait_registered(self, functions, timeout: float = 30.0) -> None:
        """Until every one of ``functions`` has a worker on this server
        (workers reconnect on their own schedule, seen only from here)."""
        wanted = set(functions)
        wait_for(lambda: wanted <= set(self.registered()), timeout=timeout,
                 what=f'workers registering {sorted(wanted)}')

    def __getattr__(self, name):
        server = self.__dict__.get('server')
        if server is None:
            raise AttributeError(f'{name}: the Gearman server is stopped')
        return getattr(server, name)


@pytest.fixture
def gearman_server():
    """A running GearmanService; ``.port`` is where to connect and
    ``.restart()`` restarts it on that port."""
    service = GearmanService()
    try:
        yield service
    finally:
        service.stop()
