"""Upstream repositories for the merger tests: real bare git repos laid
out like Gerrit's (branches, tags, change refs ``refs/changes/NN/N/P``),
written with plumbing so any commit can have any parent and date."""

from __future__ import annotations

import os
import subprocess

import pytest

from zuul.merger.merger import Merger
from zuul.merger.repos import RepoUrlResolver

AUTHOR = {'GIT_AUTHOR_NAME': 'Dev Eloper', 'GIT_AUTHOR_EMAIL': 'dev@example.org',
          'GIT_COMMITTER_NAME': 'Dev Eloper', 'GIT_COMMITTER_EMAIL': 'dev@example.org'}


def git(cwd, *args, env=None, input_bytes=None) -> str:
    full = dict(os.environ, GIT_CONFIG_NOSYSTEM='1', GIT_CONFIG_GLOBAL=os.devnull, **AUTHOR)
    full.update(env or {})
    proc = subprocess.run(['git', *args], cwd=cwd, env=full, input=input_bytes,
                          capture_output=True)
    if proc.returncode:
        raise AssertionError(f'git {args} failed: {proc.stderr.decode()}')
    return proc.stdout.decode().strip()


class Upstream:
    """Bare repos at ``root/<project>`` (what RepoUrlResolver is given)."""

    def __init__(self, root: str):
        self.root = root
        self._date = 1000000000  # commits get increasing, fixed dates

    def path(self, project: str) -> str:
        return os.path.join(self.root, project)

    def git(self, project: str, *args, **kw) -> str:
        return git(self.path(project), *args, **kw)

    def create(self, project: str, files: dict, branches=('master',)) -> str:
        path = self.path(project)
        os.makedirs(path)
        git(path, 'init', '-q', '--bare', '-b', branches[0])
        sha = self.commit(project, None, files, 'Initial commit')
        for branch in branches:
            self.git(project, 'update-ref', f'refs/heads/{branch}', sha)
        return sha

    def commit(self, project: str, parent: str | None, files: dict, message: str,
               parents: list[str] | None = None) -> str:
        """A commit of ``parent``'s tree plus ``files`` (None deletes)."""
        self._date += 60
        index = os.path.join(self.root, f'.index-{self._date}')
        env = {'GIT_INDEX_FILE': index, 'GIT_AUTHOR_DATE': f'{self._date} +0200',
               'GIT_COMMITTER_DATE': f'{self._date} +0200'}
        try:
            if parent:
                self.git(project, 'read-tree', parent, env=env)
            lines = []
            for name, text in files.items():
                if text is None:
                    lines.append(f'0 {"0" * 40}\t{name}\n')
                    continue
                blob = self.git(project, 'hash-object', '-w', '--stdin',
                                input_bytes=text.encode())
                lines.append(f'100644 {blob}\t{name}\n')
            self.git(project, 'update-index', '--index-info', env=env,
                     input_bytes=''.join(lines).encode())
            tree = self.git(project, 'write-tree', env=env)
        finally:
            if os.path.exists(index):
                os.unlink(index)
        args = []
        for p in (parents if parents is not None else ([parent] if parent else [])):
            args += ['-p', p]
        return self.git(project, 'commit-tree', tree, *args, '-m', message, env=env)

    def head(self, project: str, branch: str = 'master') -> str:
        return self.git(project, 'rev-parse', f'refs/heads/{branch}')

    def push(self, project: str, files: dict, branch: str = 'master',
             message: str = 'Direct push') -> str:
        """A new commit on ``branch`` (as if a change merged)."""
        sha = self.commit(project, self.head(project, branch), files, message)
        self.git(project, 'update-ref', f'refs/heads/{branch}', sha)
        return sha

    def add_change(self, project: str, number: int, files: dict, branch: str = 'master',
                   parent: str | None = None, patchset: int = 1,
                   message: str | None = None) -> str:
        """A change (patchset) on top of ``parent`` (a sha or another
        change's ref) or the branch tip; returns its ref."""
        base = self.git(project, 'rev-parse', parent) if parent else self.head(project, branch)
        sha = self.commit(project, base, files, message or f'Change {number}\n\nBody.')
        ref = change_ref(number, patchset)
        self.git(project, 'update-ref', ref, sha)
        return ref

    def tag(self, project: str, name: str, sha: str) -> None:
        self.git(project, 'update-ref', f'refs/tags/{name}', sha)


def change_ref(number: int, patchset: int = 1) -> str:
    return f'refs/changes/{number % 100:02d}/{number}/{patchset}'


@pytest.fixture
def upstream(tmp_path):
    root = tmp_path / 'upstream'
    root.mkdir()
    return Upstream(str(root))


@pytest.fixture
def make_merger(tmp_path, upstream):
    """``make_merger(name='a')``: a Merger with its own cache directory."""
    def make(name: str = 'a', **kw) -> Merger:
        kw.setdefault('git_user_email', 'zuul@example.org')
        kw.setdefault('git_user_name', 'Zuul Merger')
        return Merger(str(tmp_path / f'cache-{name}'),
                      RepoUrlResolver({'gerrit': upstream.root}), **kw)
    return make
