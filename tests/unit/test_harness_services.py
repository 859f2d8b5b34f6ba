"""The harness's real services behave as the other tests rely on."""

import threading

import gear
import pytest
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import KazooState

from tests.harness.waiting import Signal, wait_for
from zuul.lib.gearlib import GearClient, GearWorker


def test_each_test_gets_its_own_chroot(zk_chroot, zookeeper_server):
    client = zk_chroot.client()
    client.create('/mine', b'x')
    assert client.get('/mine')[0] == b'x'
    from kazoo.client import KazooClient
    root = KazooClient(zookeeper_server)
    root.start()
    try:
        assert root.exists(f'{zk_chroot.chroot}/mine')
        assert not root.exists('/mine')
    finally:
        root.stop()
        root.close()


def test_expire_session_removes_ephemeral_nodes(zk_chroot):
    victim = zk_chroot.client(timeout=2.0)
    observer = zk_chroot.client()
    victim.create('/eph', b'', ephemeral=True)
    gone = Signal()

    def watch(event):
        gone.set()
    assert observer.exists('/eph', watch=watch)
    zk_chroot.expire_session(victim)
    assert gone.wait(30)
    assert observer.exists('/eph') is None
    # kazoo makes a new session after expiry
    wait_for(lambda: victim.state == KazooState.CONNECTED, what='reconnect')
    with pytest.raises(NoNodeError):
        observer.get('/eph')


def test_drop_connection_keeps_session(zk_chroot):
    client = zk_chroot.client(timeout=10.0)
    client.create('/eph', b'', ephemeral=True)
    states = []
    reconnected = Signal()

    def listener(state):
        states.append(state)
        if state == KazooState.CONNECTED and KazooState.SUSPENDED in states:
            reconnected.set()
    client.add_listener(listener)
    session = client.client_id[0]
    zk_chroot.drop_connection(client)
    assert reconnected.wait(30)
    assert client.client_id[0] == session
    assert client.exists('/eph')


def test_gearman_round_trip_with_work_data(gearman_server):
    worker = GearWorker('test-worker')
    worker.addServer('127.0.0.1', gearman_server.port)
    worker.waitForServer()
    worker.registerFunction('echo')
    client = GearClient('test-client')
    client.addServer('127.0.0.1', gearman_server.port)
    client.waitForServer()

    def work():
        job = worker.getJob()
        job.sendWorkData(b'progress')
        job.sendWorkComplete(job.arguments[::-1])
    t = threading.Thread(target=work, daemon=True)
    t.start()
    job = gear.TextJob('echo', 'hello')
    done = Signal()
    client.handleWorkComplete = _chain(client.handleWorkComplete, done.set)
    client.submitJob(job)
    assert done.wait(30)
    assert job.complete and job.data[-1] == 'olleh'
    t.join(10)
    worker.shutdown()
    client.shutdown()


def _chain(handler, after):
    def wrapped(packet):
        job = handler(packet)
        after()
        return job
    return wrapped
