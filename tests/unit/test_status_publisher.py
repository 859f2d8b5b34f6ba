"""The status publisher: the scheduler's loop computes each tenant's
status; encoding and writing it to ZooKeeper happen on the publisher's
own thread, so a slow ZooKeeper write never holds the loop."""

from __future__ import annotations

import threading
import types

from tests.harness.waiting import wait_for
from zuul.scheduler import status as status_module
from zuul.scheduler.loop import EventLoop
from zuul.scheduler.status_publisher import StatusPublisher


class _Handlers:
    def __init__(self):
        self.publisher = None

    def handle_management(self, event):
        event.args['publisher'].publish()

    def handle_result(self, event):
        pass

    def handle_trigger(self, event):
        pass

    def process_pipelines(self):
        return False


class _Store:
    def __init__(self, fail_first=False):
        self.written = []
        self.fail_first = fail_first

    def publish(self, tenant, status):
        if self.fail_first:
            self.fail_first = False
            raise RuntimeError('ZooKeeper away')
        self.written.append((tenant, status, threading.current_thread().name))


def _publisher(monkeypatch, store):
    computed = []

    def tenant_status(scheduler, name, estimate, version=''):
        computed.append((name, threading.current_thread().name))
        return {'tenant': name, 'n': len(computed)}
    monkeypatch.setattr(status_module, 'tenant_status', tenant_status)
    loop = EventLoop(_Handlers(), name='scheduler-loop')
    scheduler = types.SimpleNamespace(loop=loop, tenants={'a': None, 'b': None},
                                      owns=lambda name: name != 'b',
                                      status_estimate=lambda name: None)
    publisher = StatusPublisher(scheduler, store, interval=0.01)
    loop.start()
    publisher.start()
    return publisher, loop, computed


def test_status_is_computed_on_the_loop_and_written_by_the_publishers_thread(monkeypatch):
    store = _Store()
    publisher, loop, computed = _publisher(monkeypatch, store)
    try:
        wait_for(lambda: publisher.published >= 1, what='a status published')
        assert computed[0] == ('a', 'scheduler-loop')       # b: another scheduler's
        tenant, status, thread = store.written[0]
        assert (tenant, status['tenant'], thread) == ('a', 'a', 'status-publisher')
        # Something changed: published again, with what the loop computed then.
        publisher.changed()
        wait_for(lambda: publisher.published >= 2, what='published again')
        assert store.written[-1][1]['n'] >= 2
    finally:
        publisher.stop()
        loop.stop()


def test_a_failed_write_is_logged_and_the_next_change_publishes(monkeypatch):
    store = _Store(fail_first=True)
    publisher, loop, computed = _publisher(monkeypatch, store)
    try:
        wait_for(lambda: computed, what='a status computed')
        publisher.changed()
        wait_for(lambda: publisher.published >= 1, what='published after the failure')
        assert store.written and all(t == 'status-publisher' for _, _, t in store.written)
    finally:
        publisher.stop()
        loop.stop()
