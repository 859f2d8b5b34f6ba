# ruff: noqa: F811 - pytest fixtures imported from the support modules
"""A Gearman server restart is survived: workers (mergers, executors, the
scheduler's RPC listener) reconnect and register their functions again,
and a merger job that was queued or running when the server died is
submitted again and answered exactly once.  Real parts throughout: a
GearServer restarted on the same port, MergeServers over real git repos,
an ExecutorServer running ansible-playbook over SSH, and a whole Zuul."""

from __future__ import annotations

import socket
import threading
import time

import gear
import pytest

from tests.functional.system_support import zuul_system  # noqa: F401 - fixture
from tests.functional.test_executor_server import PLAYBOOKS, request_for
from tests.functional.test_executor_support import (  # noqa: F401 - fixtures
    exec_env,
    exec_keypair,
    exec_nodes,
)
from tests.functional.test_merger_support import (  # noqa: F401 - fixtures
    change_ref,
    make_merger,
    upstream,
)
from tests.harness.waiting import wait_for
from zuul.executor.client import ExecutorClient
from zuul.executor.server import ExecutorServer
from zuul.lib import rpc_protocol as p
from zuul.lib.gearlib import KEEPALIVE_IDLE, GearClient, GearWorker
from zuul.lib.rpc import RPCClient
from zuul.merger.client import MergeClient
from zuul.merger.protocol import FUNCTIONS as MERGER_FUNCTIONS
from zuul.merger.protocol import MergeItem
from zuul.merger.server import MergeServer
from zuul.scheduler.layouts import MergerConfigFetcher


class Results:
    """Callback results, in arrival order."""

    def __init__(self):
        self.items = []
        self.cond = threading.Condition()

    def __call__(self, result):
        with self.cond:
            self.items.append(result)
            self.cond.notify_all()

    def wait(self, count=1):
        wait_for(lambda: len(self.items) >= count, condition=self.cond, what='results')
        return self.items[count - 1]


class Gate:
    """Holds every call of ``obj.<method>`` until ``release()``; counts
    the calls that entered."""

    def __init__(self, obj, method: str):
        self.real = getattr(obj, method)
        self.calls = 0
        self.cond = threading.Condition()
        self.released = threading.Event()
        setattr(obj, method, self)

    def __call__(self, *args, **kw):
        with self.cond:
            self.calls += 1
            self.cond.notify_all()
        assert self.released.wait(120), 'gate never released'
        return self.real(*args, **kw)

    def wait_entered(self, count=1):
        wait_for(lambda: self.calls >= count, condition=self.cond, timeout=60,
                 what=f'{count} call(s) through the gate')

    def release(self):
        self.released.set()


def merge_item(number):
    return MergeItem(connection='gerrit', project='org/project', branch='master',
                     ref=change_ref(number), number=number, patchset=1)


def wait_idle(server: MergeServer, jobs_done: int):
    wait_for(lambda: server.jobs_done >= jobs_done and server.active_jobs == 0,
             condition=server.idle, timeout=60, what=f'{jobs_done} merger job(s) done')


@pytest.fixture
def project(upstream):
    upstream.create('org/project', {'a.txt': 'a\n', 'zuul.yaml': '- job: {name: j}\n'})
    upstream.add_change('org/project', 1, {'b.txt': 'b\n'})
    return 'org/project'


@pytest.fixture
def merger(gearman_server, make_merger, project):
    """A MergeServer (one job at a time) and a MergeClient."""
    server = MergeServer([('127.0.0.1', gearman_server.port)], make_merger('server'),
                         hostname='merger.test')
    server.start()
    client = MergeClient('127.0.0.1', gearman_server.port, merge_mode_for=lambda i: 'merge')
    try:
        yield server, client
    finally:
        client.stop()
        server.stop(timeout=30)


