"""A real Gearman server (gear.Server) on a free loopback port."""

from __future__ import annotations

import pytest

from nodepool.zk.localserver import free_port
from zuul.lib.gearlib import GearServer


@pytest.fixture
def gearman_server():
    """A running GearServer; ``.port`` is where to connect."""
    port = free_port()
    server = GearServer(port=port, host='127.0.0.1')
    server.port = port
    try:
        yield server
    finally:
        server.shutdown()
