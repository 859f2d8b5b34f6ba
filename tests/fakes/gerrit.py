"""Test fixtures around the development Gerrit (zuul/devtools/gerrit)."""

from __future__ import annotations

import os
import subprocess

import pytest

from zuul.devtools.gerrit import DevGerritServer, ReviewStore


class GerritFixture:
    def __init__(self, base_dir: str):
        self.base_dir = base_dir
        self.store = ReviewStore(os.path.join(base_dir, 'review'))
        self.key_path = os.path.join(base_dir, 'user_key')
        subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', self.key_path],
                       check=True)
        with open(self.key_path + '.pub') as f:
            pub = f.read().strip()
        self.server = DevGerritServer(self.store, os.path.join(base_dir, 'host_key'),
                                      authorized_keys=[pub])
        self.server.start()
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
