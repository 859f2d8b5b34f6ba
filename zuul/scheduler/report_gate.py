"""Reports that go out once their write-ahead landed, off the loop.

Before a report goes out, the pipeline's state is saved with the report
marked as being sent (so a scheduler restored from it knows; the
write-ahead). When every reporter of the report sends it off the loop
(its connection's report workers), the loop does not wait for that save:
it sends the write and hands the report's submission to this gate, whose
one thread submits each report once its write-ahead landed, in the order
the loop asked. ZooKeeper answers one session's writes in order, so
waiting in order costs nothing extra.

A write-ahead that did not land (ZooKeeper away) lets the report go all
the same, as a failed write-ahead on the loop did; ``stop()`` submits
what is queued before it returns.
"""

from __future__ import annotations

import collections
import logging
import threading

log = logging.getLogger('zuul.scheduler.report_gate')

# How long a report waits for its write-ahead before it goes anyway.
LAND_TIMEOUT = 60.0


class ReportGate:
    def __init__(self):
        self._queue: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._running = True
        self._busy = False
        self._thread = threading.Thread(target=self._run, name='report-gate', daemon=True)
        self._thread.start()

    def put(self, landed: threading.Event, submit, on_error=None) -> None:
        """``submit()`` once ``landed`` is set (after those put before);
        ``on_error()`` if it raises."""
        with self._cond:
            if not self._running:
                landed.wait(LAND_TIMEOUT)
                self._call(submit, on_error)
                return
            self._queue.append((landed, submit, on_error))
            self._cond.notify_all()

    def pending(self) -> int:
        with self._cond:
            return len(self._queue) + self._busy

    def stop(self, timeout: float = LAND_TIMEOUT + 5) -> None:
        with self._cond:
            self._running = False
            self._cond.notify_all()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._running and not self._queue:
                    self._cond.wait()
                if not self._queue:
                    return
                landed, submit, on_error = self._queue.popleft()
                self._busy = True
            try:
                if not landed.wait(LAND_TIMEOUT):
                    log.warning('Report sent without its write-ahead after %.0f s',
                                LAND_TIMEOUT)
                self._call(submit, on_error)
            finally:
                with self._cond:
                    self._busy = False

    @staticmethod
    def _call(submit, on_error) -> None:
        try:
            submit()
        except Exception:
            log.exception('Unable to submit a report')
            if on_error is not None:
                on_error()
