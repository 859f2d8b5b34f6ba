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

import logging
import threading

from zuul.lib.ordered_worker import OrderedWorker

log = logging.getLogger('zuul.scheduler.report_gate')

# How long a report waits for its write-ahead before it goes anyway.
LAND_TIMEOUT = 60.0


class ReportGate:
    def __init__(self):
        self._worker = OrderedWorker('report-gate')

    def put(self, landed: threading.Event, submit, on_error=None) -> None:
        """``submit()`` once ``landed`` is set (after those put before);
        ``on_error()`` if it raises."""
        self._worker.put(lambda: self._submit(landed, submit, on_error))

    def pending(self) -> int:
        return self._worker.pending()

    def stop(self, timeout: float = LAND_TIMEOUT + 5) -> None:
        self._worker.stop(timeout)

    @staticmethod
    def _submit(landed: threading.Event, submit, on_error) -> None:
        if not landed.wait(LAND_TIMEOUT):
            log.warning('Report sent without its write-ahead after %.0f s', LAND_TIMEOUT)
        try:
            submit()
        except Exception:
            log.exception('Unable to submit a report')
            if on_error is not None:
                on_error()
