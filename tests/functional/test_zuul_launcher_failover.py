"""Several zuul-launchers over one ZooKeeper: work is shared with no
double fulfilment, and a launcher killed mid-launch (a real process,
SIGKILL) leaves nothing the others cannot finish or clean up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

from nodepool.driver.simulated.adapter import HOLD_FILE
from nodepool.zk.records import FULFILLED, PENDING, READY
from tests.functional import test_zuul_launcher_support as support
from tests.functional.test_zuul_launcher_support import (
    canonical,
    provider,
    publish_providers,
    zuul_zk,
)
from tests.harness.waiting import wait_for
from zuul.launcher import assign

launchers = support.launchers
requestor = support.requestor

UBUNTU = canonical('ubuntu')
CENTOS = canonical('centos')


def _count_fulfilments(monkeypatch, counts: dict, lock: threading.Lock) -> None:
    """Count every fulfilment written (by any launcher of this process)."""
    real = assign._Writes.store_request

    def store(self, request, version, done=None):
        def counted():
            if request.state == FULFILLED:
                with lock:
                    counts[request.id] = counts.get(request.id, 0) + 1
            if done is not None:
                done()
        real(self, request, version, counted)
    monkeypatch.setattr(assign._Writes, 'store_request', store)


def _cloud(state_dir: str) -> set[str]:
    return {name[:-5] for name in os.listdir(state_dir) if name.endswith('.json')}


def test_two_launchers_share_the_work_and_fulfil_each_request_once(
        zk_client, launchers, requestor, tmp_path, monkeypatch):
    state = str(tmp_path / 'cloud')
    publish_providers(zk_client, provider('sim-a', ['ubuntu', 'centos'],
                                          settings={'quota': {'instances': 8}}))
    connections = {'sim': {'driver': 'simulated', 'options': {'state-dir': state}}}
    counts, lock = {}, threading.Lock()
    _count_fulfilments(monkeypatch, counts, lock)
    # Short turns: the locks move between the launchers all the time.
    first, second = launchers(connections, lock_hold=0.1), launchers(connections, lock_hold=0.1)
    handles = [requestor.submit([UBUNTU] if i % 2 else [UBUNTU, CENTOS]) for i in range(30)]
    released = set()
    for handle in handles:
        assert handle.wait(30) and handle.fulfilled, handle.id
        assert len(handle.nodes) == len(handle.node_types)
        assert [n.type for n in handle.nodes] == handle.node_types
        assert all(n.allocated_to == handle.id for n in handle.nodes)
        released.update(n.id for n in handle.nodes)
        requestor.release(handle)
    assert len(released) == sum(len(h.node_types) for h in handles)
    assert sorted(counts.values()) == [1] * 30
    assert set(counts) == {h.id for h in handles}
    assert first.assigner.passes and second.assigner.passes
    zk = zuul_zk(zk_client)
    wait_for(lambda: zk.get_nodes() == [] and _cloud(state) == set(), timeout=30,
             what='every used node and instance deleted')


def _launcher_conf(tmp_path, zk_hosts: str, state: str) -> str:
    path = tmp_path / 'zuul.conf'
    path.write_text(f"""
[zookeeper]
hosts={zk_hosts}
session_timeout=2

[launcher]
pidfile={tmp_path}/launcher.pid
poll_interval=0.05
cleanup_interval=0.5
leak_grace=0.5

