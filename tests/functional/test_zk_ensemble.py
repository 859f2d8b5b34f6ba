"""Nodepool (and Zuul) on a real three-member ZooKeeper ensemble.

Losing one member, the leader included, changes nothing: sessions,
locks and watches survive and requests keep being fulfilled.  Losing
quorum pauses work (nothing fulfilled, nothing exits), and when quorum
returns the work resumes on its own: every request submitted before and
during the outage is fulfilled exactly once, and no node or instance is
left over.
"""

from __future__ import annotations

import configparser
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from nodepool.config import load_config_text
from nodepool.driver.simulated.adapter import SimulatedAdapter
from nodepool.zk.api import NodepoolZooKeeper, connect
from nodepool.zk.records import BUILDING, IN_USE
from nodepool.zk.requestor import NodeRequestClient
from tests.functional.system_support import ZuulSystem
from tests.functional.test_nodepool_failover import REPO
from tests.harness import docs
from tests.harness import zk_ensemble as ensemble_harness
from tests.harness.waiting import wait_for

zk_ensemble = ensemble_harness.zk_ensemble

DOC = 'doc/source/operations/zookeeper-ensemble.rst'

PROVIDERS = """
zookeeper-timeout: 5
labels:
  - name: small
providers:
  - name: sim
    driver: simulated
    state-dir: {state_dir}
    pools:
      - name: main
        max-servers: 20
        labels:
          - name: small
"""


def documented_zuul_hosts(ensemble) -> str:
    """The documented zuul.conf ``[zookeeper] hosts``, with this
    machine's members in place of the example hosts."""
    block = next(b for b in docs.code_blocks(DOC, 'ini') if '[zookeeper]' in b)
    parser = configparser.ConfigParser()
    parser.read_string(block)
    documented = parser['zookeeper']['hosts'].split(',')
    assert len(documented) == len(ensemble.members)
    assert all(re.fullmatch(r'zk\d\.example\.org:2181', h) for h in documented)
    return ','.join(m.hosts for m in ensemble.members)


def nodepool_yaml(ensemble, state_dir) -> str:
    """The documented ``zookeeper-servers`` (every member listed), with
    this machine's members in place of the example hosts."""
    block = next(b for b in docs.code_blocks(DOC, 'yaml') if 'zookeeper-servers' in b)
    members = iter(ensemble.members)

    def local(match):
        member = next(members)
        return f'- host: {member.address}\n    port: {member.port}'
    text = re.sub(r'- host: \S+\n\s+port: 2181', local, block)
    assert next(members, None) is None, 'the documented example lists every member'
    return text + PROVIDERS.format(state_dir=state_dir)


class Launcher:
    """A real nodepool-launcher process."""

    def __init__(self, config_path, log_path):
        self.log_path = log_path
        self._log = open(log_path, 'w')
        self.proc = subprocess.Popen(
            [sys.executable, '-m', 'nodepool.cmd.launcher', '-c', str(config_path), '-d',
             '--cleanup-interval', '3600'],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO)

    def log(self) -> str:
        return self.log_path.read_text()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


class Setup:
    """Ensemble, launcher process, the shared simulated cloud, and a
    requestor connected first to the member chosen by the test."""

    def __init__(self, zk_ensemble, tmp_path):
        self.zk_ensemble = zk_ensemble
        self.ensemble = zk_ensemble.ensemble
        text = nodepool_yaml(self.ensemble, tmp_path / 'cloud')
        path = tmp_path / 'nodepool.yaml'
        path.write_text(text)
        self.cloud = SimulatedAdapter(load_config_text(text).providers['sim'])
        self.launcher = Launcher(path, tmp_path / 'launcher.log')
        self.observer = NodepoolZooKeeper(zk_ensemble.client())
        self.requestors: list[NodeRequestClient] = []
        wait_for(lambda: self.observer.get_launcher_ids() or not self.launcher.alive(), 60,
                 what='the launcher registered')
        assert self.launcher.alive(), self.launcher.log()

    def requestor(self, first_member: int) -> tuple[NodeRequestClient, KazooClient]:
        """A requestor whose client connects to ``first_member`` first
        (and falls over to the others in order)."""
        members = self.ensemble.members
        order = [members[(first_member + i) % len(members)] for i in range(len(members))]
        client = connect(','.join(m.hosts for m in order), timeout=5,
                         randomize_hosts=False)
        self.zk_ensemble.adopt(client)
        requestor = NodeRequestClient(NodepoolZooKeeper(client), requestor='test-zuul')
        requestor.start()
        self.requestors.append(requestor)
        return requestor, client

    def instances(self) -> set[str]:
        return {i.external_id for i in self.cloud.list()}

    def check_exactly_once(self, handles) -> None:
        """Every handle fulfilled with its own node; no other node or
        instance exists (nothing duplicated, nothing leaked)."""
        assert all(h.fulfilled for h in handles), [(h.id, h.outcome) for h in handles]
        node_ids = [n.id for h in handles for n in h.nodes]
        assert len(node_ids) == len(set(node_ids)) == len(handles)
        nodes = {n.id: n for n in self.observer.get_nodes()}
        assert set(nodes) == set(node_ids)
        assert all(n.state == IN_USE for n in nodes.values())
        assert all(self.observer.is_node_locked(i) for i in node_ids)
        assert self.instances() == {n.external_id for n in nodes.values()}
        assert self.observer.get_requests() == []

    def release_all(self, requestor, handles) -> None:
        for handle in handles:
            requestor.release(handle)
        wait_for(lambda: not self.observer.get_nodes() and not self.cloud.list(), 60,
                 what='the used nodes and their instances deleted')

    def close(self) -> None:
        for requestor in self.requestors:
            requestor.stop()
        self.launcher.stop()


