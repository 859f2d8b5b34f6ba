"""The review data of the development Gerrit: projects (real bare git
repositories), changes, patchsets, approvals, and the event stream."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field

ZERO_SHA = '0' * 40


class ReviewError(Exception):
    """A request the review server refuses (reported to the SSH client)."""


@dataclass
class Account:
    username: str
    name: str = ''
    email: str = ''

    def to_dict(self) -> dict:
        return {'name': self.name or self.username,
                'email': self.email or f'{self.username}@example.com',
                'username': self.username}


@dataclass
class Approval:
    label: str
    value: int
    by: Account
    granted_on: int

    def to_dict(self) -> dict:
        return {'type': self.label, 'description': self.label,
                'value': str(self.value), 'grantedOn': self.granted_on,
                'by': self.by.to_dict()}


@dataclass
class PatchSet:
    number: int
    revision: str
    ref: str
    parents: list[str]
    uploader: Account
    created_on: int
    files: list[tuple[str, str]]
    approvals: list[Approval] = field(default_factory=list)
    # Gerrit's change kind of this patch set against the previous one.
    kind: str = 'REWORK'

    def to_dict(self, with_files: bool = False) -> dict:
        d = {'number': self.number, 'revision': self.revision,
             'parents': list(self.parents), 'ref': self.ref,
             'uploader': self.uploader.to_dict(), 'author': self.uploader.to_dict(),
             'createdOn': self.created_on, 'kind': self.kind}
        if self.approvals:
            d['approvals'] = [a.to_dict() for a in self.approvals]
        if with_files:
            d['files'] = [{'file': '/COMMIT_MSG', 'type': 'ADDED'}] + [
                {'file': f, 'type': t} for f, t in self.files]
        return d


@dataclass
class Change:
    number: int
    project: str
    branch: str
    change_id: str
    subject: str
    message: str
    owner: Account
    created_on: int
    last_updated: int
    patchsets: list[PatchSet] = field(default_factory=list)
    status: str = 'NEW'
    topic: str | None = None
    hashtags: list[str] = field(default_factory=list)

    @property
    def current(self) -> PatchSet:
        return self.patchsets[-1]

    @property
    def is_open(self) -> bool:
        return self.status == 'NEW'

    def approval_value(self, label: str) -> int:
        votes = [a.value for a in self.current.approvals if a.label == label]
        return max(votes, key=abs) if votes else 0


@dataclass
class PushedCommit:
    """A commit received by a push to ``refs/for/<branch>``."""
    sha: str
    tree: str
    parents: list[str]
    message: str


@dataclass
class PushAction:
    commit: PushedCommit
    change_id: str
    change: Change | None       # None: a new change


_CHANGE_ID_LINE = re.compile(r'^Change-Id:\s*(.*?)\s*$', re.M)
_CHANGE_ID = re.compile(r'I[0-9a-f]{40}')


def footer_change_id(sha: str, message: str) -> str:
    """The Change-Id in the footer (last paragraph) of a commit message;
    raises ReviewError with Gerrit's wording when it is missing or bad."""
    where = f'commit {sha[:7]}'
    paragraphs = [p for p in re.split(r'\n[ \t]*\n', message.strip('\n')) if p.strip()]
    footer = paragraphs[-1] if len(paragraphs) > 1 else ''
    ids = _CHANGE_ID_LINE.findall(footer)
    if not ids:
        if _CHANGE_ID_LINE.search(message):
            if len(paragraphs) == 1:
                raise ReviewError(f'{where}: missing subject; Change-Id must be in '
                                  'message footer')
            raise ReviewError(f'{where}: Change-Id must be in message footer')
        raise ReviewError(f'{where}: missing Change-Id in message footer')
    if len(set(ids)) > 1:
        raise ReviewError(f'{where}: multiple Change-Id lines in message footer')
    if not _CHANGE_ID.fullmatch(ids[0]):
        raise ReviewError(f'{where}: invalid Change-Id line format in message footer')
    return ids[0]


