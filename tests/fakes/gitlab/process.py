"""Driving the GitLab stand-in from tests and benchmarks: it runs as its
own process, and everything here goes through what a GitLab user has --
the REST API with a personal access token, and git over HTTP -- plus the
stand-in's ``/-/standin/`` controls (request log, faults, deliveries)."""

from __future__ import annotations

import base64
import json
import os
import pathlib
import secrets
import signal
import subprocess
import sys
import textwrap
import urllib.error
import urllib.parse
import urllib.request

from tests.harness.waiting import wait_for

TOP = pathlib.Path(__file__).resolve().parents[3]
DEVELOPER, MAINTAINER = 30, 40


class GitlabError(Exception):
    def __init__(self, status: int, body):
        super().__init__(f'{status}: {body}')
        self.status = status
        self.body = body


def _q(value) -> str:
    return urllib.parse.quote(str(value), safe='')


class GitlabStandIn:
    """The stand-in process (state under ``base_dir``) and a root token."""

    def __init__(self, base_dir: str):
        self.base_dir = base_dir
        os.makedirs(base_dir, exist_ok=True)
        self.root_token = 'glpat-root-' + secrets.token_hex(8)
        self.log_path = os.path.join(base_dir, 'standin.log')
        log = open(self.log_path, 'ab')
        self.proc = subprocess.Popen(
            [sys.executable, '-m', 'tests.fakes.gitlab', '--state-dir',
             os.path.join(base_dir, 'state'), '--root-token', self.root_token],
            cwd=str(TOP), stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        log.close()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError('the GitLab stand-in did not start:\n' + self.log())
        self.url = json.loads(line)['url']
        self.tokens: dict[str, str] = {'root': self.root_token}
        self.user_ids: dict[str, int] = {}
        self._work = os.path.join(base_dir, 'work')

    def log(self) -> str:
        with open(self.log_path, errors='replace') as f:
            return f.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc.stdout.close()

    # -- HTTP -----------------------------------------------------------------------
    def request(self, method: str, path: str, body=None, user: str = 'root',
                token: str | None = None, raw_path: bool = False):
        url = self.url + (path if raw_path else '/api/v4' + path)
        headers = {'Content-Type': 'application/json'}
        token = token if token is not None else self.tokens.get(user)
        if token:
            headers['PRIVATE-TOKEN'] = token
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=60) as answer:
                raw = answer.read()
                return json.loads(raw) if raw else None
        except urllib.error.HTTPError as err:
            raw = err.read()
            raise GitlabError(err.code, json.loads(raw) if raw else None) from None

    def get(self, path, **kw):
        return self.request('GET', path, **kw)

    def control(self, method: str, what: str, body=None):
        return self.request(method, f'/-/standin/{what}', body=body, raw_path=True)

    def api_requests(self, user: str | None = None) -> list[dict]:
        return [r for r in self.control('GET', 'requests')
                if r['method'] != 'GIT' and (user is None or r['user'] == user)]

    def clear_requests(self) -> None:
        self.control('DELETE', 'requests')

    def fault(self, match: str, status: int = 500, count: int = 1,
              retry_after: int | None = None) -> None:
        self.control('POST', 'faults', {'match': match, 'status': status, 'count': count,
                                        'retry_after': retry_after})

    def hold(self, match: str) -> None:
        """API requests matching ``match`` (a regex on ``METHOD /path``)
        wait unanswered until ``release``."""
        self.control('POST', 'holds', {'match': match})

    def held(self) -> int:
        """How many API requests wait on a hold now."""
        return self.control('GET', 'holds')['held']

    def release(self) -> None:
        self.control('DELETE', 'holds')

    def deliveries(self) -> list[dict]:
        return self.control('GET', 'deliveries')['deliveries']

    def wait_deliveries(self, timeout: float = 30) -> None:
        wait_for(lambda: self.control('GET', 'deliveries')['pending'] == 0, timeout=timeout,
                 what='webhook deliveries sent')

    # -- arranging, as an admin would ---------------------------------------------------
    def add_user(self, username: str) -> str:
        user = self.request('POST', '/users', {'username': username, 'name': username.title(),
                                               'email': f'{username}@example.org'})
        self.user_ids[username] = user['id']
        token = self.request('POST', f'/users/{user["id"]}/personal_access_tokens',
                             {'name': 'zuul', 'scopes': ['api']})['token']
        self.tokens[username] = token
        return token

    def add_project(self, name: str, members: dict | None = None, **settings) -> dict:
        namespace, path = name.split('/', 1)
        groups = getattr(self, '_groups', {})
        if namespace not in groups:
            groups[namespace] = self.request('POST', '/groups', {'name': namespace,
                                                                 'path': namespace})['id']
            self._groups = groups
        project = self.request('POST', '/projects', {'path': path,
                                                     'namespace_id': groups[namespace],
                                                     **settings})
        for username, level in (members or {}).items():
            self.request('POST', f'/projects/{project["id"]}/members',
                         {'user_id': self.user_ids[username], 'access_level': level})
        return project

    def add_hook(self, project: str, url: str, token: str) -> dict:
        return self.request('POST', f'/projects/{_q(project)}/hooks', {
            'url': url, 'token': token, 'push_events': True, 'tag_push_events': True,
            'merge_requests_events': True, 'note_events': True})

    # -- git, as a developer would -------------------------------------------------------
    def git_url(self, project: str, user: str = 'root') -> str:
        return f'{self.url}/{project}.git'

    def _git_env(self, user: str) -> dict:
        basic = base64.b64encode(f'{user}:{self.tokens[user]}'.encode()).decode()
        return dict(os.environ, GIT_AUTHOR_NAME=user, GIT_AUTHOR_EMAIL=f'{user}@example.org',
                    GIT_COMMITTER_NAME=user, GIT_COMMITTER_EMAIL=f'{user}@example.org',
                    GIT_CONFIG_COUNT='1', GIT_CONFIG_KEY_0='http.extraHeader',
                    GIT_CONFIG_VALUE_0=f'Authorization: Basic {basic}',
                    GIT_TERMINAL_PROMPT='0')

    def git(self, project: str, *args, user: str = 'root', check: bool = True):
        work = os.path.join(self._work, project)
        return subprocess.run(['git', *args], cwd=work, env=self._git_env(user),
                              capture_output=True, text=True, check=check)

    def commit(self, project: str, branch: str, files: dict, message: str,
               base: str | None = None, user: str = 'root', push: bool = True) -> str:
        """``files`` committed on ``branch`` (made from ``base``, default
        the remote's ``main``) and pushed; returns the commit."""
        work = os.path.join(self._work, project)
        if not os.path.isdir(os.path.join(work, '.git')):
            os.makedirs(work, exist_ok=True)
            subprocess.run(['git', 'init', '-q', '-b', 'main'], cwd=work, check=True)
            subprocess.run(['git', 'remote', 'add', 'origin', self.git_url(project)],
                           cwd=work, check=True)
        fetched = self.git(project, 'fetch', '-q', 'origin', user=user, check=False)
        start = base or 'origin/main'
        has_start = self.git(project, 'rev-parse', '--verify', '-q', start,
                             check=False).returncode == 0
        if has_start and fetched.returncode == 0:
            self.git(project, 'checkout', '-q', '-B', branch, start)
        else:
            self.git(project, 'checkout', '-q', '--orphan', branch)
        for path, text in files.items():
            full = os.path.join(work, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            if text is None:
                os.remove(full)
            else:
                with open(full, 'w') as f:
                    f.write(textwrap.dedent(text))
        self.git(project, 'add', '-A')
        self.git(project, 'commit', '-q', '--allow-empty', '-m', message, user=user)
        sha = self.git(project, 'rev-parse', 'HEAD').stdout.strip()
        if push:
            self.git(project, 'push', '-q', '-f', 'origin', f'HEAD:refs/heads/{branch}',
                     user=user)
        return sha

    # -- merge requests ------------------------------------------------------------------
    def open_mr(self, project: str, title: str, files: dict, description: str = '',
                user: str = 'dev', branch: str | None = None, target: str = 'main') -> dict:
        branch = branch or 'mr-' + secrets.token_hex(4)
        self.commit(project, branch, files, title, base=f'origin/{target}', user=user)
        return self.request('POST', f'/projects/{_q(project)}/merge_requests',
                            {'source_branch': branch, 'target_branch': target,
                             'title': title, 'description': description}, user=user)

    def mr(self, project: str, iid: int) -> dict:
        return self.get(f'/projects/{_q(project)}/merge_requests/{iid}')

    def mr_path(self, project: str, iid: int) -> str:
        return f'/projects/{_q(project)}/merge_requests/{iid}'

    def approve(self, project: str, iid: int, user: str = 'core') -> None:
        self.request('POST', self.mr_path(project, iid) + '/approve', {}, user=user)

    def unapprove(self, project: str, iid: int, user: str = 'core') -> None:
        self.request('POST', self.mr_path(project, iid) + '/unapprove', {}, user=user)

    def comment(self, project: str, iid: int, text: str, user: str = 'dev') -> dict:
        return self.request('POST', self.mr_path(project, iid) + '/notes', {'body': text},
                            user=user)

    def label(self, project: str, iid: int, add=(), remove=(), user: str = 'core') -> dict:
        body = {}
        if add:
            body['add_labels'] = ','.join(add)
        if remove:
            body['remove_labels'] = ','.join(remove)
        return self.request('PUT', self.mr_path(project, iid), body, user=user)

    def notes(self, project: str, iid: int, by: str | None = None) -> list[str]:
        notes = self.get(self.mr_path(project, iid) + '/notes?sort=asc&per_page=100')
        return [n['body'] for n in notes if not n['system'] and
                (by is None or n['author']['username'] == by)]

    def approved_by(self, project: str, iid: int) -> list[str]:
        data = self.get(self.mr_path(project, iid) + '/approvals')
        return [a['user']['username'] for a in data['approved_by']]

    def branch_files(self, project: str, branch: str = 'main') -> list[str]:
        self.git(project, 'fetch', '-q', 'origin')
        return self.git(project, 'ls-tree', '--name-only', f'origin/{branch}').stdout.split()

    def branch_log(self, project: str, branch: str = 'main', rev: str | None = None
                   ) -> list[str]:
        """``<parents>|<subject>`` of ``branch`` (its first parents), newest
        first; ``rev`` (e.g. ``origin/main^2``) instead of the branch."""
        self.git(project, 'fetch', '-q', 'origin')
        out = self.git(project, 'log', '--first-parent', '--format=%p|%s',
                       rev or f'origin/{branch}').stdout
        return out.splitlines()
