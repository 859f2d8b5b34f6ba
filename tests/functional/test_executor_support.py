"""Fixtures for the executor tests: real git repos, real sshd nodes.

Nodes come from the shared ``node_factory`` (tests/harness/nodes.py) when
it is registered; until then a small fallback here starts sshd in its own
network namespace per node.  Repos are prepared by the merger
(zuul.merger.merger.Merger).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
import subprocess
import tempfile

import pytest

from zuul.executor.protocol import (
    ExecuteRequest,
    ItemSpec,
    JobSpec,
    NodeSpec,
    PlaybookSpec,
    ZuulContext,
)
from zuul.executor.settings import ExecutorSettings
from zuul.merger.merger import Merger
from zuul.merger.repos import RepoUrlResolver

HOSTNAME = 'review.example.org'
GIT_ENV = dict(os.environ, GIT_AUTHOR_NAME='t', GIT_AUTHOR_EMAIL='t@example.org',
               GIT_COMMITTER_NAME='t', GIT_COMMITTER_EMAIL='t@example.org')


def git(cwd, *args) -> str:
    return subprocess.run(['git', *args], cwd=cwd, env=GIT_ENV, check=True,
                          capture_output=True, text=True).stdout.strip()


# -- repos ------------------------------------------------------------------
class UpstreamRepos:
    """Bare-ish upstream repos at ``root/<project>`` with Gerrit-style
    change refs (``refs/changes/NN/N/P``)."""

    def __init__(self, root: str):
        self.root = root

    def path(self, project: str) -> str:
        return os.path.join(self.root, project)

    def create(self, project: str, files: dict[str, str]) -> None:
        path = self.path(project)
        os.makedirs(path)
        git(path, 'init', '-q', '-b', 'master')
        git(path, 'config', 'receive.denyCurrentBranch', 'ignore')
        self._commit(path, files, 'initial')

    def _commit(self, path: str, files: dict[str, str], message: str) -> str:
        for name, text in files.items():
            full = os.path.join(path, name)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, 'w') as f:
                f.write(text)
        git(path, 'add', '-A')
        git(path, 'commit', '-q', '-m', message)
        return git(path, 'rev-parse', 'HEAD')

    def add_change(self, project: str, number: int, files: dict[str, str],
                   branch: str = 'master') -> str:
        """A change on ``branch`` at refs/changes/..; returns the ref."""
        path = self.path(project)
        ref = f'refs/changes/{number % 100:02d}/{number}/1'
        git(path, 'checkout', '-q', branch)
        git(path, 'checkout', '-q', '-b', f'change-{number}')
        self._commit(path, files, f'change {number}')
        git(path, 'update-ref', ref, 'HEAD')
        git(path, 'checkout', '-q', branch)
        git(path, 'branch', '-q', '-D', f'change-{number}')
        return ref


def make_merger(upstream: UpstreamRepos, root: str) -> Merger:
    """The real merger (zuul.merger), fetching from ``upstream``."""
    resolver = RepoUrlResolver({'gerrit': upstream.root})
    return Merger(root, resolver, git_user_email='zuul@example.org', git_user_name='zuul')


# -- nodes ------------------------------------------------------------------
@dataclasses.dataclass
class _Node:
    address: str
    port: int
    username: str
    host_keys: list


class NetnsNodeFactory:
    """Fallback nodes: sshd in a fresh network namespace per node."""

    _ids = itertools.count(1)

    def __init__(self, client_pubkey: str, workdir: str):
        self.client_pubkey = client_pubkey
        self.workdir = workdir
        self.nodes: list[tuple[str, str, str]] = []

    def make(self) -> _Node:
        n = next(self._ids)
        ns, veth = f'zex{os.getpid() % 10000}n{n}', f'zx{os.getpid() % 10000}n{n}'
        prefix = f'10.{200 + os.getpid() % 50}.{n // 60}'
        host_ip, node_ip = f'{prefix}.{n % 60 * 4 + 1}', f'{prefix}.{n % 60 * 4 + 2}'
        run = lambda *a: subprocess.run(a, check=True, capture_output=True)  # noqa: E731
        run('ip', 'netns', 'add', ns)
        run('ip', 'link', 'add', veth, 'type', 'veth', 'peer', 'name', veth + 'p')
        run('ip', 'link', 'set', veth + 'p', 'netns', ns)
        run('ip', 'addr', 'add', f'{host_ip}/30', 'dev', veth)
        run('ip', 'link', 'set', veth, 'up')
        run('ip', 'netns', 'exec', ns, 'ip', 'addr', 'add', f'{node_ip}/30', 'dev', veth + 'p')
        run('ip', 'netns', 'exec', ns, 'ip', 'link', 'set', veth + 'p', 'up')
        run('ip', 'netns', 'exec', ns, 'ip', 'link', 'set', 'lo', 'up')
        d = os.path.join(self.workdir, ns)
        os.makedirs(f'{d}/home')  # the node's HOME: never this machine's dotfiles
        run('ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', f'{d}/host_key')
        with open(f'{d}/authorized_keys', 'w') as f:
            f.write(self.client_pubkey)
        with open(f'{d}/sshd_config', 'w') as f:
            f.write(f'Port 22\nListenAddress {node_ip}\nHostKey {d}/host_key\n'
                    f'SetEnv HOME={d}/home\n'
                    f'AuthorizedKeysFile {d}/authorized_keys\nPasswordAuthentication no\n'
                    f'PidFile {d}/sshd.pid\nStrictModes no\nUsePAM no\nPermitRootLogin yes\n'
                    'MaxSessions 50\nMaxStartups 50\n')
        os.makedirs('/run/sshd', exist_ok=True)
        # sshd returns once it listens (it daemonizes after binding).
        run('ip', 'netns', 'exec', ns, '/usr/sbin/sshd', '-f', f'{d}/sshd_config')
        self.nodes.append((ns, veth, d))
        with open(f'{d}/host_key.pub') as f:
            key = ' '.join(f.read().split()[:2])
        return _Node(node_ip, 22, 'root', [key])

    def cleanup(self) -> None:
        for ns, veth, d in self.nodes:
            try:
                with open(f'{d}/sshd.pid') as f:
                    os.kill(int(f.read().strip()), 15)
            except (OSError, ValueError):
                pass
            subprocess.run(['ip', 'link', 'del', veth], capture_output=True)
            subprocess.run(['ip', 'netns', 'del', ns], capture_output=True)
        shutil.rmtree(self.workdir, ignore_errors=True)


@pytest.fixture(scope='session')
def exec_keypair():
    d = tempfile.mkdtemp(prefix='zek')
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', f'{d}/id'], check=True)
    with open(f'{d}/id.pub') as f:
        yield f'{d}/id', f.read()
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def exec_nodes(request, exec_keypair):
    """``make() -> node`` with .address .port .username .host_keys."""
    try:
        factory = request.getfixturevalue('node_factory')
        keypair = request.getfixturevalue('ssh_keypair')
        for attr in ('private_key_path', 'private_key_file', 'private_key', 'path'):
            if isinstance(getattr(keypair, attr, None), str):
                yield factory, getattr(keypair, attr)
                return
        yield factory, keypair[0]
        return
    except pytest.FixtureLookupError:
        pass
    factory = NetnsNodeFactory(exec_keypair[1], tempfile.mkdtemp(prefix='zen'))
    try:
        yield factory, exec_keypair[0]
    finally:
        factory.cleanup()


def node_spec(node, name: str | list[str]) -> NodeSpec:
    names = [name] if isinstance(name, str) else name
    return NodeSpec(name=names, label='debian', provider='netns', interface_ip=node.address,
                    connection_port=node.port, username=node.username,
                    host_keys=list(node.host_keys), python_path='/usr/bin/python3')


# -- builds ---------------------------------------------------------------
@pytest.fixture
def exec_env(exec_nodes):
    """Short paths (SSH control sockets must fit in 108 bytes)."""
    root = tempfile.mkdtemp(prefix='zx', dir='/tmp')
    upstream = UpstreamRepos(os.path.join(root, 'up'))
    factory, key = exec_nodes
    settings = ExecutorSettings(hostname='executor.example.org', job_dir=f'{root}/b',
                                state_dir=f'{root}/s', private_key_file=key,
                                load_multiplier=0, min_avail_mem=0, log_stream_port=0,
                                log_stream_host='127.0.0.1')
    os.makedirs(f'{root}/m')
    env = dataclasses.make_dataclass('Env', ['root', 'upstream', 'factory', 'settings',
                                             'merger'])(
        root, upstream, factory, settings, make_merger(upstream, f'{root}/m'))
    yield env
    shutil.rmtree(root, ignore_errors=True)


def playbook(project: str, path: str, trusted: bool = False, **kw) -> PlaybookSpec:
    return PlaybookSpec(connection='gerrit', project=project, branch='master', path=path,
                        trusted=trusted, **kw)


def item(project: str, number: int | None = None, ref: str | None = None) -> ItemSpec:
    return ItemSpec(connection='gerrit', project=project, canonical_hostname=HOSTNAME,
                    branch='master', ref=ref, number=number,
                    patchset=1 if number else None)


def execute_request(uuid: str, job: JobSpec, nodes: list[NodeSpec], items: list[ItemSpec],
                    attempt: int = 1) -> ExecuteRequest:
    return ExecuteRequest(uuid=uuid, job=job, nodes=nodes, items=items, attempt=attempt,
                          zuul=ZuulContext(tenant='tenant-one', pipeline='check',
                                           buildset='bs1',
                                           canonical_hostnames={'gerrit': HOSTNAME}))
