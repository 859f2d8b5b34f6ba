# ruff: noqa: F811 - pytest fixtures imported from test_merger_support
"""Many merger requests at once, from several threads, over a real
Gearman server to a real MergeServer (two job threads, real git): every
request gets exactly its own answer and nothing stays queued.

This is what the scheduler (merges), its configuration loader (cats,
ref states) and zuul-web do to one MergeClient at the same time.  gear
pairs each JOB_CREATED with the oldest submit waiting on the
connection, so two submits racing could take each other's job handle:
each then got the other's answer (a cat result in a merge's callback)."""

from __future__ import annotations

import threading

import pytest

from tests.functional.test_merger_support import (  # noqa: F401 - fixtures
    change_ref,
    make_merger,
    upstream,
)
from tests.harness.daemons import gear_jobs
from tests.harness.waiting import wait_for
from zuul.merger.client import MergeClient
from zuul.merger.protocol import CatResult, MergeResult, RefStateResult
from zuul.merger.server import MergeServer
from zuul.model.change import Change
from zuul.model.item import QueueItem

PROJECT = 'org/project'
FILES = 8           # f0.txt .. f7.txt on master, one content each
CHANGES = 6         # changes 1..6, each adding its own file
THREADS = 6
PER_THREAD = 24     # one request in four is a merge


@pytest.fixture
def project(upstream):
    upstream.create(PROJECT, {f'f{k}.txt': f'content {k}\n' for k in range(FILES)})
    for n in range(1, CHANGES + 1):
        upstream.add_change(PROJECT, n, {f'change{n}.txt': f'change {n}\n'})
    return PROJECT


@pytest.fixture
def served(gearman_server, make_merger, project):
    server = MergeServer([('127.0.0.1', gearman_server.port)], make_merger('server'),
                         hostname='merger.stress', threads=2)
    server.start()
    client = MergeClient('127.0.0.1', gearman_server.port, merge_mode_for=lambda i: 'merge')
    try:
        yield server, client
    finally:
        client.stop()
        server.stop()


class Answers:
    """event id -> the results its callback got."""

    def __init__(self):
        self.by_event: dict[str, list] = {}
        self.cond = threading.Condition()

    def callback(self, event_id: str):
        def record(result):
            with self.cond:
                self.by_event.setdefault(event_id, []).append(result)
                self.cond.notify_all()
        return record


def submit_many(client: MergeClient, answers: Answers, thread: int, expected: dict) -> None:
    """``PER_THREAD`` requests of mixed kinds; ``expected`` maps each
    event id to a check of its result."""
    for i in range(PER_THREAD):
        event_id = f't{thread}-{i}'
        kind = (thread + i) % 4
        if kind == 0:
            number = (thread + i) % CHANGES + 1
            item = QueueItem(Change('gerrit', PROJECT, change_ref(number), number=number,
                                    patchset=1, branch_name='master'))
            expected[event_id] = (MergeResult, lambda r, n=number: r.merged and
                                  r.files == [f'change{n}.txt'])
            client.merge_items([item], answers.callback(event_id), event_id=event_id)
        elif kind == 1:
            item = QueueItem(Change('gerrit', PROJECT, 'refs/heads/master',
                                    branch_name='master'))
            expected[event_id] = (RefStateResult, lambda r: r.updated and
                                  list(r.repo_state['gerrit']) == [PROJECT])
            client.get_repo_state([item], answers.callback(event_id), event_id=event_id)
        else:
            k = (thread * PER_THREAD + i) % FILES
            expected[event_id] = (CatResult, lambda r, k=k: r.files == {
                f'f{k}.txt': f'content {k}\n'})
            client.get_files('gerrit', PROJECT, 'master', [f'f{k}.txt'],
                             answers.callback(event_id), event_id=event_id)


