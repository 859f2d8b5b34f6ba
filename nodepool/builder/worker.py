"""What the builder's threads share: a pass loop woken by events, and
tickets to wait for a full pass."""

from __future__ import annotations

import logging
import threading

log = logging.getLogger('nodepool.builder')


class PassTicker:
    """Lets a caller wait for a full worker pass that began after it asked."""

    def __init__(self):
        self._lock = threading.Lock()
        self.requested = 0
        self.completed = 0

    def request(self) -> int:
        with self._lock:
            self.requested += 1
            return self.requested

    def begin(self) -> int:
        with self._lock:
            return self.requested

    def done(self, ticket: int) -> None:
        with self._lock:
            self.completed = max(self.completed, ticket)


class Worker(threading.Thread):
    """A builder thread that does a pass, then sleeps until woken or
    its interval has passed."""

    interval_name = ''
    ticker_name = ''

    def __init__(self, builder, name: str):
        super().__init__(daemon=True, name=name)
        self.builder = builder
        self.wake_event = threading.Event()

    def wake(self) -> None:
        self.wake_event.set()

    def run(self) -> None:
        ticker: PassTicker = getattr(self.builder, self.ticker_name)
        interval = getattr(self.builder.settings, self.interval_name)
        while self.builder.running:
            self.wake_event.clear()
            ticket = ticker.begin()
            try:
                self.run_pass()
            except Exception:
                log.exception('%s: pass failed', self.name)
            ticker.done(ticket)
            self.builder.notify_changed()
            if not self.builder.running:
                break
            self.wake_event.wait(interval)

    def run_pass(self) -> None:
        raise NotImplementedError
