"""After the scheduler saves its pipelines, what follows the save
(acknowledging the trigger events it holds, forgetting the build records
whose results are saved, the last-saved mark) is sent on the same
ZooKeeper session without the loop waiting for it: ZooKeeper applies a
session's requests in order, so each still lands after the save. Real
ZooKeeper; the waits are counted where kazoo waits for an answer."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
from kazoo.handlers.threading import AsyncResult

from tests.unit.scheduler_support import start_system
from zuul.zk.builds import BUILD_ROOT, BuildRecords
from zuul.zk.pipeline_state import ALIVE_PATH, PipelineStateStore, TriggerEventQueue

MAIN = """
- tenant:
    name: t1
    source:
      gerrit:
        config-projects: [org/config]
"""

CONFIG = """
- pipeline:
    name: check
    manager: independent
    trigger: {}
- job:
    name: base
    parent: null
- project:
    check:
      jobs: []
"""


class _CountingResult(AsyncResult):
    waits: list = []

    def get(self, block=True, timeout=None):
        if block:
            _CountingResult.waits.append(threading.current_thread().name)
        return super().get(block, timeout)


@pytest.fixture
def saving(tmp_path, zk_chroot):
    client = zk_chroot.client()
    scheduler, _ = start_system(tmp_path, MAIN, {'org/config': {'master': CONFIG}})
    scheduler.loop.stop()       # save_state is driven from the test's thread
    scheduler.state_store = PipelineStateStore(client)
    scheduler.event_queue = TriggerEventQueue(client)
    scheduler.executor.records = BuildRecords(client)
    scheduler.save_state()      # the first save reads what is there, marks
    yield SimpleNamespace(scheduler=scheduler, client=client)
    scheduler.stop()


def test_a_saves_follow_ups_cost_the_loop_no_wait(saving, monkeypatch):
    scheduler, client = saving.scheduler, saving.client
    paths = [scheduler.event_queue.put({'type': 'x', 'event_id': str(i)}) for i in range(3)]
    client.create(f'{BUILD_ROOT}/b-1', b'{}', makepath=True)
    scheduler._acks.extend(paths)
    scheduler._forget.append(SimpleNamespace(uuid='b-1'))
    scheduler._latest_changed = True        # a mark is due
    before = client.get(ALIVE_PATH)[0]
    monkeypatch.setattr(client.handler, 'async_result',
                        lambda: _CountingResult(client.handler))
    _CountingResult.waits.clear()
    time.sleep(0.01)                        # the mark's time differs
    scheduler.save_state()
    me = threading.current_thread().name
    assert [w for w in _CountingResult.waits if w == me] == []
    # All of it landed (a read on the same session comes after them).
    monkeypatch.undo()
    assert scheduler.event_queue.pending() == []
    assert not client.exists(f'{BUILD_ROOT}/b-1')
    assert client.get(ALIVE_PATH)[0] != before


def test_an_acknowledgement_of_an_event_already_gone_still_removes_the_others(saving):
    scheduler, client = saving.scheduler, saving.client
    paths = [scheduler.event_queue.put({'type': 'x', 'event_id': str(i)}) for i in range(3)]
    client.delete(paths[1])     # acknowledged meanwhile (another scheduler)
    scheduler.event_queue.ack_many(paths, wait=False)
    deadline = time.monotonic() + 30
    while scheduler.event_queue.pending() and time.monotonic() < deadline:
        client.sync('/')
    assert scheduler.event_queue.pending() == []