class Repos:
    """Bare repositories on disk, one per project."""

    def __init__(self, root: str):
        self.root = root
        os.makedirs(root, exist_ok=True)
        self._env = dict(os.environ, GIT_TERMINAL_PROMPT='0')

    def path(self, project: str) -> str:
        return os.path.join(self.root, project + '.git')

    def git(self, project: str, *args, input_bytes=None, env=None) -> str:
        proc = subprocess.run(
            ['git', '--git-dir', self.path(project), *args],
            input=input_bytes, capture_output=True, env=env or self._env)
        if proc.returncode:
            raise ReviewError(f'git {args[0]} failed: {proc.stderr.decode().strip()}')
        return proc.stdout.decode().strip()

    def init(self, project: str) -> None:
        path = self.path(project)
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            subprocess.run(['git', 'init', '-q', '--bare', '-b', 'master', path], check=True)
            # Served over git-upload-pack to fetch any change ref.
            self.git(project, 'config', 'uploadpack.allowAnySHA1InWant', 'true')

    def ref(self, project: str, ref: str) -> str | None:
        try:
            return self.git(project, 'rev-parse', '--verify', '-q', ref + '^{commit}')
        except ReviewError:
            return None

    def commit_files(self, project: str, parent: str | None, files: dict[str, str | None],
                     message: str, who: Account, when: int) -> str:
        """Write a commit whose tree is ``parent``'s with ``files`` changed
        (None deletes), without a work tree. Returns its sha."""
        with tempfile.NamedTemporaryFile(prefix='idx-', delete=False) as f:
            index = f.name
        os.unlink(index)
        env = dict(self._env, GIT_INDEX_FILE=index,
                   GIT_AUTHOR_NAME=who.name or who.username,
                   GIT_AUTHOR_EMAIL=who.email or f'{who.username}@example.com',
                   GIT_COMMITTER_NAME=who.name or who.username,
                   GIT_COMMITTER_EMAIL=who.email or f'{who.username}@example.com',
                   GIT_AUTHOR_DATE=f'{when} +0000', GIT_COMMITTER_DATE=f'{when} +0000')
        try:
            if parent:
                self.git(project, 'read-tree', parent, env=env)
            for path, content in sorted(files.items()):
                if content is None:
                    # Mode 0 removes the entry; --index-info needs no work tree.
                    self.git(project, 'update-index', '--index-info',
                             input_bytes=f'0 {"0" * 40}\t{path}\n'.encode(), env=env)
                    continue
                blob = self.git(project, 'hash-object', '-w', '--stdin',
                                input_bytes=content.encode(), env=env)
                self.git(project, 'update-index', '--add', '--cacheinfo',
                         f'100644,{blob},{path}', env=env)
            tree = self.git(project, 'write-tree', env=env)
            args = ['commit-tree', tree, '-m', message]
            if parent:
                args[2:2] = ['-p', parent]
            return self.git(project, *args, env=env)
        finally:
            if os.path.exists(index):
                os.unlink(index)

    def update_ref(self, project: str, ref: str, sha: str) -> None:
        self.git(project, 'update-ref', ref, sha)

    def changed_files(self, project: str, sha: str, parent: str | None) -> list[tuple[str, str]]:
        if parent is None:
            out = self.git(project, 'ls-tree', '-r', '--name-only', sha)
            return [(p, 'ADDED') for p in out.splitlines() if p]
        out = self.git(project, 'diff-tree', '-r', '--no-commit-id', '--name-status',
                       parent, sha)
        kinds = {'A': 'ADDED', 'M': 'MODIFIED', 'D': 'DELETED'}
        result = []
        for line in out.splitlines():
            status, _, path = line.partition('\t')
            result.append((path, kinds.get(status[:1], 'MODIFIED')))
        return result


