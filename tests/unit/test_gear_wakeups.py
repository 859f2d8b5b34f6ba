"""Lost wake-ups between the Gearman server and idle workers (issue 29):
a job queued beside an idle worker that could run it is taken at once,
whatever the server's NOOPs did."""

from __future__ import annotations

import threading

import gear
import pytest

from nodepool.zk.localserver import free_port
from tests.harness.waiting import wait_for
from zuul.lib.gearlib import GearClient, GearServer, GearWorker


class _DeafServer(GearServer):
    """A server whose wake-ups (NOOP) never reach a worker: the state
    machine moves on as if they had been sent."""

    def wakeConnection(self, connection):  # noqa: N802 - gear API
        if connection.state == 'SLEEP':
            connection.changeState('AWAKE')

    def wakeConnections(self, job=None):  # noqa: N802 - gear API
        for connection in list(self.active_connections):
            if connection.state == 'SLEEP' and (job is None or job.name in
                                                connection.functions):
                connection.changeState('AWAKE')


def _serve(worker: GearWorker, done: list) -> threading.Thread:
    def loop():
        while True:
            try:
                job = worker.getJob()
            except gear.InterruptedError:
                if not worker.running:
                    return
                continue
            done.append(job.name)
            job.sendWorkComplete(b'ok')
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def parts(request):
    made = []

    def make(server_cls=GearServer, regrab_interval=None, functions=(b'f',)):
        port = free_port()
        server = server_cls(port=port, host='127.0.0.1')
        made.append(server)
        worker = GearWorker('w')
        if regrab_interval is not None:
            worker.regrab_interval = regrab_interval
        made.append(worker)
        worker.addServer('127.0.0.1', port)
        worker.waitForServer()
        worker.setFunctions([gear.FunctionRecord(f) for f in functions])
        client = GearClient('c')
        made.append(client)
        client.addServer('127.0.0.1', port)
        client.waitForServer()
        return server, worker, client
    yield make
    for part in reversed(made):
        part.shutdown()


def _asleep(server) -> bool:
    return any(c.state == 'SLEEP' for c in list(server.active_connections)
               if c.client_id == b'w')


def test_a_worker_registering_while_asleep_is_woken_for_the_queued_job(parts):
    # No re-asking here: only the server's wake-up can hand the job over.
    server, worker, client = parts(regrab_interval=3600.0, functions=())
    done: list = []
    _serve(worker, done)
    wait_for(lambda: _asleep(server), timeout=30, what='the worker asleep')
    job = gear.TextJob('f', 'x')
    client.submitJob(job)
    # What an executor's governor or a resumed merger does: register
    # (RESET_ABILITIES, CAN_DO) while the worker sleeps.
    worker.setFunctions([gear.FunctionRecord(b'f')])
    wait_for(lambda: job.complete, timeout=30, what='the queued job taken')
    assert done == ['f'] and worker.regrabs == 0


def test_an_idle_worker_takes_a_job_whose_wake_up_was_lost(parts):
    server, worker, client = parts(server_cls=_DeafServer, regrab_interval=0.2)
    done: list = []
    _serve(worker, done)
    wait_for(lambda: _asleep(server), timeout=30, what='the worker asleep')
    jobs = [gear.TextJob('f', str(n)) for n in range(3)]
    for job in jobs:
        client.submitJob(job)
    wait_for(lambda: all(j.complete for j in jobs), timeout=30,
             what='the jobs nobody was woken for')
    assert len(done) == 3 and worker.regrabs >= 1


def test_a_busy_or_waking_worker_is_not_asked_again(parts):
    server, worker, client = parts(regrab_interval=0.2)
    # No thread waits for a job: nothing to ask for.
    assert worker.regrab_idle() == 0
    done: list = []
    _serve(worker, done)
    wait_for(lambda: _asleep(server), timeout=30, what='the worker asleep')
    job = gear.TextJob('f', 'x')
    client.submitJob(job)
    wait_for(lambda: job.complete, timeout=30, what='the job')
    assert done == ['f']
