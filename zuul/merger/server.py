"""The merger's Gearman worker: ``merger:merge``, ``merger:cat``,
``merger:refstate`` and ``merger:fileschanges`` over a Merger.

A job always ends: WORK_COMPLETE with the result payload (failures the
merger can explain -- a conflict, an unknown project, a crash while
merging -- are in its ``error``/``conflict`` fields), or WORK_FAIL when
the request cannot be decoded (logged).  ``stop()`` is graceful: no new
jobs are taken and the running ones finish first.

When the Gearman server goes away, the workers reconnect by themselves
and register the functions again (zuul.lib.gearlib); an answer to a job
of the lost connection is dropped (``lost_answers`` counts them) because
the scheduler submits that job again.
"""

from __future__ import annotations

import logging
import socket
import threading

import gear

from nodepool.driver.metrics import Metrics, key_part
from zuul.lib.gearlib import GearWorker, tls_kwargs
from zuul.merger.merger import MergerError
from zuul.merger.protocol import (
    FUNCTION_CAT,
    FUNCTION_FILES_CHANGES,
    FUNCTION_MERGE,
    FUNCTION_REFSTATE,
    FUNCTIONS,
    CatRequest,
    CatResult,
    FilesChangesRequest,
    FilesChangesResult,
    MergeRequest,
    MergeResult,
    RefStateRequest,
    RefStateResult,
)

log = logging.getLogger('zuul.merger.server')


def _tag(event_id) -> str:
    return f'[e: {event_id}] ' if event_id else ''


