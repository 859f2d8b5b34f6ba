"""What the drivers of hosted code review (GitHub, GitLab) share: a
change per pull/merge request read over a REST API, webhooks, and the
rule that no API call runs on the scheduler's loop.

- ``ApiError``/``Response``: an API's error (``status``, ``path``,
  ``message``) and answer; each driver names its own subclass.
- ``MalformedEventError``, ``require``, ``named``: reading a webhook
  payload (a missing part is a malformed event, logged and skipped).
- ``NumberedRequest``: a request numbered per project (its key names the
  project), as a pipeline change.
- ``OffLoopWork``: a connection's workers (zuul/lib/keyed_workers.py):
  events read ahead per key (an App installation, a group of projects),
  reports sent per key in the order the scheduler made them, and how
  much of either is outstanding (the scheduler's ``settled``).
- ``OffLoopReporter``: a reporter whose ``report`` runs on those
  workers; the outcome of a merge comes back as ``done(merged)``.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass

from zuul.lib.keyed_workers import KeyedWorkers

log = logging.getLogger('zuul.driver.hosted')


class ApiError(Exception):
    service = 'API'

    def __init__(self, status: int, message: str, path: str = '', method: str = ''):
        where = f'{method} {path}' if method else path
        super().__init__(f'{self.service} {status} on {where}: {message}')
        self.status = status
        self.path = path
        self.method = method
        self.message = message


@dataclass
class Response:
    status: int
    body: object
    headers: dict


class MalformedEventError(ValueError):
    pass


def require(payload: dict, key: str, what: str | None = None) -> dict:
    """``payload[key]``, an object, or MalformedEventError."""
    value = payload.get(key)
    if not isinstance(value, dict):
        raise MalformedEventError(f'payload has no {what or key}')
    return value


def named(payload: dict, key: str, attribute: str) -> str:
    """The name ``payload[key][attribute]`` (a project's full name)."""
    name = require(payload, key).get(attribute)
    if not name or not isinstance(name, str):
        raise MalformedEventError(f'{key} has no {attribute}')
    return name


class NumberedRequest:
    """Mixin of a Change numbered per project (pull and merge requests)."""

    @property
    def key(self) -> str:
        return f'{self.connection}/{self.project}/{self.number}'

    def is_update_of(self, other) -> bool:
        """A later head of the same request."""
        return isinstance(other, type(self)) and other.key == self.key and \
            other.patchset != self.patchset and self.updated_at >= other.updated_at

    def copy_for_patchset(self, sha: str):
        """This request as of an earlier head ``sha`` (not current)."""
        other = copy.copy(self)
        other.is_current_patchset = False
        other.patchset = sha
        return other

    def describe(self) -> str:
        return f'{self.number},{str(self.patchset)[:7]}'


class RequestCache:
    """Mixin of a connection: requests by (project, number) in
    ``_changes`` (guarded by ``_cache_lock``), kept current by events
    read ahead; lookups use it while ``change_cache`` is on."""

    def _cached_request(self, project: str, number: int, sha: str, read,
                        refresh: bool = False):
        """The request (``read(project, number)`` unless cached), as of
        head ``sha`` when given."""
        key = (project, number)
        with self._cache_lock:
            change = None if refresh or not self.change_cache else self._changes.get(key)
        if change is not None:
            self.cache_hits += 1
        else:
            change = read(project, number)
            with self._cache_lock:
                self._changes[key] = change
        if sha and not change.patchset.startswith(sha):
            change = change.copy_for_patchset(sha)
        return change

    def _cached(self, project: str, number: int):
        """The cached request (None: not cached, or the cache is off)."""
        if not self.change_cache:
            return None
        with self._cache_lock:
            return self._changes.get((project, number))


class OffLoopWork:
    """Mixin of a connection: ``_start_workers`` makes the event readers
    (``event_threads`` per key) and the report senders (one per key);
    ``read_ahead`` and ``submit_report`` hand them work.

    Events are handed over in submission order per key; ``ordered``: in
    submission order across all keys (the keys' readers still read in
    parallel, each key's in order), as a single event stream is."""

    _workers: KeyedWorkers | None = None
    _readers: KeyedWorkers | None = None
    _report_workers: KeyedWorkers | None = None

    def _start_workers(self, deliver, event_threads: int, name: str,
                       ordered: bool = False) -> None:
        self._workers = KeyedWorkers(deliver, 1 if ordered else event_threads, name=name)
        if ordered:
            self._readers = KeyedWorkers(lambda result, tag: None, 1,
                                         name=f'{name}-readers')
        self._report_workers = KeyedWorkers(self._report_done, 1, name=f'{name}-reports')

    def _stop_workers(self) -> None:
        for workers in (self._workers, self._readers, self._report_workers):
            if workers is not None:
                workers.stop()
        self._report_workers = None

    def read_ahead(self, key, prepare, event, tag) -> None:
        """``prepare(event)`` on ``key``'s workers; its result is handed
        to the workers' ``deliver`` with ``tag``, in submission order."""
        if self._readers is None:
            self._workers.submit(key, self._prepare_safely, prepare, event, tag=tag)
            return
        read = self._readers.submit(key, self._prepare_safely, prepare, event)
        self._workers.submit(0, read.result, tag=tag)

    def _prepare_safely(self, prepare, event):
        try:
            return prepare(event)
        except Exception:
            # Handed over unprepared: the scheduler reads the change itself.
            log.exception('[e: %s] %s: unable to read ahead for %s', event.event_id,
                          self.name, event.describe())
            return event

    def reports_off_loop(self) -> bool:
        return self._report_workers is not None and self.change_cache

    def report_key(self, project: str):
        return 0

    def submit_report(self, project: str, work, done=None) -> None:
        """Run ``work()`` on the report worker of ``project``'s key;
        ``done(result)`` follows (result None if it failed)."""
        self._report_workers.submit(self.report_key(project), work, tag=done)

    def _report_done(self, result, done) -> None:
        # Stopping: a report cut short says nothing about the change (the
        # saved state keeps its item; the next scheduler reports again).
        if done is not None and not self._stopped.is_set():
            done(result)

    def workers_busy(self) -> int:
        """Events being read ahead and reports being sent."""
        return sum(w.busy() for w in (self._workers, self._report_workers)
                   if w is not None)


def as_list(value) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in (value if isinstance(value, (list, tuple)) else [value])]


class OffLoopReporter:
    """Mixin of a reporter whose connection is an OffLoopWork."""

    def can_report_off_loop(self) -> bool:
        return self.connection.reports_off_loop()

    def report_off_loop(self, item, pipeline, action: str, message: str,
                        done=None) -> None:
        """``report`` on the connection's report worker of the change's
        key (in order with the change's other reports); ``done`` gets
        whether the change merged."""
        def work():
            self.report(item, pipeline, action, message)
            return self.connection.is_merged(item.change) if done is not None else None
        self.connection.submit_report(item.change.project, work, done)
