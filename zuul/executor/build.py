"""One build from request to result.

``BuildExecution.run()`` prepares the job dir (repos at their speculative
state, playbook and role checkouts, inventory, variables), runs the
playbooks phase by phase and maps what happened to a result, as released
Zuul does:

* pre-run: a failure, a timeout or an unreachable node stops the build
  before ``run`` and it is retried (RETRY while ``attempt < attempts``,
  then RETRY_LIMIT);
* run: failure -> FAILURE, unreachable node -> retry, the job ``timeout``
  (shared by pre-run and run) -> TIMED_OUT;
* post-run: always runs; failure or running past ``post-timeout`` (each
  post playbook gets the whole of it) -> POST_FAILURE, unless the build
  already failed before ``run`` or timed out;
* cleanup-run: always runs, its result is ignored.

ansible-playbook exits 4 for an unreachable host and for a playbook it
cannot load: only a console reporting an unreachable host counts as the
first. A FAILURE or POST_FAILURE whose console matches one of the
tenant's ``infra-failure-patterns`` is retried like a pre-run failure.
Each result says why in ``failure_class`` (zuul.executor.infrafailure).

A build stopped (aborted) runs no more playbooks but its cleanup ones:
post-run entries marked ``cleanup`` and every cleanup-run playbook, each
within ``cleanup_timeout``; the result is ABORTED.

With ``[executor] disk_limit_per_job`` the job dir is measured while the
build runs (``zuul.executor.diskusage``) and before each playbook: a build
using more is stopped as above (ABORTED) and its error detail says so.

A playbook whose entry names ``semaphores`` starts only once the
scheduler gave them to it (``zuul.executor.semaphores``; the console
says while it waits, and the wait counts against the playbook's
timeout); they are given back when it ends.

With ``failure-output`` the console of each run playbook is watched
(``zuul.executor.failureoutput``): the first matching line is announced at
once (``on_pre_fail``) and the result is FAILURE even if the playbooks
succeed.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time

from zuul.executor import (
    ansible_versions,
    ansiblecfg,
    diskusage,
    failureoutput,
    includevars,
    infrafailure,
    inventory,
    kube,
    logarchive,
    semaphores,
)
from zuul.executor.jobdir import JobDir, PreparedPlaybook
from zuul.executor.playbooks import PlaybookError, PlaybookPreparer
from zuul.executor.protocol import BuildResult, ExecuteRequest
from zuul.executor.runner import (
    ABORTED,
    NORMAL,
    RC_FAILED_HOSTS,
    TIMED_OUT,
    PlaybookProcessRunner,
)
from zuul.executor.sandbox import BubblewrapSandbox, SandboxMounts, user_files
from zuul.executor.settings import ExecutorSettings
from zuul.executor.sshagent import SshAgent, add_build_keys
from zuul.executor.vars import git_head, zuul_vars
from zuul.executor.workspace import MergeConflictError, Workspace, WorkspaceError, src_dir
from zuul.lib import safefile, yamlutil

log = logging.getLogger('zuul.executor.build')

PHASES = ('pre_run', 'run', 'post_run', 'cleanup_run')
_LABELS = {'pre_run': 'PRE-RUN', 'run': 'RUN', 'post_run': 'POST-RUN',
           'cleanup_run': 'CLEANUP'}


class BuildExecution:
    """Runs one ExecuteRequest.  ``progress(phase)`` is called as phases
    start, ``on_pre_fail(line)`` once when a console line matches the
    job's ``failure-output``; ``stop()`` may be called from another
    thread."""

    def __init__(self, request: ExecuteRequest, settings: ExecutorSettings, merger,
                 sandbox: BubblewrapSandbox | None = None, ssh_auth_sock: str | None = None,
                 progress=None, on_pre_fail=None, semaphore_client=None):
        self.request = request
        self.settings = settings
        self.jobdir = JobDir(settings.job_dir, request.uuid)
        self.workspace = Workspace(merger, request)
        self.sandbox = sandbox
        # The build's own ssh-agent (started by run() unless the caller
        # hands in an agent socket of its own).
        self.ssh_auth_sock = ssh_auth_sock
        self.agent: SshAgent | None = None
        self.progress = progress or (lambda phase: None)
        # Called as each playbook ends: (phase, RESULT_*) (executor metrics).
        self.on_playbook_end = lambda phase, result: None
        self.on_pre_fail = on_pre_fail or (lambda line: None)
        self.failure_regexes: list = []
        # The console line that matched ``failure-output``, if one did.
        self.early_failure: str | None = None
        # Variables of the job's include-vars files (below its own vars).
        self.included_vars: dict = {}
        self.runner = PlaybookProcessRunner()
        # Cleanup playbooks (cleanup-run, post-run entries with ``cleanup``)
        # run even once the build is stopped: a runner stop() leaves alone.
        self.cleanup_runner = PlaybookProcessRunner()
        self.ansible_playbook = settings.ansible_playbook
        self.playbooks: dict[str, list[PreparedPlaybook]] = {p: [] for p in PHASES}
        # Why the build was stopped when the disk limit stopped it.
        self.disk_limit_detail: str | None = None
        self.disk_watcher: diskusage.DiskLimitWatcher | None = None
        # zuul.executor.semaphores.SemaphoreClient: playbook semaphores.
        self.semaphore_client = semaphore_client
        # Why the build is retried (zuul.executor.infrafailure), if it is.
        self.failure_class: str | None = None
        self._stopped = threading.Event()
        # Stopped because the executor stops: retried, not ABORTED.
        self.shutdown = False
        # The speculative state the playbooks ran on (BuildResult).
        self.merged_state: dict = {}

    # -- public ----------------------------------------------------------
    def stop(self, shutdown: bool = False) -> None:
        """Abort the build; ``shutdown``: because the executor stops (the
        result is then RETRY, class ``infra:executor-stopped``: the
        scheduler runs it again without counting this attempt)."""
        self.shutdown = self.shutdown or shutdown
        self._stopped.set()
        self.runner.abort()

    def run(self) -> BuildResult:
        start = time.time()
        self.jobdir.create()
        self._watch_disk()
        try:
            self._start_agent()
            result, detail = self._prepare_and_run()
        except Exception as exc:  # a bug or an environment failure: say so
            log.exception('Build %s failed', self.request.uuid)
            result, detail = 'ERROR', f'{type(exc).__name__}: {exc}'
        finally:
            if self.disk_watcher is not None:
                self.disk_watcher.stop()
            self._stop_control_masters()
            if self.agent is not None:
                self.agent.stop()
        if result == 'ABORTED' and self.disk_limit_detail:
            detail = self.disk_limit_detail
        elif result == 'ABORTED' and self.shutdown:
            result = 'RETRY'
            self.failure_class = infrafailure.EXECUTOR_STOPPED
            detail = (f'the executor {self.settings.hostname} stopped while the build ran: '
                      'it runs again')
        data = self._read_result_data()
        log_url = self._archive_logs()
        if not self.settings.keep_jobdir:
            self.jobdir.cleanup()
        merger = self.workspace.merger
        git_user = [getattr(merger, 'user_name', None), getattr(merger, 'user_email', None)]
        return BuildResult(result=result, data=data, error_detail=detail,
                           attempt=self.request.attempt, start_time=start, end_time=time.time(),
                           log_url=log_url, failure_class=self._failure_class(result),
                           merged_state=self.merged_state,
                           git_user=git_user if all(git_user) else [])

    # -- the build's ssh-agent ------------------------------------------
    def _start_agent(self) -> None:
        """One agent per build, holding the node key: no build can list,
        remove or use another's (zuul.executor.sshagent)."""
        if self.ssh_auth_sock is not None or not (self.settings.private_key_file or
                                                  self.request.ssh_keys):
            return
        self.agent = SshAgent(self.jobdir.agent_socket).start(
            self.settings.private_key_file or None)
        self.ssh_auth_sock = self.agent.socket_path
        add_build_keys(self.agent, self.request.ssh_keys)

    # -- disk limit ------------------------------------------------------
    def _watch_disk(self) -> None:
        limit = self.settings.disk_limit_per_job
        if limit and limit > 0:
            self.disk_watcher = diskusage.DiskLimitWatcher(
                self.jobdir.root, limit, self.settings.disk_check_interval,
                self._disk_limit_exceeded).start()

    def _disk_limit_exceeded(self, used: int) -> None:
        limit = self.settings.disk_limit_per_job
        self.disk_limit_detail = (
            f'The job used {used / diskusage.MB:.1f} MB of disk on the executor, more than '
            f'its limit of {limit} MB ([executor] disk_limit_per_job): build stopped')
        log.warning('Build %s: %s', self.request.uuid, self.disk_limit_detail)
        self._log_line(self.disk_limit_detail)
        self.stop()

    def _check_disk(self) -> None:
        if self.disk_watcher is not None:
            self.disk_watcher.check()

    # -- preparation -----------------------------------------------------
    def _prepare_and_run(self) -> tuple[str, str | None]:
        try:
            inventory.check_job(self.request.job, self.request.nodes)
        except inventory.InventoryError as exc:
            return 'ERROR', str(exc)
        try:
            self.ansible_playbook = ansible_versions.playbook_command(
                self.settings, self.request.job.ansible_version)
        except ansible_versions.UnknownAnsibleVersionError as exc:
            return 'ERROR', str(exc)
        try:
            self.failure_regexes = failureoutput.compile_patterns(
                self.request.job.failure_output)
        except failureoutput.FailureOutputError as exc:
            return 'ERROR', str(exc)
        self.progress('prepare')
        try:
            merged_state = self.workspace.merge()
        except MergeConflictError as exc:
            return 'MERGER_FAILURE', exc.detail
        self.merged_state = merged_state
        try:
            checkouts = self._prepare_sources(merged_state)
            self.included_vars = self._load_include_vars(checkouts)
        except (WorkspaceError, includevars.IncludeVarsError) as exc:
            return 'ERROR', str(exc)
        trusted_state = self._trusted_state()
        if trusted_state is None:
            return 'ERROR', ('No repo state without the changes under test is known for '
                             'trusted content: refusing to run it')
        preparer = PlaybookPreparer(self.jobdir, self._checkout_fn(), trusted_state,
                                    merged_state)
        try:
            self._prepare_playbooks(preparer)
        except PlaybookError as exc:
            return 'ERROR', str(exc)
        self._write_ansible_files(checkouts)
        self._check_disk()
        if self.runner.aborted:
            return 'ABORTED', None
        return self._run_phases(), None

    def _trusted_state(self) -> dict | None:
        """The repo state trusted playbooks and roles come from: the state
        before any item's change (a change to a config project acts only
        once merged).  Never the speculative state: None if no such state
        is known while the items carry changes."""
        state = self.workspace.base_state
        has_changes = any(i.ref and i.number is not None for i in self.request.items)
        if not state and has_changes:
            return None
        return state

    def _checkout_fn(self):
        def checkout(state, projects, dest_root):
            return self.workspace.checkout(state, projects, dest_root)
        return checkout

    def _prepare_sources(self, repo_state: dict) -> dict:
        projects = self.workspace.source_projects(repo_state)
        self.workspace.checkout_sources(repo_state, projects, self.jobdir.work_root,
                                        os.path.join(self.jobdir.root, 'src-staging'))
        item = self.request.items[-1] if self.request.items else None
        default = item.branch if item else None
        return {(c, p): (b or default) for c, p, b in projects}

    def _load_include_vars(self, checkouts: dict) -> dict:
        """The job's ``include-vars``, read from the projects' checkouts
        (``use-ref``) or from their branches without the changes."""
        entries = self.request.job.include_vars
        if not entries:
            return {}
        item = self.request.items[-1] if self.request.items else None
        default = (item.connection, item.project) if item else None
        hostnames = self.workspace.hostnames
        scheme = self.request.job.workspace_scheme or 'golang'
        counter = iter(range(len(entries)))

        def root(connection: str, project: str, use_ref: bool) -> str:
            if use_ref:
                return os.path.join(self.jobdir.work_root, src_dir(
                    scheme, hostnames.get(connection, connection), project))
            dest = os.path.join(self.jobdir.root, 'include-vars', str(next(counter)))
            branch = checkouts.get((connection, project))
            paths = self.workspace.checkout(self.workspace.base_state,
                                            [(connection, project, branch)], dest)
            return paths[(connection, project)]
        return includevars.load_include_vars(entries, default, checkouts, hostnames, root)

    def _prepare_playbooks(self, preparer: PlaybookPreparer) -> None:
        job = self.request.job
        for phase in PHASES:
            for index, spec in enumerate(getattr(job, phase)):
                prepared = preparer.prepare(phase, index, spec)
                prepared.secrets = dict(spec.secrets)
                prepared.cleanup = bool(spec.cleanup)
                prepared.semaphores = list(spec.semaphores)
                prepared.label = (f'{"trusted" if spec.trusted else "untrusted"} : '
                                  f'{spec.project}/{spec.path}@{spec.branch}')
                self.playbooks[phase].append(prepared)

    def _write_ansible_files(self, checkouts: dict) -> None:
        request = self.request
        zuul = zuul_vars(request, self.jobdir, self.settings.hostname, checkouts,
                         playbook_context=self._playbook_context(),
                         ansible_playbook=self.ansible_playbook)
        all_vars = {**self.included_vars, **request.job.vars}
        kubeconf = kube.write_for_build(self.jobdir.ansible_root, self.jobdir.work_root,
                                        request.nodes)
        zuul['resources'] = kubeconf.resources
        inv = inventory.build_inventory(request.job, request.nodes, all_vars,
                                        self.settings.default_username, kubeconf)
        _write_vars(self.jobdir.inventory_file, inv)
        with open(self.jobdir.known_hosts, 'w') as f:
            f.write('\n'.join(inventory.known_hosts_lines(request.nodes)) + '\n')
        # zuul and extra-vars go in as extra vars: nothing in a playbook
        # can override them.  Every string of ``zuul`` is unsafe text: a
        # commit message, a topic or a branch name is never a template.
        _write_vars(self.zuul_vars_file, {'zuul': yamlutil.mark_unsafe(zuul)})
        _write_vars(self.extra_vars_file, dict(request.job.extra_vars))
        # Site variables ([executor] variables) outrank everything a job sets.
        _write_vars(self.site_vars_file, dict(self.settings.site_variables))
        ansiblecfg.write_configs(self.jobdir)

    def _playbook_context(self) -> dict:
        """``zuul.playbook_context``: the playbook checkouts and, per phase,
        each playbook's path and role path (relative to the build dir)."""
        root = self.jobdir.root
        specs = {phase: getattr(self.request.job, phase) for phase in PHASES}
        projects: dict = {}
        lists: dict = {'pre_run': [], 'run': [], 'post_run': [], 'cleanup_run': []}
        for phase in PHASES:
            for prepared, spec in zip(self.playbooks[phase], specs[phase]):
                rel_root = os.path.relpath(prepared.project_root, root)
                if rel_root not in projects:
                    # .../<trusted|untrusted>/project_<n>/<hostname>/<name>
                    parts = rel_root.split(os.sep)
                    at = next((i for i, p in enumerate(parts) if p.startswith('project_')),
                              -1)
                    canonical = '/'.join(parts[at + 1:])
                    projects[rel_root] = {'canonical_name': canonical,
                                          'checkout': spec.branch,
                                          'commit': git_head(prepared.project_root)}
                lists[phase].append({
                    'path': os.path.relpath(prepared.path, root),
                    'roles': [{'role_path': os.path.relpath(r, root)}
                              for r in prepared.roles_path]})
        return {'playbook_projects': projects, 'pre_playbooks': lists['pre_run'],
                'playbooks': lists['run'], 'post_playbooks': lists['post_run'],
                'cleanup_playbooks': lists['cleanup_run']}

    @property
    def zuul_vars_file(self) -> str:
        return os.path.join(self.jobdir.ansible_root, 'zuul-vars.yaml')

    @property
    def site_vars_file(self) -> str:
        return os.path.join(self.jobdir.ansible_root, 'site-vars.yaml')

    @property
    def extra_vars_file(self) -> str:
        return os.path.join(self.jobdir.ansible_root, 'extra-vars.yaml')

    # -- running ---------------------------------------------------------
    def _run_phases(self) -> str:
        job = self.request.job
        result, retry = self._run_main(job.timeout)
        post_timeout = job.post_timeout or self.settings.default_post_timeout
        aborted = result == 'ABORTED'
        for playbook in self.playbooks['post_run']:
            if aborted:
                # Aborted: only the entries marked ``cleanup`` still run.
                if playbook.cleanup:
                    self._run_playbook(playbook, self.settings.cleanup_timeout, cleanup=True)
                continue
            outcome = self._run_playbook(playbook, post_timeout)
            if outcome.status == ABORTED:
                aborted = True
            elif outcome.unreachable:
                retry = True
                self.failure_class = self.failure_class or infrafailure.UNREACHABLE
            elif not outcome.ok and result in ('SUCCESS', 'FAILURE'):
                result = 'POST_FAILURE'
        for playbook in self.playbooks['cleanup_run']:
            self._run_playbook(playbook, self.settings.cleanup_timeout, cleanup=True)
        if aborted:
            return 'ABORTED'
        retry = retry or self._infra_pattern_matched(result)
        if retry:
            attempts = max(1, self.request.job.attempts)
            return 'RETRY' if self.request.attempt < attempts else 'RETRY_LIMIT'
        return result

    def _run_main(self, timeout: int | None) -> tuple[str | None, bool]:
        """Pre-run and run: (result, retry)."""
        deadline = time.monotonic() + timeout if timeout else None
        for playbook in self.playbooks['pre_run']:
            outcome = self._run_playbook(playbook, _remaining(deadline))
            if outcome.status == ABORTED:
                return 'ABORTED', False
            if not outcome.ok:
                self.failure_class = (infrafailure.UNREACHABLE if outcome.unreachable
                                      else infrafailure.PRE_RUN)
                return None, True
        result = 'SUCCESS'
        for playbook in self.playbooks['run']:
            outcome = self._run_playbook(playbook, _remaining(deadline))
            if outcome.status == ABORTED:
                return 'ABORTED', False
            if outcome.status == TIMED_OUT:
                return 'TIMED_OUT', False
            if outcome.unreachable:
                self.failure_class = infrafailure.UNREACHABLE
                return None, True
            if not outcome.ok:
                return 'FAILURE', False
        if self.early_failure is not None:
            # failure-output matched: announced as failing, so it fails.
            return 'FAILURE', False
        return result, False

    def _confirm_unreachable(self, outcome, console_start: int):
        """ansible-playbook exits 4 both when a host was unreachable and
        when it could not load the playbook: only the first is the
        infrastructure's (and retried); the second fails like a task."""
        if not outcome.unreachable or infrafailure.console_shows_unreachable(
                self.jobdir.work_root, self.jobdir.job_output_txt, console_start):
            return outcome
        self._log_line('ansible-playbook exited 4 but no host was unreachable: a playbook '
                       'error, not retried')
        return dataclasses.replace(outcome, returncode=RC_FAILED_HOSTS)

    def _infra_pattern_matched(self, result: str | None) -> bool:
        """A failed build whose console matches one of the tenant's
        ``infra-failure-patterns`` failed because of the infrastructure."""
        patterns = self.request.infra_failure_patterns
        if result not in ('FAILURE', 'POST_FAILURE') or not patterns:
            return False
        try:
            regexes = infrafailure.compile_patterns(patterns)
        except infrafailure.PatternError as exc:
            log.warning('Build %s: %s', self.request.uuid, exc)
            return False
        matched = infrafailure.first_matching_pattern(
            regexes, self.jobdir.work_root, self.jobdir.job_output_txt)
        if matched is None:
            return False
        self.failure_class = infrafailure.pattern_class(matched)
        self._log_line(f'Infrastructure failure: the console matched {matched!r}: '
                       'the build is retried')
        return True

    def _failure_class(self, result: str) -> str | None:
        """The class sent with the result: why it is retried, or
        ``test`` for a failure of the job itself."""
        if result in ('RETRY', 'RETRY_LIMIT'):
            return self.failure_class or infrafailure.PRE_RUN
        if result in ('FAILURE', 'POST_FAILURE', 'TIMED_OUT'):
            return infrafailure.TEST
        return None

    def _run_playbook(self, playbook: PreparedPlaybook, timeout: float | None,
                      cleanup: bool = False):
        """Run one playbook; ``cleanup`` ones run even after ``stop()``
        (within ``cleanup_timeout``).  The outcome."""
        from zuul.executor.runner import PlaybookOutcome
        label = f'{_LABELS[playbook.phase]} START: [{playbook.label}]'
        self.progress(playbook.phase)
        self._log_line(label)
        console_start = failureoutput.log_size(self.jobdir.work_root, self.jobdir.job_output_txt)
        watcher = self._watch_failure_output(playbook)
        if not cleanup:
            self._check_disk()
        deadline = time.monotonic() + timeout if timeout is not None else None
        held = self._take_semaphores(playbook, deadline, cleanup)
        try:
            if held is not None:
                outcome = PlaybookOutcome(held, None, 0.0)
            elif timeout is not None and _remaining(deadline) <= 0:
                outcome = PlaybookOutcome(TIMED_OUT, None, 0.0)
            else:
                runner = self.cleanup_runner if cleanup else self.runner
                outcome = self._start_playbook(playbook, _remaining(deadline), runner)
        finally:
            if held is None:
                self._give_semaphores(playbook)
        if watcher is not None and watcher.stop() is not None:
            self._log_line(f'Early failure in job: failure-output matched: {watcher.matched}')
        outcome = self._confirm_unreachable(outcome, console_start)
        status = f'RESULT_{outcome.status}' if outcome.status != NORMAL else (
            'RESULT_NORMAL' if outcome.ok else
            'RESULT_UNREACHABLE' if outcome.unreachable else 'RESULT_FAILED')
        self._log_line(f'{_LABELS[playbook.phase]} END {status}: [{playbook.label}]')
        self.on_playbook_end(playbook.phase, status)
        return outcome

    def _take_semaphores(self, playbook: PreparedPlaybook, deadline: float | None,
                         cleanup: bool) -> str | None:
        """Wait for the playbook's semaphores: None once held (or when it
        names none), else the outcome status (ABORTED, TIMED_OUT)."""
        if not playbook.semaphores:
            return None
        if self.semaphore_client is None:
            self._log_line('Semaphores not taken (this executor has no scheduler to ask): '
                           + ', '.join(playbook.semaphores))
            return None
        tenant = self.request.zuul.tenant if self.request.zuul else ''
        state = semaphores.wait_for_semaphores(
            self.semaphore_client, tenant, self.request.uuid, _holder(playbook),
            playbook.semaphores, should_stop=lambda: self._stopped.is_set() and not cleanup,
            announce=self._log_line, deadline=deadline,
            sleep=time.sleep if cleanup else self._stopped.wait)
        return {'acquired': None, 'stopped': ABORTED, 'timed_out': TIMED_OUT}[state]

    def _give_semaphores(self, playbook: PreparedPlaybook) -> None:
        if not playbook.semaphores or self.semaphore_client is None:
            return
        tenant = self.request.zuul.tenant if self.request.zuul else ''
        try:
            self.semaphore_client.release(tenant, self.request.uuid, _holder(playbook))
        except Exception as exc:  # the scheduler frees them when the build ends
            log.warning('Build %s: semaphores of %s not released: %s', self.request.uuid,
                        playbook.label, exc)

    def _watch_failure_output(self, playbook: PreparedPlaybook):
        """A watcher of the console from here on, for a run playbook of a
        job with ``failure-output`` that has not matched yet."""
        if playbook.phase != 'run' or not self.failure_regexes or self.early_failure:
            return None
        root, path = self.jobdir.work_root, self.jobdir.job_output_txt
        return failureoutput.FailureOutputWatcher(
            self.failure_regexes, root, path, failureoutput.log_size(root, path),
            self._pre_fail).start()

    def _pre_fail(self, line: str) -> None:
        if self.early_failure is None:
            self.early_failure = line
            log.info('Build %s: failure-output matched %r', self.request.uuid, line)
            self.on_pre_fail(line)

    def _start_playbook(self, playbook: PreparedPlaybook, timeout: float | None, runner):
        home = (self.jobdir.playbook_home(playbook.phase, playbook.index) if playbook.trusted
                else self.jobdir.home)
        secrets = _SecretsFile(playbook.secrets, self.jobdir, sandboxed=self._sandboxed(playbook))
        try:
            command, cwd = self._command(playbook, secrets, home)
            env = ansiblecfg.playbook_env(
                self.jobdir, trusted=playbook.trusted, phase=playbook.phase,
                label=playbook.label, roles_path=playbook.roles_path,
                ssh_auth_sock=self.ssh_auth_sock, home=home,
                split_streams=self.request.job.ansible_split_streams,
                ro_paths=self.settings.untrusted_ro_paths,
                rw_paths=self.settings.untrusted_rw_paths)
            log_path = os.path.join(self.jobdir.playbook_dir(playbook.phase, playbook.index),
                                    'ansible.log')
            return runner.run(command, env, cwd, log_path, timeout, pass_fds=secrets.pass_fds)
        finally:
            secrets.remove()
            if playbook.trusted:
                # What the trusted run left in its HOME (ansible's local
                # temp files, maybe rendered with secrets) goes with it.
                shutil.rmtree(home, ignore_errors=True)

    def _sandboxed(self, playbook: PreparedPlaybook) -> bool:
        """Trusted and untrusted playbooks alike run in bubblewrap (unless
        the executor runs with ``sandbox_untrusted`` off, for development)."""
        return self.sandbox is not None

    def _command(self, playbook: PreparedPlaybook, secrets: _SecretsFile, home: str
                 ) -> tuple[list[str], str]:
        """The command line and working directory of one run.  A trusted run
        works in its own HOME (under ``ansible/``, which no untrusted
        playbook can write), an untrusted one in ``work/``."""
        command = [self.ansible_playbook, playbook.path,
                   '-e', f'@{self.extra_vars_file}', '-e', f'@{self.zuul_vars_file}']
        if secrets.path:
            command += ['-e', f'@{secrets.path}']
        command += ['-e', f'@{self.site_vars_file}']
        cwd = home if playbook.trusted else self.jobdir.work_root
        if self._sandboxed(playbook):
            if playbook.trusted:
                mounts, sandbox = self._trusted_mounts(home), self.trusted_sandbox
            else:
                mounts, sandbox = self._sandbox_mounts(), self.sandbox
            if secrets.fd is not None:
                mounts.empty.append(os.path.dirname(secrets.path))
                mounts.files.append((secrets.fd, secrets.path))
            command = sandbox.wrap(command, mounts, sockets=[self.ssh_auth_sock], cwd=cwd)
        return command, cwd

    @property
    def trusted_sandbox(self) -> BubblewrapSandbox | None:
        """The sandbox of trusted runs: the untrusted one's, with the
        executor's ``trusted_ro_paths``/``trusted_rw_paths`` bound instead."""
        if self.sandbox is None:
            return None
        return dataclasses.replace(self.sandbox, ro_paths=list(self.settings.trusted_ro_paths),
                                   rw_paths=list(self.settings.trusted_rw_paths))

    def _ansible_install(self) -> list[str]:
        if self.ansible_playbook == self.settings.ansible_playbook:
            return []
        # Another install (zuul-manage-ansible's, under ansible_root, maybe
        # inside the hidden state dir): visible read-only.
        return [os.path.realpath(os.path.dirname(os.path.dirname(self.ansible_playbook)))]

    def _sandbox_mounts(self) -> SandboxMounts:
        """An untrusted run: its build read-only, ``work/`` and its own
        state writable, a fresh empty HOME."""
        jd = self.jobdir
        passwd, group = user_files(jd.ansible_root, jd.home)
        return SandboxMounts(
            readonly=[jd.root] + self._ansible_install(),
            writable=[jd.work_root, jd.untrusted_state, jd.untrusted_control_path_dir],
            empty=[jd.home, jd.fact_cache, jd.control_path_dir],
            passwd=passwd, group=group)

    def _trusted_mounts(self, home: str) -> SandboxMounts:
        """A trusted run: its build read-only; ``work/``, its own HOME (its
        working directory), the trusted fact cache and SSH control sockets
        writable; the untrusted runs' state out of sight."""
        jd = self.jobdir
        passwd, group = user_files(os.path.dirname(home), home)
        return SandboxMounts(
            readonly=[jd.root] + self._ansible_install(),
            writable=[jd.work_root, home, jd.fact_cache, jd.control_path_dir],
            empty=[jd.home, jd.untrusted_state],
            passwd=passwd, group=group)

    # -- helpers ---------------------------------------------------------
    def _log_line(self, text: str) -> None:
        """Append an executor line to job-output.txt, never through a
        symlink an untrusted playbook may have planted in its place."""
        stamp = time.strftime('%Y-%m-%d %H:%M:%S')
        try:
            with safefile.open_file_beneath(self.jobdir.work_root, self.jobdir.job_output_txt,
                                            'a') as f:
                f.write(f'{stamp}.000000 | {text}\n')
        except OSError as exc:
            log.warning('Build %s: not writing to job-output.txt: %s', self.request.uuid, exc)

    def _archive_logs(self) -> str | None:
        """Keep ``work/logs`` below ``[executor] log_root``; the build's
        log URL if there is one for it."""
        settings = self.settings
        if not settings.log_root:
            return None
        uuid = self.request.uuid
        try:
            report = logarchive.archive_build_logs(self.jobdir.root, uuid, settings.log_root,
                                                   settings.max_log_bytes)
        except Exception:  # never turn a finished build into an error
            log.exception('Build %s: logs not archived', uuid)
            return None
        log.info('Build %s: archived %d log files (%d bytes)%s', uuid, report.files,
                 report.bytes, f'; truncated: {report.truncated}' if report.truncated else '')
        return logarchive.log_url_for(settings.log_url, uuid) if settings.log_url else None

    def _read_result_data(self) -> dict:
        try:
            with safefile.open_file_beneath(self.jobdir.work_root,
                                            self.jobdir.result_data_file) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _stop_control_masters(self) -> None:
        """End the build's SSH masters (they outlive ansible-playbook)."""
        for sock in glob.glob(os.path.join(self.jobdir.control_path_dir, '*')):
            subprocess.run(['ssh', '-o', f'ControlPath={sock}', '-O', 'exit', 'node'],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=10, check=False)


