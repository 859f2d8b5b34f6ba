"""Real SSH "hosts" for tests: each in its own network namespace with its
own address and sshd (nodepool/driver/netns/host.py), torn down after the
test even when it fails."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

import pytest

from nodepool.driver.netns.host import NetnsHostManager, available

_counter = itertools.count(1)


@dataclass
class KeyPair:
    private_key_path: str
    public_key: str

    def __getitem__(self, index):  # (path, public key) like a tuple
        return (self.private_key_path, self.public_key)[index]


@pytest.fixture(scope='session')
def ssh_keypair():
    """A client key pair the test nodes accept."""
    d = tempfile.mkdtemp(prefix='zkey')
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', f'{d}/id'],
                   check=True)
    with open(f'{d}/id.pub') as f:
        yield KeyPair(f'{d}/id', f.read().strip())
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope='session')
def netns_manager(tmp_path_factory):
    why = available()
    if why:
        pytest.skip(f'netns nodes unavailable: {why}')
    base = str(tmp_path_factory.mktemp('netns'))
    # A subnet and bridge per test process, so parallel runs don't collide.
    slot = os.getpid() % 200 + 20
    manager = NetnsHostManager(base_dir=base, subnet=f'10.{slot}.0.0/16',
                               bridge=f'nptb{slot}')
    yield manager
    manager.cleanup_all(f't{os.getpid()}-')
    subprocess.run(['ip', 'link', 'del', manager.bridge], capture_output=True)


class NodeFactory:
    def __init__(self, manager: NetnsHostManager, keypair: KeyPair):
        self.manager = manager
        self.keypair = keypair
        self.hosts = []

    def make(self, name: str | None = None):
        name = name or f't{os.getpid()}-{next(_counter)}'
        host = self.manager.create(name, [self.keypair.public_key])
        self.hosts.append(host)
        return host

    def cleanup(self) -> None:
        for host in self.hosts:
            self.manager.delete(host)
        self.hosts = []


@pytest.fixture
def node_factory(netns_manager, ssh_keypair):
    """``make()`` returns a started host (.address .port .username
    .host_keys); every host is removed after the test."""
    factory = NodeFactory(netns_manager, ssh_keypair)
    try:
        yield factory
    finally:
        factory.cleanup()


@pytest.fixture
def two_nodes(node_factory):
    return node_factory.make(), node_factory.make()
