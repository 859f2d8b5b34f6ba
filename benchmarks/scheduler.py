"""Scheduler throughput: many changes through check and gate.

Everything is real (development Gerrit over SSH, ZooKeeper, Gearman,
zuul-merger doing real git merges, the scheduler daemon's service) except
the executor: an "instant executor" Gearman worker answers
``executor:execute`` with SUCCESS at once, so what is measured is the
scheduler (and the merger), not Ansible.

    .venv/bin/python -m benchmarks.scheduler [--changes N]

Prints a table: scheduler-thread CPU per item, and the latency from the
Gerrit event to the build request reaching an executor (median, p95).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

import gear

from nodepool.zk.localserver import LocalZooKeeper, free_port
from tests.fakes.gerrit import GerritFixture
from tests.functional.system_support import BASE_PIPELINES, ZuulSystem
from zuul.executor.protocol import FUNCTION_EXECUTE, BuildResult, ExecuteRequest
from zuul.lib.gearlib import GearServer, GearWorker


class InstantExecutor:
    """Completes every build at once with SUCCESS, recording when each
    build request arrived."""

    def __init__(self, port: int):
        self.worker = GearWorker('instant-executor')
        self.worker.addServer('127.0.0.1', port)
        self.worker.waitForServer()
        self.worker.registerFunction(FUNCTION_EXECUTE)
        self.arrivals: dict[tuple, float] = {}
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while self.running:
            try:
                job = self.worker.getJob()
            except gear.InterruptedError:
                continue
            now = time.time()
            request = ExecuteRequest.from_json(job.arguments)
            item = request.items[-1]
            self.arrivals.setdefault((request.zuul.pipeline, item.number), now)
            result = BuildResult(result='SUCCESS', start_time=now, end_time=time.time())
            job.sendWorkComplete(result.to_json())

    def stop(self) -> None:
        self.running = False
        self.worker.stopWaitingForJobs()
        self.worker.shutdown()


def thread_cpu(thread: threading.Thread) -> float:
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def wait_all(done, changes, what: str, timeout: float) -> None:
    """Wait until ``done(change)`` holds for every change, printing
    progress to stderr every 10 s; give up after ``timeout`` seconds."""
    start = last = time.time()
    while True:
        finished = sum(1 for c in changes if done(c))
        if finished == len(changes):
            return
        now = time.time()
        if now - start > timeout:
            raise SystemExit(f'benchmark: gave up after {timeout:.0f} s: {finished} of '
                             f'{len(changes)} changes {what}')
        if now - last >= 10:
            print(f'  {finished}/{len(changes)} {what} after {now - start:.0f} s',
                  file=sys.stderr, flush=True)
            last = now
        time.sleep(0.2)


def run(n_changes: int, timeout: float = 1800.0) -> list[tuple[str, str]]:
    root = tempfile.mkdtemp(prefix='zb', dir='/tmp')
    zk = LocalZooKeeper(os.path.join(root, 'zk'))
    zk.start()
    gear_port = free_port()
    gear_server = GearServer(port=gear_port, host='127.0.0.1')
    gear_server.port = gear_port
    gerrit = GerritFixture(os.path.join(root, 'gerrit'))
    key = os.path.join(root, 'id')
    os.system(f'ssh-keygen -q -t ed25519 -N "" -f {key}')
    executor = None
    system = ZuulSystem(root, gerrit, zk.hosts, gear_server.port, key)
    # The real executor is not started: the instant one answers instead.
    system.executor.start = lambda: None
    system.executor.stop = lambda: None
    try:
        # check and gate (plus post/periodic); not the zuul-driver pipelines,
        # whose project-change-merged enqueues every open change per merge.
        system.create_projects(pipelines=BASE_PIPELINES)
        executor = InstantExecutor(gear_server.port)
        system.start()
        loop_thread = system.scheduler.loop._thread
        store = system.store
        cpu0 = thread_cpu(loop_thread)
        t0 = time.time()
        created = {}
        changes = []
        for i in range(n_changes):
            change = store.create_change('org/app', 'master', f'Change {i}',
                                         {f'f{i}.txt': f'{i}\n'})
            created[change.number] = time.time()
            changes.append(change)
        wait_all(lambda c: system.verified(c) == 1, changes, 'verified in check', timeout)
        check_done = time.time()
        approved = {}
        for change in changes:
            approved[change.number] = time.time()
            store.approve(change, 'Workflow', 1, who='core')
        wait_all(lambda c: store.get_change(c.number).status == 'MERGED', changes,
                 'merged by the gate', timeout)
        gate_done = time.time()
        cpu = thread_cpu(loop_thread) - cpu0
        check_lat = [executor.arrivals[('check', n)] - t for n, t in created.items()]
        gate_lat = [executor.arrivals[('gate', n)] - t for n, t in approved.items()
                    if ('gate', n) in executor.arrivals]
    finally:
        if executor is not None:
            executor.stop()
        system.stop()
        gerrit.server.stop()
        gear_server.shutdown()
        zk.stop()
        shutil.rmtree(root, ignore_errors=True)

    def pct(values, q):
        values = sorted(values)
        return values[min(len(values) - 1, int(q * len(values)))]
    items = 2 * n_changes
    return [
        ('changes through check, then gate', f'{n_changes}'),
        ('wall time: check / gate (s)', f'{check_done - t0:.1f} / {gate_done - check_done:.1f}'),
        ('scheduler thread CPU per item (ms)', f'{cpu / items * 1000:.2f}'),
        ('event -> build request, check: median / p95 (ms)',
         f'{statistics.median(check_lat) * 1000:.0f} / {pct(check_lat, 0.95) * 1000:.0f}'),
        ('approval -> first gate build request: median / p95 (ms)',
         f'{statistics.median(gate_lat) * 1000:.0f} / {pct(gate_lat, 0.95) * 1000:.0f}'),
    ]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--changes', type=int, default=200)
    parser.add_argument('--timeout', type=float, default=1800.0,
                        help='give up on a phase after this many seconds')
    args = parser.parse_args(argv)
    print_measures(run(args.changes, args.timeout))


def print_measures(rows: list[tuple[str, str]]) -> None:
    """A two-column table: measure, value."""
    width = max(len(r[0]) for r in rows)
    print(f'{"measure":<{width}}  value')
    print('-' * (width + 20))
    for name, value in rows:
        print(f'{name:<{width}}  {value}')


if __name__ == '__main__':
    main()
