"""The scheduler's event thread: priorities, and pipelines processed even
while events keep coming."""

from __future__ import annotations

import threading
import time

from tests.harness.waiting import wait_for
from zuul.scheduler import loop as loop_module
from zuul.scheduler.loop import EventLoop


class Handlers:
    def __init__(self, event_cost=0.0):
        self.seen = []
        self.passes = []           # events seen when each pipeline pass ran
        self.event_cost = event_cost
        self.lock = threading.Lock()

    def handle_management(self, event):
        self.seen.append(('management', event))

    def handle_result(self, event):
        self.seen.append(('result', event))

    def handle_trigger(self, event):
        time.sleep(self.event_cost)   # e.g. a change looked up over SSH
        self.seen.append(('trigger', event))

    def process_pipelines(self):
        self.passes.append(len(self.seen))
        return False


def test_management_then_results_then_triggers():
    handlers = Handlers()
    loop = EventLoop(handlers)
    loop.add_trigger_event('t1')
    loop.add_result_event('r1')
    loop.add_management_event('m1')
    loop.start()
    try:
        assert loop.wait_idle(10)
    finally:
        loop.stop()
    assert [kind for kind, _ in handlers.seen] == ['management', 'result', 'trigger']
    assert handlers.passes  # settled once the queues were empty


def test_pipelines_are_processed_during_a_steady_stream_of_events(monkeypatch):
    monkeypatch.setattr(loop_module, 'SETTLE_INTERVAL', 0.05)
    handlers = Handlers(event_cost=0.01)
    loop = EventLoop(handlers)
    stop = threading.Event()

    def producer():
        # keeps the trigger queue from ever running dry
        while not stop.is_set():
            loop.add_trigger_event('t')
            time.sleep(0.002)
    thread = threading.Thread(target=producer, daemon=True)
    loop.start()
    thread.start()
    try:
        wait_for(lambda: len(handlers.passes) >= 3, timeout=30,
                 what='pipeline passes while events keep arriving')
        assert len(loop.triggers) > 0   # the backlog never drained meanwhile
    finally:
        stop.set()
        thread.join(5)
        loop.stop()


def test_one_pass_and_save_at_start_without_any_event():
    """A scheduler restored from saved state moves its pipelines at once,
    not at the next event."""
    handlers = Handlers()
    saved = []
    handlers.save_state = lambda: saved.append(len(handlers.passes))
    loop = EventLoop(handlers)
    loop.start()
    try:
        wait_for(lambda: handlers.passes and saved, timeout=10, what='the first pass')
        assert loop.wait_idle(10)
    finally:
        loop.stop()
    assert handlers.passes == [0] and saved == [1] and handlers.seen == []


def test_saving_while_zookeeper_is_away_warns_once_then_recovers(caplog):
    from kazoo.exceptions import ConnectionLoss
    handlers = Handlers()
    outcomes = [ConnectionLoss(), ConnectionLoss(), ConnectionLoss(), None]

    def save_state():
        outcome = outcomes.pop(0) if outcomes else None
        if outcome is not None:
            raise outcome
    handlers.save_state = save_state
    loop = EventLoop(handlers)
    with caplog.at_level('INFO', logger='zuul.scheduler.loop'):
        for _ in range(4):
            loop._save()
    warnings = [r for r in caplog.records if 'ZooKeeper unavailable' in r.getMessage()]
    assert len(warnings) == 1 and 'ConnectionLoss' in warnings[0].getMessage()
    assert any('saved again' in r.getMessage() for r in caplog.records)
    assert not any(r.exc_info for r in caplog.records)


def test_saves_are_at_most_one_per_interval_and_the_loop_is_busy_until_the_last(
        monkeypatch):
    """Events one at a time: each batch settles, but the saves (a save
    writes every item of a pipeline) are at most one per
    MIN_SAVE_INTERVAL; the loop counts as busy until the deferred save
    is made, so a caller waiting for idle finds everything saved."""
    monkeypatch.setattr(loop_module, 'MIN_SAVE_INTERVAL', 0.2)
    handlers = Handlers()
    saves = []
    handlers.save_state = lambda: saves.append(len(handlers.seen))
    loop = EventLoop(handlers)
    loop.start()
    try:
        assert loop.wait_idle(10) and saves == [0]       # the save at start
        start = time.monotonic()
        for n in range(20):
            loop.add_trigger_event(n)
            wait_for(lambda: len(handlers.passes) >= n + 2, timeout=10, what='a pass')
        assert loop.wait_idle(10)
        spent = time.monotonic() - start
        assert len(handlers.passes) >= 21       # a pass after every event
        assert saves[-1] == 20                  # idle only once the last is saved
        assert len(saves) - 1 <= spent / 0.2 + 1
    finally:
        loop.stop()


