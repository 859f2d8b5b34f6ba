"""Scheduler side of ``executor:execute`` / ``executor:stop:<hostname>``.

``ExecutorClient.execute(request, on_progress, on_complete)`` submits a
build and returns a :class:`BuildHandle`; the callbacks run on gear's
thread when WORK_DATA / WORK_COMPLETE arrive (a lost connection or
WORK_FAIL completes the build with result ``None`` and ``error_detail``,
which the scheduler treats as "relaunch").  ``handle.wait()`` blocks until
the result is in (tests, CLI tools).
"""

from __future__ import annotations

import logging
import queue
import threading
import time

import gear

from zuul.executor.protocol import (
    BuildProgress,
    BuildResult,
    ExecuteRequest,
    StopRequest,
    execute_function,
    stop_function,
)
from zuul.lib.gearlib import GearClient

log = logging.getLogger('zuul.executor.client')

# How long a build submission waits for a Gearman server to come back.
SUBMIT_WAIT = 30.0


class BuildHandle:
    """A submitted build: progress so far and, at the end, the result."""

    def __init__(self, request: ExecuteRequest, on_progress=None, on_complete=None):
        self.request = request
        self.uuid = request.uuid
        self.progress: list[BuildProgress] = []
        self.result: BuildResult | None = None
        self.worker_hostname: str | None = None
        self.url: str | None = None
        self._on_progress = on_progress
        self._on_complete = on_complete
        self._done = threading.Event()
        self._started = threading.Event()

    def wait(self, timeout: float | None = None) -> BuildResult | None:
        self._done.wait(timeout)
        return self.result

    def wait_started(self, timeout: float | None = None) -> bool:
        """True once the executor announced the build (its first WORK_DATA)."""
        return self._started.wait(timeout)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def _progress(self, progress: BuildProgress) -> None:
        self.progress.append(progress)
        self.worker_hostname = progress.worker_hostname
        self.url = progress.url or self.url
        self._started.set()
        if self._on_progress:
            self._on_progress(self, progress)

    def _complete(self, result: BuildResult) -> None:
        self.result = result
        self._done.set()
        self._started.set()
        if self._on_complete:
            self._on_complete(self, result)


class _ExecutorGearClient(GearClient):
    def __init__(self, owner: ExecutorClient):
        super().__init__('zuul-executor-client')
        self.owner = owner

    def handleWorkData(self, packet):  # noqa: N802 - gear API
        job = super().handleWorkData(packet)
        self.owner._on_data(job, packet.getArgument(1, True))
        return job

    def handleWorkComplete(self, packet):  # noqa: N802 - gear API
        job = super().handleWorkComplete(packet)
        self.owner._on_complete(job, job.data[-1] if job.data else b'')
        return job

    def handleWorkFail(self, packet):  # noqa: N802 - gear API
        job = super().handleWorkFail(packet)
        self.owner._on_failed(job, 'WORK_FAIL')
        return job

    def handleWorkException(self, packet):  # noqa: N802 - gear API
        job = super().handleWorkException(packet)
        self.owner._on_failed(job, f'WORK_EXCEPTION {job.exception!r}')
        return job

    def handleDisconnect(self, job):  # noqa: N802 - gear API
        job = super().handleDisconnect(job)
        self.owner._on_failed(job, 'lost connection to the gearman server')
        return job


class ExecutorClient:
    """Launches builds on executors through Gearman."""

    def __init__(self, host: str, port: int, tls=None):
        from zuul.lib.gearlib import tls_kwargs
        self.gearman = _ExecutorGearClient(self)
        self.gearman.addServer(host, port, **tls_kwargs(tls))
        self.gearman.waitForServer()
        self._handles: dict[str, BuildHandle] = {}
        self._lock = threading.Lock()
        # Builds are submitted on a thread of their own, in order: a
        # submit waits for the Gearman server's JOB_CREATED (and, while a
        # server restarts, up to SUBMIT_WAIT), the scheduler's loop not.
        self._submits: queue.Queue = queue.Queue()
        self._submitter = threading.Thread(target=self._submit_loop, daemon=True,
                                           name='executor-submit')
        self._submitter.start()

    def stop(self) -> None:
        self._submits.put(None)
        self._submitter.join(SUBMIT_WAIT + 5)
        self.gearman.shutdown()

    def pending_submits(self) -> int:
        return self._submits.qsize()

    def execute(self, request: ExecuteRequest, on_progress=None,
                on_complete=None, zone: str | None = None) -> BuildHandle:
        """Submit a build; one on nodes of an executor ``zone`` only runs
        on an executor of that zone (``executor:execute:<zone>``)."""
        handle = BuildHandle(request, on_progress, on_complete)
        job = gear.TextJob(execute_function(zone), request.to_json().decode('utf8'),
                           unique=request.uuid)
        with self._lock:
            self._handles[request.uuid] = handle
        self._submits.put((request.uuid, job))
        return handle

    def _submit_loop(self) -> None:
        while True:
            entry = self._submits.get()
            if entry is None:
                return
            uuid, job = entry
            try:
                self._submit(job)
            except (gear.GearmanError, gear.NoConnectedServersError,
                    gear.TimeoutError) as exc:
                # No Gearman server (a restart taking longer than it
                # should): the build is lost before it started and is
                # launched again.
                log.warning('Unable to submit build %s: %s', uuid, exc)
                self._on_failed(job, f'lost connection to the gearman server ({exc})')
            except Exception:
                log.exception('Unable to submit build %s', uuid)
                self._on_failed(job, 'unable to submit the build')

    def _submit(self, job) -> None:
        """Submit, waiting out a Gearman server restart (gear reconnects
        every few seconds) rather than failing at once."""
        deadline = time.monotonic() + SUBMIT_WAIT
        while True:
            try:
                self.gearman.submitJob(job, timeout=30)
                return
            except (gear.GearmanError, gear.NoConnectedServersError):
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)

    def cancel(self, handle: BuildHandle) -> bool:
        """Ask the executor running ``handle`` to abort it.  False if the
        build was not announced yet (cancel it in the queue instead)."""
        if handle.worker_hostname is None:
            return False
        job = gear.TextJob(stop_function(handle.worker_hostname),
                           StopRequest(handle.uuid).to_json().decode('utf8'))
        self._submits.put((handle.uuid, job))     # after its launch, in order
        return True

    # -- gear callbacks --------------------------------------------------
    def _handle_for(self, job) -> BuildHandle | None:
        unique = job.unique.decode('utf8') if isinstance(job.unique, bytes) else job.unique
        with self._lock:
            return self._handles.get(unique)

    def _on_data(self, job, data: bytes) -> None:
        handle = self._handle_for(job)
        if handle is not None and data:
            handle._progress(BuildProgress.from_json(data))

    def _on_complete(self, job, data) -> None:
        handle = self._handle_for(job)
        if handle is None:
            return
        with self._lock:
            self._handles.pop(handle.uuid, None)
        try:
            result = BuildResult.from_json(data)
        except ValueError as exc:
            result = BuildResult(result=None, error_detail=f'bad result: {exc}')
        handle._complete(result)

    def _on_failed(self, job, why: str) -> None:
        handle = self._handle_for(job)
        if handle is None:
            return
        with self._lock:
            self._handles.pop(handle.uuid, None)
        handle._complete(BuildResult(result=None, error_detail=why,
                                     attempt=handle.request.attempt))
