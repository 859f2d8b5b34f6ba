"""What every cloud stand-in does as a process of its own: read the keys
its nodes accept, say ``READY <port>`` once it listens, and serve until
SIGTERM or SIGINT (the fixture stopping it), then stop serving."""

from __future__ import annotations

import signal
import threading


def read_keys(path: str | None) -> list[str]:
    """The public keys in an authorized_keys file (none without one)."""
    if not path:
        return []
    with open(path) as f:
        return [line.strip() for line in f if line.strip()]


def serve_until_signalled(server, port: int, serving: bool = False) -> None:
    """Serve ``server`` on a thread (unless it already is, ``serving``),
    print READY and return once SIGTERM or SIGINT arrives and the server
    has shut down; the caller then stops its cloud."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    if not serving:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f'READY {port}', flush=True)
    stop.wait()
    server.shutdown()
