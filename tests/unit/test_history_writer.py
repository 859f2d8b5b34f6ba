"""The build history's writes leave the scheduler's loop
(zuul/driver/sql/writer.py): a database that blocks on an insert does not
hold up events; the rows are written in order, read back by the
scheduler once written, and all written when the scheduler stops.

The real Scheduler, managers and Layouts (tests/unit/scheduler_support)
over a real SQLite file; the database "blocks" by holding a lock in front
of its writes, as a busy server or a locked file would."""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace

import pytest

from tests.unit.scheduler_support import ONE_CONFIG_PROJECT, check_config, start_system
from zuul.driver.sql.history import BuildHistory
from zuul.driver.sql.writer import HistoryWriter

MAIN = ONE_CONFIG_PROJECT

CONFIG = check_config()


class BlockingHistory(BuildHistory):
    """A BuildHistory whose writes wait while ``gate`` is held."""

    def __init__(self, dburi):
        super().__init__(dburi)
        self.gate = threading.Lock()
        self.waiting = threading.Event()
        self.fail_next = False

    def _through_gate(self, write, *args):
        self.waiting.set()
        with self.gate:
            if self.fail_next:
                self.fail_next = False
                raise RuntimeError('disk full')
            return write(*args)

    def write_buildset(self, rows):
        return self._through_gate(super().write_buildset, rows)

    def record_reproduction(self, tenant, uuid, data):
        return self._through_gate(super().record_reproduction, tenant, uuid, data)


@pytest.fixture
def blocked(tmp_path):
    history = BlockingHistory(f'sqlite:///{tmp_path}/history.db')
    history.migrate()
    writer = HistoryWriter(history)
    scheduler, executor = start_system(tmp_path, MAIN, {'org/config': {'master': CONFIG}},
                                       history=writer)
    yield SimpleNamespace(history=history, writer=writer, scheduler=scheduler,
                          executor=executor, dburi=f'sqlite:///{tmp_path}/history.db')
    if history.gate.locked():
        history.gate.release()
    scheduler.stop()


def _enqueue(scheduler, newrev):
    scheduler.management('enqueue-ref', tenant='t1', pipeline='check', project='org/config',
                         ref='refs/heads/master', oldrev='0' * 40, newrev=newrev)


def test_a_blocked_database_does_not_hold_the_loop(blocked):
    s = blocked
    s.history.gate.acquire()
    # The launch keeps what the build runs with (zuul reproduce): that
    # insert waits on the database ...
    _enqueue(s.scheduler, 'b' * 40)
    assert s.scheduler.loop.wait_idle(30)
    assert s.history.waiting.wait(30)
    [(request, _, _)] = s.executor.running
    # ... and the build's completion, its report, and a second item's
    # launch are handled all the same.
    s.executor.finish(request, 'SUCCESS')
    _enqueue(s.scheduler, 'c' * 40)
    assert s.scheduler.loop.wait_idle(30)
    assert len(s.executor.running) == 1
    assert not list(s.scheduler.tenants['t1'].managers['check'].all_items())[:-1]
    assert s.writer.pending() >= 3     # two launches and a report (and reads)
    # Nothing is in the database yet; once it answers, everything is.
    assert BuildHistory(s.dburi).get_buildsets('t1') == []
    s.history.gate.release()
    assert s.writer.flush(30)
    [buildset] = BuildHistory(s.dburi).get_buildsets('t1')
    assert buildset['result'] == 'SUCCESS'
    assert BuildHistory(s.dburi).get_reproduction('t1', request.uuid) is not None


def test_the_scheduler_reads_what_it_wrote(blocked):
    s = blocked
    _enqueue(s.scheduler, 'b' * 40)
    assert s.scheduler.loop.wait_idle(30)
    [(request, _, _)] = s.executor.running
    s.history.gate.acquire()
    s.executor.finish(request, 'SUCCESS')
    assert s.scheduler.loop.wait_idle(30)
    reader = threading.Thread(target=lambda: found.append(
        [b['job_name'] for b in s.writer.get_builds('t1')]))
    found: list = []
    reader.start()
    reader.join(0.5)
    assert reader.is_alive()        # waits for the write asked before it
    s.history.gate.release()
    reader.join(30)
    assert found == [['unit']]


def test_writes_asked_for_are_written_when_the_scheduler_stops(blocked):
    s = blocked
    s.history.gate.acquire()
    for newrev in ('b' * 40, 'c' * 40, 'd' * 40):
        _enqueue(s.scheduler, newrev)
    assert s.scheduler.loop.wait_idle(30)
    s.executor.finish_all()
    assert s.scheduler.loop.wait_idle(30)
    assert s.writer.pending() >= 6
    threading.Timer(0.3, s.history.gate.release).start()
    s.scheduler.stop()
    assert s.writer.pending() == 0
    reader = BuildHistory(s.dburi)
    # In the order asked for (newest first).
    assert [b['newrev'] for b in reader.get_buildsets('t1')] == ['d' * 40, 'c' * 40,
                                                                 'b' * 40]
    for request in s.executor.requests:
        assert reader.get_reproduction('t1', request.uuid) is not None


def test_a_failed_write_is_logged_and_the_next_ones_go_on(blocked, caplog):
    s = blocked
    s.history.fail_next = True
    with caplog.at_level(logging.ERROR, logger='zuul.driver.sql.writer'):
        _enqueue(s.scheduler, 'b' * 40)
        assert s.scheduler.loop.wait_idle(30)
        [(request, _, _)] = s.executor.running
        s.executor.finish(request, 'SUCCESS')
        assert s.scheduler.loop.wait_idle(30)
        assert s.writer.flush(30)
    assert 'Unable to write the reproduction of' in caplog.text
    assert [b['result'] for b in BuildHistory(s.dburi).get_buildsets('t1')] == ['SUCCESS']


def test_the_scheduler_service_writes_its_history_off_the_loop(tmp_path):
    from zuul.scheduler.service import SchedulerService
    conf = SimpleNamespace(
        statsd=SimpleNamespace(server=None),
        scheduler=SimpleNamespace(prometheus_port=None),
        database=SimpleNamespace(dburi=f'sqlite:///{tmp_path}/h.db', table_prefix=''))
    _, history = SchedulerService._stats_and_history(SimpleNamespace(conf=conf))
    try:
        assert isinstance(history, HistoryWriter)
        assert history.schema_version() > 0
    finally:
        history.stop()


def test_build_times_are_seeded_off_the_loop_older_than_those_recorded_meanwhile(tmp_path):
    from zuul.scheduler.build_times import BuildTimes
    history = BlockingHistory(f'sqlite:///{tmp_path}/history.db')
    history.migrate()
    history.recent_durations = lambda *a, **kw: [30.0, 20.0]     # newest first
    writer = HistoryWriter(history)
    try:
        history.gate.acquire()
        writer.record_reproduction('t', 'x', {})      # a write the read waits behind
        times = BuildTimes(writer, keep=3)
        # Not known yet: the estimate does not wait for the database.
        assert times.estimate('t', 'p', 'master', 'unit') is None
        times.record('t', 'p', 'master', 'unit', 'SUCCESS', 100.0)
        assert times.estimate('t', 'p', 'master', 'unit') == 100.0
        history.gate.release()
        assert writer.flush(30)
        # 20, 30 from the history, then 100: the newest three.
        assert times.estimate('t', 'p', 'master', 'unit') == 50.0
    finally:
        writer.stop()