class MergeServer:
    """Serves ``merger`` (a zuul.merger.merger.Merger) on the Gearman
    servers ``servers`` [(host, port)], with ``threads`` jobs at once."""

    def __init__(self, servers, merger, hostname: str | None = None, threads: int = 1,
                 tls=None, metrics=None, stats_key: str | None = None):
        self.servers = list(servers)
        self.tls = tls
        self.merger = merger
        self.hostname = hostname or socket.getfqdn()
        # ``<stats_key>.merger.SUCCESS|FAILURE`` per merge (released Zuul's
        # name; zuul.merger.<host> for a zuul-merger, zuul.executor.<host>
        # for an executor's merger functions).
        self.metrics = metrics or Metrics(None)
        self.stats_key = stats_key or f'zuul.merger.{key_part(self.hostname)}'
        self.threads = max(1, threads)
        self.workers: list[gear.Worker] = []
        self._threads: list[threading.Thread] = []
        self._running = False
        self._lock = threading.Lock()
        # Notified whenever a job ends (tests and graceful stop wait on it).
        self.idle = threading.Condition(self._lock)
        self.active_jobs = 0
        self.jobs_done = 0
        self.failed_jobs = 0
        self.lost_answers = 0
        self._handlers = {
            FUNCTION_MERGE: (MergeRequest, self._merge, self._merge_error),
            FUNCTION_CAT: (CatRequest, self._cat, lambda r, e: CatResult(
                error=e, event_id=r.event_id)),
            FUNCTION_REFSTATE: (RefStateRequest, self._refstate, lambda r, e: RefStateResult(
                updated=False, error=e, event_id=r.event_id)),
            FUNCTION_FILES_CHANGES: (FilesChangesRequest, self._files_changes,
                                     lambda r, e: FilesChangesResult(error=e,
                                                                     event_id=r.event_id)),
        }

    # -- lifecycle -------------------------------------------------------
    def start(self) -> None:
        self._running = True
        for n in range(self.threads):
            worker = GearWorker(f'zuul-merger:{self.hostname}:{n}')
            for host, port in self.servers:
                worker.addServer(host, port, **tls_kwargs(self.tls))
            worker.waitForServer()
            worker.setFunctions([gear.FunctionRecord(f.encode('utf8')) for f in FUNCTIONS])
            self.workers.append(worker)
            thread = threading.Thread(target=self._job_loop, args=(worker,),
                                      name=f'merger-jobs-{n}', daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info('Merger %s serving %s', self.hostname, ', '.join(FUNCTIONS))

    def pause(self) -> None:
        """Take no new jobs (running ones finish); ``resume`` undoes it."""
        for worker in self.workers:
            worker.setFunctions([])
        log.info('Merger %s paused', self.hostname)

    def resume(self) -> None:
        for worker in self.workers:
            worker.setFunctions([gear.FunctionRecord(f.encode('utf8')) for f in FUNCTIONS])
            # Jobs queued while paused wake nobody: ask for them now.
            worker.stopWaitingForJobs()
        log.info('Merger %s resumed', self.hostname)

    def stop(self, timeout: float | None = None) -> None:
        """Take no new jobs, let running ones finish, disconnect."""
        self._running = False
        for worker in self.workers:
            try:
                worker.setFunctions([])
            except Exception:  # a lost connection: nothing to unregister
                log.debug('Unregistering functions failed', exc_info=True)
        with self.idle:
            self.idle.wait_for(lambda: self.active_jobs == 0, timeout)
        for worker in self.workers:
            worker.shutdown()
        for thread in self._threads:
            thread.join(timeout)
        log.info('Merger %s stopped', self.hostname)

    # -- the job loop ------------------------------------------------------
    def _job_loop(self, worker: gear.Worker) -> None:
        while self._running:
            try:
                job = worker.getJob()
            except gear.InterruptedError:
                if not self._running:
                    return
                continue    # woken to ask for jobs again (resume)
            except Exception:  # keep serving after a bad packet
                log.exception('Error getting a gearman job')
                continue
            with self._lock:
                self.active_jobs += 1
            try:
                self.handle(job)
            except Exception:  # keep serving whatever happened to this job
                log.exception('Error handling %s job %s', job.name, job.unique)
            finally:
                with self.idle:
                    self.active_jobs -= 1
                    self.jobs_done += 1
                    if getattr(job, 'answer_lost', False):
                        self.lost_answers += 1
                    self.idle.notify_all()

    def handle(self, job) -> None:
        """Run one job to its end (WORK_COMPLETE or WORK_FAIL)."""
        name = job.name.decode('utf8') if isinstance(job.name, bytes) else job.name
        handler = self._handlers.get(name)
        if handler is None:
            log.error('Unknown function %s', name)
            self._fail(job)
            return
        request_cls, run, on_error = handler
        try:
            request = request_cls.from_json(job.arguments)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            log.error('Refusing %s job %s: malformed payload: %s', name, job.unique, exc)
            self._fail(job)
            return
        try:
            result = run(request)
        except Exception as exc:
            log.exception('%s%s job %s failed', _tag(request.event_id), name, job.unique)
            result = on_error(request, f'{type(exc).__name__}: {exc}')
        if name == FUNCTION_MERGE:
            merged = 'SUCCESS' if getattr(result, 'merged', False) else 'FAILURE'
            self.metrics.incr(f'{self.stats_key}.merger.{merged}')
        job.sendWorkComplete(result.to_json())

    def _fail(self, job) -> None:
        with self._lock:
            self.failed_jobs += 1
        job.sendWorkFail()

    # -- the functions -------------------------------------------------------
    def _merge(self, request: MergeRequest) -> MergeResult:
        log.info('%sMerge of %d item(s): %s', _tag(request.event_id), len(request.items),
                 ', '.join(i.describe() for i in request.items))
        outcome = self.merger.merge_changes(
            request.items, repo_state=request.repo_state or None,
            event_id=request.event_id, files_changed=request.files_changed,
            read_files=request.read_files)
        return MergeResult(merged=outcome.merged, conflict=outcome.conflict,
                           error=outcome.error, repo_state=outcome.base_state,
                           merged_state=outcome.repo_state, commit=outcome.commit,
                           files=outcome.files, read_files=outcome.read_files,
                           event_id=request.event_id)

    @staticmethod
    def _merge_error(request: MergeRequest, error: str) -> MergeResult:
        return MergeResult(merged=False, error=error, event_id=request.event_id)

    def _cat(self, request: CatRequest) -> CatResult:
        try:
            commit, files = self.merger.cat_files(request.connection, request.project,
                                                  request.branch, request.files,
                                                  event_id=request.event_id)
        except MergerError as exc:
            log.warning('%s%s', _tag(request.event_id), exc)
            return CatResult(error=str(exc), event_id=request.event_id)
        return CatResult(files=files, commit=commit, event_id=request.event_id)

    def _refstate(self, request: RefStateRequest) -> RefStateResult:
        try:
            state = self.merger.get_repo_state(request.items, event_id=request.event_id)
        except MergerError as exc:
            log.warning('%s%s', _tag(request.event_id), exc)
            return RefStateResult(updated=False, error=str(exc), event_id=request.event_id)
        return RefStateResult(updated=True, repo_state=state, event_id=request.event_id)

    def _files_changes(self, request: FilesChangesRequest) -> FilesChangesResult:
        try:
            files = self.merger.files_changes(request.connection, request.project,
                                              request.branch, request.tosha,
                                              event_id=request.event_id)
        except MergerError as exc:
            log.warning('%s%s', _tag(request.event_id), exc)
            return FilesChangesResult(error=str(exc), event_id=request.event_id)
        return FilesChangesResult(files=files, event_id=request.event_id)