def test_a_merge_running_when_the_server_restarts_is_answered_once(merger, gearman_server):
    server, client = merger
    gate = Gate(server.merger, 'merge_changes')
    results = Results()
    handle = client.merge_items([merge_item(1)], results, event_id='ev-restart')
    gate.wait_entered()
    gearman_server.restart()
    # The client resubmits to the new server; the merger, its one thread
    # still busy with the old job, registers again.
    wait_for(lambda: handle.resubmissions == 1, timeout=30, what='the merge resubmitted')
    gearman_server.wait_registered(MERGER_FUNCTIONS)
    gate.release()
    result = results.wait()
    assert result.merged and result.error is None and result.event_id == 'ev-restart'
    wait_idle(server, 2)
    # The old job's answer had nowhere to go: dropped, not delivered twice.
    assert server.lost_answers == 1 and gate.calls == 2
    assert len(results.items) == 1 and handle.result is result
    assert client.outstanding == 0


def test_queued_and_unsubmittable_jobs_are_answered_once_after_a_restart(
        gearman_server, make_merger, project, upstream):
    client = MergeClient('127.0.0.1', gearman_server.port)
    merge, cat, refstate = Results(), Results(), Results()
    server = None
    try:
        # Queued on the server (no merger yet) when it dies.
        client.merge_items([merge_item(1)], merge)
        client.get_files('gerrit', 'org/project', 'master', ['zuul.yaml'], cat)
        # Requested while no server runs at all.
        gearman_server.restart(down=lambda: client.get_repo_state([merge_item(1)], refstate))
        assert client.outstanding == 3     # submitted again, or waiting to be
        server = MergeServer([('127.0.0.1', gearman_server.port)], make_merger('late'))
        server.start()
        assert merge.wait().merged
        assert cat.wait().files == {'zuul.yaml': '- job: {name: j}\n'}
        state = refstate.wait()
        assert state.updated
        assert state.repo_state['gerrit']['org/project']['refs/heads/master'] == \
            upstream.head('org/project')
        wait_idle(server, 3)
        assert [len(r.items) for r in (merge, cat, refstate)] == [1, 1, 1]
        assert server.jobs_done == 3 and server.lost_answers == 0
        assert client.outstanding == 0
    finally:
        client.stop()
        if server is not None:
            server.stop(timeout=30)


def test_a_config_read_survives_a_restart(merger, gearman_server):
    server, client = merger
    gate = Gate(server.merger, 'cat_files')
    fetcher = MergerConfigFetcher(client, timeout=120)
    out = {}
    reader = threading.Thread(target=lambda: out.update(
        files=fetcher.files('gerrit', 'org/project', 'master', ['zuul.yaml'])))
    reader.start()
    gate.wait_entered()
    gearman_server.restart()
    gearman_server.wait_registered(MERGER_FUNCTIONS)
    gate.release()
    reader.join(60)
    assert out['files'] == {'zuul.yaml': '- job: {name: j}\n'}
    wait_idle(server, 2)
    assert gate.calls == 2 and server.lost_answers == 1


def test_a_request_ends_as_an_error_when_no_server_comes_back(gearman_server, project):
    client = MergeClient('127.0.0.1', gearman_server.port, reconnect_timeout=1)
    results = Results()
    try:
        handle = client.merge_items([merge_item(1)], results)
        # Submitted (off the caller's thread), then the server goes.
        wait_for(lambda: handle.job is not None, timeout=30, what='the submit')
        gearman_server.stop()
        result = results.wait()
        assert not result.merged and 'lost connection' in result.error
        assert 'no Gearman server took it again within 1 s' in result.error
        assert handle.resubmissions == 0 and len(results.items) == 1
    finally:
        client.stop()


def test_gear_connections_have_keepalive_and_nodelay(merger):
    """Keepalive notices a server host that vanished without closing its
    sockets (no restart to reconnect to, no FIN)."""
    server, client = merger
    socks = [client.gearman.active_connections[0].conn] + \
        [w.active_connections[0].conn for w in server.workers]
    for sock in socks:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == KEEPALIVE_IDLE


