"""The ``sql`` reporter (also under the ``mysql``/``postgresql`` driver
names): a pipeline that lists an SQL connection among the reporters of
an action records the item's buildset, its builds and their artifacts in
that connection's database, as released Zuul's SQL reporter does.

The ``[database]`` section of zuul.conf stays the build history that
zuul-web reads and that every pipeline writes to; an ``sql`` reporter
writes a further copy to its own connection's database (for example one
kept by another team). Only reports with a result are recorded: listed
under ``enqueue`` or ``start`` it writes nothing, as no build has ended.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger('zuul.driver.sql.reporter')

# Actions whose report carries no result yet.
NOT_RECORDED = ('enqueue', 'start')


class SQLReporter:
    def __init__(self, history, pipeline, config):
        self.history = history
        self.tenant_name = getattr(pipeline, 'tenant_name', '') or ''
        self.pipeline_name = getattr(pipeline, 'name', '')
        self._lock = threading.Lock()
        self._migrated = False

    def __repr__(self) -> str:
        return f'<SQLReporter {getattr(self.history, "name", "")}>'

    def _ensure_schema(self) -> None:
        with self._lock:
            if not self._migrated:
                self.history.migrate()
                self._migrated = True

    def prepare_report(self, item, pipeline, action: str, message: str):
        """On the loop: the rows as the item is now; returns what writes
        them (on the connection's thread, once the report's write-ahead
        landed): the scheduler's loop never waits for this database."""
        if action in NOT_RECORDED:
            return None
        from zuul.driver.sql.history import buildset_rows
        rows = buildset_rows(self.tenant_name, pipeline, item, action, message)
        event_id, what = getattr(item, 'event_id', None), item.change.describe()

        def write() -> None:
            try:
                self._ensure_schema()
                self.history.write_buildset(rows)
            except Exception:
                log.exception('[e: %s] Unable to record %s of %s in %s', event_id, action,
                              what, getattr(self.history, 'name', ''))
                return
            log.debug('[e: %s] Recorded %s of %s in %s', event_id, action, what,
                      getattr(self.history, 'name', ''))
        return lambda: self.history.report_later(write)

    def report(self, item, pipeline, action: str, message: str) -> None:
        if action in NOT_RECORDED:
            return
        self._ensure_schema()
        self.history.record_buildset(self.tenant_name, pipeline, item, action, message)
        log.debug('[e: %s] Recorded %s of %s in %s', getattr(item, 'event_id', None),
                  action, item.change.describe(), getattr(self.history, 'name', ''))
