"""Expected build durations for the status page's progress bars and ETAs.

As in released Zuul, a job's estimate is the mean duration of its last
successful builds on the same project and branch (per tenant). The
scheduler records each successful build as it completes; the first time a
(tenant, project, branch, job) is asked about, its record is seeded from
the SQL build history, if there is one, so estimates survive a restart.
The scheduler thread records and asks; with a history that reads off the
caller's thread (``read_later``, zuul/driver/sql/writer.py) the seed is
read there and merged in when it arrives (the estimate is None until
then), so the loop never waits on the database for a progress bar.
"""

from __future__ import annotations

import collections
import logging
import threading

log = logging.getLogger('zuul.scheduler.build_times')

KEEP = 10  # successful builds averaged per job/project/branch


class BuildTimes:
    def __init__(self, history=None, keep: int = KEEP):
        self.history = history
        self.keep = keep
        self._durations: dict[tuple, collections.deque] = {}
        self._lock = threading.Lock()

    def _record_of(self, key: tuple) -> collections.deque:
        record = self._durations.get(key)
        if record is None:
            later = getattr(self.history, 'read_later', None)
            if later is None:
                record = collections.deque(self._from_history(*key), maxlen=self.keep)
                self._durations[key] = record
                return record
            record = self._durations[key] = collections.deque(maxlen=self.keep)
            later(lambda: self._from_history(*key),
                  lambda seed: self._seeded(record, seed))
        return record

    def _seeded(self, record: collections.deque, seed: list[float]) -> None:
        # The history's builds are older than those recorded meanwhile.
        with self._lock:
            newer = list(record)
            record.clear()
            record.extend(list(seed or []) + newer)

    def _from_history(self, tenant, project, branch, job) -> list[float]:
        if self.history is None:
            return []
        try:
            newest_first = self.history.recent_durations(
                tenant, job, project=project, branch=branch, limit=self.keep)
        except Exception:
            log.exception('Cannot read build durations of %s from the build history', job)
            return []
        return list(reversed(newest_first))

    def record(self, tenant: str, project: str, branch: str | None, job: str,
               result: str | None, duration: float | None) -> None:
        """Remember a finished build; only successes count."""
        if result != 'SUCCESS' or duration is None or duration < 0:
            return
        record = self._record_of((tenant, project, branch, job))
        with self._lock:
            record.append(duration)

    def estimate(self, tenant: str, project: str, branch: str | None,
                 job: str) -> float | None:
        """Mean of the recent successful durations, in seconds, or None."""
        record = self._record_of((tenant, project, branch, job))
        with self._lock:
            durations = list(record)
        if not durations:
            return None
        return round(sum(durations) / len(durations), 1)