def test_concurrent_requests_each_get_their_own_answer(served, gearman_server):
    server, client = served
    answers = Answers()
    expected: dict = {}
    threads = [threading.Thread(target=submit_many, args=(client, answers, t, expected))
               for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    total = THREADS * PER_THREAD
    assert len(expected) == total
    wait_for(lambda: len(answers.by_event) >= total, condition=answers.cond, timeout=120,
             what=f'answers to {total} concurrent merger requests')
    wrong = {}
    for event_id, (result_cls, check) in expected.items():
        got = answers.by_event[event_id]
        if len(got) != 1 or not isinstance(got[0], result_cls) or \
                got[0].event_id != event_id or getattr(got[0], 'error', None) or \
                not check(got[0]):
            wrong[event_id] = got
    assert not wrong, f'{len(wrong)} requests got answers not their own: {wrong}'
    # Nothing left anywhere: client bookkeeping, the Gearman queue, the merger.
    assert client.outstanding == 0
    wait_for(lambda: not any(n for n, _ in gear_jobs(gearman_server.port).values()),
             what='the Gearman queue to drain')
    with server.idle:
        assert server.active_jobs == 0 and server.jobs_done == total


def test_canceled_requests_leave_the_gearman_queue(gearman_server, make_merger, project):
    """A gate reset makes the queued merges of every item behind it
    obsolete: canceled, they leave the Gearman queue and no merger runs
    them; the others are answered as usual."""
    client = MergeClient('127.0.0.1', gearman_server.port, merge_mode_for=lambda i: 'merge')
    server = MergeServer([('127.0.0.1', gearman_server.port)], make_merger('server'),
                         hostname='merger.cancel')
    answers = Answers()
    try:
        handles = {}
        for n in range(1, CHANGES + 1):   # queued: no merger is connected yet
            item = QueueItem(Change('gerrit', PROJECT, change_ref(n), number=n, patchset=1,
                                    branch_name='master'))
            handles[n] = client.merge_items([item], answers.callback(f'm{n}'),
                                            event_id=f'm{n}')
        # Submitted in order on the client's own thread.
        wait_for(lambda: gear_jobs(gearman_server.port).get('merger:merge') == (CHANGES, 0),
                 what='every merge queued')
        obsolete = [n for n in handles if n % 2 == 0]
        for n in obsolete:
            client.cancel(handles[n])
        wait_for(lambda: all(handles[n].done for n in obsolete),
                 what='canceled merges to leave the queue')
        assert all(handles[n].withdrawn for n in obsolete)
        assert gear_jobs(gearman_server.port)['merger:merge'] == (CHANGES - len(obsolete), 0)
        assert client.outstanding == CHANGES - len(obsolete)
        server.start()
        wanted = [f'm{n}' for n in handles if n not in obsolete]
        wait_for(lambda: len(answers.by_event) >= len(wanted), condition=answers.cond,
                 what='the merges still wanted')
        assert sorted(answers.by_event) == sorted(wanted)
        assert all(answers.by_event[e][0].merged for e in wanted)
        with server.idle:
            server.idle.wait_for(lambda: server.active_jobs == 0, 30)
            assert server.jobs_done == len(wanted)     # none of the canceled ones ran
        assert client.outstanding == 0
        # Canceling what was answered already, or twice, does nothing.
        client.cancel(handles[1])
        client.cancel(handles[2])
        assert not handles[1].withdrawn and handles[1].result.merged
    finally:
        client.stop()
        server.stop()


def test_a_canceled_request_a_merger_already_runs_is_dropped(served):
    """Too late to withdraw: the merger runs it, the answer is dropped
    (no callback) and the client forgets it."""
    server, client = served
    answers = Answers()
    item = QueueItem(Change('gerrit', PROJECT, change_ref(1), number=1, patchset=1,
                            branch_name='master'))
    started = threading.Event()
    release = threading.Event()
    real_merge = server.merger.merge_changes

    def slow_merge(*args, **kw):
        started.set()
        release.wait(30)
        return real_merge(*args, **kw)
    server.merger.merge_changes = slow_merge
    handle = client.merge_items([item], answers.callback('late'), event_id='late')
    assert started.wait(30)
    client.cancel(handle)
    release.set()
    wait_for(lambda: handle.done, what='the running merge to end')
    assert not handle.withdrawn and handle.result.merged
    assert answers.by_event == {}
    assert client.outstanding == 0


def test_a_request_canceled_while_the_server_is_down_is_not_submitted_again(
        gearman_server, project):
    """Lost with a restarting Gearman server and canceled meanwhile: it
    ends without a callback and nothing of it is left in the new server's
    queue."""
    client = MergeClient('127.0.0.1', gearman_server.port, merge_mode_for=lambda i: 'merge')
    answers = Answers()
    try:
        item = QueueItem(Change('gerrit', PROJECT, change_ref(1), number=1, patchset=1,
                                branch_name='master'))
        handle = client.merge_items([item], answers.callback('gone'), event_id='gone')
        wait_for(lambda: gear_jobs(gearman_server.port).get('merger:merge') == (1, 0),
                 what='the merge queued')

        def down():
            wait_for(lambda: client.gearman.active_connections == [],
                     what='the client to notice the server gone')
            client.cancel(handle)
        gearman_server.restart(down=down)
        wait_for(lambda: handle.done, what='the canceled request to end')
        assert handle.result.error
        assert answers.by_event == {} and client.outstanding == 0
        assert gear_jobs(gearman_server.port).get('merger:merge', (0, 0)) == (0, 0)
    finally:
        client.stop()


def test_a_reset_build_set_takes_its_queued_merge_out(gearman_server, project):
    """The scheduler's side: the pipeline manager cancels the merge of a
    build set it replaces (zuul/scheduler/context.py cancel_merge); with
    the real merge client the request leaves the Gearman queue."""
    from types import SimpleNamespace

    from zuul.scheduler.context import SchedulerContext
    client = MergeClient('127.0.0.1', gearman_server.port, merge_mode_for=lambda i: 'merge')
    try:
        item = QueueItem(Change('gerrit', PROJECT, change_ref(1), number=1, patchset=1,
                                branch_name='master'))
        bs = item.current_build_set
        bs.merge_request = client.merge_items([item], lambda result: None, event_id='r1')
        wait_for(lambda: gear_jobs(gearman_server.port).get('merger:merge') == (1, 0),
                 what='the merge queued')     # no merger yet
        ctx = SchedulerContext(SimpleNamespace(layouts=None, merger=client), tenant=None)
        ctx.cancel_merge(bs)
        wait_for(lambda: bs.merge_request.done, what='the canceled merge to leave the queue')
        assert gear_jobs(gearman_server.port).get('merger:merge', (0, 0)) == (0, 0)
        ctx.cancel_merge(SimpleNamespace(merge_request=None))   # nothing asked: no-op
    finally:
        client.stop()


def test_a_request_canceled_before_it_was_sent_never_reaches_gearman(gearman_server):
    """Submits go out on the client's own thread: one canceled before
    its turn (a gate reset right after the enqueue) is not sent at all."""
    client = MergeClient('127.0.0.1', gearman_server.port, merge_mode_for=lambda i: 'merge')
    answers = Answers()
    try:
        gate = threading.Event()
        first_submit = client._first_submit

        def held(handle):      # the submit waits its turn
            gate.wait(30)
            first_submit(handle)
        client._first_submit = held
        item = QueueItem(Change('gerrit', PROJECT, change_ref(1), number=1, patchset=1,
                                branch_name='master'))
        handle = client.merge_items([item], answers.callback('c1'), event_id='c1')
        client.cancel(handle)
        gate.set()
        wait_for(lambda: handle.done, what='the canceled request to end')
        assert handle.withdrawn and handle.job is None
        assert client.outstanding == 0
        assert gear_jobs(gearman_server.port).get('merger:merge', (0, 0)) == (0, 0)
        assert answers.by_event == {}      # a canceled request has no answer
    finally:
        client.stop()
