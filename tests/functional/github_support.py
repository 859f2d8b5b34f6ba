"""A GitHub side for whole-system tests and benchmarks: the fake GitHub
(REST and git over HTTP, tests/fakes/github.py) with an App, a zuul-web
taking its webhook deliveries, pipelines and a repository with a
.zuul.yaml; pull requests opened, approved and read back from it."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import urllib.error
import urllib.request

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.fakes.github import FakeGithub
from zuul.cmd.web import WebSettings, build_web
from zuul.configloader.zuulconf import load_zuul_conf
from zuul.driver.github.connection import GithubConnection
from zuul.driver.github.events import sign
from zuul.driver.registry import default_registry
from zuul.web.webhooks import WebhookReceiver

REPO = 'acme/widget'
SECRET = 'webhook-secret'

GITHUB_PIPELINES = """
- pipeline:
    name: gh-check
    manager: independent
    trigger:
      github:
        - event: pull_request
          action: [opened, changed, reopened]
        - event: pull_request
          action: comment
          comment: (?i)^\\s*recheck\\s*$
    start:
      github:
        status: pending
        comment: false
    success:
      github:
        status: success
    failure:
      github:
        status: failure
- pipeline:
    name: gh-checks-api
    manager: independent
    trigger:
      github:
        - event: check_run
          action: rerequested
          check: .*/gh-checks-api:.*
    start:
      github:
        check: in_progress
        comment: false
    success:
      github:
        check: success
        comment: false
    failure:
      github:
        check: failure
        comment: false
- pipeline:
    name: gh-gate
    manager: dependent
    require:
      github:
        open: true
        current-patchset: true
        review:
          - type: approved
            permission: write
    trigger:
      github:
        - event: pull_request_review
          action: submitted
          state: approved
    start:
      github:
        status: pending
        comment: false
    success:
      github:
        status: success
        merge: true
    failure:
      github:
        status: failure
"""

WIDGET_CONFIG = """
- project:
    gh-check:
      jobs:
        - check-marker
    gh-checks-api:
      jobs:
        - check-marker
    gh-gate:
      jobs:
        - check-marker
