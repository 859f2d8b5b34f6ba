"""Scheduler side of the ``merger:*`` Gearman functions.

``MergeClient`` submits merges, cats, ref-state and files-changes
requests and returns a :class:`MergeJobHandle` for each.  The callback
runs with the result dataclass (zuul.merger.protocol) when the merger
answers, exactly once per handle: a second answer (a late duplicate) is
logged and ignored.

Nothing submitted is lost to Gearman trouble:

- a WORK_FAIL (the merger refused the job, or died running it: the
  Gearman server fails the jobs of a worker that disconnects) is retried
  on another merger, up to ``MAX_ATTEMPTS`` in all;
- a job whose connection to the Gearman server was lost (the server died
  or restarted, with the job queued or running), or that could not be
  submitted because no server was connected, is submitted again as soon
  as a server is back, for up to ``reconnect_timeout`` seconds.  Requests
  are reads or speculative merges, so running one twice is harmless.

After that, and on an undecodable answer, the callback gets the same
result type with ``error`` set (and ``merged``/``updated`` false), so
callers handle one shape.  A canceled handle never calls back; a
request canceled while still queued in the Gearman server is taken out
of the queue (the admin protocol's ``cancel job``), so no merger spends
time on it.  A gate reset behind a failing change makes every queued
merge of the items behind it obsolete: left in the queue, a hundred deep
queue made the merger work through as many stale merges of up to a
hundred items each before the ones wanted.
``handle.wait()`` blocks until the result is in (tests and command-line
tools).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid

import gear

from zuul.lib.gearlib import GearClient, tls_kwargs
from zuul.merger.protocol import (
    DEFAULT_MERGE_MODE,
    FUNCTION_CAT,
    FUNCTION_FILES_CHANGES,
    FUNCTION_MERGE,
    FUNCTION_REFSTATE,
    CatRequest,
    CatResult,
    FilesChangesRequest,
    FilesChangesResult,
    MergeItem,
    MergeRequest,
    MergeResult,
    RefStateRequest,
    RefStateResult,
)

log = logging.getLogger('zuul.merger.client')

SUBMIT_TIMEOUT = 30
# Tries of one request when mergers fail it (WORK_FAIL) or die with it.
MAX_ATTEMPTS = 3
# How long a request lost with its Gearman connection waits for a server
# to come back before it ends as an error.
RECONNECT_TIMEOUT = 300.0
# Pause between submissions that fail while a server is connected.
RESUBMIT_BACKOFF = 0.5


def merge_item_for(queue_item, merge_mode: str = DEFAULT_MERGE_MODE) -> MergeItem:
    """The wire form of a scheduler QueueItem (zuul.model.item) or of
    its change/ref.  Changes carry number and patchset; refs
    (ref-updated, periodic branches) only their ref and revisions."""
    if isinstance(queue_item, MergeItem):
        return queue_item
    change = getattr(queue_item, 'change', queue_item)
    number = getattr(change, 'number', None) or None
    return MergeItem(
        connection=change.connection, project=change.project,
        branch=getattr(change, 'branch', None), ref=change.ref,
        number=number, patchset=getattr(change, 'patchset', None) if number else None,
        merge_mode=merge_mode, oldrev=getattr(change, 'oldrev', None),
        newrev=getattr(change, 'newrev', None))


class MergeJobHandle:
    """A submitted merger job; ``result`` once it has ended."""

    def __init__(self, function: str, request, result_cls, error_result, callback):
        self.function = function
        self.request = request
        self.uuid = uuid.uuid4().hex
        self.result = None
        self.canceled = False
        self._result_cls = result_cls
        self._error_result = error_result
        self._callback = callback
        self._done = threading.Event()
        self._finish_lock = threading.Lock()
        # Submissions after WORK_FAIL count as attempts; those after a lost
        # connection do not (``resubmissions`` counts them).
        self.attempts = 0
        self.resubmissions = 0
        # The gear job of the latest submission (to withdraw it).
        self.job = None
        # Taken out of the Gearman queue before a merger took it.
        self.withdrawn = False

    @property
    def event_id(self) -> str | None:
        return self.request.event_id

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None):
        """The result (None if it has not arrived within ``timeout``)."""
        self._done.wait(timeout)
        return self.result

    def cancel(self) -> None:
        """Drop the result when it comes (the merger may still run it)."""
        self.canceled = True

    def _complete(self, data: str | bytes) -> None:
        try:
            result = self._result_cls.from_json(data)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            result = self._error_result(f'undecodable result from the merger: {exc}')
        self._finish(result)

    def _fail(self, why: str) -> None:
        self._finish(self._error_result(why))

    def _finish(self, result) -> None:
        with self._finish_lock:
            if self._done.is_set():
                log.info('[e: %s] Ignoring a second answer to %s job %s', self.event_id,
                         self.function, self.uuid)
                return
            self.result = result
            self._done.set()
        if self.canceled or self._callback is None:
            return
        try:
            self._callback(result)
        except Exception:
            log.exception('[e: %s] %s callback failed', self.event_id, self.function)


class _MergerGearClient(GearClient):
    def __init__(self, owner: MergeClient, name: str):
        super().__init__(name)
        self.owner = owner

    def handleWorkComplete(self, packet):  # noqa: N802 - gear API
        job = super().handleWorkComplete(packet)
        self.owner._on_complete(job, job.data[-1] if job.data else '')
        return job

    def handleWorkFail(self, packet):  # noqa: N802 - gear API
        job = super().handleWorkFail(packet)
        self.owner._on_failed(job, 'the merger failed the job or was lost (WORK_FAIL)',
                              retry=True)
        return job

    def handleWorkException(self, packet):  # noqa: N802 - gear API
        job = super().handleWorkException(packet)
        self.owner._on_failed(job, f'merger exception: {job.exception!r}')
        return job

    def handleDisconnect(self, job):  # noqa: N802 - gear API
        job = super().handleDisconnect(job)
        self.owner._on_lost(job, 'lost connection to the gearman server')
        return job


class MergeClient:
    """Submits merger jobs.  ``merge_mode_for(queue_item)`` gives an
    item's project merge mode (default merge-resolve)."""

    def __init__(self, host: str, port: int, merge_mode_for=None,
                 name: str = 'zuul-merge-client', tls=None,
                 reconnect_timeout: float = RECONNECT_TIMEOUT):
        self.merge_mode_for = merge_mode_for or (lambda item: DEFAULT_MERGE_MODE)
        self.reconnect_timeout = reconnect_timeout
        # Outstanding requests (submitted, or waiting to be again) by uuid.
        self._handles: dict[str, MergeJobHandle] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        # ('submit', handle), ('withdraw', handle) or (handle, deadline,
        # why, counts_as_attempt), in order; None stops the thread.
        self._resubmits: queue.Queue = queue.Queue()
        self._resubmitter = threading.Thread(target=self._resubmit_loop, daemon=True,
                                             name='merge-resubmit')
        self.gearman = _MergerGearClient(self, name)
        self.gearman.addServer(host, port, **tls_kwargs(tls))
        self.gearman.waitForServer()
        self._resubmitter.start()

    def stop(self) -> None:
        """Disconnect.  Outstanding requests end without a callback."""
        self._stopping.set()
        self._resubmits.put(None)
        self.gearman.shutdown()
        self._resubmitter.join(10)

    @property
    def outstanding(self) -> int:
        """Requests submitted or waiting to be submitted again."""
        with self._lock:
            return len(self._handles)

    # -- requests ----------------------------------------------------------
    def merge_items(self, items, callback, event_id: str | None = None,
                    repo_state: dict | None = None, read_files=(),
                    files_changed: bool = True) -> MergeJobHandle:
        """Merge queue ``items`` in order (the one under test last); the
        callback gets a MergeResult."""
        merge_items = [merge_item_for(i, self.merge_mode_for(i)) for i in items]
        request = MergeRequest(items=merge_items, repo_state=repo_state,
                               read_files=list(read_files), files_changed=files_changed,
                               event_id=event_id)
        described = ', '.join(i.describe() for i in merge_items)
        log.debug('[e: %s] Requesting merge of %s', event_id, described)
        return self._submit(FUNCTION_MERGE, request, MergeResult,
                            lambda e: MergeResult(merged=False, error=e, event_id=event_id),
                            callback)

    def get_files(self, connection: str, project: str, branch: str, files, callback,
                  event_id: str | None = None) -> MergeJobHandle:
        """Read ``files`` (``dir/`` for every file below) from the head of
        ``branch``; the callback gets a CatResult."""
        request = CatRequest(connection=connection, project=project, branch=branch,
                             files=list(files), event_id=event_id)
        return self._submit(FUNCTION_CAT, request, CatResult,
                            lambda e: CatResult(error=e, event_id=event_id), callback)

    def get_repo_state(self, items, callback, event_id: str | None = None) -> MergeJobHandle:
        """Current branch heads of the items' projects; the callback gets
        a RefStateResult."""
        request = RefStateRequest(items=[merge_item_for(i) for i in items], event_id=event_id)
        return self._submit(FUNCTION_REFSTATE, request, RefStateResult,
                            lambda e: RefStateResult(updated=False, error=e,
                                                     event_id=event_id), callback)

    def get_files_changes(self, connection: str, project: str, branch: str, tosha: str,
                          callback, event_id: str | None = None) -> MergeJobHandle:
        """Files touched by ``tosha`` (a change ref or sha) relative to
        ``branch``; the callback gets a FilesChangesResult."""
        request = FilesChangesRequest(connection=connection, project=project, branch=branch,
                                      tosha=tosha, event_id=event_id)
        return self._submit(FUNCTION_FILES_CHANGES, request, FilesChangesResult,
                            lambda e: FilesChangesResult(error=e, event_id=event_id), callback)

    def cancel(self, handle: MergeJobHandle) -> None:
        """Drop ``handle``'s result; if its request still waits in the
        Gearman queue, take it out (on the client's own thread: this
        never waits for the server)."""
        if handle.canceled or handle.done:
            handle.cancel()
            return
        handle.cancel()
        self._resubmits.put(('withdraw', handle))

    # -- gear ----------------------------------------------------------------
    def _submit(self, function, request, result_cls, error_result, callback) -> MergeJobHandle:
        """The request is submitted on the client's own thread, in the
        order asked: a submit waits for the Gearman server's JOB_CREATED,
        which the scheduler's loop does not."""
        handle = MergeJobHandle(function, request, result_cls, error_result, callback)
        with self._lock:
            self._handles[handle.uuid] = handle
        self._resubmits.put(('submit', handle))
        return handle

    def _first_submit(self, handle: MergeJobHandle) -> None:
        if handle.canceled:
            # Canceled before it was sent (a gate reset right after the
            # enqueue): it never reaches the Gearman queue.
            self._forget(handle)
            handle.withdrawn = True
            handle._fail('canceled while queued')
            return
        try:
            self._submit_job(handle, attempt=True)
        except Exception as exc:  # no server connected: submit once one is
            self._resubmit_later(handle, f'unable to submit {handle.function}: {exc}',
                                 attempt=True)

    def _submit_job(self, handle: MergeJobHandle, attempt: bool) -> None:
        """Submit ``handle``'s request; raises when no server took it."""
        request, function = handle.request, handle.function
        job = gear.TextJob(function, request.to_json().decode('utf8'), unique=handle.uuid)
        with self._lock:
            self._handles[handle.uuid] = handle
        if attempt:
            handle.attempts += 1
        else:
            handle.resubmissions += 1
        try:
            self.gearman.submitJob(job, timeout=SUBMIT_TIMEOUT)
        except Exception:
            if attempt:
                handle.attempts -= 1
            else:
                handle.resubmissions -= 1
            raise
        handle.job = job

    def _pop(self, job) -> MergeJobHandle | None:
        unique = job.unique.decode('utf8') if isinstance(job.unique, bytes) else job.unique
        with self._lock:
            return self._handles.pop(unique, None)

    def _on_complete(self, job, data: str | bytes) -> None:
        handle = self._pop(job)
        if handle is not None:
            handle._complete(data)

    def _on_failed(self, job, why: str, retry: bool = False) -> None:
        handle = self._pop(job)
        if handle is None:
            return
        if retry and not handle.canceled and handle.attempts < MAX_ATTEMPTS:
            log.warning('[e: %s] %s job %s: %s; trying again (attempt %d of %d)',
                        handle.event_id, handle.function, handle.uuid, why,
                        handle.attempts + 1, MAX_ATTEMPTS)
            self._resubmit_later(handle, why, attempt=True)
            return
        log.warning('[e: %s] %s job %s: %s', handle.event_id, handle.function, handle.uuid, why)
        handle._fail(why)

    def _on_lost(self, job, why: str) -> None:
        handle = self._pop(job)
        if handle is None:
            return
        if handle.canceled:
            handle._fail(why)
            return
        log.warning('[e: %s] %s job %s: %s; submitting it again once a server is back',
                    handle.event_id, handle.function, handle.uuid, why)
        self._resubmit_later(handle, why)

    def _resubmit_later(self, handle: MergeJobHandle, why: str, attempt: bool = False) -> None:
        # Not on gear's threads: submitting waits for them.
        deadline = time.monotonic() + self.reconnect_timeout
        with self._lock:
            self._handles[handle.uuid] = handle
        self._resubmits.put((handle, deadline, why, attempt))

    def _resubmit_loop(self) -> None:
        while True:
            entry = self._resubmits.get()
            if entry is None or self._stopping.is_set():
                return
            if entry[0] == 'submit':
                self._first_submit(entry[1])
            elif entry[0] == 'withdraw':
                self._withdraw(entry[1])
            else:
                self._resubmit(*entry)

    def _withdraw(self, handle: MergeJobHandle) -> None:
        """Take a canceled handle's job out of the Gearman queue.  The
        server refuses (``ERR UNKNOWN_JOB``) once a merger has it: its
        answer then comes and is dropped."""
        job = handle.job
        conn = job.connection if job is not None else None
        if handle.done or conn is None or conn.related_jobs.get(job.handle) is not job:
            # Answered, or lost with its connection (a restarted server
            # numbers handles afresh: this one may now be another job's);
            # not submitted again, being canceled.
            return
        request = gear.CancelJobAdminRequest(job.handle)
        try:
            conn.sendAdminRequest(request, timeout=SUBMIT_TIMEOUT)
        except Exception as exc:  # lost connection: _on_lost ends the handle
            log.debug('Withdrawing %s job %s failed: %s', handle.function, handle.uuid, exc)
            return
        if not (request.response or b'').startswith(b'OK'):
            return      # already running (or ended): its answer is dropped
        conn.related_jobs.pop(job.handle, None)
        with self._lock:
            if self._handles.get(handle.uuid) is handle:
                del self._handles[handle.uuid]
        handle.withdrawn = True
        handle._fail('canceled while queued')
        log.debug('[e: %s] %s job %s taken out of the Gearman queue', handle.event_id,
                  handle.function, handle.uuid)

    def _resubmit(self, handle: MergeJobHandle, deadline: float, why: str,
                  attempt: bool) -> None:
        while not self._stopping.is_set():
            if handle.done:         # answered meanwhile (a late answer)
                return
            if handle.canceled:
                self._forget(handle)
                handle._fail(why)
                return
            try:
                self.gearman.waitForServer(timeout=max(0.0, deadline - time.monotonic()))
                if handle.canceled:
                    continue        # canceled while no server was there
                self._submit_job(handle, attempt)
                log.info('[e: %s] %s job %s submitted again', handle.event_id,
                         handle.function, handle.uuid)
                return
            except Exception as exc:
                if time.monotonic() >= deadline:
                    log.error('[e: %s] %s job %s: %s; no Gearman server took it again '
                              'within %.0f s: %s', handle.event_id, handle.function,
                              handle.uuid, why, self.reconnect_timeout, exc)
                    self._forget(handle)
                    handle._fail(f'{why}; no Gearman server took it again within '
                                 f'{self.reconnect_timeout:.0f} s')
                    return
                self._stopping.wait(RESUBMIT_BACKOFF)

    def _forget(self, handle: MergeJobHandle) -> None:
        with self._lock:
            self._handles.pop(handle.uuid, None)
