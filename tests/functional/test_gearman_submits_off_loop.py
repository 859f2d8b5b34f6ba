"""The scheduler's Gearman submits leave its loop: a submit waits for
the server's JOB_CREATED (and, while a server restarts, for up to 30 s),
so ``ExecutorClient.execute`` and the ``MergeClient`` requests return at
once and their jobs are submitted on the client's own thread, in the
order asked. A real Gearman server; a submit is held up the way two
submitters are serialized (the client's submit lock held)."""

from __future__ import annotations

import threading

import gear

from tests.harness.gearman import gearman_server  # noqa: F401 - fixture
from tests.harness.waiting import wait_for
from zuul.executor.client import ExecutorClient
from zuul.executor.protocol import (
    FUNCTION_EXECUTE,
    BuildResult,
    ExecuteRequest,
    JobSpec,
    ZuulContext,
)
from zuul.lib.gearlib import GearWorker
from zuul.merger.client import MergeClient
from zuul.merger.protocol import FUNCTION_CAT


def _request(uuid: str) -> ExecuteRequest:
    return ExecuteRequest(uuid=uuid, job=JobSpec(name='j'),
                          zuul=ZuulContext(tenant='t', pipeline='check', buildset='b'))


def _returns_while_held(lock, call):
    """``call()`` on a thread while ``lock`` (a submit in progress) is
    held; its result if it returned before the lock was let go."""
    out, returned = [], threading.Event()
    with lock:
        thread = threading.Thread(target=lambda: (out.append(call()), returned.set()))
        thread.start()
        came_back = returned.wait(30)
    thread.join(60)
    assert came_back, 'the call waited for the submit'
    return out[0]


def test_a_build_submit_that_waits_does_not_hold_the_caller(gearman_server):  # noqa: F811
    client = ExecutorClient('127.0.0.1', gearman_server.port)
    worker = GearWorker('instant')
    worker.addServer('127.0.0.1', gearman_server.port)
    worker.waitForServer()
    worker.registerFunction(FUNCTION_EXECUTE)
    try:
        lock = client.gearman._submit_lock
        handles = _returns_while_held(lock, lambda: [client.execute(_request(f'{i}' * 32))
                                                      for i in range(3)])
        assert not any(h.done for h in handles)
        # Submitted once the submit may go on, in the order asked.
        got = []
        for _ in handles:
            job = worker.getJob()
            got.append(ExecuteRequest.from_json(job.arguments).uuid)
            job.sendWorkComplete(BuildResult(result='SUCCESS').to_json())
        assert got == [h.uuid for h in handles]
        assert [h.wait(30).result for h in handles] == ['SUCCESS'] * 3
    finally:
        worker.shutdown()
        client.stop()


def test_a_build_that_cannot_be_submitted_completes_for_a_relaunch(gearman_server):  # noqa: F811,E501
    client = ExecutorClient('127.0.0.1', gearman_server.port)
    try:
        def refuse(job, *a, **kw):
            raise gear.NoConnectedServersError('no server')
        client.gearman.submitJob = refuse
        client._submit = lambda job: refuse(job)
        handle = client.execute(_request('e' * 32))
        result = handle.wait(30)
        assert result.result is None and 'gearman' in result.error_detail
    finally:
        client.stop()


def test_a_merger_submit_that_waits_does_not_hold_the_caller(gearman_server):  # noqa: F811
    client = MergeClient('127.0.0.1', gearman_server.port)
    try:
        lock = client.gearman._submit_lock
        handle = _returns_while_held(lock, lambda: client.get_files(
            'gerrit', 'org/p', 'master', ['zuul.yaml'], lambda result: None))
        assert client.outstanding == 1      # counted while it waits to go out
        wait_for(lambda: handle.job is not None, timeout=30, what='the submit')
        assert handle.function == FUNCTION_CAT
    finally:
        client.stop()