"""


class GithubSide:
    """The fake GitHub, its App, and zuul-web's receiver for it."""

    def __init__(self, system, tmp):
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.key_file = os.path.join(tmp, 'github-app.pem')
        with open(self.key_file, 'wb') as f:
            f.write(key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
        public = key.public_key().public_bytes(
            serialization.Encoding.PEM,
            serialization.PublicFormat.SubjectPublicKeyInfo).decode()
        self.fake = FakeGithub(app_id=31337, app_public_key=public)
        self.url = self.fake.start()
        self.fake.repo(REPO)['private'] = True
        self.fake.repo(REPO)['permissions'].update(core='write', visitor='read')
        self.fake.installations[REPO] = 5
        self.options = {'app_id': '31337', 'app_key': self.key_file, 'api_url': self.url,
                        'git_host': self.url, 'webhook_token': SECRET}
        self.system = system
        self.work = os.path.join(tmp, 'gh-work')
        self._number = 0

    def configure(self) -> None:
        """Before system.start(): the github connection, the repo in the
        tenant, its branch with a .zuul.yaml."""
        system = self.system
        with open(system.conf_path, 'a') as f:
            f.write('\n[connection github]\ndriver = github\n')
            for k, v in self.options.items():
                f.write(f'{k} = {v}\n')
        with open(os.path.join(system.root, 'main.yaml'), 'a') as f:
            f.write(f'      github:\n        untrusted-projects:\n          - {REPO}\n')
        system.conf = load_zuul_conf(system.conf_path, default_registry())
        system.resolver.mapping['github'] = {'driver': 'github', 'options': self.options}
        from zuul.scheduler.service import SchedulerService
        system.service = SchedulerService(system.conf)
        self._git('init', '-q', '-b', 'main', cwd=None)
        self._write({'.zuul.yaml': WIDGET_CONFIG, 'README': 'widget\n'})
        self._git('commit', '-q', '-m', 'Initial')
        self._git('push', '-q', self.fake.bare_repo(REPO), 'main')

    def start_web(self, zk_client) -> None:
        """zuul-web with this connection's webhook receiver (port 0)."""
        web_side = GithubConnection('github', self.options)
        web_side.attach_zookeeper(zk_client)
        self.web, self.rpc = build_web(WebSettings(gearman_port=self.system.gear_port,
                                                   port=0),
                                       WebhookReceiver({'github': web_side}))
        self.web.start()
        self.payload_url = f'http://127.0.0.1:{self.web.port}/api/connection/github/payload'

    def stop(self) -> None:
        self.web.stop()
        self.rpc.shutdown()
        self.fake.stop()

    # -- git -----------------------------------------------------------------
    def _git(self, *args, cwd: str | None = 'work') -> str:
        if cwd is None:
            os.makedirs(self.work, exist_ok=True)
        env = dict(os.environ, GIT_AUTHOR_NAME='Alice', GIT_AUTHOR_EMAIL='alice@example.org',
                   GIT_COMMITTER_NAME='Alice', GIT_COMMITTER_EMAIL='alice@example.org')
        return subprocess.run(['git', *args], cwd=self.work, env=env, check=True,
                              capture_output=True, text=True).stdout.strip()

    def _write(self, files: dict) -> None:
        for path, text in files.items():
            full = os.path.join(self.work, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, 'w') as f:
                f.write(textwrap.dedent(text))
        self._git('add', '-A')

    # -- pull requests -------------------------------------------------------
    def open_pull(self, title: str, files: dict) -> dict:
        """A branch off main with ``files``, pushed as refs/pull/N/head,
        the pull request opened, and GitHub's delivery sent."""
        self._number += 1
        number = self._number
        self._git('fetch', '-q', self.fake.bare_repo(REPO), 'main')
        self._git('checkout', '-q', '-B', f'pr{number}', 'FETCH_HEAD')
        self._write(files)
        self._git('commit', '-q', '-m', title)
        sha = self._git('rev-parse', 'HEAD')
        self._git('push', '-q', self.fake.bare_repo(REPO), f'HEAD:refs/pull/{number}/head')
        pr = self.fake.open_pull(REPO, number, sha, title=title, files=list(files))
        self.deliver('pull_request', {'action': 'opened', 'pull_request': pr})
        return pr

    def approve(self, pr: dict, who: str = 'core') -> None:
        self.fake.add_review(REPO, pr['number'], who, 'approved')
        self.deliver('pull_request_review', {'action': 'submitted', 'pull_request': pr,
                                             'review': {'state': 'approved',
                                                        'user': {'login': who}},
                                             'sender': {'login': who}})

    def deliver(self, kind: str, payload: dict, secret: str = SECRET) -> int:
        payload = {'repository': {'full_name': REPO}, 'sender': {'login': 'alice'},
                   **payload}
        body = json.dumps(payload).encode()
        headers = {'X-GitHub-Event': kind, 'X-GitHub-Delivery': f'{kind}-{len(body)}',
                   'X-Hub-Signature-256': sign(secret, body)}
        request = urllib.request.Request(self.payload_url, data=body, method='POST',
                                         headers={**headers,
                                                  'Content-Type': 'application/json'})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status
        except urllib.error.HTTPError as err:
            return err.code

    def rerequest_check(self, pr: dict, name: str) -> int:
        """GitHub's delivery when someone clicks "Re-run" on a check run."""
        return self.deliver('check_run', {'action': 'rerequested', 'check_run': {
            'name': name, 'head_sha': pr['head']['sha'], 'conclusion': 'failure',
            'app': {'slug': 'zuul'},
            'pull_requests': [{'number': pr['number'], 'base': {'ref': 'main'}}]}})

    def check_runs(self, pr: dict) -> list[dict]:
        return self.fake.repo(REPO)['check_runs'].get(pr['head']['sha'], [])

    def status(self, pr: dict, context: str) -> str | None:
        for s in self.fake.repo(REPO)['statuses'].get(pr['head']['sha'], []):
            if s['context'] == context:
                return s['state']
        return None

    def branch_files(self) -> list[str]:
        bare = self.fake.bare_repo(REPO)
        return subprocess.run(['git', '-C', bare, 'ls-tree', '--name-only', 'main'],
                              capture_output=True, text=True, check=True).stdout.split()
