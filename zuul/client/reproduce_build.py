"""The executor's preparation of a build, done in a ``zuul reproduce``
work directory: zuul.executor.build.BuildExecution prepares it exactly as
an executor would (merges, checkouts, playbook and role checkouts,
inventory, variables, ansible.cfg), and instead of running the
playbooks this module describes how each would run, for run.sh."""

from __future__ import annotations

import os
import sys
import tempfile
from types import SimpleNamespace

from zuul.client.commands import CLIError
from zuul.executor import ansible_versions, ansiblecfg
from zuul.executor.build import PHASES, BuildExecution
from zuul.executor.jobdir import JobDir
from zuul.executor.sandbox import BubblewrapSandbox
from zuul.executor.settings import ExecutorSettings
from zuul.lib import safefile, yamlutil
from zuul.merger.merger import Merger, MergerError
from zuul.merger.repos import GitError, RepoRemote, UnknownConnectionError

# The git identity of merge commits when the executor did not report its
# own ([merger] git_user_name/git_user_email; their dates come from the
# changes, so with the executor's identity they get the executor's ids).
GIT_USER = ('Zuul', 'zuul@localhost')


class _PreparedSignalError(Exception):
    """Raised where the executor would start the playbooks."""


class UrlResolver:
    """RepoUrlResolver for the URLs zuul-web handed out; the user's own
    git credentials (their SSH agent, GIT_SSH_COMMAND) are used."""

    def __init__(self, urls: dict):
        self.urls = urls

    def remote(self, connection: str, project: str) -> RepoRemote:
        url = (self.urls.get(connection) or {}).get(project)
        if not url:
            raise UnknownConnectionError(
                f'no git URL for {connection}/{project}: give --git-url {connection}=BASE_URL')
        env = {k: os.environ[k] for k in ('GIT_SSH_COMMAND', 'GIT_SSH') if k in os.environ}
        return RepoRemote(url, env)

    def url(self, connection: str, project: str) -> str:
        return self.remote(connection, project).url


