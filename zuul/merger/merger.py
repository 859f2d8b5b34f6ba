"""Speculative merging over the repo cache, and workspace checkouts.

``Merger.merge_changes(items, repo_state)`` merges queue items in order
onto their branches, each with its project's merge mode, and returns a
:class:`MergeOutcome`.  It is used in-process by executors (which also
call ``prepare_workspace``) and behind Gearman by ``zuul-merger``.

Reproducibility: an executor re-merges the same items on the state the
scheduler's merge started from and must get the same commits.  So every
commit a merge creates has a fixed identity (``git_user_name``/``email``,
which every merger and executor read from the same ``[merger]`` section)
and dates taken from the change's commit, a fixed strategy per mode, and
git configuration of the host switched off (see ``repos.LOCAL_ENV``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from zuul.merger.protocol import MERGE_MODES, MergeItem, ProjectFiles
from zuul.merger.repos import (
    LOCAL_ENV,
    CommitInfo,
    GitError,
    Repo,
    RepoCache,
    RepoUrlResolver,
    UnknownConnectionError,
    run_git,
)

__all__ = ['Merger', 'MergeItem', 'MergeOutcome', 'MergerError', 'RepoUrlResolver']

log = logging.getLogger('zuul.merger')

DEFAULT_USER_NAME = 'Zuul'
DEFAULT_USER_EMAIL = 'zuul@localhost'
# Where the remote of a workspace checkout points: nowhere, so that no
# credentials or cache paths leak into jobs (as released Zuul does).
WORKSPACE_REMOTE = 'file:///dev/null'


class MergerError(Exception):
    """A repo could not be fetched or read; the message names it."""


@dataclass
class MergeOutcome:
    """What ``merge_changes`` returns.

    ``repo_state``: the state AFTER merging -- every branch of every
    touched project, the items' branches at their speculative commits
    (what workspace checkouts use).  ``base_state``: the state the merge
    started from (what a scheduler hands to executors so they can
    reproduce the merge).  ``conflict`` is the item that did not merge;
    ``error`` explains other failures.  ``item_commits`` holds, per item,
    its branch's commit once it was merged.
    """

    merged: bool
    conflict: MergeItem | None = None
    error: str | None = None
    repo_state: dict = field(default_factory=dict)
    base_state: dict = field(default_factory=dict)
    commit: str | None = None
    item_commits: list = field(default_factory=list)
    files: list[str] | None = None
    read_files: list[ProjectFiles] = field(default_factory=list)


def _tag(event_id) -> str:
    return f'[e: {event_id}] ' if event_id else ''


def _state_branches(refs: dict) -> dict[str, str]:
    """{'refs/heads/b': sha} (or {'b': sha}) -> {b: sha}."""
    out = {}
    for ref, sha in refs.items():
        if ref.startswith('refs/heads/'):
            out[ref[len('refs/heads/'):]] = sha
        elif not ref.startswith('refs/'):
            out[ref] = sha
    return out


def _as_state(projects: dict) -> dict:
    """{(conn, project): {branch: sha}} -> the wire repo_state shape."""
    state: dict = {}
    for (conn, project), branches in projects.items():
        state.setdefault(conn, {})[project] = {
            f'refs/heads/{b}': sha for b, sha in sorted(branches.items())}
    return state


class _Speculation:
    """One merge_changes call: per project, the branch heads it started
    from and the current speculative heads."""

    def __init__(self):
        self.base: dict[tuple[str, str], dict[str, str]] = {}
        self.current: dict[tuple[str, str], dict[str, str]] = {}

    def add(self, key, heads: dict[str, str]) -> None:
        self.base[key] = dict(heads)
        self.current[key] = dict(heads)


class Merger:
    """The repo cache under ``git_dir`` and the operations on it."""

    merge_item_class = MergeItem

    def __init__(self, git_dir: str, resolver: RepoUrlResolver,
                 git_user_email: str | None = None, git_user_name: str | None = None):
        self.git_dir = git_dir
        self.cache = RepoCache(git_dir, resolver)
        self.user_name = git_user_name or DEFAULT_USER_NAME
        self.user_email = git_user_email or DEFAULT_USER_EMAIL
        os.makedirs(git_dir, exist_ok=True)

    # -- helpers ---------------------------------------------------------
    def _repo(self, connection: str, project: str) -> Repo:
        try:
            return self.cache.get(connection, project)
        except (UnknownConnectionError, ValueError) as exc:
            raise MergerError(f'{connection}/{project}: {exc}') from None

    def _fetch(self, repo: Repo, refs=(), branches: bool = True) -> None:
        try:
            repo.fetch(list(refs), branches=branches)
        except GitError as exc:
            raise MergerError(f'Unable to fetch {repo.name}: {exc.stderr}') from None

    def _ensure(self, repo: Repo, shas) -> None:
        try:
            repo.ensure_commits(list(shas))
        except GitError as exc:
            raise MergerError(f'Unable to fetch {repo.name}: {exc.stderr}') from None

    def _env(self, date: str, author: CommitInfo | None = None) -> dict:
        env = dict(LOCAL_ENV, GIT_COMMITTER_NAME=self.user_name,
                   GIT_COMMITTER_EMAIL=self.user_email, GIT_COMMITTER_DATE=date,
                   GIT_AUTHOR_NAME=self.user_name, GIT_AUTHOR_EMAIL=self.user_email,
                   GIT_AUTHOR_DATE=date)
        if author is not None:
            env.update(GIT_AUTHOR_NAME=author.author_name, GIT_AUTHOR_EMAIL=author.author_email,
                       GIT_AUTHOR_DATE=author.author_date)
        return env

    # -- merging ---------------------------------------------------------
    def merge_changes(self, items: list[MergeItem], repo_state: dict | None = None,
                      event_id: str | None = None, files_changed: bool = False,
                      read_files=()) -> MergeOutcome:
        """Merge ``items`` in order (see MergeOutcome).  With
        ``repo_state``, the projects it names start from those commits
        instead of origin's current branch heads."""
        spec = _Speculation()
        commits: list = []
        try:
            self._prepare_projects(items, repo_state, spec, event_id)
            last_base = None
            for item in items:
                last_base, commit = self._merge_item(item, spec, event_id)
                if commit is None:
                    log.info('%s%s does not merge', _tag(event_id), item.describe())
                    return MergeOutcome(merged=False, conflict=item,
                                        base_state=_as_state(spec.base),
                                        item_commits=commits)
                commits.append(commit)
            outcome = MergeOutcome(merged=True, repo_state=_as_state(spec.current),
                                   base_state=_as_state(spec.base),
                                   commit=commits[-1] if commits else None,
                                   item_commits=commits)
            if items and files_changed:
                outcome.files = self._item_files(items[-1], last_base)
            if read_files:
                outcome.read_files = self._read_after(items, spec, list(read_files))
            return outcome
        except (MergerError, GitError) as exc:
            log.warning('%s%s', _tag(event_id), exc)
            return MergeOutcome(merged=False, error=str(exc), base_state=_as_state(spec.base),
                                item_commits=commits)

    def _prepare_projects(self, items, repo_state, spec: _Speculation, event_id) -> None:
        """Fetch each project once (its branches unless repo_state pins
        them, and the change refs of its items)."""
        refs: dict[tuple[str, str], list[str]] = {}
        for item in items:
            wanted = refs.setdefault((item.connection, item.project), [])
            if item.is_change and item.ref not in wanted:
                wanted.append(item.ref)
        for (conn, project), change_refs in refs.items():
            repo = self._repo(conn, project)
            recorded = ((repo_state or {}).get(conn) or {}).get(project)
            with repo.lock:
                if recorded is None:
                    log.debug('%sUpdating %s', _tag(event_id), repo.name)
                    self._fetch(repo, change_refs)
                    spec.add((conn, project), repo.heads())
                    continue
                heads = _state_branches(recorded)
                if change_refs:
                    self._fetch(repo, change_refs, branches=not repo.exists)
                self._ensure(repo, heads.values())
                spec.add((conn, project), heads)

    def _branch_head(self, item: MergeItem, spec: _Speculation) -> str:
        key = (item.connection, item.project)
        current = spec.current[key]
        if item.branch not in current:
            # A branch the recorded state does not know (created since).
            repo = self._repo(*key)
            with repo.lock:
                heads = repo.heads() if repo.exists else {}
            if item.branch not in heads:
                raise MergerError(f'{item.project} has no branch {item.branch!r}')
            spec.base[key][item.branch] = heads[item.branch]
            current[item.branch] = heads[item.branch]
        return current[item.branch]

    def _merge_item(self, item: MergeItem, spec: _Speculation, event_id):
        """(branch head before, branch head after); after is None when the
        item does not merge."""
        head = self._branch_head(item, spec) if item.branch else None
        if not item.is_change:
            return head, item.newrev or head
        if item.merge_mode not in MERGE_MODES:
            raise MergerError(f'{item.describe()}: unknown merge mode {item.merge_mode!r}')
        repo = self._repo(item.connection, item.project)
        with repo.lock:
            try:
                change = repo.resolve(item.ref)
            except GitError:
                raise MergerError(f'Unable to find {item.ref} of {item.project}') from None
            log.info('%sMerging %s (%s, %s) onto %s %s', _tag(event_id), item.describe(),
                     change[:10], item.merge_mode, item.branch, head[:10])
            new = self._apply(repo, item, head, change)
        if new is not None:
            spec.current[(item.connection, item.project)][item.branch] = new
        return head, new

    def _apply(self, repo: Repo, item: MergeItem, head: str, change: str) -> str | None:
        info = repo.commit_info(change)
        strategy = _MODES[item.merge_mode]
        try:
            return strategy(self, repo, item, head, info)
        except GitError as exc:
            log.debug('%s: %s', item.describe(), exc)
            repo.recover()
            return None

    # The merge modes.  Each starts from a clean work tree, returns the new
    # branch head or raises GitError (the item does not merge).
    def _mode_merge(self, repo, item, head, info, strategy='ort') -> str:
        repo.checkout(head)
        repo.clean_head = None
        repo.git('merge', '-q', '--ff', '--no-edit', '--no-verify', '-s', strategy,
                 '-m', _merge_message(item), info.sha, env=self._env(info.committer_date))
        return self._settle(repo)

    def _mode_merge_resolve(self, repo, item, head, info) -> str:
        return self._mode_merge(repo, item, head, info, strategy='resolve')

    def _mode_cherry_pick(self, repo, item, head, info) -> str:
        repo.checkout(head)
        repo.clean_head = None
        args = ['cherry-pick', '--ff', '--allow-empty', '--keep-redundant-commits']
        if len(info.parents) > 1:
            args += ['-m', '1']
        repo.git(*args, info.sha, env=self._env(info.committer_date))
        return self._settle(repo)

    def _mode_squash_merge(self, repo, item, head, info) -> str:
        repo.checkout(head)
        repo.clean_head = None
        env = self._env(info.committer_date, author=info)
        repo.git('merge', '-q', '--squash', '-s', 'ort', info.sha, env=env)
        if not repo.git_ok('diff', '--cached', '--quiet'):
            repo.git('commit', '-q', '--no-verify', '--cleanup=strip', '-F', '-', env=env,
                     input_bytes=info.message.encode('utf8'))
        return self._settle(repo)

    def _mode_rebase(self, repo, item, head, info) -> str:
        repo.checkout(info.sha)
        repo.clean_head = None
        repo.git('rebase', '-q', '--no-verify', head, env=self._env(info.committer_date))
        return self._settle(repo)

    @staticmethod
    def _settle(repo: Repo) -> str:
        sha = repo.head()
        repo.clean_head = sha
        return sha

    # -- reading ---------------------------------------------------------
    def _item_files(self, item: MergeItem, branch_head: str | None) -> list[str] | None:
        if not item.is_change:
            return None
        repo = self._repo(item.connection, item.project)
        with repo.lock:
            change = repo.resolve(item.ref)
            base = repo.merge_base(branch_head, change) if branch_head else None
            return repo.changed_files(base, change)

    def _read_after(self, items, spec: _Speculation, paths: list[str]) -> list[ProjectFiles]:
        out, seen = [], set()
        for item in items:
            key = (item.connection, item.project, item.branch)
            if key in seen or not item.branch:
                continue
            seen.add(key)
            sha = spec.current[(item.connection, item.project)].get(item.branch)
            repo = self._repo(item.connection, item.project)
            with repo.lock:
                files = repo.read_files(sha, paths) if sha else {}
            out.append(ProjectFiles(item.connection, item.project, item.branch, files))
        return out

    def get_repo_state(self, items: list[MergeItem], event_id: str | None = None) -> dict:
        """Fetch the items' projects; their current branch heads as a
        repo_state.  Raises MergerError."""
        projects: dict = {}
        for item in items:
            key = (item.connection, item.project)
            if key in projects:
                continue
            repo = self._repo(*key)
            with repo.lock:
                self._fetch(repo)
                projects[key] = repo.heads()
        log.debug('%sRepo state of %d projects', _tag(event_id), len(projects))
        return _as_state(projects)

    def cat_files(self, connection: str, project: str, branch: str, files: list[str],
                  event_id: str | None = None) -> tuple[str, dict[str, str]]:
        """(branch head, {path: text}) after fetching; ``dir/`` reads every
        file below.  Raises MergerError (no such project or branch)."""
        repo = self._repo(connection, project)
        with repo.lock:
            self._fetch(repo)
            sha = repo.heads().get(branch)
            if sha is None:
                raise MergerError(f'{project} has no branch {branch!r}')
            log.debug('%sReading %s from %s %s', _tag(event_id), files, project, branch)
            return sha, repo.read_files(sha, files)

    def files_changes(self, connection: str, project: str, branch: str, tosha: str,
                      event_id: str | None = None) -> list[str]:
        """Files touched by ``tosha``'s commits not on ``branch``."""
        repo = self._repo(connection, project)
        with repo.lock:
            self._fetch(repo, [tosha])
            try:
                sha = repo.resolve(tosha)
            except GitError:
                raise MergerError(f'Unable to find {tosha} of {project}') from None
            head = repo.heads().get(branch)
            base = repo.merge_base(head, sha) if head else None
            log.debug('%sFiles of %s in %s', _tag(event_id), tosha, project)
            return repo.changed_files(base, sha)

    # -- workspaces --------------------------------------------------------
    def prepare_workspace(self, repo_state: dict, projects, dest_root: str,
                          canonical_hostnames: dict) -> dict:
        """Check out ``projects`` [(connection, project, branch or None)] at
        ``dest_root/<canonical hostname>/<project>``: every branch of the
        project at its ``repo_state`` commit (origin's current heads for a
        project not in it), tags, ``branch`` checked out (a tag name is
        checked out detached; None or unknown: the default branch), and
        ``origin`` pointing nowhere.  Returns {(connection, project): path}.
        Raises MergerError."""
        paths = {}
        for connection, project, branch in projects:
            repo = self._repo(connection, project)
            recorded = ((repo_state or {}).get(connection) or {}).get(project)
            hostname = (canonical_hostnames or {}).get(connection) or connection
            dest = os.path.join(dest_root, hostname, project)
            with repo.lock:
                if recorded is None:
                    self._fetch(repo)
                    heads = repo.heads()
                else:
                    heads = _state_branches(recorded)
                    self._ensure(repo, heads.values())
                default = repo.default_branch()
                repo.clone_to(dest)
            _setup_checkout(dest, heads, branch, default)
            paths[(connection, project)] = dest
        return paths