class ReviewStore:
    """Projects, changes and events. Thread-safe; every mutation emits the
    event Gerrit would emit, to every stream-events subscriber."""

    def __init__(self, base_dir: str, canonical_url: str = 'http://review.example.com'):
        self.base_dir = base_dir
        self.canonical_url = canonical_url.rstrip('/')
        self.repos = Repos(os.path.join(base_dir, 'git'))
        self.lock = threading.RLock()
        self.projects: dict[str, dict] = {}
        self.changes: dict[int, Change] = {}
        self.accounts: dict[str, Account] = {}
        self.subscribers: list = []
        self._next_change = 1
        self.events: list[dict] = []
        self.review_log: list[dict] = []

    # -- accounts, projects -------------------------------------------------

    def account(self, username: str) -> Account:
        with self.lock:
            if username not in self.accounts:
                self.accounts[username] = Account(
                    username, username.replace('_', ' ').title(), f'{username}@example.com')
            return self.accounts[username]

    def create_project(self, name: str, files: dict[str, str] | None = None,
                       branches: tuple[str, ...] = ('master',),
                       owner: str = 'admin') -> str:
        """Create a project with an initial commit on each branch."""
        with self.lock:
            self.repos.init(name)
            self.projects[name] = {'name': name}
            who = self.account(owner)
            sha = self.repos.commit_files(name, None, files or {'README': f'{name}\n'},
                                          'Initial commit', who, _now())
            for branch in branches:
                self.repos.update_ref(name, f'refs/heads/{branch}', sha)
            return sha

    def branch_head(self, project: str, branch: str) -> str | None:
        return self.repos.ref(project, f'refs/heads/{branch}')

    # -- changes ------------------------------------------------------------

    def create_change(self, project: str, branch: str, subject: str,
                      files: dict[str, str | None], owner: str = 'developer',
                      parent: Change | None = None, footer: str = '',
                      topic: str | None = None) -> Change:
        """Upload a new change (patchset 1) on top of ``parent``'s current
        patchset or the branch tip; emits patchset-created."""
        with self.lock:
            if project not in self.projects:
                raise ReviewError(f'project {project} not found')
            number = self._next_change
            self._next_change += 1
            change_id = 'I' + hashlib.sha1(f'{project}{number}{time.time()}'.encode()
                                           ).hexdigest()
            who = self.account(owner)
            now = _now()
            message = _commit_message(subject, footer, change_id)
            change = Change(number, project, branch, change_id, subject, message, who,
                            now, now, topic=topic)
            base = parent.current.revision if parent else self.branch_head(project, branch)
            self._add_patchset(change, base, files, who)
            self.changes[number] = change
            self._emit_patchset_created(change)
            return change

    def add_patchset(self, change: Change, files: dict[str, str | None],
                     uploader: str | None = None, footer: str | None = None) -> PatchSet:
        """Upload a new patchset: the previous one's tree plus ``files``;
        with ``footer`` the commit message gets it (e.g. a ``Depends-On:``
        that closes a dependency cycle) in place of the previous one."""
        with self.lock:
            if footer is not None:
                change.message = _commit_message(change.subject, footer, change.change_id)
            who = self.account(uploader or change.owner.username)
            prev = change.current
            base = prev.parents[0] if prev.parents else None
            previous_files = {p: self.repos.git(change.project, 'show', f'{prev.revision}:{p}')
                              for p, t in prev.files if t != 'DELETED'}
            previous_files.update(files)
            ps = self._add_patchset(change, base, previous_files, who)
            change.last_updated = _now()
            self._emit_patchset_created(change)
            return ps

    def _add_patchset(self, change: Change, base: str | None,
                      files: dict[str, str | None], who: Account) -> PatchSet:
        number = len(change.patchsets) + 1
        sha = self.repos.commit_files(change.project, base, files, change.message, who, _now())
        ref = f'refs/changes/{change.number % 100:02d}/{change.number}/{number}'
        self.repos.update_ref(change.project, ref, sha)
        ps = PatchSet(number, sha, ref, [base] if base else [], who, _now(),
                      self.repos.changed_files(change.project, sha, base))
        change.patchsets.append(ps)
        return ps

    # -- pushes to refs/for/<branch> ------------------------------------------

    def plan_push(self, project: str, branch: str,
                  commits: list[PushedCommit]) -> list[PushAction]:
        """What a push of ``commits`` (oldest first, those not yet on any
        branch) to ``refs/for/<branch>`` does: a new change per unknown
        Change-Id, a new patch set per open change. Raises ReviewError (with
        Gerrit's reason) to refuse the whole push; changes nothing."""
        with self.lock:
            known = {ps.revision for c in self.changes.values() if c.project == project
                     for ps in c.patchsets}
            actions: list[PushAction] = []
            seen: set[str] = set()
            for commit in commits:
                if commit.sha in known:
                    continue    # already a patch set (e.g. an unchanged parent)
                change_id = footer_change_id(commit.sha, commit.message)
                if change_id in seen:
                    raise ReviewError(f'commit {commit.sha[:7]}: same Change-Id in '
                                      'multiple changes. Squash the commits with the same '
                                      'Change-Id or ensure Change-Ids are unique for each '
                                      'commit')
                seen.add(change_id)
                existing = self.find_change(project, branch, change_id)
                if existing is not None and not existing.is_open:
                    raise ReviewError(f'change {self.change_url(existing)} closed')
                actions.append(PushAction(commit, change_id, existing))
            if not actions:
                raise ReviewError('no new changes')
            return actions

    def apply_push(self, project: str, branch: str, actions: list[PushAction],
                   uploader: str, topic: str | None = None) -> list[tuple[Change, bool]]:
        """Record a planned push (its commits must be in the repository):
        emits patchset-created for each change. Returns (change, is_new)."""
        results = []
        with self.lock:
            who = self.account(uploader)
            for action in actions:
                commit = action.commit
                subject = commit.message.split('\n', 1)[0].strip()
                change = action.change
                is_new = change is None
                if is_new:
                    number = self._next_change
                    self._next_change += 1
                    now = _now()
                    change = Change(number, project, branch, action.change_id, subject,
                                    commit.message, who, now, now, topic=topic)
                    kind = 'REWORK'
                else:
                    prev = change.current
                    prev_tree = self.repos.git(project, 'rev-parse', prev.revision + '^{tree}')
                    kind = 'REWORK'
                    if prev_tree == commit.tree and prev.parents == commit.parents:
                        kind = 'NO_CHANGE' if change.message == commit.message \
                            else 'NO_CODE_CHANGE'
                    change.subject, change.message = subject, commit.message
                    if topic:
                        change.topic = topic
                self._record_patchset(change, commit, who, kind)
                change.last_updated = _now()
                if is_new:
                    self.changes[change.number] = change
                self._emit_patchset_created(change)
                results.append((change, is_new))
        return results

    def _record_patchset(self, change: Change, commit: PushedCommit, who: Account,
                         kind: str) -> PatchSet:
        number = len(change.patchsets) + 1
        ref = f'refs/changes/{change.number % 100:02d}/{change.number}/{number}'
        self.repos.update_ref(change.project, ref, commit.sha)
        parent = commit.parents[0] if commit.parents else None
        ps = PatchSet(number, commit.sha, ref, list(commit.parents), who, _now(),
                      self.repos.changed_files(change.project, commit.sha, parent),
                      kind=kind)
        change.patchsets.append(ps)
        return ps

    def find_change(self, project: str, branch: str, change_id: str) -> Change | None:
        with self.lock:
            for change in self.changes.values():
                if (change.project, change.branch, change.change_id) == \
                        (project, branch, change_id):
                    return change
        return None

    def get_change(self, key) -> Change:
        """A change by number, "number,patchset", Change-Id or commit sha."""
        with self.lock:
            text = str(key).split(',')[0].strip()
            if text.isdigit() and int(text) in self.changes:
                return self.changes[int(text)]
            for change in self.changes.values():
                if change.change_id == text or any(
                        ps.revision == text for ps in change.patchsets):
                    return change
        raise ReviewError(f'change {key} not found')

    def review(self, change: Change, patchset: int, who: str, message: str = '',
               labels: dict[str, int] | None = None, submit: bool = False,
               tag: str | None = None, notify: str | None = None) -> None:
        """Post a review (message and votes) and optionally submit, as
        ``gerrit review`` does; emits comment-added (and change-merged).
        ``notify`` is only recorded (the dev server sends no mail)."""
        with self.lock:
            if patchset > len(change.patchsets) or patchset < 1:
                raise ReviewError(f'patch set {patchset} not found')
            account = self.account(who)
            ps = change.patchsets[patchset - 1]
            now = _now()
            given = []
            for label, value in (labels or {}).items():
                ps.approvals = [a for a in ps.approvals
                                if not (a.label == label and a.by.username == who)]
                approval = Approval(label, int(value), account, now)
                ps.approvals.append(approval)
                given.append(approval)
            change.last_updated = now
            self.review_log.append({'change': change.number, 'patchset': patchset,
                                    'user': who, 'message': message,
                                    'labels': dict(labels or {}), 'submit': submit,
                                    'tag': tag, 'notify': notify, 'time': now})
            if message or given:
                self._emit_comment_added(change, ps, account, message, given)
            if submit:
                self.submit(change, who)

    def approve(self, change: Change, label: str, value: int, who: str = 'reviewer',
                message: str = '') -> None:
        """Convenience for tests: vote on the current patchset."""
        self.review(change, change.current.number, who, message, {label: value})

    def comment(self, change: Change, message: str, who: str = 'reviewer') -> None:
        self.review(change, change.current.number, who, message)

    def submit(self, change: Change, who: str = 'admin') -> str:
        """Merge the change into its branch (fast-forward when possible,
        otherwise a merge commit); refuses when it does not merge."""
        with self.lock:
            if not change.is_open:
                raise ReviewError(f'change {change.number} is {change.status.lower()}')
            head = self.branch_head(change.project, change.branch)
            rev = change.current.revision
            new = rev if self._is_ancestor(change.project, head, rev) else \
                self._merge_commit(change, head, rev)
            self.repos.update_ref(change.project, f'refs/heads/{change.branch}', new)
            change.status = 'MERGED'
            change.last_updated = _now()
            submitter = self.account(who)
            self._emit(self._change_event('change-merged', change, {
                'submitter': submitter.to_dict(), 'newRev': new}))
            self._emit_ref_updated(change.project, f'refs/heads/{change.branch}', head, new,
                                   submitter)
            return new

    def abandon(self, change: Change, who: str = 'developer', reason: str = '') -> None:
        with self.lock:
            change.status = 'ABANDONED'
            change.last_updated = _now()
            self._emit(self._change_event('change-abandoned', change, {
                'abandoner': self.account(who).to_dict(), 'reason': reason}))

    def restore(self, change: Change, who: str = 'developer', reason: str = '') -> None:
        with self.lock:
            change.status = 'NEW'
            change.last_updated = _now()
            self._emit(self._change_event('change-restored', change, {
                'restorer': self.account(who).to_dict(), 'reason': reason}))

    def push_branch(self, project: str, branch: str, files: dict[str, str | None],
                    message: str = 'Direct push', who: str = 'admin') -> str:
        """A direct push to a branch (no review): emits ref-updated."""
        with self.lock:
            head = self.branch_head(project, branch)
            account = self.account(who)
            new = self.repos.commit_files(project, head, files, message, account, _now())
            self.repos.update_ref(project, f'refs/heads/{branch}', new)
            self._emit_ref_updated(project, f'refs/heads/{branch}', head, new, account)
            return new

    def _is_ancestor(self, project: str, ancestor: str | None, sha: str) -> bool:
        if ancestor is None:
            return True
        proc = subprocess.run(['git', '--git-dir', self.repos.path(project), 'merge-base',
                               '--is-ancestor', ancestor, sha], capture_output=True)
        return proc.returncode == 0

    def _merge_commit(self, change: Change, head: str, rev: str) -> str:
        proc = subprocess.run(
            ['git', '--git-dir', self.repos.path(change.project), 'merge-tree',
             '--write-tree', head, rev], capture_output=True)
        if proc.returncode:
            raise ReviewError(f'Change {change.number}: Change could not be merged due to '
                              'a path conflict. Please rebase the change locally and upload '
                              'the rebased commit for review.')
        tree = proc.stdout.decode().split()[0]
        who = self.account('admin')
        env = dict(os.environ, GIT_AUTHOR_NAME=who.name, GIT_AUTHOR_EMAIL=who.email,
                   GIT_COMMITTER_NAME=who.name, GIT_COMMITTER_EMAIL=who.email)
        return self.repos.git(change.project, 'commit-tree', tree, '-p', head, '-p', rev,
                              '-m', f'Merge "{change.subject}"', env=env)

    # -- events -------------------------------------------------------------

    def subscribe(self, callback) -> None:
        with self.lock:
            self.subscribers.append(callback)

    def unsubscribe(self, callback) -> None:
        with self.lock:
            if callback in self.subscribers:
                self.subscribers.remove(callback)

    def _emit(self, event: dict) -> None:
        event['eventCreatedOn'] = _now()
        with self.lock:
            self.events.append(event)
            subscribers = list(self.subscribers)
        for callback in subscribers:
            callback(event)

    def set_canonical_url(self, url: str) -> None:
        """Where change URLs (events, queries, push output) point, e.g. the
        dev server's ``http_url`` when it serves change pages."""
        with self.lock:
            self.canonical_url = url.rstrip('/')

    def change_url(self, change: Change) -> str:
        """``<canonical url>/c/<project>/+/<number>``, as Gerrit and Zuul's
        status page link changes (and web.py serves them)."""
        return f'{self.canonical_url}/c/{change.project}/+/{change.number}'

    def change_dict(self, change: Change) -> dict:
        return {'project': change.project, 'branch': change.branch,
                'id': change.change_id, 'number': change.number,
                'subject': change.subject, 'owner': change.owner.to_dict(),
                'url': self.change_url(change), 'commitMessage': change.message,
                'createdOn': change.created_on, 'status': change.status,
                **({'topic': change.topic} if change.topic else {})}

    def _change_event(self, kind: str, change: Change, extra: dict) -> dict:
        return {**extra, 'patchSet': change.current.to_dict(),
                'change': self.change_dict(change),
                'project': {'name': change.project},
                'refName': f'refs/heads/{change.branch}',
                'changeKey': {'key': change.change_id}, 'type': kind}

    def _emit_patchset_created(self, change: Change) -> None:
        self._emit(self._change_event('patchset-created', change, {
            'uploader': change.current.uploader.to_dict()}))

    def _emit_comment_added(self, change: Change, ps: PatchSet, author: Account,
                            message: str, given: list[Approval]) -> None:
        event = self._change_event('comment-added', change, {
            'author': author.to_dict(),
            'approvals': [{'type': a.label, 'description': a.label, 'value': str(a.value)}
                          for a in given],
            'comment': f'Patch Set {ps.number}:\n\n{message}' if message else
                       f'Patch Set {ps.number}:'})
        event['patchSet'] = ps.to_dict()
        self._emit(event)

    def _emit_ref_updated(self, project: str, ref: str, old: str | None, new: str,
                          who: Account) -> None:
        self._emit({'submitter': who.to_dict(),
                    'refUpdate': {'oldRev': old or ZERO_SHA, 'newRev': new,
                                  'refName': ref, 'project': project},
                    'type': 'ref-updated'})


def _now() -> int:
    return int(time.time())


def _commit_message(subject: str, footer: str, change_id: str) -> str:
    body = subject.strip() + '\n\n'
    if footer.strip():
        body += footer.strip() + '\n'
    return body + f'Change-Id: {change_id}\n'