class ReproductionBuild(BuildExecution):
    def __init__(self, request, workdir: str, git_urls: dict, key_file: str | None,
                 sandboxed: bool = True, git_user=None):
        key_file = os.path.abspath(key_file) if key_file else None
        # The key (when not in the work directory) is visible, read-only,
        # to the sandboxed runs, which see nothing else of your home.
        outside = [key_file] if key_file and not safefile.is_within(workdir, key_file) else []
        settings = ExecutorSettings(hostname='zuul-reproduce', job_dir=os.path.dirname(workdir),
                                    state_dir=os.path.join(workdir, 'state'),
                                    disk_limit_per_job=0, trusted_ro_paths=outside)
        name, email = git_user if git_user and len(git_user) == 2 else GIT_USER
        merger = Merger(os.path.join(workdir, 'git'), UrlResolver(git_urls),
                        git_user_name=name, git_user_email=email)
        super().__init__(request, settings, merger)
        self.workdir = workdir
        self.jobdir = JobDir(os.path.dirname(workdir), os.path.basename(workdir))
        # SSH control sockets need a short path (108 bytes): a work
        # directory deep in a tree would make ssh refuse every node.
        if len(self.jobdir.control_path_dir) > 40:
            self.jobdir.control_path_dir = tempfile.mkdtemp(prefix='zuul-repro-cp-')
            self.jobdir.untrusted_control_path_dir = tempfile.mkdtemp(prefix='zuul-repro-cu-')
        self.merger = merger
        self.key_file = key_file
        self.merged_state: dict = {}
        # Playbooks run in bubblewrap as on the executor (untrusted ones
        # come from the changes under test): None without it.
        self.sandbox = _sandbox(settings, outside) if sandboxed else None
        self.ssh_auth_sock = os.environ.get('SSH_AUTH_SOCK')

    def check_state(self, say) -> None:
        """Every commit the merger started from must still be there: a
        build whose state cannot be rebuilt is refused, saying why."""
        for conn, projects in sorted((self.request.repo_state or {}).items()):
            for project, refs in sorted(projects.items()):
                try:
                    repo = self.merger._repo(conn, project)
                    with repo.lock:
                        repo.fetch()
                except (MergerError, GitError) as e:
                    detail = getattr(e, 'stderr', None) or str(e)
                    raise CLIError(f'cannot rebuild the speculative state: {conn}/{project} '
                                   f'cannot be fetched ({detail.strip()})') from None
                with repo.lock:
                    missing = [sha for sha in refs.values() if not repo.has_commit(sha)]
                    if missing:
                        try:   # asked for by id: gone from every branch?
                            repo.fetch(missing, branches=False)
                        except GitError:
                            pass
                gone = [f'{ref} {sha}' for ref, sha in sorted(refs.items())
                        if not repo.has_commit(sha)]
                if gone:
                    raise CLIError(f'cannot rebuild the speculative state: {conn}/{project} '
                                   f'no longer has commit(s) {", ".join(gone)} '
                                   '(garbage-collected or the branch was rewritten)')
            say(f'{conn}: the commits the build started from are all there')

    def prepare(self, skipped: set) -> dict:
        self.jobdir.create()
        job = self.request.job
        try:
            ansible_versions.playbook_command(self.settings, job.ansible_version)
        except ansible_versions.UnknownAnsibleVersionError:
            job.ansible_version = None     # the Ansible installed here
        try:
            result, detail = self._prepare_and_run()
        except _PreparedSignalError:
            pass
        except (MergerError, GitError) as e:
            raise CLIError(f'cannot rebuild the speculative state: {e}') from None
        else:
            raise CLIError(f'cannot prepare the build ({result}): {detail}')
        self._check_inside()
        return self._plan(skipped)

    # Where the executor would run the playbooks: stop.
    def _run_phases(self) -> str:
        raise _PreparedSignalError()

    def _check_inside(self) -> None:
        """Nothing prepared (a checkout's symlink included) points the
        playbooks outside the work directory."""
        for phase in PHASES:
            for pb in self.playbooks[phase]:
                for path in (pb.path, pb.project_root):
                    if not safefile.is_within(self.workdir, path):
                        raise CLIError(f'refusing the build: {path} resolves outside the '
                                       'work directory')

    def _plan(self, skipped: set) -> dict:
        entries = []
        for phase in PHASES:
            for pb in self.playbooks[phase]:
                entry = {'phase': phase, 'index': pb.index, 'label': pb.label,
                         'trusted': pb.trusted}
                if (phase, pb.index) in skipped:
                    entry['skipped'] = 'needs a secret not supplied'
                    entries.append(entry)
                    continue
                entry.update(self._invocation(pb))
                entries.append(entry)
        state = self._merged_state()
        return {'uuid': self.request.uuid, 'job': self.request.job.name,
                'job_output': self.jobdir.job_output_txt,
                'playbooks': entries, 'state': state}

    def _merged_state(self) -> dict:
        return self.merged_state or dict(self.request.repo_state or {})

    def _invocation(self, pb) -> dict:
        home = (self.jobdir.playbook_home(pb.phase, pb.index) if pb.trusted
                else self.jobdir.home)
        secrets = SimpleNamespace(path=None, fd=None)
        if pb.secrets:   # the values you supplied, in the work directory
            secrets.path = os.path.join(self.jobdir.playbook_dir(pb.phase, pb.index),
                                        'your-secrets.yaml')
            fd = os.open(secrets.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, 'w') as f:
                f.write(yamlutil.dump_for_ansible(pb.secrets))
        command, cwd = self._command(pb, secrets, home)
        env = ansiblecfg.playbook_env(
            self.jobdir, trusted=pb.trusted, phase=pb.phase, label=pb.label,
            roles_path=pb.roles_path, ssh_auth_sock=self.ssh_auth_sock,
            home=home, split_streams=self.request.job.ansible_split_streams)
        if self.key_file:
            env['ANSIBLE_PRIVATE_KEY_FILE'] = self.key_file
        env = {k: v for k, v in env.items() if v is not None}
        return {'command': command, 'env': env, 'cwd': cwd}


def _sandbox(settings: ExecutorSettings, outside: list) -> BubblewrapSandbox | None:
    """zuul.executor.server's sandbox, the reproduction's state hidden."""
    sandbox = BubblewrapSandbox(
        hidden_paths=[settings.state_dir],
        readonly_paths=[sys.base_prefix, sys.prefix,
                        os.path.join(ansiblecfg.CODE_ROOT, 'zuul')],
        ro_paths=list(outside))
    return sandbox if sandbox.available() else None