[connection sim]
driver=simulated
state-dir={state}
""")
    return str(path)


def test_a_killed_launcher_leaves_nothing_behind(zk_chroot, zk_client, launchers, requestor,
                                                 tmp_path):
    state = tmp_path / 'cloud'
    state.mkdir()
    (state / HOLD_FILE).touch()      # instances stay booting: kill mid-launch
    publish_providers(zk_client, provider('sim-a', ['ubuntu', 'centos']))
    conf = _launcher_conf(tmp_path, zk_chroot.hosts, str(state))
    log = open(tmp_path / 'launcher.log', 'w')
    proc = subprocess.Popen([sys.executable, '-m', 'zuul.cmd.launcher', '-c', conf, '-d'],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        handles = [requestor.submit([UBUNTU, CENTOS]) for _ in range(5)]
        zk = zuul_zk(zk_client)

        def all_booting():
            nodes = zk.get_nodes()
            return len(nodes) == 10 and all(n.launch_state == 'booting' for n in nodes)
        wait_for(all_booting, timeout=30, what='the subprocess launching every node')
        assert all(zk.get_request(h.id).state == PENDING for h in handles)
        assert len(_cloud(str(state))) == 10
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        log.close()
    # An instance its launcher created but never recorded (killed in between).
    (state / 'sim-999.json').write_text('{"node_id": "0000000999", "index": 999, '
                                        '"username": null, "fail": false, "created": 0, '
                                        '"ready_at": 0}')
    survivor = launchers({'sim': {'driver': 'simulated', 'options': {'state-dir': str(state)}}})
    (state / HOLD_FILE).unlink()
    for handle in handles:
        assert handle.wait(30) and handle.fulfilled
    # Every instance is a node's; the unrecorded one is gone.
    wait_for(lambda: _cloud(str(state)) == {n.external_id for n in zk.get_nodes()},
             timeout=30, what='instances matching node records')
    assert len(zk.get_nodes()) == 10
    for handle in handles:
        requestor.release(handle)
    wait_for(lambda: zk.get_nodes() == [] and _cloud(str(state)) == set(), timeout=30,
             what='nodes used and deleted, no instance left')
    # The survivor resumed the dead launcher's launches (polled the
    # instances it had created) instead of launching again.
    assert survivor.adapter_for(canonical('sim-a')).created == []


def _sim(state) -> dict:
    return {'sim': {'driver': 'simulated', 'options': {'state-dir': str(state)}}}


def _all_booting(zk, count: int):
    def check():
        nodes = zk.get_nodes()
        return len(nodes) == count and all(n.launch_state == 'booting' for n in nodes)
    return check


def test_launch_state_lives_in_zookeeper(zk_client, launchers, requestor, tmp_path):
    state = tmp_path / 'cloud'
    state.mkdir()
    (state / HOLD_FILE).touch()
    publish_providers(zk_client, provider('sim-a', ['ubuntu'], settings={'boot-timeout': 60}))
    launchers(_sim(state))
    handle = requestor.submit([UBUNTU], event_id='ev-7')
    zk = zuul_zk(zk_client)
    wait_for(_all_booting(zk, 1), timeout=20, what='node booting')
    [node] = zk.get_nodes()
    assert node.external_id in _cloud(str(state))
    assert node.launch_attempts == 1 and node.launch_deadline > node.created_time
    assert (node.allocated_to, node.request_index) == (handle.id, 0)
    (state / HOLD_FILE).unlink()
    assert handle.wait(20) and handle.fulfilled
    requestor.release(handle)


def test_a_launcher_whose_session_expires_carries_on(zk_chroot, zk_client, launchers,
                                                     requestor, tmp_path):
    state = tmp_path / 'cloud'
    state.mkdir()
    (state / HOLD_FILE).touch()
    publish_providers(zk_client, provider('sim-a', ['ubuntu']))
    launcher = launchers(_sim(state))
    handles = [requestor.submit([UBUNTU, UBUNTU]) for _ in range(3)]
    zk = zuul_zk(zk_client)
    wait_for(_all_booting(zk, 6), timeout=20, what='nodes booting')
    zk_chroot.expire_session(launcher.client)
    (state / HOLD_FILE).unlink()
    for handle in handles:
        assert handle.wait(30) and handle.fulfilled
        requestor.release(handle)
    wait_for(lambda: zk.get_nodes() == [] and _cloud(str(state)) == set(), timeout=30,
             what='nodes used and deleted')
    wait_for(lambda: zk.get_launcher_ids() == [launcher.id], timeout=30,
             what='the launcher registered again')


def test_a_node_whose_request_was_canceled_joins_the_pool(zk_client, launchers, requestor,
                                                         tmp_path):
    state = tmp_path / 'cloud'
    state.mkdir()
    (state / HOLD_FILE).touch()
    publish_providers(zk_client, provider('sim-a', ['ubuntu']))
    launchers(_sim(state))
    handle = requestor.submit([UBUNTU])
    zk = zuul_zk(zk_client)
    wait_for(_all_booting(zk, 1), timeout=20, what='node booting')
    [node] = zk.get_nodes()
    requestor.cancel(handle)
    (state / HOLD_FILE).unlink()
    wait_for(lambda: [(n.state, n.allocated_to) for n in zk.get_nodes()] == [(READY, None)],
             timeout=20, what='the node ready and unallocated')
    again = requestor.submit([UBUNTU])
    assert again.wait(20) and again.fulfilled
    assert again.nodes[0].id == node.id
    requestor.release(again)


def test_connections_option_limits_the_providers_a_launcher_serves(zk_client, launchers,
                                                                   requestor):
    east = provider('east', ['ubuntu'], connection='east')
    west = provider('west', ['centos'], connection='west')
    publish_providers(zk_client, east, west)
    connections = {'east': {'driver': 'simulated'}, 'west': {'driver': 'simulated'}}
    only_east = launchers(connections, connections='east')
    assert set(only_east.loops) == {east.canonical_name}
    handle = requestor.submit([CENTOS])
    assert not handle.wait(1.5)          # assigned to west, which nobody runs yet
    zk = zuul_zk(zk_client)
    assert [n.provider for n in zk.get_nodes()] == [west.canonical_name]
    only_west = launchers(connections, connections='west')
    assert set(only_west.loops) == {west.canonical_name}
    assert handle.wait(20) and handle.fulfilled
    requestor.release(handle)


def test_sigterm_stops_the_daemon_and_unregisters_it(zk_chroot, zk_client, tmp_path):
    state = tmp_path / 'cloud'
    publish_providers(zk_client, provider('sim-a', ['ubuntu']))
    conf = _launcher_conf(tmp_path, zk_chroot.hosts, str(state))
    proc = subprocess.Popen([sys.executable, '-m', 'zuul.cmd.launcher', '-c', conf, '-d',
                             '--connections', 'sim'],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    zk = zuul_zk(zk_client)
    try:
        wait_for(lambda: len(zk.get_launcher_ids()) == 1, timeout=30, what='registration')
        [record] = zk.get_launchers()
        assert record.pid == proc.pid
        assert record.supported_labels == [UBUNTU]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    assert zk.get_launcher_ids() == []


def test_two_launchers_even_out_the_provider_loops(zk_client, launchers, requestor):
    names = [f'sim-{i}' for i in range(4)]
    publish_providers(zk_client, *[provider(n, ['ubuntu']) for n in names])
    first = launchers()
    wait_for(lambda: sum(lp.lock.held for lp in first.loops.values()) == 4, timeout=20,
             what='the first launcher holds every provider loop')
    second = launchers()

    def held(launcher):
        return sum(1 for lp in launcher.loops.values() if lp.lock.held)
    wait_for(lambda: held(first) == 2 and held(second) == 2, timeout=30,
             what='two provider loops each')
    handles = [requestor.submit([UBUNTU]) for _ in range(8)]
    for handle in handles:
        assert handle.wait(20) and handle.fulfilled
        requestor.release(handle)
    assert held(first) + held(second) == 4
