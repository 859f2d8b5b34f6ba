"""Publishing each tenant's status in ZooKeeper (zuul/zk/status.py).

The status is computed on the scheduler's thread (it reads the queues),
at most once per ``INTERVAL`` seconds and only after something was
processed: a thread asks for it with a ``status-publish`` management
event, never waiting for it, and asks again only once the previous one
was handled.  Only computing the status runs on the scheduler's thread:
encoding and writing it to ZooKeeper is this publisher's thread's work.
zuul-web reads what is published; the scheduler's cost no longer grows
with the number of open status pages.
"""

from __future__ import annotations

import logging
import threading

from zuul.model.events import ManagementEvent

log = logging.getLogger('zuul.scheduler.status_publisher')

INTERVAL = 1.0


class StatusPublisher:
    def __init__(self, scheduler, store, version: str = '', interval: float = INTERVAL):
        self.scheduler = scheduler
        self.store = store
        self.version = version
        self.interval = interval
        self.dirty = threading.Event()
        self.dirty.set()
        self._pending = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name='status-publisher',
                                        daemon=True)
        self.published = 0
        # Statuses computed on the scheduler's thread, waiting to be written.
        self._computed: list[tuple[str, dict]] | None = None
        self._ready = threading.Event()
        self._lock = threading.Lock()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.dirty.set()
        self._ready.set()
        self._thread.join(5)

    def changed(self) -> None:
        """The scheduler processed something (any thread)."""
        self.dirty.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.dirty.wait()
            if self._stop.is_set():
                return
            self.dirty.clear()
            self._pending.set()
            self.scheduler.loop.add_management_event(
                ManagementEvent('status-publish', publisher=self))
            # The loop computes it (publish), this thread writes it.
            self._ready.wait()
            self._ready.clear()
            self._write()
            self._stop.wait(self.interval)

    def publish(self) -> None:
        """On the scheduler's thread: every tenant's status, computed and
        handed to the publisher's thread to write."""
        from zuul.scheduler.status import tenant_status
        computed = []
        try:
            owns = getattr(self.scheduler, 'owns', lambda name: True)
            for name in list(self.scheduler.tenants):
                if not owns(name):
                    continue    # published by the scheduler holding it
                computed.append((name, tenant_status(
                    self.scheduler, name, self.scheduler.status_estimate(name),
                    version=self.version)))
        except Exception:
            log.exception('Unable to compute the status')
            computed = None
        with self._lock:
            self._computed = computed
        self._ready.set()   # the publisher's thread writes it

    def _write(self) -> None:
        with self._lock:
            computed, self._computed = self._computed, None
        if computed is None:
            self._pending.clear()
            return
        try:
            for name, status in computed:
                self.store.publish(name, status)
            self.published += 1
        except Exception:
            log.exception('Unable to publish the status in ZooKeeper')
        finally:
            self._pending.clear()
