"""The executor's Gearman worker.

Registers ``executor:execute`` while it has capacity (job limit, builds
still starting, and the load/memory governor) and ``executor:stop:<hostname>`` always.  Each build
runs in its own thread: WORK_DATA announces the live-log URL (and later
the phase), WORK_COMPLETE carries the BuildResult.  ``graceful_stop()``
stops taking work and returns once the running builds have finished;
``stop()`` aborts them.  With ``[executor] log_root`` each finished
build's logs are kept there (``zuul.executor.logarchive``) and aged out
after ``log_retention_days``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

import gear

from zuul.executor import ansiblecfg, logarchive
from zuul.executor.build import BuildExecution
from zuul.executor.capacity import CapacityGovernor
from zuul.executor.logstream import LogStreamServer
from zuul.executor.protocol import (
    FUNCTION_EXECUTE,
    BuildProgress,
    BuildResult,
    ExecuteRequest,
    ProtocolVersionError,
    StopRequest,
    execute_function,
    stop_function,
)
from zuul.executor.sandbox import BubblewrapSandbox
from zuul.executor.semaphores import SemaphoreClient
from zuul.executor.settings import ExecutorSettings
from zuul.executor.stats import ExecutorStats, executor_key
from zuul.lib.gearlib import GearWorker, tls_kwargs

log = logging.getLogger('zuul.executor.server')

GOVERNOR_INTERVAL = 10.0
# How often expired build logs are looked for (also once at start).
LOG_RETENTION_INTERVAL = 3600.0


def default_sandbox(settings: ExecutorSettings) -> BubblewrapSandbox:
    """The Python running ansible (which may live under home, e.g. pyenv)
    and Zuul's own package (for its Ansible plugins) are visible,
    read-only; the state dir, other builds and ``hidden_paths`` stay
    hidden even if one of those happens to contain them."""
    hidden = [settings.state_dir, settings.job_dir]
    visible = [sys.base_prefix, sys.prefix, os.path.join(ansiblecfg.CODE_ROOT, 'zuul')]
    return BubblewrapSandbox(hidden_paths=hidden + list(settings.hidden_paths),
                             readonly_paths=visible,
                             ro_paths=list(settings.untrusted_ro_paths),
                             rw_paths=list(settings.untrusted_rw_paths))


class ExecutorServer:
    """One executor.  ``merger`` is a zuul.merger.merger.Merger (repo cache
    and workspace preparation)."""

    def __init__(self, settings: ExecutorSettings, gearman_host: str, gearman_port: int,
                 merger, governor: CapacityGovernor | None = None,
                 serve_merger: bool = False, tls=None, build_records=None, metrics=None):
        self.settings = settings
        # zuul.executor.<host>.* (zuul.executor.stats): statsd and Prometheus.
        self.stats = ExecutorStats(metrics, settings.hostname, settings.job_dir)
        self.metrics = self.stats.metrics
        self._starting_since: dict[str, float] = {}
        self._paused = False
        # zuul.zk.builds.BuildRecords: every build's state and result also
        # in ZooKeeper, so a scheduler that restarted adopts it.
        self.build_records = build_records
        self.tls = tls
        self.merger = merger
        # As released: an executor can also answer the merger:* functions
        # from its own repo cache, so small sites need no zuul-merger.
        self.serve_merger = serve_merger
        self.merge_server = None
        self.gearman = (gearman_host, gearman_port)
        self.governor = governor or CapacityGovernor(
            settings.max_builds, settings.load_multiplier, settings.min_avail_mem,
            settings.max_starting_builds)
        self.builds: dict[str, BuildExecution] = {}
        # Builds not yet at their first playbook (max_starting_builds).
        self.starting: set[str] = set()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._registered_execute = False
        # Deciding what to register and telling Gearman happen together:
        # the governor, the job loop and build threads all re-register,
        # and one that decided earlier must not send after one that
        # decided later (an executor left not taking builds until the
        # next change of its load).
        self._registration_lock = threading.Lock()
        self._accepting = True
        self._running = False
        self._stopped = threading.Event()
        self.worker: gear.Worker | None = None
        self.log_streamer: LogStreamServer | None = None
        self.sandbox = self._make_sandbox()
        # Playbook semaphores are asked of the scheduler over RPC.
        self.semaphore_client = SemaphoreClient(gearman_host, gearman_port, tls=tls)

    def _remove_stale_build_dirs(self) -> None:
        """Build dirs left by an executor that was killed: nothing runs in
        them any more (their builds are retried elsewhere). Kept with
        ``keep_jobdir``, for debugging."""
        if self.settings.keep_jobdir:
            return
        import shutil
        for name in os.listdir(self.settings.job_dir):
            path = os.path.join(self.settings.job_dir, name)
            if len(name) == 32 and os.path.isdir(path) and not os.path.islink(path):
                log.info('Removing build dir %s left by a previous run', path)
                shutil.rmtree(path, ignore_errors=True)

    def _make_sandbox(self) -> BubblewrapSandbox | None:
        if not self.settings.sandbox_untrusted:
            return None
        return default_sandbox(self.settings)

    # -- lifecycle -------------------------------------------------------
    def start(self) -> None:
        # SSH control sockets live in <job_dir>/<uuid>/cp/<10-char hash>
        # (ansible's naming) and ssh adds a 17-character suffix while
        # creating one: the whole must fit a unix socket path (108 bytes)
        # or every node looks unreachable. Refuse clearly instead.
        longest = len(os.path.abspath(self.settings.job_dir)) + 1 + 32 + 4 + 11 + 17
        if longest > 107:
            raise ValueError(f'[executor] job_dir {self.settings.job_dir!r} is too long for '
                             f'SSH control sockets ({longest} > 107 bytes); use a path '
                             f'of at most {107 - (longest - len(self.settings.job_dir))} '
                             'characters')
        os.makedirs(self.settings.job_dir, exist_ok=True)
        os.makedirs(self.settings.state_dir, exist_ok=True)
        self._remove_stale_build_dirs()
        self.log_streamer = LogStreamServer(self.settings.log_stream_host,
                                            self.settings.log_stream_port,
                                            self.settings.log_stream_public_host)
        self.log_streamer.start()
        if self.build_records is not None:
            self.build_records.register_executor(self.settings.hostname,
                                                 zone=self.settings.zone,
                                                 allow_unzoned=self.settings.allow_unzoned)
        self.worker = GearWorker(f'executor:{self.settings.hostname}')
        self.worker.addServer(*self.gearman, **tls_kwargs(self.tls))
        self.worker.waitForServer()
        self._running = True
        self._update_registration()
        threading.Thread(target=self._job_loop, name='executor-jobs', daemon=True).start()
        threading.Thread(target=self._governor_loop, name='executor-governor',
                         daemon=True).start()
        if self.settings.log_root:
            os.makedirs(self.settings.log_root, exist_ok=True)
            if self.settings.log_retention_days > 0:
                threading.Thread(target=self._log_retention_loop, name='executor-log-retention',
                                 daemon=True).start()
        if self.serve_merger:
            from zuul.merger.server import MergeServer
            self.merge_server = MergeServer([self.gearman], self.merger,
                                            hostname=self.settings.hostname, tls=self.tls,
                                            metrics=self.metrics,
                                            stats_key=executor_key(self.settings.hostname))
            self.merge_server.start()

    def pause(self) -> None:
        """Take no new builds (running ones go on); ``resume`` undoes it."""
        with self._lock:
            self._accepting = False
            self._paused = True
        self._update_registration()

    def resume(self) -> None:
        with self._lock:
            self._accepting = True
            self._paused = False
        self._update_registration()

    def graceful_stop(self) -> None:
        """Take no more builds; return when the running ones have finished."""
        with self._lock:
            self._accepting = False
        self._update_registration()
        with self._idle:
            self._idle.wait_for(lambda: not self.builds)
        self.stop()

    def stop(self) -> None:
        """Abort running builds and shut down.  Each aborted build is sent
        back as RETRY (``infra:executor-stopped``): the scheduler runs it
        again elsewhere, or here once this executor is back, and the
        attempt does not count; no change gets a failure for it."""
        self._running = False
        self._stopped.set()
        self._accepting = False
        self._update_registration()
        with self._lock:
            builds = list(self.builds.values())
        for build in builds:
            build.stop(shutdown=True)
        with self._idle:
            self._idle.wait_for(lambda: not self.builds, timeout=60)
        if self.merge_server is not None:
            self.merge_server.stop()
        if self.worker is not None:
            self.worker.shutdown()
        if self.log_streamer is not None:
            self.log_streamer.stop()
        self.semaphore_client.shutdown()
        if self.build_records is not None:
            self.build_records.unregister_executor()

    # -- registration and capacity --------------------------------------
    def _update_registration(self) -> None:
        with self._registration_lock:
            self._register()

    def _register(self) -> None:
        with self._lock:
            want = (self._running and self._accepting
                    and self.governor.accepting(len(self.builds), len(self.starting)))
            functions = [stop_function(self.settings.hostname)]
            if want:
                functions += self.execute_functions()
            changed = want != self._registered_execute
            self._registered_execute = want
        if self.worker is not None and (changed or not want):
            self.worker.setFunctions([gear.FunctionRecord(f.encode("utf8")) for f in functions])
            if want and changed:
                # Builds queued while we did not take any wake nobody:
                # ask for them now.
                self.worker.stopWaitingForJobs()
            if not want and self.governor.reason:
                log.info('Not accepting builds: %s', self.governor.reason)
        self._report_stats()

    def _report_stats(self) -> None:
        with self._lock:
            running, starting, paused = len(self.builds), len(self.starting), self._paused
        try:
            self.stats.report(running, starting, paused)
        except Exception:   # figures must never stop the executor
            log.exception('Unable to report the executor figures')

    def execute_functions(self) -> list[str]:
        """What this executor takes builds as: ``executor:execute`` when
        it has no zone; ``executor:execute:<zone>`` when it has one (and
        ``executor:execute`` too with ``allow_unzoned``)."""
        zone = self.settings.zone
        if not zone:
            return [FUNCTION_EXECUTE]
        functions = [execute_function(zone)]
        if self.settings.allow_unzoned:
            functions.append(FUNCTION_EXECUTE)
        return functions

    def _governor_loop(self) -> None:
        while not self._stopped.wait(GOVERNOR_INTERVAL):
            self._update_registration()

    def _log_retention_loop(self) -> None:
        while True:
            try:
                logarchive.remove_expired(self.settings.log_root,
                                          self.settings.log_retention_days)
            except Exception:
                log.exception('Error removing expired build logs')
            if self._stopped.wait(LOG_RETENTION_INTERVAL):
                return

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def accepting_work(self) -> bool:
        return self._registered_execute

    # -- jobs ------------------------------------------------------------
    def _job_loop(self) -> None:
        while self._running:
            try:
                job = self.worker.getJob()
            except gear.InterruptedError:
                if not self._running:
                    return
                continue    # woken to ask for jobs again
            except Exception:  # keep serving on a single bad packet
                log.exception('Error getting a gearman job')
                continue
            try:
                self._dispatch(job)
            except Exception:
                log.exception('Error handling %s', job.name)
                job.sendWorkFail()

    def _dispatch(self, job) -> None:
        name = job.name.decode('utf8') if isinstance(job.name, bytes) else job.name
        if name == FUNCTION_EXECUTE or name.startswith(FUNCTION_EXECUTE + ':'):
            self._start_build(job)
        elif name == stop_function(self.settings.hostname):
            request = StopRequest.from_json(job.arguments)
            build = self.builds.get(request.uuid)
            if build is not None:
                build.stop()
            job.sendWorkComplete(b'{}')
        else:
            job.sendWorkFail()

    def _start_build(self, job) -> None:
        try:
            request = ExecuteRequest.from_json(job.arguments)
        except (ProtocolVersionError, ValueError, TypeError, KeyError) as exc:
            log.error('Refusing execute request: %s', exc)
            job.sendWorkException(str(exc).encode('utf8'))
            return
        with self._lock:
            # Each build starts an ssh-agent of its own (BuildExecution.run).
            build = BuildExecution(request, self.settings, self.merger, sandbox=self.sandbox,
                                   progress=lambda phase: self._on_phase(job, request, phase),
                                   on_pre_fail=lambda line: self._send_progress(
                                       job, request, 'run', pre_fail=True),
                                   semaphore_client=self.semaphore_client)
            build.on_playbook_end = self.stats.playbook_ended
            self.builds[request.uuid] = build
            self.starting.add(request.uuid)
            self._starting_since[request.uuid] = time.monotonic()
        self.stats.build_started()
        self._update_registration()
        self.log_streamer.register(request.uuid, build.jobdir.job_output_txt,
                                   root=build.jobdir.root)
        if self.build_records is not None:
            self.build_records.started(request.uuid, self.settings.hostname,
                                       self.log_streamer.url(request.uuid))
        self._send_progress(job, request, None)
        threading.Thread(target=self._run_build, args=(job, request, build),
                         name=f'build-{request.uuid[:8]}', daemon=True).start()

    def _on_phase(self, job, request: ExecuteRequest, phase: str) -> None:
        """A build's phase began: once it reaches a playbook it no longer
        counts as starting."""
        self._send_progress(job, request, phase)
        if phase != 'prepare':
            self._started(request.uuid)

    def _started(self, uuid: str) -> None:
        with self._lock:
            was_starting = uuid in self.starting
            self.starting.discard(uuid)
            since = self._starting_since.pop(uuid, None)
        if was_starting:
            if since is not None:
                self.stats.starting_ended(time.monotonic() - since)
            self._update_registration()

    def _send_progress(self, job, request: ExecuteRequest, phase: str | None,
                       pre_fail: bool = False) -> None:
        progress = BuildProgress(worker_hostname=self.settings.hostname,
                                 url=self.log_streamer.url(request.uuid), phase=phase,
                                 pre_fail=pre_fail)
        job.sendWorkData(progress.to_json())

    def _run_build(self, job, request: ExecuteRequest, build: BuildExecution) -> None:
        try:
            result = build.run()
        except Exception as exc:  # never leave the scheduler waiting
            log.exception('Build %s crashed', request.uuid)
            result = BuildResult(result='ERROR', error_detail=str(exc), attempt=request.attempt)
        finally:
            self.log_streamer.finish(request.uuid)
        try:
            if self.build_records is not None:
                self.build_records.completed(request.uuid, self.settings.hostname,
                                             result.to_json())
            job.sendWorkComplete(result.to_json())
        finally:
            with self._idle:
                self.builds.pop(request.uuid, None)
                self.starting.discard(request.uuid)
                self._starting_since.pop(request.uuid, None)
                self._idle.notify_all()
            self._update_registration()