@pytest.fixture
def setup(zk_ensemble, tmp_path):
    s = Setup(zk_ensemble, tmp_path)
    try:
        yield s
    finally:
        s.close()


def fulfilled(handles, timeout=30.0) -> None:
    for handle in handles:
        assert handle.wait(timeout), f'request {handle.id} not answered'


def traceback_free(log: str) -> bool:
    return 'Traceback' not in log


def test_losing_any_one_member_changes_nothing(setup):
    ensemble = setup.ensemble
    leader = ensemble.leader()
    requestor, client = setup.requestor(first_member=leader)
    session = client.client_id
    states = []
    client.add_listener(states.append)
    assert setup.zk_ensemble.member_of(client) == leader

    held = [requestor.submit(['small']) for _ in range(2)]
    fulfilled(held)

    # The leader dies without a word, with the requestor's connection
    # (and locks, and watches) on it and a request in flight.
    in_flight = [requestor.submit(['small']) for _ in range(4)]
    ensemble.kill_member(leader)
    ensemble.wait_for_quorum()
    assert ensemble.leader() != leader
    during = [requestor.submit(['small']) for _ in range(2)]
    fulfilled([*in_flight, *during])
    assert client.client_id == session and KazooState.LOST not in states
    assert setup.zk_ensemble.member_of(client) != leader

    # It comes back; then a follower the requestor now uses is stopped.
    ensemble.start_member(leader)
    used = setup.zk_ensemble.member_of(client)
    ensemble.stop_member(used)
    ensemble.wait_for_quorum()
    after = [requestor.submit(['small']) for _ in range(2)]
    fulfilled(after)
    ensemble.start_member(used)

    handles = [*held, *in_flight, *during, *after]
    assert client.client_id == session and KazooState.LOST not in states
    setup.check_exactly_once(handles)
    assert setup.launcher.alive()
    setup.release_all(requestor, handles)
    assert traceback_free(setup.launcher.log()), setup.launcher.log()


def test_losing_quorum_pauses_work_and_it_resumes_on_its_own(setup):
    ensemble = setup.ensemble
    leader = ensemble.leader()
    follower = ensemble.followers()[0]
    requestor, client = setup.requestor(first_member=leader)
    session = client.client_id
    states = []
    client.add_listener(states.append)

    before = [requestor.submit(['small'])]
    fulfilled(before)

    # A request whose node is still booting when quorum goes.
    setup.cloud.hold_boots()
    booting = requestor.submit(['small'])

    def building():
        return [n for n in setup.observer.get_nodes()
                if n.state == BUILDING and n.external_id and n.allocated_to == booting.id]
    wait_for(building, 30, what='a node booting')

    ensemble.kill_member(leader)
    ensemble.stop_member(follower)
    outage_started = time.monotonic()
    wait_for(lambda: KazooState.SUSPENDED in states, 30, what='the requestor suspended')
    # The boot finishes during the outage; more requests come (a
    # requestor blocks in submit until ZooKeeper serves again).
    setup.cloud.release_boots()
    during: list = []

    def submit_during():
        during.append(requestor.submit(['small']))
    submitters = [threading.Thread(target=submit_during) for _ in range(2)]
    for t in submitters:
        t.start()

    # Paused: nothing answered, nothing exits, for longer than the
    # sessions' timeout (5 s).
    time.sleep(6)
    assert not booting.done.is_set() and during == []
    assert setup.launcher.alive(), setup.launcher.log()
    assert all(t.is_alive() for t in submitters)

    ensemble.start_member(follower)
    ensemble.start_member(leader)
    ensemble.wait_for_quorum()
    outage = time.monotonic() - outage_started
    for t in submitters:
        t.join(30)
    assert len(during) == 2
    handles = [*before, booting, *during]
    fulfilled(handles)
    assert client.client_id == session and KazooState.LOST not in states, states
    assert outage > 5
    setup.check_exactly_once(handles)
    assert setup.launcher.alive()
    setup.release_all(requestor, handles)
    assert traceback_free(setup.launcher.log()), setup.launcher.log()


