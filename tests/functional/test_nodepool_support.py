"""Shared set-up for the Nodepool tests (no tests here): launchers built
from YAML on the test's ZooKeeper chroot, a requestor client, and small
helpers to write records the way a dead or foreign component would."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from nodepool.config import load_config_text
from nodepool.launcher.launcher import Launcher
from nodepool.launcher.settings import LauncherSettings
from nodepool.zk.api import NodepoolZooKeeper
from nodepool.zk.requestor import NodeRequestClient

SIM_CONFIG = """
labels:
  - name: small
    min-ready: {min_ready}
  - name: large
providers:
  - name: {provider}
    driver: simulated
    launch-retries: {launch_retries}
    pools:
      - name: main
        max-servers: {max_servers}
        labels:
          - name: small
          - name: large
"""


def sim_config(provider='sim', max_servers=10, min_ready=0, launch_retries=3) -> str:
    return SIM_CONFIG.format(provider=provider, max_servers=max_servers, min_ready=min_ready,
                             launch_retries=launch_retries)


def fast_settings(**overrides) -> LauncherSettings:
    """Intervals for tests: cleanup passes are asked for explicitly
    (``launcher.run_cleanup()``), so the periodic ones are far apart."""
    values = dict(cleanup_interval=3600, poll_interval=5.0, min_ready_interval=3600,
                  building_grace=60, boot_poll_interval=0.05)
    values.update(overrides)
    return LauncherSettings(**values)


class LauncherFactory:
    def __init__(self, zk_chroot):
        self.zk_chroot = zk_chroot
        self.launchers: list[Launcher] = []

    def make(self, yaml_text: str, settings: LauncherSettings | None = None,
             registry=None, start: bool = True, wait_registered: bool = True) -> Launcher:
        config = load_config_text(yaml_text, registry=registry)
        client = self.zk_chroot.client()
        launcher = Launcher(config, NodepoolZooKeeper(client), settings or fast_settings(),
                            registry=registry)
        self.launchers.append(launcher)
        if start:
            launcher.start()
            if wait_registered:
                launcher.wait_for(launcher.registered, what='pool workers registered')
        return launcher

    def stop(self, launcher: Launcher) -> None:
        launcher.stop()
        try:
            launcher.zk.client.stop()
        except Exception:
            pass

    def close(self) -> None:
        for launcher in self.launchers:
            launcher.stop()


@pytest.fixture
def launchers(zk_chroot):
    factory = LauncherFactory(zk_chroot)
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture
def requestor(zk_chroot):
    client = NodeRequestClient(NodepoolZooKeeper(zk_chroot.client()), requestor='test-zuul')
    client.start()
    try:
        yield client
    finally:
        client.stop()


@pytest.fixture
def zk(zk_chroot):
    """The test's own NodepoolZooKeeper (plays a foreign component)."""
    return NodepoolZooKeeper(zk_chroot.client())


def wait_until(launcher: Launcher, predicate, what: str, timeout: float = 30.0):
    """Re-check ``predicate`` whenever the launcher reports a change."""
    launcher.wait_for(predicate, timeout=timeout, what=what)


def request_state(zk: NodepoolZooKeeper, request_id: str) -> str | None:
    request = zk.get_request(request_id)
    return request.state if request else None


def node_states(zk: NodepoolZooKeeper) -> dict[str, str]:
    return {n.id: n.state for n in zk.get_nodes()}


def netns_settings(tmp_path) -> dict:
    """A subnet, bridge and state dir of this test process's own."""
    pid = os.getpid()
    return {
        # 10.240-254: clear of the harness (10.20-219), the netns default
        # (10.231), and the e2e test and quickstart (10.233, 10.234).
        'subnet': f'10.{240 + pid % 15}.{(pid // 15) % 250}.0/24',
        'bridge': f'npl{pid % 100000}',
        'state-dir': str(tmp_path / 'netns'),
    }


def remove_bridge(name: str) -> None:
    subprocess.run(['ip', 'link', 'del', name], capture_output=True)


def ssh_run(address: str, port: int, username: str, key_path: str, host_keys: list[str],
            tmp_path, command: str = 'echo ok') -> subprocess.CompletedProcess:
    """Log in with strict host key checking against the recorded keys."""
    known = tmp_path / f'known_hosts_{address}_{time.monotonic_ns()}'
    host = address if port == 22 else f'[{address}]:{port}'
    known.write_text(''.join(f'{host} {k}\n' for k in host_keys))
    return subprocess.run(
        ['ssh', '-i', key_path, '-p', str(port), '-o', f'UserKnownHostsFile={known}',
         '-o', 'StrictHostKeyChecking=yes', '-o', 'BatchMode=yes',
         '-o', 'ConnectTimeout=10', f'{username}@{address}', command],
        capture_output=True, text=True, timeout=60)
