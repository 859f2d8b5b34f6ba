"""The merger's git repo cache: where each project is fetched from, and
one working repository per connection/project under ``git_dir``.

Every git command runs as a subprocess.  Commands that only touch the
local repository run with the system and global git configuration
switched off, so that merges give the same commits on any host whatever
its ``~/.gitconfig`` says; fetches keep them (proxies, ssh settings).
A repository is used by one thread at a time (``Repo.lock``).
"""

from __future__ import annotations

import base64
import logging
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

log = logging.getLogger('zuul.merger.repos')

# The refs a cache repo keeps: origin's branches and tags, and every
# change ref it fetched (immutable in Gerrit), under refs/zuul/fetched/.
BRANCH_PREFIX = 'refs/remotes/origin/'
FETCHED_PREFIX = 'refs/zuul/fetched/'
SHA_RE = re.compile(r'^[0-9a-f]{40}$')

_TRUE = ('1', 'true', 'yes', 'on')
_FALSE = ('0', 'false', 'no', 'off')


class GitError(Exception):
    """A git command failed; ``stderr`` says why."""

    def __init__(self, args, returncode: int, stderr: str):
        self.command = ' '.join(args)
        self.returncode = returncode
        self.stderr = stderr.strip()
        super().__init__(f'git {self.command} failed ({returncode}): {self.stderr}')


class UnknownConnectionError(LookupError):
    """No git URL is known for a connection."""


@dataclass(frozen=True)
class RepoRemote:
    """Where a project is fetched from.  ``url`` never carries
    credentials; ``env`` holds what authenticates (GIT_SSH_COMMAND, or
    an http header passed as GIT_CONFIG_* variables)."""

    url: str
    env: dict = field(default_factory=dict)
    # How long commits missing after a fetch are fetched again (GitHub's
    # ``repo_retry_timeout``: a ``repo_cache`` mirror lags its server).
    retry_timeout: float = 0.0


def _bool_option(value) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    return None


def _config_env(pairs: list[tuple[str, str]]) -> dict:
    """Git configuration passed through the environment (not argv, so
    it does not show in ``ps``)."""
    env = {'GIT_CONFIG_COUNT': str(len(pairs))}
    for i, (key, value) in enumerate(pairs):
        env[f'GIT_CONFIG_KEY_{i}'] = key
        env[f'GIT_CONFIG_VALUE_{i}'] = value
    return env


# A code-review host that takes the TCP connection and then never answers
# must not hold a merge job for ever: the connection attempt (TCP and the
# SSH handshake) is bounded, and a silent established connection is
# dropped after ServerAliveCountMax (3) missed keepalives.
SSH_CONNECT_TIMEOUT = 30
SSH_KEEPALIVE = 60  # the connection's documented default


def _ssh_command(options: dict) -> str:
    cmd = ['ssh', '-o', 'BatchMode=yes', '-o', f'ConnectTimeout={SSH_CONNECT_TIMEOUT}']
    if options.get('sshkey'):
        cmd += ['-i', os.path.expanduser(options['sshkey']), '-o', 'IdentitiesOnly=yes']
    if options.get('known_hosts'):
        cmd += ['-o', f'UserKnownHostsFile={os.path.expanduser(options["known_hosts"])}',
                '-o', 'StrictHostKeyChecking=yes']
    keepalive = options.get('keepalive')
    if keepalive is None:
        keepalive = SSH_KEEPALIVE
    if str(keepalive) != '0':
        cmd += ['-o', f'ServerAliveInterval={keepalive}']
    return ' '.join(shlex.quote(c) for c in cmd)


def gerrit_remote(options: dict, project: str) -> RepoRemote:
    """As released Zuul: SSH (``ssh://user@server:port/project`` with
    ``sshkey``) unless an HTTP password is configured, or
    ``git_over_ssh=false`` with a ``baseurl``; then HTTP(S) from
    ``baseurl`` (``/a/`` for authenticated access)."""
    server = options['server']
    password = options.get('password')
    over_ssh = _bool_option(options.get('git_over_ssh'))
    use_http = (over_ssh is False and bool(options.get('baseurl') or password)) or \
        (over_ssh is None and bool(password))
    user = options.get('user') or 'zuul'
    if not use_http:
        port = int(options.get('port') or 29418)
        return RepoRemote(f'ssh://{user}@{server}:{port}/{project}',
                          {'GIT_SSH_COMMAND': _ssh_command(options)})
    baseurl = (options.get('baseurl') or f'https://{server}').rstrip('/')
    pairs = []
    if password:
        baseurl += '/a'
        token = base64.b64encode(f'{user}:{password}'.encode()).decode()
        pairs.append(('http.extraHeader', f'Authorization: Basic {token}'))
    if _bool_option(options.get('verify_ssl')) is False:
        pairs.append(('http.sslVerify', 'false'))
    return RepoRemote(f'{baseurl}/{project}', _config_env(pairs) if pairs else {})