class CostlyPasses(Handlers):
    def process_pipelines(self):
        spin = time.thread_time() + 0.01     # CPU: many items
        while time.thread_time() < spin:
            pass
        return super().process_pipelines()


def test_events_a_few_milliseconds_apart_share_a_costly_pass_and_idle_waits_for_it(
        monkeypatch):
    """A pass looks at every item: when it costs (many items), events
    arriving closer together than a few times its cost share one pass
    instead of one each, and the loop counts as busy until that pass is
    made (a caller waiting for idle finds every event acted on)."""
    monkeypatch.setattr(loop_module, 'MIN_PASS_INTERVAL', 0.3)
    handlers = CostlyPasses()
    loop = EventLoop(handlers)
    loop.start()
    try:
        assert loop.wait_idle(10) and handlers.passes == [0]     # the pass at start
        for n in range(10):
            loop.add_trigger_event(n)
            time.sleep(0.01)
        assert loop.wait_idle(10)
        assert handlers.passes[-1] == 10, 'idle before the last event was passed over'
        assert len(handlers.passes) <= 4, f'{len(handlers.passes)} passes for one burst'
    finally:
        loop.stop()


def test_cheap_passes_are_not_deferred(monkeypatch):
    """A pass over few items costs next to nothing: it is made after each
    event as it comes, however close together they are (a node request's
    priority is revised before a launcher looks again)."""
    monkeypatch.setattr(loop_module, 'MIN_PASS_INTERVAL', 5.0)
    handlers = Handlers()
    loop = EventLoop(handlers)
    loop.start()
    try:
        assert loop.wait_idle(10)
        for n in range(5):
            loop.add_trigger_event(n)
            wait_for(lambda: handlers.passes[-1] == n + 1, timeout=2.5,
                     what='a pass right after the event')
    finally:
        loop.stop()


class Reporting(Handlers):
    """Every event is a final report: the state without its item is to
    be saved at once (``save_urgent``); ``save_cost`` is each save's CPU."""

    def __init__(self, save_cost):
        super().__init__()
        self.save_cost = save_cost
        self.urgent = False
        self.saves = []

    def handle_trigger(self, event):
        super().handle_trigger(event)
        self.urgent = True

    def save_urgent(self):
        return self.urgent

    def save_state(self):
        self.urgent = False
        spin = time.thread_time() + self.save_cost
        while time.thread_time() < spin:
            pass
        self.saves.append(len(self.seen))


def _report_burst(loop, handlers, count=10):
    assert loop.wait_idle(10)
    handlers.saves.clear()
    for n in range(count):
        loop.add_trigger_event(n)
        wait_for(lambda: len(handlers.seen) == n + 1, timeout=10, what='the event')
        time.sleep(0.01)
    assert loop.wait_idle(10)
    assert handlers.saves[-1] == count, 'idle before the last report was saved'


def test_a_cheap_save_after_a_final_report_is_made_at_once(monkeypatch):
    monkeypatch.setattr(loop_module, 'MIN_SAVE_INTERVAL', 5.0)
    handlers = Reporting(save_cost=0.0)
    loop = EventLoop(handlers)
    loop.start()
    try:
        _report_burst(loop, handlers)
        assert handlers.saves == list(range(1, 11)), handlers.saves
    finally:
        loop.stop()


def test_costly_saves_after_final_reports_share_the_loops_next_save(monkeypatch):
    """Saving a pipeline of many items costs: the final reports of one
    MIN_SAVE_INTERVAL share one save instead of one each, and the loop
    counts as busy until it is made (a restart never finds an item
    reported and not saved as such for longer than that)."""
    monkeypatch.setattr(loop_module, 'MIN_SAVE_INTERVAL', 0.3)
    handlers = Reporting(save_cost=0.01)
    loop = EventLoop(handlers)
    loop.start()
    try:
        _report_burst(loop, handlers)
        assert len(handlers.saves) <= 4, f'{len(handlers.saves)} saves for one burst'
    finally:
        loop.stop()
