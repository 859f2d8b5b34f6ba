# ruff: noqa: F811 - pytest fixtures imported from test_merger_support
"""MergeClient <-> MergeServer over a real Gearman server."""

from __future__ import annotations

import logging
import threading

import gear
import pytest

from nodepool.zk.localserver import free_port
from tests.functional.test_merger_support import (  # noqa: F401 - fixtures
    change_ref,
    make_merger,
    upstream,
)
from tests.harness.waiting import Signal, wait_for
from zuul.lib.gearlib import GearClient, GearServer
from zuul.merger.client import MergeClient
from zuul.merger.protocol import (
    CatResult,
    FilesChangesResult,
    MergeRequest,
    MergeResult,
    RefStateResult,
)
from zuul.merger.server import MergeServer
from zuul.model.change import Change
from zuul.model.item import QueueItem


def queue_item(project, number, branch='master'):
    return QueueItem(Change('gerrit', project, change_ref(number), number=number, patchset=1,
                            branch_name=branch))


class Results:
    """Collects callback results; ``wait(n)`` until n arrived."""

    def __init__(self):
        self.items = []
        self.threads = []
        self.cond = threading.Condition()

    def __call__(self, result):
        with self.cond:
            self.items.append(result)
            self.threads.append(threading.current_thread())
            self.cond.notify_all()

    def wait(self, count=1):
        wait_for(lambda: len(self.items) >= count, condition=self.cond, what='merger results')
        return self.items[count - 1]


@pytest.fixture
def served(gearman_server, make_merger):
    """A MergeServer on its own cache and a MergeClient, both connected."""
    server = MergeServer([('127.0.0.1', gearman_server.port)], make_merger('server'),
                         hostname='merger.test')
    server.start()
    client = MergeClient('127.0.0.1', gearman_server.port,
                         merge_mode_for=lambda item: 'merge')
    try:
        yield server, client
    finally:
        client.stop()
        server.stop()


@pytest.fixture
def project(upstream):
    upstream.create('org/project', {'a.txt': 'a\n', 'zuul.yaml': '- job: {name: j}\n',
                                    'zuul.d/x.yaml': '- job: {name: x}\n'})
    upstream.add_change('org/project', 1, {'b.txt': 'b\n'})
    upstream.add_change('org/project', 2, {'c.txt': 'c\n'})
    upstream.add_change('org/project', 3, {'a.txt': 'conflict\n'})
    upstream.add_change('org/project', 4, {'a.txt': 'other\n'})
    return 'org/project'


def test_merge_end_to_end_and_reproduced_by_an_executor(served, project, upstream,
                                                        make_merger):
    server, client = served
    results = Results()
    handle = client.merge_items([queue_item(project, 1), queue_item(project, 2)], results,
                                event_id='ev-1')
    result = results.wait()
    assert isinstance(result, MergeResult) and result.merged, result.error
    assert handle.done and handle.result is result
    assert results.threads[0] is not threading.current_thread()
    assert result.event_id == 'ev-1'
    # repo_state: where the merge started (what executors are given) ...
    assert result.repo_state == {'gerrit': {project: {
        'refs/heads/master': upstream.head(project)}}}
    # ... merged_state: the speculative result; commit: the last item's.
    assert result.merged_state['gerrit'][project]['refs/heads/master'] == result.commit
    assert result.files == ['c.txt']
    # An executor with its own cache re-merges on repo_state: same commits.
    upstream.push(project, {'later.txt': 'later\n'})
    executor = make_merger('executor')
    sent = MergeRequest.from_json(handle.request.to_json())
    again = executor.merge_changes(sent.items, repo_state=result.repo_state)
    assert again.repo_state == result.merged_state


def test_conflict_over_the_wire_names_the_change(served, project):
    server, client = served
    results = Results()
    client.merge_items([queue_item(project, 3), queue_item(project, 4)], results)
    result = results.wait()
    assert not result.merged and result.error is None
    assert (result.conflict.number, result.conflict.project) == (4, project)