def github_remote(options: dict, project: str, token: str | None) -> RepoRemote:
    """As released Zuul: HTTPS from the server (or ``git_host``, a host or
    a base URL) with the App installation token or ``api_token`` as
    ``x-access-token``; with neither, SSH as ``git@server`` with
    ``sshkey`` when one is configured, else anonymous HTTPS.

    ``repo_cache`` (a host or base URL of a read-only mirror) is fetched
    from instead; commits not there yet are fetched again for
    ``repo_retry_timeout`` seconds (600 by default with a cache)."""
    server = options.get('server') or 'github.com'
    retry = options.get('repo_retry_timeout')
    retry_timeout = float(retry) if retry not in (None, '') else \
        (600.0 if options.get('repo_cache') else 0.0)
    pairs = []
    if _bool_option(options.get('verify_ssl')) is False:
        pairs.append(('http.sslVerify', 'false'))
    if not token and options.get('sshkey'):
        return RepoRemote(f'ssh://git@{server}/{project}.git',
                          {'GIT_SSH_COMMAND': _ssh_command(options)})
    host = options.get('repo_cache') or options.get('git_host') or server
    base = host if '://' in host else f'https://{host}'
    if token:
        basic = base64.b64encode(f'x-access-token:{token}'.encode()).decode()
        pairs.append(('http.extraHeader', f'Authorization: Basic {basic}'))
    return RepoRemote(f'{base.rstrip("/")}/{project}.git',
                      _config_env(pairs) if pairs else {}, retry_timeout=retry_timeout)


def gitlab_remote(options: dict, project: str) -> RepoRemote:
    """As released Zuul documents ``cloneurl``: ``baseurl`` unless set; an
    ``ssh://`` (or ``git@host:``) cloneurl clones over SSH with
    ``sshkey``; over HTTP(S), ``api_token_name`` and ``api_token``
    authenticate (HTTP basic), and credentials written into cloneurl are
    used as given -- sent as a header, never kept in the URL."""
    server = options.get('server') or 'gitlab.com'
    baseurl = (options.get('baseurl') or f'https://{server}').rstrip('/')
    cloneurl = (options.get('cloneurl') or baseurl).rstrip('/')
    if cloneurl.startswith('ssh://') or re.match(r'^[^/:@]+@[^/:]+:', cloneurl):
        sep = ':' if not cloneurl.startswith('ssh://') and cloneurl.endswith(':') else '/'
        return RepoRemote(f'{cloneurl.rstrip(":")}{sep}{project}.git',
                          {'GIT_SSH_COMMAND': _ssh_command(options)})
    parts = urllib.parse.urlsplit(cloneurl)
    pairs = []
    user, password = parts.username, parts.password
    if user is None and options.get('api_token_name') and options.get('api_token'):
        user, password = options['api_token_name'], options['api_token']
    if user is not None:
        netloc = parts.hostname + (f':{parts.port}' if parts.port else '')
        cloneurl = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, '', ''))
        basic = base64.b64encode(f'{urllib.parse.unquote(user)}:'
                                 f'{urllib.parse.unquote(password or "")}'.encode()).decode()
        pairs.append(('http.extraHeader', f'Authorization: Basic {basic}'))
    if _bool_option(options.get('verify_ssl')) is False:
        pairs.append(('http.sslVerify', 'false'))
    return RepoRemote(f'{cloneurl}/{project}.git', _config_env(pairs) if pairs else {})


def _join(base: str, project: str) -> str:
    if re.match(r'^[^/]+@[^/]+:$', base):  # scp-like "git@host:"
        return base + project
    if '://' in base or re.match(r'^[^/]+@[^/]+:', base):
        return f'{base.rstrip("/")}/{project}'
    path = os.path.join(base, project)
    if not os.path.exists(path) and os.path.exists(path + '.git'):
        return path + '.git'
    return path


