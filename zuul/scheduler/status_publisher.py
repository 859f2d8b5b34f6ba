"""Publishing each tenant's status in ZooKeeper (zuul/zk/status.py).

The status is computed on the scheduler's thread (it reads the queues),
at most once per ``INTERVAL`` seconds and only after something was
processed: a thread asks for it with a ``status-publish`` management
event, never waiting for it, and asks again only once the previous one
was handled.  zuul-web reads what is published; the scheduler's cost no
longer grows with the number of open status pages.
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

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.dirty.set()
        self._thread.join(5)

    def changed(self) -> None:
        """The scheduler processed something (any thread)."""
        self.dirty.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.dirty.wait()
            if self._stop.is_set():
                return
            if not self._pending.is_set():
                self.dirty.clear()
                self._pending.set()
                self.scheduler.loop.add_management_event(
                    ManagementEvent('status-publish', publisher=self))
            self._stop.wait(self.interval)

    def publish(self) -> None:
        """On the scheduler's thread: every tenant's status, written."""
        from zuul.scheduler.status import tenant_status
        try:
            owns = getattr(self.scheduler, 'owns', lambda name: True)
            for name in list(self.scheduler.tenants):
                if not owns(name):
                    continue    # published by the scheduler holding it
                status = tenant_status(self.scheduler, name, self.scheduler.status_estimate(name),
                                       version=self.version)
                self.store.publish(name, status)
            self.published += 1
        except Exception:
            log.exception('Unable to publish the status in ZooKeeper')
        finally:
            self._pending.clear()