def test_cat_refstate_and_files_changes(served, project, upstream):
    server, client = served
    results = Results()
    client.get_files('gerrit', project, 'master', ['zuul.yaml', 'zuul.d/', '.zuul.yaml'],
                     results)
    cat = results.wait(1)
    assert isinstance(cat, CatResult) and cat.error is None
    assert cat.files == {'zuul.yaml': '- job: {name: j}\n',
                         'zuul.d/x.yaml': '- job: {name: x}\n'}
    assert cat.commit == upstream.head(project)
    client.get_repo_state([queue_item(project, 1)], results, event_id='ev-2')
    state = results.wait(2)
    assert isinstance(state, RefStateResult) and state.updated
    assert state.repo_state == {'gerrit': {project: {'refs/heads/master':
                                                     upstream.head(project)}}}
    client.get_files_changes('gerrit', project, 'master', change_ref(3), results)
    changes = results.wait(3)
    assert isinstance(changes, FilesChangesResult) and changes.files == ['a.txt']


def test_failures_are_results_and_the_merger_keeps_serving(served, project):
    server, client = served
    results = Results()
    client.merge_items([queue_item('org/missing', 1)], results)
    client.get_files('gerrit', 'org/missing', 'master', ['zuul.yaml'], results)
    client.get_files('gerrit', project, 'no-such-branch', ['zuul.yaml'], results)
    client.get_repo_state([queue_item('org/missing', 1)], results)
    client.get_files_changes('gerrit', project, 'master', change_ref(99), results)
    client.merge_items([queue_item(project, 1)], results)
    results.wait(6)
    merge, cat, cat_branch, refstate, changes, ok = results.items
    assert not merge.merged and 'org/missing' in merge.error
    assert 'org/missing' in cat.error and cat.files == {}
    assert 'no-such-branch' in cat_branch.error
    assert not refstate.updated and 'org/missing' in refstate.error
    assert changes.files is None and changes.error
    assert ok.merged


def test_a_crash_inside_the_merger_is_an_error_result(served, project, monkeypatch):
    server, client = served

    def explode(*args, **kw):
        raise RuntimeError('disk on fire')
    monkeypatch.setattr(server.merger, 'merge_changes', explode)
    results = Results()
    client.merge_items([queue_item(project, 1)], results)
    result = results.wait()
    assert not result.merged and 'disk on fire' in result.error


@pytest.mark.parametrize('payload', [b'garbage', b'{"version": 99, "items": []}',
                                     b'{"version": 1, "items": [{"nope": 1}]}'])
def test_malformed_payload_is_failed_and_logged(served, gearman_server, project, caplog,
                                                payload):
    server, client = served
    raw = GearClient('raw-test-client')
    raw.addServer('127.0.0.1', gearman_server.port)
    raw.waitForServer()
    try:
        job = gear.Job(b'merger:merge', payload)
        with caplog.at_level(logging.ERROR, logger='zuul.merger.server'):
            raw.submitJob(job)
            wait_for(lambda: job.complete, what='WORK_FAIL')
        assert job.failure
        assert server.failed_jobs == 1
        assert any('malformed payload' in r.getMessage() for r in caplog.records)
    finally:
        raw.shutdown()
    results = Results()
    client.merge_items([queue_item(project, 1)], results)
    assert results.wait().merged


def test_canceled_request_never_calls_back(gearman_server, make_merger, project):
    client = MergeClient('127.0.0.1', gearman_server.port)
    results = Results()
    handle = client.merge_items([queue_item(project, 1)], results)
    handle.cancel()  # no merger is running yet: the job waits in the queue
    server = MergeServer([('127.0.0.1', gearman_server.port)], make_merger())
    server.start()
    try:
        later = client.merge_items([queue_item(project, 2)], results)
        assert later.wait(60) is not None and handle.wait(60) is not None
        # Canceled before its turn to be sent, it was not sent; once sent,
        # it runs: either way it ends, and only the other one calls back.
        assert handle.result.merged or handle.withdrawn
        assert results.items == [later.result]
    finally:
        client.stop()
        server.stop()