@pytest.fixture
def zuul_on_ensemble(zk_ensemble, dev_gerrit, gearman_server, ssh_keypair):
    """The whole Zuul of system_support, its zuul.conf listing every
    member of the ensemble."""
    root = tempfile.mkdtemp(prefix='zs', dir='/tmp')
    system = ZuulSystem(root, dev_gerrit, documented_zuul_hosts(zk_ensemble.ensemble),
                        gearman_server.port,
                        ssh_keypair.private_key_path)
    try:
        yield system
    finally:
        system.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_the_documented_member_config_is_what_the_ensemble_runs(zk_ensemble, tmp_path):
    (zoo_cfg,) = [b for b in docs.code_blocks(DOC, 'ini') if 'server.1=' in b]
    documented = dict(line.split('=', 1) for line in zoo_cfg.splitlines())
    for index, member in enumerate(zk_ensemble.ensemble.members):
        with open(f'{member.base_dir}/conf/zoo.cfg') as f:
            running = dict(line.split('=', 1) for line in f.read().splitlines() if line)
        assert set(documented) <= set(running)
        for key, value in documented.items():
            if key.startswith('server.'):
                shape = r'[\w.]+:\d+:\d+'
                assert re.fullmatch(shape, value) and re.fullmatch(shape, running[key])
        # The documented myid command, for this member's data directory.
        (command,) = docs.code_blocks(DOC, 'shell')
        data_dir = tmp_path / f'zk{index + 1}'
        data_dir.mkdir()
        command = command.replace(documented['dataDir'], str(data_dir))
        command = command.replace('echo 1', f'echo {index + 1}')
        subprocess.run(['sh', '-c', command], check=True)
        with open(f'{running["dataDir"]}/myid') as f:
            assert f.read() == (data_dir / 'myid').read_text()


def test_zuul_verifies_changes_through_member_loss_and_quorum_loss(zk_ensemble,
                                                                   zuul_on_ensemble):
    system = zuul_on_ensemble
    ensemble = zk_ensemble.ensemble
    assert system.conf.zookeeper.hosts == zk_ensemble.hosts
    system.create_projects()
    system.start()
    client = system.service.zk.client
    session = client.client_id
    states = []
    state_times = []        # (state, when): when the scheduler's session changed

    def listener(state):
        states.append(state)
        state_times.append((state, time.time()))
    client.add_listener(listener)
    gerrit = system.service.connections.get('gerrit')
    received, deliver = [], gerrit.on_event

    def on_event(event):
        received.append(event)
        deliver(event)
    gerrit.on_event = on_event

    # The member the scheduler talks to dies as a change comes in.
    member = zk_ensemble.member_of(client)
    assert member is not None
    first = system.store.create_change('org/app', 'master', 'First', {'a.txt': 'a\n'})
    ensemble.kill_member(member)
    wait_for(lambda: system.verified(first) == 1, timeout=120, what='the first vote')
    assert 'Build succeeded' in system.messages(first)[-1]
    assert client.client_id == session and KazooState.LOST not in states
    assert zk_ensemble.member_of(client) not in (None, member)
    ensemble.start_member(member)

    # Quorum goes; a change proposed meanwhile waits for it.
    leader, follower = ensemble.leader(), ensemble.followers()[0]
    ensemble.kill_member(leader)
    ensemble.stop_member(follower)
    wait_for(lambda: KazooState.SUSPENDED in states, 30, what='the scheduler suspended')
    second = system.store.create_change('org/app', 'master', 'Second', {'b.txt': 'b\n'})
    proposed_at = time.time()
    # The event reached the scheduler's Gerrit connection during the outage.
    wait_for(lambda: any(e.change_number == second.number for e in received), timeout=30,
             what='the event at the scheduler')
    ensemble.start_member(leader)
    ensemble.start_member(follower)
    ensemble.wait_for_quorum()
    wait_for(lambda: system.verified(second) == 1, timeout=120, what='the second vote')
    # It waited for quorum: nothing of it ran before the scheduler's
    # session was back (a scheduler acting without ZooKeeper would have
    # enqueued and built it while members were down).
    back = min(when for state, when in state_times
               if state == KazooState.CONNECTED and when > proposed_at)
    (item,) = {b.build_set.item for b in system.builds
               if b.build_set.item.change.number == second.number}
    assert item.enqueue_time >= back, (item.enqueue_time, back, proposed_at)
    assert all(b.start_time is None or b.start_time >= back for b in system.builds
               if b.build_set.item is item)
    assert client.client_id == session and KazooState.LOST not in states
    assert len(system.messages(second)) == 1 and len(system.messages(first)) == 1
    assert [launch['change'] for launch in system.launches] == [first.number, second.number]
