"""Scheduler scale-out at OpenDev size: the same workload with 1, 2 and 3
schedulers running.

The tenant has ``--projects`` untrusted projects (2,000 by default), each
with a ``.zuul.yaml`` running one no-op job in check and gate.  Everything
is real (the development Gerrit's event stream and review API over SSH,
ZooKeeper, Gearman, a zuul-merger doing real git merges from the review
store's repositories on local disk, the scheduler daemon's service) except
the executor: an "instant executor" Gearman worker answers
``executor:execute`` with SUCCESS at once, so what is measured is the
scheduler, not Ansible.

    .venv/bin/python -m benchmarks.schedulers [--projects 2000] [--changes 200]
        [--schedulers 1,2,3] [--tenants 1] [--active] [--mergers 0]

``--active`` runs the schedulers with ``[scheduler] standby = false``
(each processes the tenants it locks, zuul/scheduler/ownership.py);
without it one leads and the others stand by. ``--mergers N`` runs N
merger processes (benchmarks/merger_process.py), as zuul-merger runs at
a site; with 0 (the default) one merger runs in the benchmark's process
and competes with the schedulers for its interpreter lock. The projects are spread
over ``--tenants`` tenants (``t0`` ... ``tN-1``): the unit several active
schedulers share is the tenant.

For each scheduler count: ``--changes`` changes (each in its own project)
are uploaded at once (200 in flight), then all approved; then one
project's ``.zuul.yaml`` changes. Each change is based on a change
merged before the run, as at any real site: Gerrit names that change as
its git parent (``dependsOn``), so its dependencies are looked up as
they would be there. Measured:

- events/s: trigger events the schedulers processed per second of the run;
- CPU per item: CPU of the schedulers' event-loop threads, per queue item
  (check and gate), in total and per scheduler;
- event -> first build: from a change's upload (check) or approval (gate)
  to its first build request reaching the executor, p50 and p99;
- max loop stall: the longest any loop spent on one step (an event, a
  pass over the pipelines, a save) without looking at its queues;
- reconfiguration: one project's ``.zuul.yaml`` changes: from the push to
  the tenant's new layout in every scheduler;
- memory per item: the schedulers' Python heap growth (tracemalloc) per
  queue item while check items wait for their builds (a phase of its
  own after the gate: tracing allocations slows the process, so none of
  the figures above is taken while it runs).

On a 2-core machine a second and third scheduler compete for the same
cores: the table gives the CPU per item and per core so that scaling is
visible (events/s per busy core).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import sys
import tempfile
import textwrap
import threading
import time
import tracemalloc

from benchmarks.loop_sampler import LoopSampler
from benchmarks.scheduler import InstantExecutor, print_measures, thread_cpu, wait_all
from nodepool.zk.localserver import LocalZooKeeper, free_port
from tests.fakes.gerrit import GerritFixture
from tests.functional.system_support import BASE_PIPELINES, ZuulSystem
from zuul.lib.gearlib import GearServer
from zuul.scheduler.service import SchedulerService

NOOP_PROJECT = """
- project:
    check:
      jobs:
        - noop-bench
    gate:
      jobs:
        - noop-bench
"""

NOOP_JOB = """
- job:
    name: noop-bench
    run: playbooks/noop.yaml