class BlockingMerger:
    """Wraps a Merger; merge_changes waits for ``release``."""

    def __init__(self, merger):
        self.merger = merger
        self.entered = Signal()
        self.release = Signal()

    def merge_changes(self, *args, **kw):
        self.entered.set()
        self.release.wait(60)
        return self.merger.merge_changes(*args, **kw)


def test_stop_lets_the_running_merge_finish(gearman_server, make_merger, project):
    merger = BlockingMerger(make_merger())
    server = MergeServer([('127.0.0.1', gearman_server.port)], merger)
    server.start()
    client = MergeClient('127.0.0.1', gearman_server.port)
    try:
        handle = client.merge_items([queue_item(project, 1)], None)
        assert merger.entered.wait(60)
        stopper = threading.Thread(target=server.stop)
        stopper.start()
        assert server.active_jobs == 1 and stopper.is_alive()
        merger.release.set()
        stopper.join(60)
        assert not stopper.is_alive()
        assert handle.wait(60).merged
    finally:
        client.stop()


def test_lost_gearman_server_completes_waiting_requests(project):
    """A server that does not come back within ``reconnect_timeout``:
    the waiting request ends as an error (a restart within it is in
    test_gearman_restart)."""
    port = free_port()
    gearman = GearServer(port=port, host='127.0.0.1')
    client = MergeClient('127.0.0.1', port, reconnect_timeout=1)
    results = Results()
    try:
        handle = client.merge_items([queue_item(project, 1)], results)
        # Submitted (off the caller's thread), then the server goes.
        wait_for(lambda: handle.job is not None, timeout=30, what='the submit')
        gearman.shutdown()
        result = results.wait()
        assert not result.merged and 'lost connection' in result.error
    finally:
        client.stop()


def test_log_lines_carry_the_event_id(served, project, caplog):
    server, client = served
    results = Results()
    with caplog.at_level(logging.DEBUG, logger='zuul.merger'):
        client.merge_items([queue_item(project, 1)], results, event_id='ev-trace')
        results.wait()
    lines = [r.getMessage() for r in caplog.records if r.name.startswith('zuul.merger')]
    assert any('[e: ev-trace]' in line and '1,1' in line for line in lines
               if 'Merging' in line)
    assert any('[e: ev-trace]' in line for line in lines if 'Requesting merge' in line)


def _raw_worker(port, name):
    worker = gear.Worker(name)
    worker.addServer('127.0.0.1', port)
    worker.waitForServer()
    worker.registerFunction('merger:merge')
    return worker


def test_a_merger_that_dies_with_the_job_is_replaced(gearman_server, make_merger, project):
    client = MergeClient('127.0.0.1', gearman_server.port)
    results = Results()
    server = None
    try:
        handle = client.merge_items([queue_item(project, 1)], results)
        dying = _raw_worker(gearman_server.port, 'dying-merger')
        taken = dying.getJob()
        assert taken.unique.decode() == handle.uuid
        dying.shutdown()       # gone without an answer: the server fails the job
        wait_for(lambda: handle.attempts == 2, what='the request submitted again')
        assert not results.items
        server = MergeServer([('127.0.0.1', gearman_server.port)], make_merger())
        server.start()
        result = results.wait()
        assert result.merged and handle.attempts == 2 and len(results.items) == 1
    finally:
        client.stop()
        if server is not None:
            server.stop()


def test_a_request_every_merger_fails_ends_as_an_error(gearman_server, project):
    from zuul.merger.client import MAX_ATTEMPTS
    client = MergeClient('127.0.0.1', gearman_server.port)
    results = Results()
    worker = _raw_worker(gearman_server.port, 'failing-merger')
    try:
        handle = client.merge_items([queue_item(project, 1)], results)
        for _ in range(MAX_ATTEMPTS):
            worker.getJob().sendWorkFail()
        result = results.wait()
        assert not result.merged and 'WORK_FAIL' in result.error
        assert handle.attempts == MAX_ATTEMPTS and len(results.items) == 1
    finally:
        worker.shutdown()
        client.stop()
