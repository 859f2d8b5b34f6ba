"""Test fixtures around the development Gerrit (zuul/devtools/gerrit)."""

from __future__ import annotations

import os
import subprocess

import pytest

from zuul.devtools.gerrit import DevGerritServer, ReviewStore
from zuul.devtools.gerrit.rest import http_auth_for


class GerritFixture:
    """The development Gerrit over SSH; with ``http`` also its HTTP side
    (``http_url``), where ``user`` has the HTTP password ``http_password``
    (REST under ``/a/``, the checks plugin)."""

    http_password = 'secret-http-password'

    def __init__(self, base_dir: str, http: bool = False, user: str = 'zuul'):
        self.base_dir = base_dir
        self.store = ReviewStore(os.path.join(base_dir, 'review'))
        self.key_path = os.path.join(base_dir, 'user_key')
        subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', self.key_path],
                       check=True)
        with open(self.key_path + '.pub') as f:
            pub = f.read().strip()
        self.server = DevGerritServer(self.store, os.path.join(base_dir, 'host_key'),
                                      authorized_keys=[pub], http_port=0 if http else None)
        self.server.start()
        self.http_url = self.server.http_url
        if http:
            http_auth_for(self.store).set_password(user, self.http_password)
        self.known_hosts = os.path.join(base_dir, 'known_hosts')
        with open(self.known_hosts, 'w') as f:
            f.write(f'[127.0.0.1]:{self.server.port} {self.server.host_key_line()}\n')

    def ssh_args(self, user: str = 'zuul') -> list[str]:
        return ['ssh', '-p', str(self.server.port), '-i', self.key_path,
                '-o', f'UserKnownHostsFile={self.known_hosts}',
                '-o', 'StrictHostKeyChecking=yes', '-o', 'BatchMode=yes',
                f'{user}@127.0.0.1']

    def git_env(self) -> dict:
        return dict(os.environ, GIT_SSH_COMMAND=' '.join(self.ssh_args()[:-1]))

    def git_url(self, project: str, user: str = 'zuul') -> str:
        return f'ssh://{user}@127.0.0.1:{self.server.port}/{project}'


@pytest.fixture
def dev_gerrit(tmp_path):
    fixture = GerritFixture(str(tmp_path / 'gerrit'))
    try:
        yield fixture
    finally:
        fixture.server.stop()


@pytest.fixture
def dev_gerrit_http(tmp_path):
    """The development Gerrit with its HTTP side (REST, checks plugin)."""
    fixture = GerritFixture(str(tmp_path / 'gerrit'), http=True)
    try:
        yield fixture
    finally:
        fixture.server.stop()