def test_a_submit_cut_short_by_a_lost_connection_fails_at_once():
    """gear would wait out the whole submit timeout for a JOB_CREATED that
    cannot come; the caller (who then submits again) hears at once."""
    listener = socket.create_server(('127.0.0.1', 0))
    port = listener.getsockname()[1]

    def hang_up_after_a_packet():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                # Hang up once the SUBMIT_JOB came (not on an earlier
                # packet of the connection): no JOB_CREATED ever.
                data = b''
                while b'\x00REQ\x00\x00\x00\x07' not in data:
                    chunk = conn.recv(1024)
                    if not chunk:
                        break
                    data += chunk
    threading.Thread(target=hang_up_after_a_packet, daemon=True).start()
    client = GearClient('cut-short')
    try:
        client.addServer('127.0.0.1', port)
        client.waitForServer(10)
        started = time.monotonic()
        with pytest.raises(gear.NoConnectedServersError, match='lost the connection'):
            client.submitJob(gear.TextJob('f', 'x'), timeout=30)
        assert time.monotonic() - started < 10
    finally:
        client.shutdown()
        listener.close()


def _stale_answer_setup(gearman_server, worker_cls):
    """A worker holding job A of the first server; after a restart a new
    client submits B, which the new server numbers like A."""
    first = GearClient('first-client')
    first.addServer('127.0.0.1', gearman_server.port)
    first.waitForServer()
    worker = worker_cls('stale-worker')
    worker.addServer('127.0.0.1', gearman_server.port)
    worker.waitForServer()
    worker.registerFunction('f')
    first.submitJob(gear.TextJob('f', 'A'))
    job_a = worker.getJob()
    gearman_server.restart()
    second = GearClient('second-client')
    second.addServer('127.0.0.1', gearman_server.port)
    second.waitForServer()
    gearman_server.wait_registered(['f'])
    job_b = gear.TextJob('f', 'B')
    second.submitJob(job_b)
    assert job_b.handle == job_a.handle     # handles start again at 1
    return [first, worker, second], job_a, job_b


@pytest.mark.parametrize('worker_cls', [GearWorker, gear.Worker],
                         ids=['guarded-worker', 'plain-worker-guarded-server'])
def test_a_stale_answer_never_completes_another_job(gearman_server, worker_cls):
    parts, job_a, job_b = _stale_answer_setup(gearman_server, worker_cls)
    fresh = GearWorker('fresh-worker')
    parts.append(fresh)
    try:
        # A's answer goes out after the restart, over the new connection.
        job_a.sendWorkComplete(b'stale')
        if worker_cls is GearWorker:
            assert job_a.answer_lost
        fresh.addServer('127.0.0.1', gearman_server.port)
        fresh.waitForServer()
        fresh.registerFunction('f')
        taken = fresh.getJob()
        assert taken.arguments == b'B' and not job_b.complete
        taken.sendWorkComplete(b'fresh')
        wait_for(lambda: job_b.complete, what='B completed')
        assert job_b.data == ['fresh']
    finally:
        for part in parts:
            part.shutdown()


@pytest.mark.timeout(30)
def test_a_job_submitted_while_the_server_is_still_starting_is_taken(gearman_server):
    # gear.Server's connection threads run before its constructor has set
    # ``statsd``; a client reconnecting in that window submitted a job that
    # failed on it and lost its connection (seen once in CI).  The window
    # is recreated by taking the attribute off the running server.
    gearman_server.server.__dict__.pop('statsd', None)
    worker = GearWorker('starting-worker')
    client = GearClient('starting-client')
    try:
        for part in (worker, client):
            part.addServer('127.0.0.1', gearman_server.port)
            part.waitForServer()
        worker.registerFunction('f')
        job = gear.Job(b'f', b'x')
        client.submitJob(job)
        worker.getJob().sendWorkComplete(b'done')
        wait_for(lambda: job.complete, what='job completed')
        assert job.data == [b'done'] and client.active_connections
    finally:
        worker.shutdown()
        client.shutdown()


