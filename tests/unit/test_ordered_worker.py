"""zuul.lib.ordered_worker: work runs in order on one thread; a failing
piece does not stop the rest; stop() runs what was put; work put after
the stop runs on the caller's thread."""

import threading

from zuul.lib.ordered_worker import OrderedWorker


def test_work_runs_in_order_and_survives_a_failure():
    worker = OrderedWorker('test-worker')
    gate = threading.Event()
    done = []
    try:
        worker.put(lambda: gate.wait(10))
        worker.put(lambda: done.append(1))
        worker.put(lambda: 1 / 0)
        worker.put(lambda: done.append((2, threading.current_thread().name)))
        assert worker.pending() == 4
        assert not worker.flush(0.05)       # held by the first
        gate.set()
        assert worker.flush(10)
        assert done == [1, (2, 'test-worker')] and worker.pending() == 0
    finally:
        worker.stop(10)


def test_stop_runs_what_was_put_then_work_runs_on_the_caller():
    worker = OrderedWorker('test-worker')
    gate = threading.Event()
    done = []
    worker.put(lambda: gate.wait(10))
    worker.put(lambda: done.append('queued'))
    threading.Timer(0.1, gate.set).start()
    assert worker.stop(10)
    assert done == ['queued']
    worker.put(lambda: done.append(threading.current_thread().name))
    assert done == ['queued', threading.current_thread().name]
    assert worker.flush(0) and worker.pending() == 0
