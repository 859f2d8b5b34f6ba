"""A report's write-ahead (the pipeline saved with the report marked as
being sent) no longer holds the scheduler's loop when every reporter
sends off the loop: the write is sent, and the report is submitted by the
report gate (zuul/scheduler/report_gate.py) once the write landed, in the
order the loop asked. The real Scheduler and managers
(tests/unit/scheduler_support); a state store whose writes land when the
test says (a waiting write blocks, as a slow ZooKeeper would)."""

from __future__ import annotations

import threading

import pytest

from tests.harness.waiting import wait_for
from tests.unit.scheduler_support import ONE_CONFIG_PROJECT, check_config, start_system
from zuul.scheduler.report_gate import ReportGate

MAIN = ONE_CONFIG_PROJECT

CONFIG = check_config(reports=('success',))


class HeldStore:
    """save_many: a waited-for write blocks while ``gate`` is held; a
    write not waited for lands when ``land()`` is called."""

    def __init__(self):
        self.gate = threading.Lock()
        self.held: list = []
        self.in_flight = 0
        self.client = None

    def save_many(self, states, then=None):
        if then is None:
            with self.gate:
                return len(states)
        self.held.append(then)
        self.in_flight += 1
        return len(states)

    def land(self):
        held, self.held = self.held, []
        for then in held:
            self.in_flight -= 1
            then(True)


class OffLoopReporter:
    def __init__(self):
        self.sent: list = []

    def can_report_off_loop(self):
        return True

    def report_off_loop(self, item, pipeline, action, message, done=None):
        self.sent.append((item.change.newrev, action))

    def report(self, *args):
        raise AssertionError('reported on the loop')


@pytest.fixture
def reporting(tmp_path):
    scheduler, executor = start_system(tmp_path, MAIN, {'org/config': {'master': CONFIG}})
    store = scheduler.state_store = HeldStore()
    scheduler.marks_saved = False
    reporter = OffLoopReporter()
    scheduler.layouts.reporters = lambda pipeline, action: \
        [reporter] if action == 'success' else []
    yield scheduler, executor, store, reporter
    if store.gate.locked():
        store.gate.release()
    store.land()
    scheduler.stop()


def _enqueue(scheduler, newrev):
    scheduler.management('enqueue-ref', tenant='t1', pipeline='check', project='org/config',
                         ref='refs/heads/master', oldrev='0' * 40, newrev=newrev)


def test_a_reports_write_ahead_does_not_hold_the_loop(reporting):
    scheduler, executor, store, reporter = reporting
    _enqueue(scheduler, 'b' * 40)
    assert scheduler.loop.wait_idle(30)
    store.land()
    # From now on a write the loop waits for would block.
    store.gate.acquire()
    executor.finish(executor.running[0][0], 'SUCCESS')
    _enqueue(scheduler, 'c' * 40)            # handled while the write-ahead is out
    assert scheduler.loop.wait_idle(30)
    assert len(executor.running) == 1
    # Not reported before the write-ahead landed ...
    assert reporter.sent == []
    assert not scheduler.wait_until_settled(0.2)
    store.gate.release()
    store.land()
    # ... and once it did.
    wait_for(lambda: reporter.sent == [('b' * 40, 'success')], timeout=30, what='the report')


def test_the_gate_submits_in_order_each_once_landed():
    gate = ReportGate()
    first, second = threading.Event(), threading.Event()
    sent = []
    gate.put(first, lambda: sent.append(1))
    gate.put(second, lambda: sent.append(2))
    second.set()
    assert gate.pending() == 2 and sent == []     # the second waits behind the first
    first.set()
    wait_for(lambda: sent == [1, 2], timeout=30, what='both submitted')
    # A submit that fails says so (e.g. a merge report waits for its outcome).
    failed = threading.Event()
    landed = threading.Event()
    landed.set()
    gate.put(landed, lambda: 1 / 0, on_error=failed.set)
    assert failed.wait(30)
    gate.stop()
    assert gate.pending() == 0
