"""The stand-in's state: users and tokens, groups, projects (each a bare
git repository), merge requests with their notes, approvals, label events
and diff versions, project events and webhooks. One lock serializes every
change, git included."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from datetime import datetime, timezone

GUEST, REPORTER, DEVELOPER, MAINTAINER, OWNER = 10, 20, 30, 40, 50
ZERO_SHA = '0' * 40


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, timezone.utc).strftime('%Y-%m-%dT%H:%M:%S.%f')[:-3] + 'Z'


def parse_time(text: str | None) -> float | None:
    if not text:
        return None
    text = text.strip().replace('Z', '+00:00')
    if len(text) == 10:
        text += 'T00:00:00+00:00'
    when = datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


class ApiError(Exception):
    def __init__(self, status: int, message, headers: dict | None = None):
        super().__init__(status)
        self.status = status
        self.message = message
        self.headers = headers or {}


class GitError(Exception):
    pass


class Project:
    def __init__(self, pid: int, namespace: str, path: str, repo_dir: str):
        self.id = pid
        self.namespace = namespace
        self.path = path
        self.path_with_namespace = f'{namespace}/{path}'
        self.bare = repo_dir
        self.default_branch = 'main'
        self.merge_method = 'merge'             # merge, rebase_merge, ff
        self.squash_option = 'default_off'      # never, always, default_on, default_off
        self.approvals_required = 0
        self.visibility = 'private'
        self.members: dict[int, int] = {}       # user id -> access level
        self.protected: dict[str, dict] = {}    # branch -> access levels
        self.hooks: list[dict] = []
        self.mrs: dict[int, dict] = {}
        self.next_iid = 1
        self.events: list[dict] = []


class Store:
    def __init__(self, state_dir: str, web_url: str = ''):
        self.state_dir = state_dir
        self.web_url = web_url
        self.lock = threading.RLock()
        self.users: dict[int, dict] = {}
        self.tokens: dict[str, int] = {}
        self.groups: dict[int, dict] = {}
        self.projects: dict[int, Project] = {}
        self._ids = 100
        self.on_hook = None            # (project, header, payload) -> None
        root = self.add_user('root', 'Administrator', admin=True)
        self.root_id = root['id']

    def new_id(self) -> int:
        with self.lock:
            self._ids += 1
            return self._ids

    # -- users, groups, projects -----------------------------------------------------
    def add_user(self, username: str, name: str = '', email: str = '',
                 admin: bool = False) -> dict:
        with self.lock:
            if any(u['username'] == username for u in self.users.values()):
                raise ApiError(409, {'username': ['has already been taken']})
            user = {'id': self.new_id(), 'username': username, 'name': name or username,
                    'email': email or f'{username}@example.org', 'is_admin': admin,
                    'state': 'active'}
            self.users[user['id']] = user
            return user

    def add_token(self, user_id: int, token: str | None = None) -> str:
        token = token or 'glpat-' + secrets.token_hex(10)
        with self.lock:
            self.tokens[token] = user_id
        return token

    def user_for_token(self, token: str | None) -> dict | None:
        uid = self.tokens.get(token or '')
        return self.users.get(uid) if uid else None

    def find_user(self, key) -> dict:
        for user in self.users.values():
            if str(user['id']) == str(key) or user['username'] == key:
                return user
        raise ApiError(404, '404 User Not Found')

    def add_group(self, path: str, name: str = '') -> dict:
        with self.lock:
            group = {'id': self.new_id(), 'path': path, 'name': name or path,
                     'full_path': path}
            self.groups[group['id']] = group
            return group

    def add_project(self, namespace: str, path: str, creator: int | None = None) -> Project:
        with self.lock:
            name = f'{namespace}/{path}'
            if any(p.path_with_namespace == name for p in self.projects.values()):
                raise ApiError(400, {'name': ['has already been taken']})
            bare = os.path.join(self.state_dir, 'repos', name + '.git')
            os.makedirs(os.path.dirname(bare), exist_ok=True)
            subprocess.run(['git', 'init', '-q', '--bare', '-b', 'main', bare], check=True)
            project = Project(self.new_id(), namespace, path, bare)
            project.protected['main'] = {'push': MAINTAINER, 'merge': MAINTAINER}
            if creator is not None:
                project.members[creator] = OWNER
            self.projects[project.id] = project
            return project

    def find_project(self, key: str) -> Project:
        for project in self.projects.values():
            if str(project.id) == key or project.path_with_namespace == key:
                return project
        raise ApiError(404, '404 Project Not Found')

    def access(self, project: Project, user: dict | None) -> int:
        if user is None:
            return 0
        if user.get('is_admin'):
            return OWNER
        return project.members.get(user['id'], 0)

    def web(self, project: Project) -> str:
        return f'{self.web_url}/{project.path_with_namespace}'

    # -- git ------------------------------------------------------------------------
    def git(self, project: Project, *args, check: bool = True, cwd: str | None = None,
            name: str = 'GitLab', email: str = 'gitlab@example.org') -> str:
        env = dict(os.environ, GIT_AUTHOR_NAME=name, GIT_AUTHOR_EMAIL=email,
                   GIT_COMMITTER_NAME=name, GIT_COMMITTER_EMAIL=email,
                   GIT_CONFIG_NOSYSTEM='1', GIT_CONFIG_GLOBAL=os.devnull)
        base = ['git', '-C', cwd] if cwd else ['git', '--git-dir', project.bare]
        proc = subprocess.run([*base, *args], capture_output=True, text=True, env=env)
        if check and proc.returncode:
            raise GitError(f'git {" ".join(args)}: {proc.stderr.strip()}')
        return proc.stdout.strip()

    def refs(self, project: Project) -> dict[str, str]:
        out = self.git(project, 'for-each-ref', '--format=%(refname) %(objectname)',
                       'refs/heads', 'refs/tags')
        return dict(line.split(' ', 1) for line in out.splitlines() if line)

    def branch_head(self, project: Project, branch: str) -> str | None:
        sha = self.git(project, 'rev-parse', '--verify', '-q', f'refs/heads/{branch}',
                       check=False)
        return sha or None

    def is_ancestor(self, project: Project, older: str, newer: str) -> bool:
        return subprocess.run(['git', '--git-dir', project.bare, 'merge-base',
                               '--is-ancestor', older, newer]).returncode == 0

    def merge_tree(self, project: Project, base: str, head: str) -> str | None:
        """The merged tree, or None on conflicts."""
        proc = subprocess.run(['git', '--git-dir', project.bare, 'merge-tree',
                               '--write-tree', base, head], capture_output=True, text=True)
        return proc.stdout.split()[0] if proc.returncode == 0 else None

    def commits_between(self, project: Project, base: str | None, head: str) -> list[dict]:
        spec = f'{base}..{head}' if base and base != ZERO_SHA else head
        out = self.git(project, 'log', '--format=%H%x00%s%x00%an%x00%ae%x00%ct%x00%B%x01',
                       spec, check=False)
        commits = []
        for chunk in out.split('\x01'):
            parts = chunk.strip('\n').split('\x00')
            if len(parts) >= 6:
                commits.append({'id': parts[0], 'title': parts[1], 'author_name': parts[2],
                                'author_email': parts[3], 'timestamp': iso(int(parts[4])),
                                'message': parts[5]})
        return commits

    def changed_files(self, project: Project, base: str, head: str) -> list[dict]:
        out = self.git(project, 'diff', '--name-status', '-M', f'{base}...{head}',
                       check=False)
        diffs = []
        for line in out.splitlines():
            fields = line.split('\t')
            status = fields[0]
            old = fields[1]
            new = fields[2] if len(fields) > 2 else fields[1]
            diffs.append({'old_path': old, 'new_path': new, 'new_file': status == 'A',
                          'deleted_file': status == 'D', 'renamed_file': status[:1] == 'R',
                          'a_mode': '100644', 'b_mode': '100644', 'diff': ''})
        return diffs

    def cherry_pick_onto(self, project: Project, onto: str, base: str, head: str) -> str:
        """``base..head`` replayed onto ``onto`` (GitLab's rebase); GitError
        on conflicts."""
        work = tempfile.mkdtemp(prefix='standin-rebase-')
        shutil.rmtree(work)
        self.git(project, 'worktree', 'add', '-q', '--detach', work, onto)
        try:
            commits = self.git(project, 'rev-list', '--reverse', f'{base}..{head}')
            for sha in commits.split():
                self.git(project, 'cherry-pick', '--allow-empty', '--keep-redundant-commits',
                         sha, cwd=work)
            return self.git(project, 'rev-parse', 'HEAD', cwd=work)
        finally:
            self.git(project, 'worktree', 'remove', '--force', work, check=False)
            shutil.rmtree(work, ignore_errors=True)

    # -- project events ------------------------------------------------------------------
    def record_event(self, project: Project, user: dict | None, action_name: str,
                     **fields) -> dict:
        user = user or self.users[self.root_id]
        event = {'id': self.new_id(), 'project_id': project.id, 'action_name': action_name,
                 'target_id': None, 'target_iid': None, 'target_type': None,
                 'target_title': None, 'created_at': iso(time.time()),
                 'author_id': user['id'], 'author_username': user['username'],
                 'author': {k: user[k] for k in ('id', 'username', 'name')}, **fields}
        project.events.append(event)
        return event
