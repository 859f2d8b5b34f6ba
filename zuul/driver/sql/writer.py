"""The scheduler's writes to the build history, off its event loop.

A database insert can take from a millisecond to seconds (a busy
PostgreSQL, a locked SQLite file); the scheduler's loop must not wait for
it. :class:`HistoryWriter` stands in for a
:class:`zuul.driver.sql.history.BuildHistory`: what a write records is
taken on the caller's thread at once (the item's builds as they are now),
and the rows are written on one writer thread, in the order they were
asked for. Reads through it first wait until the writes asked for before
them are done (a scheduler reads what it wrote); everything else reads
the database directly.

What must survive a SIGKILL is in ZooKeeper already (the pipeline state,
the build records); the build history is the record of finished work.
``stop()`` writes everything asked for before it returns; a write that
fails is logged and dropped, as it was when it ran on the loop.
"""

from __future__ import annotations

import logging

from zuul.driver.sql.history import build_row, buildset_rows
from zuul.lib.ordered_worker import OrderedWorker

log = logging.getLogger('zuul.driver.sql.writer')


class HistoryWriter:
    def __init__(self, history):
        self.history = history
        self._worker = OrderedWorker('build-history-writer')

    # -- writes (taken now, written on the writer thread) -------------------

    def record_buildset(self, tenant: str, pipeline, item, result: str,
                        message: str = '') -> None:
        rows = buildset_rows(tenant, pipeline, item, result, message)
        self._put(f'buildset {rows["buildset"]["uuid"]}', self.history.write_buildset, rows)

    def record_build(self, buildset_uuid: str, build, final: bool = False) -> None:
        self._put(f'build {build.uuid}', self.history.write_build, buildset_uuid,
                  build_row(build, final))

    def record_reproduction(self, tenant: str, uuid: str, data: dict) -> None:
        self._put(f'reproduction of {uuid}', self.history.record_reproduction,
                  tenant, uuid, data)

    def add_reproduction_outcome(self, uuid: str, outcome: dict) -> None:
        self._put(f'outcome of {uuid}', self.history.add_reproduction_outcome, uuid, outcome)

    def read_later(self, read, then) -> None:
        """``then(read())`` on the writer thread, after the writes asked
        for before it (a read the caller does not wait for)."""
        def run():
            then(read())
        self._put('read', run)

    def _put(self, what: str, fn, *args) -> None:
        self._worker.put(lambda: self._write(what, fn, args))

    # -- reads and the rest: the history's own, after the pending writes ---

    def __getattr__(self, name):
        value = getattr(self.history, name)
        if not callable(value):
            return value

        def after_writes(*args, **kw):
            self.flush()
            return value(*args, **kw)
        return after_writes

    def pending(self) -> int:
        return self._worker.pending()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every write asked for so far is done; False if
        ``timeout`` passed first."""
        return self._worker.flush(timeout)

    def stop(self, timeout: float = 60.0) -> None:
        """Write what was asked for, then end the writer thread."""
        if not self._worker.stop(timeout):
            log.error('Build history writes still pending after %.0f s: %d', timeout,
                      self.pending())

    @staticmethod
    def _write(what: str, fn, args) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception('Unable to write the %s to the build history', what)
