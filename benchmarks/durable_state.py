"""Durable scheduler state (issue 16): what it costs and what it buys.

The same real system as benchmarks/scheduler.py (development Gerrit over
SSH, ZooKeeper, Gearman, zuul-merger, the scheduler daemon's service; an
executor that answers over Gearman without running Ansible), measured
three ways:

1. cost: N changes through check, then gate, once with the pipeline
   state saved to ZooKeeper after every batch (the daemon's normal mode)
   and once in memory only (``state_store``/``event_queue`` unset right
   after start): scheduler-thread CPU per item, the ratio, the part
   spent in ``save_state`` and the number of ZooKeeper state writes;
2. takeover: a leader ``zuul-scheduler`` process and an in-process hot
   standby on the same zuul.conf (``[zookeeper] session_timeout`` short);
   the leader is SIGKILLed and a change is proposed at once: the time
   from the kill to that change's check build request at the executor
   (ZooKeeper's session expiry, the standby's start, the catch-up);
3. restart: M check items whose builds are held (recorded in ZooKeeper
   as the real executor does), the scheduler stopped without a final
   save (what a SIGKILL leaves) and a new one started: time until all M
   are restored and its loop has made its first pass, the part of it in
   ``restore_state``, and the size of the saved state.

    .venv/bin/python -m benchmarks.durable_state [--changes N] [--items M]
                                                 [--profile]

``--profile`` also prints where the scheduler thread spends its CPU in
the durable run of part 1, and where ``restore_state`` spends its time
(waits included) in part 3 (cProfile; it slows them down, so the ratio
of part 1 means nothing then).

Measured on this machine (2 CPUs shared with other work; CPU figures vary
by about 20 % between runs), defaults; part 1 and 3 after the store was
made one transaction per write, events acknowledged in batches, restore
lookups made in parallel, and the zuul driver's events made only when a
pipeline takes them::

    measure                                                                value
    ---------------------------------------------------------------------------------
    1. 50 changes through check, then gate (100 items)
       scheduler CPU per item until idle, in memory (ms)                   14.15
       scheduler CPU per item until idle, durable (ms)                     15.79
       ratio durable / in memory (target <= 1.3)                           1.12x
       of which save_state: CPU / wall per item (ms)                       3.85 / 13.53
         in it, pipeline writes (JSON, digest, zlib, ZooKeeper): CPU (ms)  2.45
       save_state calls / pipeline saves / ZooKeeper state writes          228 / 312 / 233
       trigger events stored: by the scheduler thread / by others          0 / 350
       wall check / gate / event backlog after it, in memory (s)           11.9 / 20.5 / 0.5
       wall check / gate / event backlog after it, durable (s)             11.6 / 20.5 / 0.2
    2. takeover: leader process SIGKILLed, in-process standby
       [zookeeper] session_timeout (s)                                     5
       kill -> leader reaped, its Gerrit event stream closed (s)           0.33
       kill -> standby holds the leader lock (s)                           4.06
       kill -> standby started (tenants loaded, restored) (s)              4.88
       kill -> check build request of a change proposed then (s, <= 10)    5.17
    3. restart with 200 check items queued (builds held)
       saved state of check: compressed / JSON (bytes)                     36205 / 352619
       items restored / queued after restart                               200 / 201
       start -> all items restored (s)                                     6.33
       of which restore_state (s)                                          5.54
       then a new change -> its check build request (s)                    0.29
       builds launched again after restart (adopted: 0)                    0

Before those changes part 1 was 34.6 / 45.4 ms (1.31x: every merge made
the zuul driver's ``project-change-merged`` for each open change though
no pipeline took it, 1225 events stored and deleted one round trip each)
and part 3 took 19 s (one Gerrit query after the other). Takeover time is
mostly ZooKeeper's session expiry.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import shutil
import sys
import tempfile
import threading
import time

import gear

from benchmarks.scheduler import InstantExecutor, thread_cpu, wait_all
from nodepool.zk.localserver import LocalZooKeeper, free_port
from tests.fakes.gerrit import GerritFixture
from tests.functional.system_support import BASE_PIPELINES, ZuulSystem
from zuul.configloader.zuulconf import load_zuul_conf
from zuul.driver.registry import default_registry
from zuul.executor.protocol import BuildProgress, ExecuteRequest
from zuul.lib.gearlib import GearServer
from zuul.scheduler.loop import EventLoop
from zuul.scheduler.scheduler import Scheduler
from zuul.scheduler.service import SchedulerService

TENANT = 'example'
# After a restart, how long to wait for a pass of the loop before an event.
IDLE_WAIT = 3.0


# -- the system ----------------------------------------------------------------

class Env:
    """ZooKeeper, Gearman, the development Gerrit and a ZuulSystem whose
    in-process executor is left out (a benchmark executor answers)."""

    def __init__(self, session_timeout: float | None = None):
        self.root = tempfile.mkdtemp(prefix='zd', dir='/tmp')
        self.zk = LocalZooKeeper(os.path.join(self.root, 'zk'))
        self.zk.start()
        try:
            self._start(session_timeout)
        except BaseException:
            self.zk.stop()
            shutil.rmtree(self.root, ignore_errors=True)
            raise
        self.executor = None
        self.extra_stops: list = []

    def _start(self, session_timeout: float | None) -> None:
        port = free_port()
        self.gear_server = GearServer(port=port, host='127.0.0.1')
        self.gear_server.port = port
        self.gerrit = GerritFixture(os.path.join(self.root, 'gerrit'))
        key = os.path.join(self.root, 'id')
        os.system(f'ssh-keygen -q -t ed25519 -N "" -f {key}')
        self.system = system = ZuulSystem(self.root, self.gerrit, self.zk.hosts, port, key)
        system.executor.start = lambda: None
        system.executor.stop = lambda: None
        if session_timeout is not None:
            with open(system.conf_path) as f:
                text = f.read()
            with open(system.conf_path, 'w') as f:
                f.write(text.replace('[zookeeper]\n',
                                     f'[zookeeper]\nsession_timeout = {session_timeout}\n', 1))
            system.conf = load_zuul_conf(system.conf_path, default_registry())
            system.service = SchedulerService(system.conf)
        # check and gate (plus post/periodic), as benchmarks/scheduler.py.
        system.create_projects(pipelines=BASE_PIPELINES)

    def close(self) -> None:
        # The scheduler first: an executor that goes away fails its
        # builds, which a running scheduler would then try to follow.
        for stop in [*self.extra_stops, self.system.stop,
                     lambda: self.executor is not None and self.executor.stop(),
                     self.gerrit.server.stop,
                     self.gear_server.shutdown, self.zk.stop]:
            try:
                stop()
            except Exception:
                pass
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def environment(session_timeout: float | None = None):
    env = Env(session_timeout)
    try:
        yield env
    finally:
        env.close()


class HoldingExecutor(InstantExecutor):
    """Starts every build and never ends it: records it as running in
    ZooKeeper (zuul.zk.builds, with the executor's liveness node) and
    reports its start over Gearman, as zuul-executor does, so a
    restarted scheduler adopts the builds instead of retrying them."""

    hostname = 'holding-executor.example.org'

    def __init__(self, port: int, zk_hosts: str):
        from kazoo.client import KazooClient

        from zuul.zk.builds import BuildRecords
        self.zk = KazooClient(hosts=zk_hosts)
        self.zk.start()
        self.records = BuildRecords(self.zk)
        self.records.register_executor(self.hostname)
        self.held: list = []
        self.requests = 0
        super().__init__(port)

    def _run(self) -> None:
        progress = BuildProgress(worker_hostname=self.hostname).to_json()
        while self.running:
            try:
                job = self.worker.getJob()
            except gear.InterruptedError:
                continue
            request = ExecuteRequest.from_json(job.arguments)
            self.requests += 1
            self.arrivals.setdefault((request.zuul.pipeline, request.items[-1].number),
                                     time.time())
            self.records.started(request.uuid, self.hostname, None)
            job.sendWorkData(progress)
            self.held.append(job)

    def stop(self) -> None:
        super().stop()
        self.zk.stop()
        self.zk.close()


class Meter:
    """Counts the calls of ``obj.name`` made on ``thread`` and the CPU
    and wall time they took (an instance attribute wraps the method)."""

    def __init__(self, obj, name: str, thread: threading.Thread):
        self.calls = self.cpu = self.wall = 0
        self.others = 0        # calls from other threads (not timed)
        method = getattr(obj, name)

        def metered(*args, **kwargs):
            if threading.current_thread() is not thread:
                self.others += 1
                return method(*args, **kwargs)
            c, w = time.thread_time(), time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.cpu += time.thread_time() - c
                self.wall += time.perf_counter() - w
                self.calls += 1
        setattr(obj, name, metered)

    def totals(self) -> dict:
        return {'calls': self.calls, 'cpu': self.cpu, 'wall': self.wall,
                'others': self.others}


@contextlib.contextmanager
def patched(cls, name: str, wrapper):
    """``cls.name`` replaced by ``wrapper(original)`` for the block."""
    original = getattr(cls, name)
    setattr(cls, name, wrapper(original))
    try:
        yield
    finally:
        setattr(cls, name, original)


# -- 1. the cost of saving -----------------------------------------------------

def throughput(n_changes: int, durable: bool, timeout: float,
               profiles: list | None = None) -> dict:
    """N changes through check, then gate; scheduler-thread CPU, and the
    part of it in save_state (with ``profiles``: the scheduler thread's
    cProfile.Profile is added to it)."""

    def profiled(run):
        def _run(self):
            prof = cProfile.Profile(time.thread_time)     # CPU, not waits
            prof.enable()
            try:
                run(self)
            finally:
                prof.disable()
                profiles.append(prof)
        return _run
    with (patched(EventLoop, '_run', profiled) if profiles is not None
          else contextlib.nullcontext()), environment() as env:
        system = env.system
        env.executor = InstantExecutor(env.gear_server.port)
        system.start()
        scheduler = system.scheduler
        state_store = scheduler.state_store
        if not durable:
            scheduler.state_store = None
            scheduler.event_queue = None
        loop_thread = scheduler.loop._thread
        meters = {'save_state': Meter(scheduler, 'save_state', loop_thread)}
        if durable:
            meters.update(write=Meter(state_store, 'save', loop_thread),
                          put=Meter(scheduler.event_queue, 'put', loop_thread),
                          ack=Meter(scheduler.event_queue, 'ack', loop_thread))
        store = system.store
        writes0 = state_store.writes
        cpu0 = thread_cpu(loop_thread)
        t0 = time.time()
        changes = [store.create_change('org/app', 'master', f'Change {i}',
                                       {f'f{i}.txt': f'{i}\n'}) for i in range(n_changes)]
        wait_all(lambda c: system.verified(c) == 1, changes, 'verified in check', timeout)
        check_done = time.time()
        for change in changes:
            store.approve(change, 'Workflow', 1, who='core')
        wait_all(lambda c: store.get_change(c.number).status == 'MERGED', changes,
                 'merged by the gate', timeout)
        merged = time.time()
        cpu_merged = thread_cpu(loop_thread) - cpu0
        # Then the backlog of trigger events (each merge emits the zuul
        # driver's project-change-merged for every open change): all the
        # work, in both modes, is counted.
        if not scheduler.loop.wait_idle(timeout):
            raise SystemExit('benchmark: the scheduler did not go idle after the gate')
        done = time.time()
        cpu = thread_cpu(loop_thread) - cpu0
        result = {'cpu': cpu, 'cpu_merged': cpu_merged, 'items': 2 * n_changes,
                  'check': check_done - t0, 'gate': merged - check_done,
                  'drain': done - merged, 'writes': state_store.writes - writes0,
                  'events': scheduler.loop.processed,
                  **{name: meter.totals() for name, meter in meters.items()}}
    return result


# -- 2. takeover by a hot standby ----------------------------------------------

def takeover(session_timeout: float, timeout: float) -> dict:
    with environment(session_timeout) as env:
        system = env.system
        env.executor = executor = InstantExecutor(env.gear_server.port)
        system.start(scheduler=False)           # the merger
        leader = system.start_daemon('scheduler')
        store = system.store
        warm = [store.create_change('org/app', 'master', f'Before {i}', {f'b{i}.txt': 'x\n'})
                for i in range(3)]
        wait_all(lambda c: system.verified(c) == 1, warm, 'verified by the leader', timeout)
        standby = SchedulerService(system.conf)
        env.extra_stops.insert(0, standby.stop)
        started = threading.Thread(target=standby.start, name='standby-start', daemon=True)
        started.start()
        deadline = time.time() + 60
        while not (standby.leader_lock is not None and
                   len(standby.leader_lock.contenders()) == 2):
            if time.time() > deadline:
                raise SystemExit('benchmark: the standby did not queue on the leader lock')
            time.sleep(0.05)
        system.wait_idle(timeout=60)      # the leader is idle, its last batch saved
        t_kill = time.time()
        leader.kill()
        killed = time.time()
        change = store.create_change('org/app', 'master', 'After the kill', {'a.txt': 'x\n'})
        t_lead = t_started = None
        while ('check', change.number) not in executor.arrivals:
            now = time.time()
            if t_lead is None and standby.is_leader:
                t_lead = now
            if t_started is None and t_lead is not None and not started.is_alive():
                t_started = now
            if now - t_kill > timeout:
                raise SystemExit(f'benchmark: no build request {timeout:.0f} s after the kill')
            time.sleep(0.01)
        t_build = executor.arrivals[('check', change.number)]
        started.join(60)
        t_started = t_started or t_build
        t_lead = t_lead or t_started
        standby.stop()
        env.extra_stops.remove(standby.stop)
        return {'session_timeout': session_timeout, 'kill': killed - t_kill,
                'lead': t_lead - t_kill, 'started': t_started - t_kill,
                'build': t_build - t_kill}


# -- 3. restart with M items queued --------------------------------------------

def saved_size(state_store, pipeline: str) -> tuple[int, int]:
    """(compressed, uncompressed) bytes of a pipeline's saved state."""
    import zlib
    client = state_store.client
    path = state_store.path(TENANT, pipeline)
    header = json.loads(client.get(path)[0].decode('utf8'))
    data = b''.join(client.get(f'{path}/{header["generation"]}-{i:04d}')[0]
                    for i in range(header['shards']))
    return len(data), len(zlib.decompress(data))


def restart(n_items: int, timeout: float, profiles: list | None = None) -> dict:
    """M items with held check builds, the scheduler killed (no final
    save) and started again: how long until it has restored them, runs
    its first pass and takes a new change."""
    with environment() as env:
        system = env.system
        env.executor = executor = HoldingExecutor(env.gear_server.port, env.zk.hosts)
        system.start()
        filled = _fill_and_kill(system, executor, n_items, timeout)
        requests_before = executor.requests
        marks: dict[str, float] = {}
        with patched(Scheduler, 'restore_state', _timed_restore(marks, profiles)), \
                patched(Scheduler, 'process_pipelines', _first_pass(marks)):
            service = SchedulerService(system.conf)
            system.service = service
            t_start = time.time()
            service.start()
            t_started = time.time()
            scheduler = service.scheduler
            # Does the restored scheduler process its pipelines by itself
            # (re-requesting merges and nodes lost with the old one)?
            while 'first_pass' not in marks and time.time() - t_started < IDLE_WAIT:
                time.sleep(0.01)
            own_pass = marks.get('first_pass')
            # A fresh change, handled with the M restored items in place
            # (and, if nothing else did, what makes the loop's first pass).
            t_new = time.time()
            change = system.store.create_change('org/app', 'master', 'After restart',
                                                {'n.txt': 'x\n'})
            while ('check', change.number) not in executor.arrivals:
                if time.time() - t_new > timeout:
                    raise SystemExit('benchmark: the restored scheduler ignored a new change')
                time.sleep(0.01)
            t_new_build = executor.arrivals[('check', change.number)]
            scheduler.loop.wait_idle(60)
            queued = len(list(scheduler.tenants[TENANT].managers['check'].all_items()))
        return {'items': n_items, **filled, 'restored': scheduler.restored_items,
                'queued': queued,
                'restore': marks['restore_end'] - marks['restore_begin'],
                'to_restored': marks['restore_end'] - t_start,
                'to_started': t_started - t_start,
                'own_pass': own_pass - t_start if own_pass else None,
                'new_pass': marks['first_pass'] - t_new if not own_pass else None,
                'new_change': t_new_build - t_new,
                'relaunched': executor.requests - requests_before - 1}


def _fill_and_kill(system, executor, n_items: int, timeout: float) -> dict:
    """Queue ``n_items`` changes, each with a held check build, then stop
    the scheduler as a SIGKILL would (no final save)."""
    t0 = time.time()
    changes = [system.store.create_change('org/app', 'master', f'Held {i}',
                                          {f'h{i}.txt': f'{i}\n'}) for i in range(n_items)]
    wait_all(lambda c: ('check', c.number) in executor.arrivals, changes,
             'with a held check build', timeout)
    fill = time.time() - t0
    old = system.scheduler
    if not old.loop.wait_idle(120):
        raise SystemExit('benchmark: the scheduler did not go idle with the items queued')
    compressed, raw = saved_size(old.state_store, 'check')
    old.state_store = None
    old.event_queue = None
    system.service.stop()
    return {'fill': fill, 'compressed': compressed, 'raw': raw}


def _timed_restore(marks: dict, profiles: list | None):
    """Wraps Scheduler.restore_state: marks its begin and end (and
    profiles it when ``profiles`` is a list)."""
    def wrap(restore_state):
        def wrapper(self):
            prof = cProfile.Profile() if profiles is not None else None
            marks['restore_begin'] = time.time()
            try:
                if prof is None:
                    return restore_state(self)
                return prof.runcall(restore_state, self)
            finally:
                marks['restore_end'] = time.time()
                if prof is not None:
                    profiles.append(prof)
        return wrapper
    return wrap


def _first_pass(marks: dict):
    """Wraps Scheduler.process_pipelines: marks the first pass after the
    restore."""
    def wrap(process_pipelines):
        def wrapper(self):
            try:
                return process_pipelines(self)
            finally:
                if 'restore_end' in marks:
                    marks.setdefault('first_pass', time.time())
        return wrapper
    return wrap


# -- the table -----------------------------------------------------------------

def cost_rows(memory: dict, durable: dict, n_changes: int) -> list[tuple[str, str]]:
    def per_item(r, key='cpu', sub=None):
        value = r[key] if sub is None else r[key][sub]
        return value / r['items'] * 1000
    ratio = per_item(durable) / per_item(memory)
    return [
        (f'1. {n_changes} changes through check, then gate ({2 * n_changes} items)', ''),
        ('   scheduler CPU per item until idle, in memory (ms)', f'{per_item(memory):.2f}'),
        ('   scheduler CPU per item until idle, durable (ms)', f'{per_item(durable):.2f}'),
        ('   ratio durable / in memory (target <= 1.3)', f'{ratio:.2f}x'),
        ('   of which save_state: CPU / wall per item (ms)',
         f'{per_item(durable, "save_state", "cpu"):.2f} / '
         f'{per_item(durable, "save_state", "wall"):.2f}'),
        ('     in it, pipeline writes (JSON, digest, zlib, ZooKeeper): CPU (ms)',
         f'{per_item(durable, "write", "cpu"):.2f}'),
        ('     in it, trigger event acks (ZooKeeper deletes): CPU (ms)',
         f'{per_item(durable, "ack", "cpu"):.2f}'),
        ('   trigger events stored from the scheduler thread: CPU / wall (ms)',
         f'{per_item(durable, "put", "cpu"):.2f} / {per_item(durable, "put", "wall"):.2f}'),
        ('   save_state calls / pipeline saves / ZooKeeper state writes',
         f'{durable["save_state"]["calls"]} / {durable["write"]["calls"]} / '
         f'{durable["writes"]}'),
        ('   trigger events stored: by the scheduler thread / by others',
         f'{durable["put"]["calls"]} / {durable["put"]["others"]}'),
        ('   the same, counted when the last change merged (ms, ms, ratio)',
         f'{per_item(memory, "cpu_merged"):.2f}, {per_item(durable, "cpu_merged"):.2f}, '
         f'{per_item(durable, "cpu_merged") / per_item(memory, "cpu_merged"):.2f}x'),
        ('   wall check / gate / event backlog after it, in memory (s)',
         f'{memory["check"]:.1f} / {memory["gate"]:.1f} / {memory["drain"]:.1f}'),
        ('   wall check / gate / event backlog after it, durable (s)',
         f'{durable["check"]:.1f} / {durable["gate"]:.1f} / {durable["drain"]:.1f}'),
    ]


def takeover_rows(take: dict) -> list[tuple[str, str]]:
    return [
        ('2. takeover: leader process SIGKILLed, in-process standby', ''),
        ('   [zookeeper] session_timeout (s)', f'{take["session_timeout"]:g}'),
        ('   kill -> leader reaped, its Gerrit event stream closed (s)', f'{take["kill"]:.2f}'),
        ('   kill -> standby holds the leader lock (s)', f'{take["lead"]:.2f}'),
        ('   kill -> standby started (tenants loaded, restored) (s)', f'{take["started"]:.2f}'),
        ('   kill -> check build request of a change proposed then (s, target <= 10)',
         f'{take["build"]:.2f}'),
    ]


def restart_rows(rest: dict) -> list[tuple[str, str]]:
    return [
        (f'3. restart with {rest["items"]} check items queued (builds held)', ''),
        ('   time to queue them (s)', f'{rest["fill"]:.1f}'),
        ('   saved state of check: compressed / JSON (bytes)',
         f'{rest["compressed"]} / {rest["raw"]}'),
        ('   items restored / queued after restart',
         f'{rest["restored"]} / {rest["queued"]}'),
        ('   start -> all items restored (s)', f'{rest["to_restored"]:.2f}'),
        ('   of which restore_state (s)', f'{rest["restore"]:.2f}'),
        ('   start -> service started (s)', f'{rest["to_started"]:.2f}'),
        (f'   start -> first pass of the loop, with no new event (s; {IDLE_WAIT:g} s wait)',
         f'{rest["own_pass"]:.2f}' if rest['own_pass'] is not None else 'none'),
        ('   then a new change -> first pass of the loop done (s)',
         f'{rest["new_pass"]:.2f}' if rest['new_pass'] is not None else '-'),
        ('   then a new change -> its check build request (s)', f'{rest["new_change"]:.2f}'),
        ('   builds launched again after restart (adopted: 0)', f'{rest["relaunched"]}'),
    ]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--changes', type=int, default=50,
                        help='changes through check and gate in part 1')
    parser.add_argument('--items', type=int, default=200,
                        help='queued items restored in part 3')
    parser.add_argument('--session-timeout', type=float, default=5.0,
                        help='[zookeeper] session_timeout for part 2')
    parser.add_argument('--timeout', type=float, default=900.0,
                        help='give up on a phase after this many seconds')
    parser.add_argument('--parts', default='123',
                        help='which parts to run (default 123: all)')
    parser.add_argument('--profile', action='store_true',
                        help='profile the scheduler thread of the durable run')
    args = parser.parse_args(argv)
    import faulthandler
    import signal
    faulthandler.register(signal.SIGUSR1)     # kill -USR1 <pid>: where is it stuck?
    # SIGTERM stops as an error does: ZooKeeper and Gerrit are cleaned up.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    profiles = [] if args.profile else None
    restore_profiles = None
    rows = []
    if '1' in args.parts:
        print('1. in memory ...', file=sys.stderr, flush=True)
        memory = throughput(args.changes, False, args.timeout)
        print('1. durable ...', file=sys.stderr, flush=True)
        durable = throughput(args.changes, True, args.timeout, profiles=profiles)
        rows += cost_rows(memory, durable, args.changes)
    if '2' in args.parts:
        print('2. takeover ...', file=sys.stderr, flush=True)
        rows += takeover_rows(takeover(args.session_timeout, args.timeout))
    if '3' in args.parts:
        print('3. restart ...', file=sys.stderr, flush=True)
        restore_profiles = [] if args.profile else None
        rows += restart_rows(restart(args.items, args.timeout, restore_profiles))
    width = max(len(r[0]) for r in rows)
    print(f'{"measure":<{width}}  value')
    print('-' * (width + 12))
    for name, value in rows:
        print(f'{name:<{width}}  {value}')
    for title, collected in (('scheduler thread, durable run of part 1', profiles),
                             ('restore_state of part 3', restore_profiles)):
        if collected:
            out = io.StringIO()
            stats = pstats.Stats(*collected, stream=out)
            stats.sort_stats('cumulative').print_stats(45)
            print(f'\nProfile of the {title}:\n{out.getvalue()}')


if __name__ == '__main__':
    main()