def _merge_message(item: MergeItem) -> str:
    if item.number is not None:
        return f'Merge change {item.number},{item.patchset}'
    return f'Merge {item.ref}'


def _setup_checkout(dest: str, heads: dict[str, str], branch: str | None,
                    default: str | None) -> None:
    def git(*args, **kw):
        return run_git(list(args), cwd=dest, **kw)

    lines = []
    for name, sha in sorted(heads.items()):
        lines.append(f'update refs/heads/{name} {sha}\n')
        lines.append(f'update refs/remotes/origin/{name} {sha}\n')
    git('update-ref', '--no-deref', '--stdin', input_bytes=''.join(lines).encode())
    git('remote', 'set-url', 'origin', WORKSPACE_REMOTE)
    tag = f'refs/tags/{branch}' if branch and branch not in heads else None
    if tag and run_git(['rev-parse', '-q', '--verify', tag], cwd=dest, check=False):
        git('checkout', '-q', '-f', '--detach', tag)
        target = None
    else:
        target = _pick_checkout(heads, branch, default)
        if target is not None:
            git('checkout', '-q', '-f', target)
    fallback = default if default in heads else target
    if fallback:
        git('symbolic-ref', 'refs/remotes/origin/HEAD', f'refs/remotes/origin/{fallback}')


def _pick_checkout(heads: dict, branch: str | None, default: str | None) -> str | None:
    for candidate in (branch, default, 'master', 'main'):
        if candidate and candidate in heads:
            return candidate
    return sorted(heads)[0] if heads else None


_MODES = {
    'merge': Merger._mode_merge,
    'merge-resolve': Merger._mode_merge_resolve,
    'cherry-pick': Merger._mode_cherry_pick,
    'squash-merge': Merger._mode_squash_merge,
    'rebase': Merger._mode_rebase,
}
