"""Two nodepool-launcher processes on one ZooKeeper chroot and one
(simulated, shared) cloud: one is killed with SIGKILL while a node it
launches is still building.  The survivor must clean up after it (the
unlocked building node and its instance), take over the request the dead
one had pending, and fulfil it; nothing is leaked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from nodepool.config import load_config_text
from nodepool.driver.simulated.adapter import HOLD_FILE, SimulatedAdapter
from nodepool.zk.records import BUILDING, IN_USE, PENDING
from tests.functional import test_nodepool_support as support
from tests.harness.waiting import wait_for

requestor = support.requestor
zk = support.zk

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A short session timeout: a killed launcher's session (and with it its
# registration and locks) ends this many seconds after its death.
CONFIG = """
zookeeper-servers:
  - host: {host}
    port: {port}
    chroot: /{chroot}
zookeeper-timeout: 3
labels:
  - name: small
providers:
  - name: shared-sim
    driver: simulated
    state-dir: {state_dir}
    pools:
      - name: main
        max-servers: 5
        labels:
          - name: small
"""


class LauncherProcess:
    def __init__(self, name: str, config_path: str, log_dir):
        self.name = name
        self.log_path = log_dir / f'{name}.log'
        self._log = open(self.log_path, 'w')
        # A periodic cleanup pass an hour away: recovering from the other
        # launcher's death must not wait for one.
        self.proc = subprocess.Popen(
            [sys.executable, '-m', 'nodepool.cmd.launcher', '-c', config_path, '-d',
             '--cleanup-interval', '3600'],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@pytest.fixture
def cloud_and_config(zk_chroot, tmp_path):
    host, _, rest = zk_chroot.hosts.partition(':')
    port, _, chroot = rest.partition('/')
    text = CONFIG.format(host=host, port=port, chroot=chroot,
                         state_dir=tmp_path / 'cloud')
    path = tmp_path / 'nodepool.yaml'
    path.write_text(text)
    # The test's own view of the shared cloud.
    provider = load_config_text(text).providers['shared-sim']
    return SimulatedAdapter(provider), str(path)


@pytest.fixture
def launcher_processes(tmp_path):
    started: list[LauncherProcess] = []

    def start(name, config_path):
        process = LauncherProcess(name, config_path, tmp_path)
        started.append(process)
        return process
    try:
        yield start
    finally:
        for process in started:
            process.stop()


def instance_ids(cloud) -> set[str]:
    return {i.external_id for i in cloud.list()}


def test_survivor_recovers_what_a_killed_launcher_was_building(
        cloud_and_config, launcher_processes, requestor, zk):
    cloud, config_path = cloud_and_config
    cloud.hold_boots()                 # every instance stays booting for now
    assert os.path.exists(os.path.join(cloud.cloud.path, HOLD_FILE))
    first = launcher_processes('launcher-a', config_path)
    second = launcher_processes('launcher-b', config_path)
    by_pid = {first.pid: first, second.pid: second}
    wait_for(lambda: len(zk.get_launchers()) == 2 or first.proc.poll() is not None
             or second.proc.poll() is not None, 60, what='both launchers registered')
    assert first.proc.poll() is None, first.log()
    assert second.proc.poll() is None, second.log()

    handle = requestor.submit(['small'])

    def building_node():
        nodes = [n for n in zk.get_nodes() if n.state == BUILDING and n.external_id]
        return nodes[0] if nodes else None
    wait_for(building_node, 60, what='a node building at the provider')
    doomed = building_node()
    assert doomed.allocated_to == handle.id
    assert doomed.external_id in instance_ids(cloud)
    assert zk.is_node_locked(doomed.id) and zk.is_request_locked(handle.id)
    assert zk.get_request(handle.id).state == PENDING
    owners = {r.id: r.pid for r in zk.get_launchers()}
    victim = by_pid[owners[doomed.launcher]]
    survivor = second if victim is first else first
    survivor_id = next(i for i, pid in owners.items() if pid == survivor.pid)

    victim.proc.send_signal(signal.SIGKILL)
    assert victim.proc.wait(30) == -signal.SIGKILL

    # Its session ends: the survivor deletes the orphaned building node and
    # its instance, and requeues the request, which it accepts itself
    # (and launches a node for, still held booting).
    wait_for(lambda: [r.id for r in zk.get_launchers()] == [survivor_id], 60,
             what="the dead launcher's registration to go")
    wait_for(lambda: zk.get_node(doomed.id) is None, 60, what='the orphaned node deleted')
    wait_for(lambda: doomed.external_id not in instance_ids(cloud), 60,
             what='its instance deleted')

    def taken_over():
        request = zk.get_request(handle.id)
        nodes = [n for n in zk.get_nodes() if n.allocated_to == handle.id]
        return request is not None and request.state == PENDING and \
            zk.is_request_locked(handle.id) and \
            [n.launcher for n in nodes] == [survivor_id]
    wait_for(taken_over, 60, what='the request taken over by the survivor')
    assert not handle.done.is_set()
    assert zk.get_request(handle.id).declined_by == []

    cloud.release_boots()
    assert handle.wait(60), survivor.log()
    assert handle.fulfilled
    node = handle.nodes[0]
    assert (node.state, node.launcher, node.allocated_to) == (IN_USE, survivor_id, handle.id)
    assert instance_ids(cloud) == {node.external_id}

    requestor.release(handle)
    wait_for(lambda: not zk.get_nodes() and not cloud.list(), 60,
             what='the used node and its instance deleted')
    assert survivor.proc.poll() is None
    text = survivor.log()
    assert 'recovering their work' in text
    assert f'Node {doomed.id} deleted' in text
