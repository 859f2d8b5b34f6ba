"""RPC calls made at the same time from many threads of one client (as
zuul-web does while serving several requests) each get their own answer."""

from __future__ import annotations

import threading
import time

from tests.harness.gearman import gearman_server  # noqa: F401 - fixture
from zuul.lib import rpc_protocol as p
from zuul.lib.rpc import RPCClient, RPCListener

CALLS_PER_THREAD = 25
THREADS = 8


def _echo(request: p.RPCRequest):
    # A short, varying delay so answers come back out of order.
    time.sleep((hash(request.project) % 3) / 1000)
    return {'project': request.project}


def test_concurrent_calls_get_their_own_answers(gearman_server):  # noqa: F811
    listeners = [RPCListener('127.0.0.1', gearman_server.port, {p.STATUS_GET: _echo},
                             name=f'echo-{i}') for i in range(3)]
    for listener in listeners:
        listener.start()
    client = RPCClient('127.0.0.1', gearman_server.port, timeout=60)
    wrong: list[tuple[str, object]] = []
    errors: list[BaseException] = []

    def caller(index: int) -> None:
        for call in range(CALLS_PER_THREAD):
            asked = f'org/p{index}-{call}'
            try:
                answer = client.call(p.STATUS_GET, p.RPCRequest(project=asked))
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
                return
            if answer != {'project': asked}:
                wrong.append((asked, answer))
    try:
        threads = [threading.Thread(target=caller, args=(i,)) for i in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        client.shutdown()
        for listener in listeners:
            listener.stop()
    assert not errors, errors[:3]
    assert not wrong, f'{len(wrong)} calls got another call\'s answer, e.g. {wrong[:3]}'