"""


def _main_yaml(projects: list[str], n_tenants: int = 1) -> str:
    lines = []
    for t in range(n_tenants):
        lines += ['- tenant:', f'    name: {_tenant_name(t, n_tenants)}', '    source:',
                  '      gerrit:', '        config-projects:',
                  '          - org/project-config', '        untrusted-projects:']
        lines += [f'          - {p}' for i, p in enumerate(projects) if i % n_tenants == t]
    return '\n'.join(lines) + '\n'


def _tenant_name(index: int, n_tenants: int) -> str:
    return 'example' if n_tenants == 1 else f't{index}'


class HeldExecutor(InstantExecutor):
    """The instant executor that, while ``hold`` is set, keeps builds
    (answering none) so items stay queued (memory per item)."""

    def __init__(self, port: int):
        self.hold = threading.Event()
        self.held: list = []
        super().__init__(port)

    def _run(self) -> None:
        import gear

        from zuul.executor.protocol import BuildResult, ExecuteRequest
        while self.running:
            try:
                job = self.worker.getJob()
            except gear.InterruptedError:
                continue
            now = time.time()
            request = ExecuteRequest.from_json(job.arguments)
            item = request.items[-1]
            self.arrivals.setdefault((request.zuul.pipeline, item.number), now)
            if self.hold.is_set():
                self.held.append(job)
                continue
            result = BuildResult(result='SUCCESS', start_time=now, end_time=time.time())
            job.sendWorkComplete(result.to_json())

    def release(self) -> None:
        from zuul.executor.protocol import BuildResult
        self.hold.clear()
        for job in self.held:
            now = time.time()
            job.sendWorkComplete(BuildResult(result='SUCCESS', start_time=now,
                                             end_time=now).to_json())
        self.held = []


class Site:
    """ZooKeeper, Gearman, the development Gerrit with ``n_projects``
    projects, a merger and the instant executor; ``n_schedulers``
    scheduler services in this process."""

    def __init__(self, n_projects: int, n_schedulers: int, n_tenants: int = 1,
                 active: bool = False, n_mergers: int = 0):
        self.root = tempfile.mkdtemp(prefix='zbs', dir='/tmp')
        self.zk = LocalZooKeeper(os.path.join(self.root, 'zk'))
        self.zk.start()
        port = free_port()
        self.gear = GearServer(port=port, host='127.0.0.1')
        self.gear.port = port
        self.gerrit = GerritFixture(os.path.join(self.root, 'gerrit'))
        key = os.path.join(self.root, 'id')
        os.system(f'ssh-keygen -q -t ed25519 -N "" -f {key}')
        self.system = ZuulSystem(self.root, self.gerrit, self.zk.hosts, port, key)
        self.system.executor.start = lambda: None
        self.system.executor.stop = lambda: None
        self.projects = [f'bench/p{i:04d}' for i in range(n_projects)]
        self.n_schedulers = n_schedulers
        # 0: one merger in this process; N: N merger processes
        # (benchmarks/merger_process.py), as zuul-merger runs at a site.
        self.n_mergers = n_mergers
        self.merger_procs: list = []
        self.n_tenants = n_tenants
        self.active = active
        self.services: list[SchedulerService] = []
        self.executor = None

    def create(self, n_changes: int = 0) -> float:
        """Projects in Gerrit, the first ``n_changes`` of them with a
        merged change at the tip of master; returns the seconds it took."""
        t0 = time.time()
        store = self.system.store
        self.system.create_projects(pipelines=BASE_PIPELINES + NOOP_JOB)
        for project in self.projects:
            store.create_project(project, {'.zuul.yaml': textwrap.dedent(NOOP_PROJECT)})
        for project in self.projects[:n_changes]:
            store.submit(store.create_change(project, 'master', 'Base', {'base.txt': '1\n'}))
        with open(os.path.join(self.root, 'main.yaml'), 'w') as f:
            f.write(_main_yaml(self.projects, self.n_tenants))
        if self.active:
            import configparser

            from zuul.configloader.zuulconf import load_zuul_conf
            from zuul.driver.registry import default_registry
            config = configparser.RawConfigParser()
            config.read(self.system.conf_path)
            config['scheduler']['standby'] = 'false'
            with open(self.system.conf_path, 'w') as f:
                config.write(f)
            self.system.conf = load_zuul_conf(self.system.conf_path, default_registry())
            self.system.service = SchedulerService(self.system.conf)
        # Mergers fetch from the review store's repositories on disk.
        self.system.resolver.mapping['gerrit'] = store.repos.root
        return time.time() - t0

    def start(self) -> float:
        """The merger, the executor and the schedulers; returns the
        seconds until the first one loaded the tenant."""
        if self.n_mergers:
            self._start_merger_processes()
        else:
            self.system.merge_server.threads = 4
            self.system.merge_server.start()
        self.executor = HeldExecutor(self.gear.port)
        t0 = time.time()
        self.system.service.start()
        loaded = time.time() - t0
        self.services = [self.system.service]
        for _ in range(self.n_schedulers - 1):
            service = SchedulerService(self.system.conf)
            threading.Thread(target=service.start, daemon=True).start()
            self.services.append(service)
        from tests.harness.waiting import wait_for
        wait_for(lambda: self.gerrit.server.stream_count() >= 1, timeout=60,
                 what='the event stream')
        if self.active:
            # Every scheduler up and holding its share of the tenants.
            share = -(-self.n_tenants // self.n_schedulers)
            wait_for(lambda: all(getattr(s, 'ownership', None) is not None and
                                 len(s.ownership.owned) >= min(1, share) for s in self.services)
                     and sum(len(s.ownership.owned) for s in self.services) == self.n_tenants,
                     timeout=300, what='the tenants shared')
        return loaded

    def _start_merger_processes(self) -> None:
        import subprocess
        repos = self.system.resolver.mapping['gerrit']
        for index in range(self.n_mergers):
            proc = subprocess.Popen(
                [sys.executable, '-m', 'benchmarks.merger_process', str(self.gear.port),
                 os.path.join(self.root, f'merger{index}'), repos],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            self.merger_procs.append(proc)
        for proc in self.merger_procs:
            if proc.stdout.readline().strip() != b'ready':
                raise RuntimeError('a merger process did not start')

    def _stop_merger_processes(self) -> None:
        for proc in self.merger_procs:
            proc.stdin.close()
        for proc in self.merger_procs:
            try:
                proc.wait(30)
            except Exception:
                proc.kill()

    def loops(self) -> list:
        return [s.scheduler.loop for s in self.services if getattr(s, 'scheduler', None)]

    def stop(self) -> None:
        import faulthandler
        # A part that does not stop is named (its threads' stacks) rather
        # than holding the run.
        faulthandler.dump_traceback_later(120, exit=True)
        # The system did not start them (its stop() leaves them): every
        # scheduler service and the merger are stopped here, before
        # ZooKeeper (a client left running blocks the interpreter's exit).
        for stop in ([self.executor.stop] if self.executor else []) + \
                [s.stop for s in self.services] + [self.system.merge_server.stop,
                                                   self._stop_merger_processes,
                                                   self.system.stop, self.gerrit.server.stop,
                                                   self.gear.shutdown, self.zk.stop]:
            try:
                stop()
            except Exception as exc:  # best effort
                print(f'stop: {exc}', file=sys.stderr)
        shutil.rmtree(self.root, ignore_errors=True)
        faulthandler.cancel_dump_traceback_later()


def _pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float('nan')


def run(n_projects: int, n_changes: int, n_schedulers: int, timeout: float,
        n_tenants: int = 1, active: bool = False, n_mergers: int = 0) -> dict:
    site = Site(n_projects, n_schedulers, n_tenants, active, n_mergers)
    out: dict = {'schedulers': n_schedulers, 'active': n_schedulers if active else 1,
                 'mergers': n_mergers or 'in process'}
    try:
        out['create_s'] = site.create(n_changes)
        out['load_s'] = site.start()
        store = site.system.store
        loops = site.loops()
        cpu0 = {id(lp): thread_cpu(lp._thread) for lp in loops}
        processed0 = sum(lp.processed for lp in loops)
        for lp in loops:
            lp.max_stall, lp.stalls_over_100ms = 0.0, 0
            lp.stall_kinds.clear()
        sampler = LoopSampler(loops).start() if SAMPLE else None
        # Check with the builds held until every change has one (all of
        # them in flight at once), then released.
        site.executor.hold.set()
        t0 = time.time()
        created, changes = {}, []
        for i in range(n_changes):
            project = site.projects[i % len(site.projects)]
            change = store.create_change(project, 'master', f'Change {i}',
                                         {f'f{i}.txt': f'{i}\n'})
            created[change.number] = time.time()
            changes.append(change)
        wait_all(lambda c: ('check', c.number) in site.executor.arrivals, changes,
                 'with a check build', timeout)
        site.executor.release()
        wait_all(lambda c: site.system.verified(c) == 1, changes, 'verified in check', timeout)
        check_done = time.time()
        approved = {}
        for change in changes:
            approved[change.number] = time.time()
            store.approve(change, 'Workflow', 1, who='core')
        wait_all(lambda c: store.get_change(c.number).status == 'MERGED', changes,
                 'merged by the gate', timeout)
        gate_done = time.time()
        cpus = [thread_cpu(lp._thread) - cpu0[id(lp)] for lp in loops]
        arrivals = site.executor.arrivals
        check_lat = [arrivals[('check', n)] - t for n, t in created.items()]
        gate_lat = [arrivals[('gate', n)] - t for n, t in approved.items()
                    if ('gate', n) in arrivals]
        events = sum(lp.processed for lp in loops) - processed0
        out.update({
            'wall_s': gate_done - t0, 'check_s': check_done - t0,
            'gate_s': gate_done - check_done, 'events': events,
            'events_per_s': events / (gate_done - t0),
            'cpu_per_item_ms': sum(cpus) / (2 * n_changes) * 1000,
            'cpu_by_scheduler_s': cpus,
            'check_p50_s': statistics.median(check_lat), 'check_p99_s': _pct(check_lat, .99),
            'gate_p50_s': statistics.median(gate_lat) if gate_lat else float('nan'),
            'gate_p99_s': _pct(gate_lat, .99),
            'max_stall_ms': max(lp.max_stall for lp in loops) * 1000,
            'stalls_over_100ms': sum(lp.stalls_over_100ms for lp in loops),
        })
        kinds = collections.Counter()
        for lp in loops:
            kinds.update(lp.stall_kinds)
        out['stall_kinds'] = dict(kinds.most_common(8))
        if sampler is not None:
            sampler.stop()
            sampler.report()
        out['memory_per_item_kb'] = _heap_per_item(site, n_changes, timeout)
        out['reconfigure_s'] = _reconfigure(site, timeout)
    finally:
        site.stop()
    return out


def _heap_per_item(site: Site, n_changes: int, timeout: float) -> float:
    """KiB of Python heap per queued check item: as many changes again,
    their builds held. Measured in a phase of its own: tracing every
    allocation slows the process down (it would be counted as loop CPU)."""
    store = site.system.store
    site.executor.hold.set()
    tracemalloc.start()
    heap0 = tracemalloc.get_traced_memory()[0]
    changes = [store.create_change(site.projects[i % len(site.projects)], 'master',
                                   f'Held change {i}', {f'h{i}.txt': f'{i}\n'})
               for i in range(n_changes)]
    wait_all(lambda c: ('check', c.number) in site.executor.arrivals, changes,
             'with a held check build', timeout)
    heap = tracemalloc.get_traced_memory()[0] - heap0
    tracemalloc.stop()
    site.executor.release()
    wait_all(lambda c: site.system.verified(c) == 1, changes, 'verified in check', timeout)
    return heap / n_changes / 1024


def _reconfigure(site: Site, timeout: float) -> float:
    """One project's .zuul.yaml changes (a direct push): seconds until
    every running scheduler holds the new layout."""
    services = [s for s in site.services if getattr(s, 'scheduler', None)]
    tenant = _tenant_name((len(site.projects) - 1) % site.n_tenants, site.n_tenants)
    before = {id(s): s.scheduler.tenants[tenant].layout for s in services}
    t0 = time.time()
    site.system.store.push_branch(site.projects[-1], 'master', {
        '.zuul.yaml': textwrap.dedent(NOOP_PROJECT) + '# changed\n'}, 'Change config')
    deadline = t0 + timeout
    while any(s.scheduler.tenants[tenant].layout is before[id(s)] for s in services):
        if time.time() > deadline:
            return float('nan')
        time.sleep(0.02)
    return time.time() - t0


def rows(results: list[dict]) -> list[tuple]:
    cores = os.cpu_count() or 1

    def each(fmt, key):
        return [fmt.format(r[key]) for r in results]
    table = [
        ('projects / changes in flight / tenants', *[f'{PROJECTS} / {CHANGES} / {TENANTS}'
                                                     for _ in results]),
        ('schedulers active', *[str(r['active']) for r in results]),
        ('mergers (4 threads each)', *[str(r.get('mergers', 'in process')) for r in results]),
        ('tenant load at start (s)', *each('{:.1f}', 'load_s')),
        ('wall time: check / gate (s)', *[f'{r["check_s"]:.1f} / {r["gate_s"]:.1f}'
                                          for r in results]),
        ('trigger+result events processed', *each('{}', 'events')),
        ('events/s', *each('{:.1f}', 'events_per_s')),
        ('events/s per core', *[f'{r["events_per_s"] / cores:.1f}' for r in results]),
        ('scheduler loop CPU per item, all schedulers (ms)', *each('{:.2f}',
                                                                   'cpu_per_item_ms')),
        ('loop CPU by scheduler (s)', *[' / '.join(f'{c:.2f}' for c in r['cpu_by_scheduler_s'])
                                        for r in results]),
        ('event -> first build, check: p50 / p99 (s)',
         *[f'{r["check_p50_s"]:.2f} / {r["check_p99_s"]:.2f}' for r in results]),
        ('approval -> first build, gate: p50 / p99 (s)',
         *[f'{r["gate_p50_s"]:.2f} / {r["gate_p99_s"]:.2f}' for r in results]),
        ('max loop stall (ms) / steps over 100 ms',
         *[f'{r["max_stall_ms"]:.0f} / {r["stalls_over_100ms"]}' for r in results]),
        ('reconfiguration, one .zuul.yaml changed (s)', *each('{:.2f}', 'reconfigure_s')),
        ('scheduler heap per queued item (KiB)', *each('{:.1f}', 'memory_per_item_kb')),
    ]
    return table


PROJECTS = CHANGES = TENANTS = 0
SAMPLE = False


def main(argv=None) -> None:
    global PROJECTS, CHANGES, TENANTS, SAMPLE
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--projects', type=int, default=2000)
    parser.add_argument('--changes', type=int, default=200)
    parser.add_argument('--schedulers', default='1,2,3',
                        help='comma-separated scheduler counts to run')
    parser.add_argument('--timeout', type=float, default=1800.0)
    parser.add_argument('--tenants', type=int, default=1,
                        help='tenants the projects are spread over')
    parser.add_argument('--active', action='store_true',
                        help='every scheduler active ([scheduler] standby = false)')
    parser.add_argument('--mergers', type=int, default=0,
                        help='merger processes (as zuul-merger runs at a site); '
                             '0: one merger in the benchmark\'s process')
    parser.add_argument('--sample', action='store_true',
                        help='sample the loop threads\' stacks; print where they spend '
                             'their time and where they stall')
    args = parser.parse_args(argv)
    SAMPLE = args.sample
    PROJECTS, CHANGES, TENANTS = args.projects, args.changes, args.tenants
    results = []
    for n in [int(x) for x in args.schedulers.split(',')]:
        print(f'-- {n} scheduler(s)', file=sys.stderr, flush=True)
        results.append(run(args.projects, args.changes, n, args.timeout, args.tenants,
                           args.active, args.mergers))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    kinds = [', '.join(f'{k}: {n}' for k, n in r['stall_kinds'].items()) or '-'
             for r in results]
    table = rows(results)
    width = max(len(r[0]) for r in table)
    header = ['measure'] + [f'{r["schedulers"]} scheduler(s)' for r in results]
    print(f'{header[0]:<{width}}  ' + '  '.join(f'{h:>22}' for h in header[1:]))
    print('-' * (width + 24 * len(results)))
    for name, *values in table:
        print(f'{name:<{width}}  ' + '  '.join(f'{v:>22}' for v in values))
    for r, line in zip(results, kinds):
        print(f'steps over 100 ms, {r["schedulers"]} scheduler(s): {line}')


__all__ = ['main', 'print_measures']

if __name__ == '__main__':
    main()