class RepoUrlResolver:
    """Connection name -> how to fetch its projects.

    ``mapping`` values are either a plain string (a base directory or base
    URL; the project URL is base + '/' + project, and for a directory
    ``<project>.git`` is used when ``<project>`` does not exist), or
    ``{'driver': ..., 'options': {zuul.conf connection keys}}``: gerrit
    (see :func:`gerrit_remote`), git and any driver with ``baseurl``
    (``baseurl/project``), github (``https://<server>/project``), gitlab
    (see :func:`gitlab_remote`).
    """

    def __init__(self, mapping: dict):
        self.mapping = dict(mapping)
        self._github: dict[str, object] = {}   # connection -> GithubClient (tokens)

    def remote(self, connection: str, project: str) -> RepoRemote:
        spec = self.mapping.get(connection)
        if spec is None:
            raise UnknownConnectionError(f'no git source for connection {connection!r}')
        if isinstance(spec, str):
            return RepoRemote(_join(spec, project))
        driver = spec.get('driver')
        options = spec.get('options') or {}
        if driver == 'gerrit':
            return gerrit_remote(options, project)
        if driver == 'gitlab':
            return gitlab_remote(options, project)
        if options.get('baseurl'):
            return RepoRemote(f'{options["baseurl"].rstrip("/")}/{project}')
        if driver == 'github':
            return github_remote(options, project, self._github_token(connection, options,
                                                                      project))
        raise UnknownConnectionError(
            f'connection {connection!r} (driver {driver}) has no git URL (set baseurl)')

    def _github_token(self, connection: str, options: dict, project: str) -> str | None:
        if not (options.get('api_token') or options.get('app_id')):
            return None
        github = self._github.get(connection)
        if github is None:
            from zuul.driver.github.connection import GithubConnection
            github = self._github[connection] = GithubConnection(connection, options)
        return github.git_token(project)

    def url(self, connection: str, project: str) -> str:
        return self.remote(connection, project).url


# Variables that would point git at another repository than the one we
# run it in.
_LOCATION_VARS = ('GIT_DIR', 'GIT_WORK_TREE', 'GIT_INDEX_FILE', 'GIT_OBJECT_DIRECTORY',
                  'GIT_ALTERNATE_OBJECT_DIRECTORIES', 'GIT_COMMON_DIR', 'GIT_NAMESPACE')


def _env(keep_git_vars: bool) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith('GIT_') or (keep_git_vars and k not in _LOCATION_VARS)}
    env.update(LC_ALL='C', LANGUAGE='C', GIT_TERMINAL_PROMPT='0')
    return env


# Fetches: the operator's environment (GIT_SSH_COMMAND, proxies, ...).
_REMOTE_ENV = _env(keep_git_vars=True)
# Local operations: no GIT_* variables and no system or user configuration,
# so a merge is the same on every host.
LOCAL_ENV = dict(_env(keep_git_vars=False), GIT_CONFIG_NOSYSTEM='1',
                 GIT_CONFIG_GLOBAL=os.devnull)


def run_git(args: list[str], cwd: str | None = None, env: dict | None = None,
            check: bool = True, input_bytes: bytes | None = None) -> str:
    """Run git; the stdout (text) or GitError."""
    proc = subprocess.run(['git', *args], cwd=cwd, env=env or LOCAL_ENV, input=input_bytes,
                          capture_output=True)
    if check and proc.returncode:
        raise GitError(args, proc.returncode, proc.stderr.decode('utf8', 'replace'))
    return proc.stdout.decode('utf8', 'replace').strip()


