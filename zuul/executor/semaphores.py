"""Playbook semaphores, as the executor takes them.

A playbook entry's ``semaphores`` are held only while that playbook
runs.  The scheduler counts them with the jobs' semaphores
(zuul/scheduler/semaphores.py); the executor asks it over Gearman RPC
(``zuul:semaphore_acquire``, all or none) before the playbook, every
``RETRY_INTERVAL`` seconds while they are held elsewhere, and gives them
back (``zuul:semaphore_release``) once the playbook ended, whatever its
outcome.  Like zuul-web, the executor meets the scheduler only over
Gearman: it imports the RPC wire contract and client, nothing else of
the scheduler.
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger('zuul.executor.semaphores')

RETRY_INTERVAL = 2.0


class SemaphoreClient:
    """Acquire/release calls to the scheduler, over one RPC client made
    on first use (``rpc`` may be given: anything with ``call``)."""

    def __init__(self, host: str | None = None, port: int | None = None, tls=None,
                 rpc=None, timeout: float = 60.0):
        self._address = (host, port)
        self._tls = tls
        self._rpc = rpc
        self._timeout = timeout
        self._lock = threading.Lock()

    def _client(self):
        with self._lock:
            if self._rpc is None:
                from zuul.lib.rpc import RPCClient
                host, port = self._address
                self._rpc = RPCClient(host, port, timeout=self._timeout,
                                      name='zuul-executor-semaphores', tls=self._tls)
            return self._rpc

    def acquire(self, tenant: str, build: str, playbook: str, names) -> list[str]:
        """Take ``names`` for this playbook: [] when held now, else the
        names held elsewhere.  RPCError/TimeoutError when the scheduler
        cannot be asked."""
        from zuul.lib import rpc_protocol as p
        answer = self._client().call(p.SEMAPHORE_ACQUIRE, p.RPCRequest(
            tenant=tenant, build=build, playbook=playbook, semaphores=list(names)))
        if answer.get('acquired'):
            return []
        return list(answer.get('waiting_for') or names)

    def release(self, tenant: str, build: str, playbook: str) -> bool:
        from zuul.lib import rpc_protocol as p
        answer = self._client().call(p.SEMAPHORE_RELEASE, p.RPCRequest(
            tenant=tenant, build=build, playbook=playbook))
        return bool(answer.get('released'))

    def shutdown(self) -> None:
        with self._lock:
            if self._rpc is not None and hasattr(self._rpc, 'shutdown'):
                self._rpc.shutdown()


def wait_for_semaphores(client: SemaphoreClient, tenant: str, build: str, playbook: str,
                        names, should_stop, announce, deadline: float | None = None,
                        interval: float = RETRY_INTERVAL, sleep=None) -> str:
    """Ask until the semaphores are held: ``'acquired'``, or
    ``'stopped'`` once ``should_stop()`` is true, or ``'timed_out'`` past
    ``deadline`` (a monotonic time).  ``announce(text)`` tells the
    console once that the playbook waits (and why, again, if that
    changes).  ``sleep(seconds)`` waits between tries."""
    sleep = sleep or time.sleep
    said = None
    while True:
        if should_stop():
            return 'stopped'
        try:
            waiting = client.acquire(tenant, build, playbook, names)
            reason = ', '.join(waiting)
        except Exception as exc:  # scheduler away: keep asking
            log.warning('Build %s: cannot ask for semaphores: %s', build, exc)
            waiting, reason = list(names), 'the scheduler to answer'
        if not waiting:
            return 'acquired'
        if reason != said:
            announce(f'Waiting for semaphore {reason}')
            said = reason
        if deadline is not None and time.monotonic() + interval > deadline:
            return 'timed_out'
        sleep(interval)
