"""A GitLab side for whole-system tests and benchmarks: the GitLab
stand-in (its own process: REST API v4, git over HTTP, webhooks;
tests/fakes/gitlab), a ``gitlab`` connection in the system's zuul.conf,
zuul-web as a real process taking the stand-in's webhooks at
``/api/connection/gitlab/payload``, pipelines, and two projects sharing
a gate queue, each with a .zuul.yaml."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request

from tests.fakes.gitlab.process import DEVELOPER, MAINTAINER, GitlabStandIn
from tests.harness.waiting import wait_for
from zuul.configloader.zuulconf import load_zuul_conf
from zuul.driver.registry import default_registry

WIDGET = 'acme/widget'
LIB = 'acme/lib'
HOOK_TOKEN = 'gitlab-hook-secret'

GITLAB_PIPELINES = """
- pipeline:
    name: gl-check
    manager: independent
    require:
      gitlab:
        open: true
    trigger:
      gitlab:
        - event: gl_merge_request
          action: [opened, changed]
        - event: gl_merge_request
          action: comment
          comment: (?i)^\\s*recheck\\s*$
    success:
      gitlab:
        comment: true
        label: verified
    failure:
      gitlab:
        comment: true
        unlabel: verified
- pipeline:
    name: gl-gate
    manager: dependent
    require:
      gitlab:
        open: true
        approved: true
    reject:
      gitlab:
        labels: do-not-merge
    trigger:
      gitlab:
        - event: gl_merge_request
          action: approved
        - event: gl_merge_request
          action: labeled
          labels: regate
    start:
      gitlab:
        comment: false
    success:
      gitlab:
        comment: true
        merge: true
    failure:
      gitlab:
        comment: true
- pipeline:
    name: gl-post
    manager: supercedent
    post-review: true
    trigger:
      gitlab:
        - event: gl_push
          ref: ^refs/heads/main$
- pipeline:
    name: gl-tag
    manager: independent
    post-review: true
    trigger:
      gitlab:
        - event: gl_push
          ref: ^refs/tags/.*$
"""

PROJECT_CONFIG = """
- project:
    queue: gl-integrated
    gl-check:
      jobs:
        - check-marker
    gl-gate:
      jobs:
        - check-marker
    gl-post:
      jobs:
        - noop-ok
    gl-tag:
      jobs:
        - noop-ok
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


class GitlabSide:
    """The stand-in, its users and projects, and zuul-web for it."""

    def __init__(self, system, tmp: str, squash_lib: bool = False):
        self.system = system
        self.tmp = tmp
        self.standin = GitlabStandIn(os.path.join(tmp, 'gitlab'))
        for user in ('dev', 'core', 'zuul'):
            self.standin.add_user(user)
        members = {'dev': DEVELOPER, 'core': MAINTAINER, 'zuul': MAINTAINER}
        self.standin.add_project(WIDGET, members=members)
        self.standin.add_project(LIB, members=members, merge_method='ff')
        self.web_port = _free_port()
        self.payload_url = f'http://127.0.0.1:{self.web_port}/api/connection/gitlab/payload'
        self.options = {'server': 'gitlab.example.org', 'baseurl': self.standin.url,
                        'api_token': self.standin.tokens['zuul'], 'api_token_name': 'zuul',
                        'webhook_token': HOOK_TOKEN}
        self.web = None

    def configure(self) -> None:
        """Before system.start(): the connection, both projects in the
        tenant, their branches (with .zuul.yaml) and webhooks."""
        system = self.system
        with open(system.conf_path, 'a') as f:
            f.write('\n[connection gitlab]\ndriver = gitlab\n')
            for key, value in self.options.items():
                f.write(f'{key} = {value}\n')
            f.write(f'\n[web]\nlisten_address = 127.0.0.1\nport = {self.web_port}\n'
                    f'command_socket = {self.tmp}/web.socket\n')
        with open(os.path.join(system.root, 'main.yaml'), 'a') as f:
            f.write(f'      gitlab:\n        untrusted-projects:\n          - {WIDGET}\n'
                    f'          - {LIB}\n')
        system.conf = load_zuul_conf(system.conf_path, default_registry())
        system.resolver.mapping['gitlab'] = {'driver': 'gitlab', 'options': self.options}
        from zuul.scheduler.service import SchedulerService
        system.service = SchedulerService(system.conf)
        for project in (WIDGET, LIB):
            self.standin.commit(project, 'main', {'.zuul.yaml': PROJECT_CONFIG,
                                                  'README': f'{project}\n'}, 'Initial')
            self.standin.add_hook(project, self.payload_url, HOOK_TOKEN)

    # -- zuul-web, a real process ---------------------------------------------------------
    def start_web(self) -> None:
        log = open(os.path.join(self.tmp, 'zuul-web.log'), 'ab')
        self.web = subprocess.Popen([sys.executable, '-m', 'zuul.cmd.web', '-c',
                                     self.system.conf_path, '-d'], stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

        def serving():
            if self.web.poll() is not None:
                raise AssertionError('zuul-web exited:\n' + self.web_log()[-3000:])
            try:
                urllib.request.urlopen(f'http://127.0.0.1:{self.web_port}/api/tenants',
                                       timeout=5).close()
            except urllib.error.HTTPError:
                return True
            except OSError:
                return False
            return True
        wait_for(serving, timeout=60, what='zuul-web serving')

    def stop_web(self) -> None:
        if self.web is not None and self.web.poll() is None:
            self.web.send_signal(signal.SIGTERM)
            try:
                self.web.wait(30)
            except subprocess.TimeoutExpired:
                self.web.kill()
                self.web.wait(10)
        self.web = None

    def web_log(self) -> str:
        with open(os.path.join(self.tmp, 'zuul-web.log'), errors='replace') as f:
            return f.read()

    def stop(self) -> None:
        self.stop_web()
        self.standin.stop()

    # -- observing ----------------------------------------------------------------------
    def notes(self, project: str, mr: dict) -> list[str]:
        return self.standin.notes(project, mr['iid'], by='zuul')

    def reported(self, project: str, mr: dict, words: str) -> bool:
        return any(words in note for note in self.notes(project, mr))

    def state(self, project: str, mr: dict) -> str:
        return self.standin.mr(project, mr['iid'])['state']

    def post(self, body: bytes, token: str | None = HOOK_TOKEN,
             kind: str = 'Merge Request Hook') -> int:
        headers = {'Content-Type': 'application/json', 'X-Gitlab-Event': kind}
        if token is not None:
            headers['X-Gitlab-Token'] = token
        request = urllib.request.Request(self.payload_url, data=body, headers=headers,
                                         method='POST')
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status
        except urllib.error.HTTPError as err:
            return err.code


def dedent(text: str) -> str:
    return textwrap.dedent(text)