class Repo:
    """One project's cache: a working repository whose ``origin`` is the
    project's remote, branches at ``refs/remotes/origin/*``, its work
    tree used for merges (always on a detached HEAD)."""

    def __init__(self, path: str, remote: RepoRemote, name: str):
        self.path = path
        self.remote = remote
        self.name = name
        self.lock = threading.RLock()
        # The commit the work tree holds, clean; None when unknown.
        self.clean_head: str | None = None
        self._head_checked = False

    def git(self, *args, env: dict | None = None, check: bool = True,
            input_bytes: bytes | None = None) -> str:
        return run_git(list(args), cwd=self.path, env=env, check=check,
                       input_bytes=input_bytes)

    def git_ok(self, *args) -> bool:
        proc = subprocess.run(['git', *args], cwd=self.path, env=LOCAL_ENV,
                              capture_output=True)
        return proc.returncode == 0

    # -- fetching ---------------------------------------------------------
    @property
    def exists(self) -> bool:
        return os.path.isfile(os.path.join(self.path, '.git', 'HEAD'))

    def _init(self) -> None:
        if os.path.exists(self.path):
            shutil.rmtree(self.path)  # a half-created cache from a crash
        os.makedirs(self.path)
        run_git(['init', '-q', self.path])
        for key, value in (('gc.autoDetach', 'false'), ('core.autocrlf', 'false'),
                           ('remote.origin.url', self.remote.url),
                           ('remote.origin.fetch', '+refs/heads/*:' + BRANCH_PREFIX + '*')):
            self.git('config', key, value)
        self.clean_head = None

    def _remote_env(self) -> dict:
        return dict(_REMOTE_ENV, **self.remote.env)

    def fetch(self, refs: list[str] = (), branches: bool = True) -> None:
        """Update from origin: every branch and tag when ``branches``, and
        the given refs (change refs go under refs/zuul/fetched/; a sha is
        fetched as itself)."""
        if not self.exists:
            self._init()
        elif self.git('config', '--get', 'remote.origin.url', check=False) != self.remote.url:
            self.git('config', 'remote.origin.url', self.remote.url)
        specs = ['+refs/heads/*:' + BRANCH_PREFIX + '*', '+refs/tags/*:refs/tags/*'] \
            if branches else []
        for ref in refs:
            specs.append(ref if SHA_RE.match(ref) else f'+{ref}:{fetched_ref(ref)}')
        if not specs:
            return
        args = ['fetch', '-q', '--no-write-fetch-head']
        if branches:
            args.append('--prune')
        self.git(*args, 'origin', *specs, env=self._remote_env())
        if branches and not self._head_checked:
            # Learn origin's default branch (a round trip) when unknown.
            self._head_checked = True
            if self.default_branch() is None:
                self.git('remote', 'set-head', 'origin', '--auto', env=self._remote_env(),
                         check=False)

    def ensure_commits(self, shas) -> None:
        """Make sure every sha is here: fetch origin, then ask for the
        missing ones by id (a force-pushed branch may have lost them)."""
        missing = [s for s in shas if not self.has_commit(s)]
        if not missing:
            return
        deadline = time.monotonic() + self.remote.retry_timeout
        delay = 1.0
        while True:
            try:
                self.fetch()
                missing = [s for s in missing if not self.has_commit(s)]
                if missing:
                    self.fetch(missing, branches=False)
                return
            except GitError:
                # A mirror (repo_cache) may not have the commits yet.
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 30.0)

    # -- reading ---------------------------------------------------------
    def has_commit(self, sha: str) -> bool:
        return self.exists and self.git_ok('cat-file', '-e', f'{sha}^{{commit}}')

    def resolve(self, ref: str) -> str:
        """The commit a fetched ref (or a sha) points to."""
        name = ref if SHA_RE.match(ref) else fetched_ref(ref)
        return self.git('rev-parse', '--verify', '-q', f'{name}^{{commit}}')

    def heads(self) -> dict[str, str]:
        """origin's branches as last fetched: {branch: sha}."""
        out = self.git('for-each-ref', '--format=%(objectname) %(refname)', BRANCH_PREFIX)
        heads = {}
        for line in out.splitlines():
            sha, ref = line.split(' ', 1)
            branch = ref[len(BRANCH_PREFIX):]
            if branch != 'HEAD':
                heads[branch] = sha
        return heads

    def default_branch(self) -> str | None:
        ref = self.git('symbolic-ref', '-q', BRANCH_PREFIX + 'HEAD', check=False)
        return ref[len(BRANCH_PREFIX):] if ref.startswith(BRANCH_PREFIX) else None

    def commit_info(self, sha: str) -> CommitInfo:
        out = self.git('log', '-1', '--date=raw',
                       '--format=%an%x00%ae%x00%ad%x00%cd%x00%P%x00%B', sha)
        name, email, adate, cdate, parents, message = out.split('\0', 5)
        return CommitInfo(sha, name, email, adate, cdate, parents.split(), message)

    def merge_base(self, a: str, b: str) -> str | None:
        out = self.git('merge-base', a, b, check=False)
        return out.split()[0] if out else None

    def changed_files(self, base: str | None, sha: str) -> list[str]:
        """Files that differ between ``base`` (or the empty tree) and
        ``sha``; a rename lists both paths."""
        if base is None:
            return sorted(self.git('ls-tree', '-r', '--name-only', sha).splitlines())
        out = self.git('diff', '--no-renames', '--name-only', '-z', base, sha)
        return sorted(p for p in out.split('\0') if p)

    def read_files(self, sha: str, paths: list[str]) -> dict[str, str]:
        """path -> text at ``sha``; ``dir/`` entries read every file
        below; missing paths are left out."""
        tree = self.git('ls-tree', '-r', '-z', '--full-tree', sha).split('\0')
        blobs = {}
        for entry in tree:
            if not entry:
                continue
            meta, path = entry.split('\t', 1)
            mode, kind, obj = meta.split()
            if kind == 'blob':
                blobs[path] = obj
        wanted = {}
        for want in paths:
            prefix = want if want.endswith('/') else want + '/'
            if want in blobs:
                wanted[want] = blobs[want]
            for path, obj in blobs.items():
                if path.startswith(prefix):
                    wanted[path] = obj
        return self._cat_blobs(wanted)

    def _cat_blobs(self, wanted: dict[str, str]) -> dict[str, str]:
        if not wanted:
            return {}
        order = sorted(wanted)
        stdin = ''.join(f'{wanted[p]}\n' for p in order).encode()
        proc = subprocess.run(['git', 'cat-file', '--batch'], cwd=self.path, env=LOCAL_ENV,
                              input=stdin, capture_output=True, check=True)
        out, pos, result = proc.stdout, 0, {}
        for path in order:
            header_end = out.index(b'\n', pos)
            size = int(out[pos:header_end].split()[2])
            body = out[header_end + 1:header_end + 1 + size]
            result[path] = body.decode('utf8', 'replace')
            pos = header_end + 1 + size + 1
        return result

    # -- the work tree -----------------------------------------------------
    def recover(self) -> None:
        """Abandon any merge, cherry-pick or rebase in progress."""
        git_dir = os.path.join(self.path, '.git')
        for name in ('rebase-merge', 'rebase-apply'):
            if os.path.exists(os.path.join(git_dir, name)):
                self.git('rebase', '--abort', check=False)
                shutil.rmtree(os.path.join(git_dir, name), ignore_errors=True)
        shutil.rmtree(os.path.join(git_dir, 'sequencer'), ignore_errors=True)
        self.git('reset', '-q', '--hard', check=False)
        self.git('clean', '-ffdxq', check=False)
        self.clean_head = None

    def checkout(self, sha: str) -> None:
        """A clean work tree at ``sha`` (detached)."""
        if self.clean_head == sha:
            return
        self.clean_head = None
        self.git('checkout', '-q', '-f', '--detach', sha)
        self.git('clean', '-ffdxq')
        self.clean_head = sha

    def head(self) -> str:
        return self.git('rev-parse', 'HEAD')

    def clone_to(self, dest: str) -> None:
        """A new repository at ``dest`` holding all of this one's objects
        (hard links where possible), no work tree checked out yet."""
        if os.path.exists(dest):
            shutil.rmtree(dest)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        run_git(['clone', '-q', '--no-checkout', self.path, dest])