def test_rpc_calls_work_after_a_restart(gearman_server, fake_scheduler, rpc_client):
    before = rpc_client.call(p.TENANT_LIST)
    during = {}

    def call_while_down():
        # Made while no server runs: it waits for the client to reconnect;
        # the job then waits on the server for the scheduler's listener.
        wait_for(lambda: not rpc_client.client.active_connections, what='client disconnected')
        caller = threading.Thread(target=lambda: during.update(
            tenants=rpc_client.call(p.TENANT_LIST)))
        caller.start()
        during['caller'] = caller
    gearman_server.restart(down=call_while_down)
    during['caller'].join(60)
    assert during['tenants'] == before
    assert rpc_client.call(p.TENANT_LIST) == before
    assert p.TENANT_LIST in gearman_server.registered()
    assert [c[0] for c in fake_scheduler.calls] == [p.TENANT_LIST] * 3


def test_executor_registers_again_and_runs_a_build_after_a_restart(
        exec_env, gearman_server):
    exec_env.upstream.create('org/project', PLAYBOOKS)
    server = ExecutorServer(exec_env.settings, '127.0.0.1', gearman_server.port,
                            exec_env.merger)
    server.start()
    client = ExecutorClient('127.0.0.1', gearman_server.port)
    try:
        functions = ['executor:execute', 'executor:stop:executor.example.org']
        gearman_server.wait_registered(functions)
        gearman_server.restart()
        gearman_server.wait_registered(functions)
        client.gearman.waitForServer(30)
        handle = client.execute(request_for(exec_env, 'playbooks/ok.yaml', 'e' * 32))
        assert handle.wait(120).result == 'SUCCESS'
    finally:
        client.stop()
        server.stop()


def test_a_check_change_merged_across_a_restart_gets_one_vote(zuul_system, gearman_server):
    system = zuul_system
    system.create_projects()
    system.start()
    gate = Gate(system.merge_server.merger, 'merge_changes')
    change = system.store.create_change('org/app', 'master', 'Survive', {'app.py': 'ok\n'})
    gate.wait_entered()
    gearman_server.restart()
    gearman_server.wait_registered([*MERGER_FUNCTIONS, 'executor:execute', 'zuul:status_get'])
    # The scheduler's executor client must be back before the build is
    # launched (it does not wait for a server by itself).
    system.service.executor_client.gearman.waitForServer(30)
    gate.release()
    wait_for(lambda: system.verified(change) == 1, timeout=180, what='the check vote')
    system.settle()
    assert len(system.messages(change)) == 1
    assert gate.calls == 2 and system.merge_server.lost_answers == 1
    assert len([b for b in system.launches if b['change'] == change.number]) == 1
    # The scheduler's RPC listener answers the CLI again.
    cli = RPCClient('127.0.0.1', gearman_server.port, timeout=30)
    try:
        assert 'example' in [t['name'] for t in cli.call(p.TENANT_LIST)]
    finally:
        cli.shutdown()


def test_a_build_submitted_while_the_server_restarts_waits_for_it(
        exec_env, gearman_server):
    """The scheduler launches a build in the seconds a Gearman restart
    takes: the submission waits for the server instead of failing."""
    exec_env.upstream.create('org/project', PLAYBOOKS)
    server = ExecutorServer(exec_env.settings, '127.0.0.1', gearman_server.port,
                            exec_env.merger)
    server.start()
    client = ExecutorClient('127.0.0.1', gearman_server.port)
    try:
        gearman_server.wait_registered(['executor:execute'])
        gearman_server.stop()
        wait_for(lambda: not client.gearman.active_connections, what='client disconnected')
        threading.Timer(1.0, gearman_server.start).start()
        handle = client.execute(request_for(exec_env, 'playbooks/ok.yaml', 'f' * 32))
        assert handle.wait(120).result == 'SUCCESS'
    finally:
        client.stop()
        server.stop()