def _holder(playbook: PreparedPlaybook) -> str:
    """The playbook within its build, for the scheduler's holder key."""
    return f'{playbook.phase} {playbook.index}'


def _remaining(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    return deadline - time.monotonic()


class _SecretsFile:
    """Where one playbook run finds its decrypted secrets: never on a
    persistent disk.  Sandboxed runs get them from an anonymous memory file
    that bubblewrap copies onto a tmpfs of the sandbox's own (gone with
    the run); trusted runs from a private file on the executor's tmpfs
    (/dev/shm), removed when the run ends."""

    def __init__(self, secrets: dict, jobdir: JobDir, sandboxed: bool):
        self.fd: int | None = None
        self.path: str | None = None
        self._dir: str | None = None
        if not secrets:
            return
        data = yamlutil.dump_for_ansible(secrets).encode()
        if sandboxed:
            self.fd = os.memfd_create('zuul-secrets')
            _write_all(self.fd, data)
            os.lseek(self.fd, 0, os.SEEK_SET)
            self.path = os.path.join(jobdir.secrets_dir, 'secrets.yaml')
            return
        self._dir = tempfile.mkdtemp(prefix='zuul-secrets-', dir=_memory_tmp())
        self.path = os.path.join(self._dir, 'secrets.yaml')
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)

    @property
    def pass_fds(self) -> tuple:
        return (self.fd,) if self.fd is not None else ()

    def remove(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def _memory_tmp() -> str:
    """A RAM-backed directory for trusted runs' secrets files."""
    for candidate in (os.environ.get('XDG_RUNTIME_DIR'), '/dev/shm', '/run/shm'):
        if candidate and os.path.isdir(candidate) and _is_tmpfs(candidate):
            return candidate
    raise RuntimeError('no tmpfs (/dev/shm) to hold decrypted secrets: refusing to write '
                       'them to a persistent disk')


def _is_tmpfs(path: str) -> bool:
    real = os.path.realpath(path)
    try:
        with open('/proc/mounts') as f:
            mounts = [line.split() for line in f]
    except OSError:
        return False
    best = max((m for m in mounts if real == m[1] or real.startswith(m[1].rstrip('/') + '/')),
               key=lambda m: len(m[1]), default=None)
    return best is not None and best[2] in ('tmpfs', 'ramfs')


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def _write_vars(path: str, data, mode: int = 0o644) -> None:
    """Variables for Ansible: strings that came marked unsafe over the
    wire are written so Ansible never templates them (JSON: see
    zuul.lib.yamlutil.dump_for_ansible)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, 'w') as f:
        f.write(yamlutil.dump_for_ansible(data))
