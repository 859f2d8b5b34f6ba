"""A GitHub side for whole-system tests and benchmarks: the fake GitHub
(REST and git over HTTP, tests/fakes/github.py) with an App, a zuul-web
taking its webhook deliveries, pipelines and a repository with a
.zuul.yaml; pull requests opened, approved, closed and read back from it.

Every delivery is a real GitHub payload (tests/fakes/github_payloads.py,
from tests/fixtures/github-webhooks/) carrying the fake's objects, signed
as GitHub signs it; the deliveries that follow a merge (pull_request
closed, push) are sent by the fake itself, as GitHub sends them."""

from __future__ import annotations

import os
import subprocess
import textwrap
import time

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.fakes import github_payloads as payloads
from tests.fakes.github import FakeGithub, post_delivery
from zuul.cmd.web import WebSettings, build_web
from zuul.configloader.zuulconf import load_zuul_conf
from zuul.driver.github.connection import GithubConnection
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
        - gh-waits
    gh-checks-api:
      jobs:
        - check-marker
        - gh-waits
    gh-gate:
      jobs:
        - check-marker
        - gh-waits
"""


def github_config_files(marker: str) -> dict:
    """project-config files: ``gh-waits``, a job that runs only for pull
    requests with a WAIT file and waits until ``marker`` exists (so a
    test can act while it runs)."""
    return {'zuul.d/github-jobs.yaml': """
- job:
    name: gh-waits
    files: ['^WAIT$']
    run: playbooks/gh-waits.yaml
""", 'playbooks/gh-waits.yaml': f"""
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Run until the test says so
      wait_for:
        path: {marker}
        timeout: 240
"""}


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
        """zuul-web with this connection's webhook receiver (port 0); the
        fake GitHub's App delivers its webhooks there."""
        web_side = GithubConnection('github', self.options)
        web_side.attach_zookeeper(zk_client)
        self.web, self.rpc = build_web(WebSettings(gearman_port=self.system.gear_port,
                                                   port=0),
                                       WebhookReceiver({'github': web_side}))
        self.web.start()
        self.payload_url = f'http://127.0.0.1:{self.web.port}/api/connection/github/payload'
        self.fake.hooks.append((self.payload_url, SECRET))

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
    @property
    def repository(self) -> dict:
        return self.fake.repository(REPO)

    def open_pull(self, title: str, files: dict, body: str = '', draft: bool = False,
                  deliver: bool = True) -> dict:
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
        pr = self.fake.open_pull(REPO, number, sha, title=title, body=body,
                                 files=list(files), draft=draft)
        if deliver:
            self.deliver('pull_request', payloads.pull_request_event(
                'opened', self.repository, pr, 'alice'))
        return pr

    def approve(self, pr: dict, who: str = 'core') -> dict:
        review = self.fake.add_review(REPO, pr['number'], who, 'approved')
        self.deliver('pull_request_review', payloads.review_event(
            'submitted', self.repository, self.pull(pr), review))
        return review

    def dismiss(self, pr: dict, review: dict) -> None:
        self.fake.dismiss_review(REPO, pr['number'], review)
        self.deliver('pull_request_review', payloads.review_event(
            'dismissed', self.repository, self.pull(pr), review))

    def close(self, pr: dict, who: str = 'alice') -> None:
        self.fake.touch(REPO, pr['number'], state='closed',
                        closed_at=payloads.iso(time.time()))
        self.deliver('pull_request', payloads.pull_request_event(
            'closed', self.repository, self.pull(pr), who))

    def pull(self, pr: dict) -> dict:
        return self.fake.repo(REPO)['pulls'][pr['number']]

    def push_to_main(self, files: dict, message: str) -> str:
        """A direct push to main (not through a pull request) and its
        ``push`` delivery."""
        bare = self.fake.bare_repo(REPO)
        self._git('fetch', '-q', bare, 'main')
        self._git('checkout', '-q', '-B', 'direct', 'FETCH_HEAD')
        before = self._git('rev-parse', 'HEAD')
        self._write(files)
        self._git('commit', '-q', '-m', message)
        after = self._git('rev-parse', 'HEAD')
        self._git('push', '-q', bare, 'HEAD:main')
        self.deliver('push', payloads.push_event(
            self.repository, 'refs/heads/main', before, after, 'alice',
            [{'id': after, 'message': message, 'modified': sorted(files)}]))
        return after

    def deliver(self, kind: str, payload: dict, secret: str = SECRET,
                signatures=('sha1', 'sha256')) -> int:
        return post_delivery(self.payload_url, secret, kind, payload, signatures)

    def rerequest_check(self, pr: dict, name: str) -> int:
        """GitHub's delivery when someone clicks "Re-run" on a check run."""
        run = {'name': name, 'head_sha': pr['head']['sha'], 'conclusion': 'failure',
               'status': 'completed', 'app': {'slug': 'zuul'}}
        return self.deliver('check_run', payloads.check_run_event(
            'rerequested', self.repository, run, self.pull(pr), 'alice'))

    def abort_check(self, pr: dict, name: str) -> int:
        """GitHub's delivery when someone clicks Zuul's "Abort" button."""
        (run,) = [r for r in self.check_runs(pr) if r['name'] == name]
        return self.deliver('check_run', payloads.check_run_event(
            'requested_action', self.repository, run, self.pull(pr), 'alice',
            identifier='abort'))

    def check_runs(self, pr: dict) -> list[dict]:
        return self.fake.repo(REPO)['check_runs'].get(pr['head']['sha'], [])

    def status(self, pr: dict, context: str) -> str | None:
        for s in self.fake.repo(REPO)['statuses'].get(pr['head']['sha'], []):
            if s['context'] == context:
                return s['state']
        return None

    def comments(self, pr: dict) -> list[str]:
        return [c['body'] for c in self.fake.repo(REPO)['comments'].get(pr['number'], [])]

    def branch_files(self) -> list[str]:
        bare = self.fake.bare_repo(REPO)
        return subprocess.run(['git', '-C', bare, 'ls-tree', '--name-only', 'main'],
                              capture_output=True, text=True, check=True).stdout.split()

    def last_commit(self) -> str:
        """``git log -1`` of main: the commit message."""
        return subprocess.run(['git', '-C', self.fake.bare_repo(REPO), 'log', '-1',
                               '--format=%B', 'main'], capture_output=True, text=True,
                              check=True).stdout.strip()
