"""One thread that runs the work put to it, in the order it was put.

For what the scheduler's loop hands off and must not wait for, yet must
happen in order: build history writes (zuul/driver/sql/writer.py),
reports waiting for their write-ahead (zuul/scheduler/report_gate.py).
``stop()`` runs what was put before it, then ends the thread; work put
after the stop runs on the caller's thread (nothing would run it later).
"""

from __future__ import annotations

import collections
import logging
import threading

log = logging.getLogger('zuul.lib.ordered_worker')


class OrderedWorker:
    def __init__(self, name: str):
        self._queue: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._asked = 0      # callables put
        self._done = 0       # callables run (returned or raised)
        self._running = True
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, work) -> None:
        """``work()`` on the worker thread, after what was put before."""
        with self._cond:
            inline = not self._running
            if not inline:
                self._asked += 1
                self._queue.append(work)
                self._cond.notify_all()
        if inline:
            self._call(work)

    def pending(self) -> int:
        """Put and not yet run (or running)."""
        with self._cond:
            return self._asked - self._done

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything put so far has run; False if ``timeout``
        passed first. From the worker thread itself: at once."""
        if threading.current_thread() is self._thread:
            return True
        with self._cond:
            target = self._asked
            return self._cond.wait_for(lambda: self._done >= target, timeout)

    def stop(self, timeout: float | None = None) -> bool:
        """Run what was put, then end the thread; False if it was still
        running after ``timeout``."""
        with self._cond:
            self._running = False
            self._cond.notify_all()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._running and not self._queue:
                    self._cond.wait()
                if not self._queue:
                    return
                work = self._queue.popleft()
            try:
                self._call(work)
            finally:
                with self._cond:
                    self._done += 1
                    self._cond.notify_all()

    @staticmethod
    def _call(work) -> None:
        try:
            work()
        except Exception:
            log.exception('Error in work handed to %s', threading.current_thread().name)


class ReportWorker:
    """For a connection whose reports the scheduler's loop must not wait
    for (an SMTP server, another database): its own ordered thread, made
    at first use. ``workers_busy()`` is what the scheduler counts as work
    outstanding; ``stop_reports()`` sends what is queued, then reports
    run on the caller's thread."""

    _report_worker: OrderedWorker | None = None
    _report_worker_lock = threading.Lock()

    def report_later(self, work) -> None:
        with ReportWorker._report_worker_lock:
            if self._report_worker is None:
                self._report_worker = OrderedWorker(
                    f'reports-{getattr(self, "name", None) or type(self).__name__}')
            worker = self._report_worker
        worker.put(work)

    def workers_busy(self) -> int:
        worker = self._report_worker
        return worker.pending() if worker is not None else 0

    def stop_reports(self, timeout: float | None = 60.0) -> None:
        worker = self._report_worker
        if worker is not None:
            worker.stop(timeout)