@dataclass
class CommitInfo:
    sha: str
    author_name: str
    author_email: str
    author_date: str  # raw: "<epoch> <tz>"
    committer_date: str
    parents: list[str]
    message: str


def fetched_ref(ref: str) -> str:
    """Where a fetched change ref is kept in the cache."""
    return FETCHED_PREFIX + (ref[len('refs/'):] if ref.startswith('refs/') else ref)


def check_project_name(project: str) -> None:
    parts = project.split('/')
    if not project or project.startswith('/') or any(p in ('', '.', '..') for p in parts):
        raise ValueError(f'invalid project name {project!r}')


class RepoCache:
    """The repos under ``git_dir``: ``<git_dir>/<connection>/<project>``."""

    def __init__(self, git_dir: str, resolver: RepoUrlResolver):
        self.git_dir = git_dir
        self.resolver = resolver
        self._repos: dict[tuple[str, str], Repo] = {}
        self._lock = threading.Lock()

    def get(self, connection: str, project: str) -> Repo:
        """The repo object (created lazily; not fetched yet).  Raises
        ValueError / UnknownConnectionError for an unusable name."""
        key = (connection, project)
        with self._lock:
            repo = self._repos.get(key)
            if repo is None:
                check_project_name(project)
                check_project_name(connection)
                remote = self.resolver.remote(connection, project)
                path = os.path.join(self.git_dir, connection, project)
                repo = Repo(path, remote, f'{connection}/{project}')
                self._repos[key] = repo
            return repo
