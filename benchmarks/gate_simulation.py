"""Gate simulation (issue 21): node-hours per merged change and time to
merge, released behaviour against batching, result reuse and infra
retries.

A stream of changes (some bad: they add a file that makes the job fail;
builds also flake at a given rate with an infrastructure error on their
console) is approved one after the other into a gate. Everything is the
real system of benchmarks/scheduler.py (development Gerrit over SSH,
ZooKeeper, Gearman, zuul-merger doing real git merges, the scheduler
daemon's service) except the executor: a simulated one that answers
``executor:execute`` over Gearman on a virtual clock. Time only moves
when the system is quiet (no event, merge, launch or result in flight):
then the clock jumps to the next approval or build end. A build takes
``--duration`` virtual minutes on one node; a flaky one ends early. A
build fails when a bad change is among the changes it tests (its
request's items); a flake fails with "Connection reset by peer" on its
console, which the executor, as the real one does, turns into a RETRY
when the tenant's ``infra-failure-patterns`` matches it.

Modes: ``released`` (none of the issue-21 keys), ``batching`` (pipeline
``batching: {max: 8, adaptive: true}``), ``reuse`` (job
``reuse-results: true``), ``retry`` (tenant ``infra-failure-patterns``)
and ``all``. For each mode and failure rate it prints node-hours per
merged change, time to merge (median / p95, virtual minutes), builds,
merged and failed changes, and checks that nothing merged untested: no
bad change merged, and every merged change was reported with a
successful build of each job whose tested changes are consecutive merges
in merge order (tested exactly as it merged).

    .venv/bin/python -m benchmarks.gate_simulation [--changes 200]
        [--rates 0.05,0.15] [--flake 0.02] [--modes released,batching,...]
        [--bisect parallel|halves]
    .venv/bin/python -m benchmarks.gate_simulation --quick   # smoke run

A 200-change run takes 3-7 minutes of wall time per mode on this
machine (the merger's git work dominates, and grows with the queue's
depth); the default (5 modes, 2 rates) takes about 45 minutes, ``--quick``
about 20 seconds. A progress line goes to stderr every 25 approvals.

Measured (200 changes, seed 21, 2 % flakes, builds of 60 virtual minutes,
an approval every 6 minutes; "all tested" held in every run)::

    fail  mode      bisect    node-h/merged  vs released  merge min p50/p95  builds  merged/failed
    5%    released            1.41                        162 / 366          298     185/15
    5%    batching  parallel  0.72           -49%         324 / 804          148     187/13
    5%    batching  halves    0.67           -52%         654 / 2106         138     187/13
    5%    reuse               1.41           -0%          162 / 366          298     185/15
    5%    retry               1.51           +7%          129 / 270          314     188/12
    5%    all       parallel  0.88           -38%         216 / 606          183     188/12
    5%    all       halves    0.66           -53%         672 / 1818         131     188/12
    15%   released            1.94                        816 / 1788         337     165/35
    15%   batching  parallel  1.34           -31%         1320 / 3114        236     167/33
    15%   batching  halves    1.21           -38%         2100 / 4914        215     167/33
    15%   reuse               1.94           -0%          816 / 1788         337     165/35
    15%   retry               1.97           +2%          741 / 1656         339     168/32
    15%   all       parallel  1.35           -30%         1311 / 2976        233     168/32
    15%   all       halves    1.26           -35%         2193 / 5076        218     168/32

Batching meets the 30 % target at both rates, alone and with every mode.
``parallel`` (the default) finds a failed batch's culprit in one round:
a few more runs than ``halves``, and about half its time to merge at 5 %.
Result reuse saves nothing in a gate-only stream (no run has the inputs
of an earlier successful one; it pays on rechecks and check-then-gate);
retries merge the changes a flake would have failed, which costs the
retried runs but shortens the time to merge. Batching makes changes wait
longer to merge than released behaviour: the queue behind a failed batch
waits for its culprit.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass, field

import gear

from nodepool.zk.localserver import LocalZooKeeper, free_port
from tests.fakes.gerrit import GerritFixture
from tests.functional.system_support import ZuulSystem, gerrit_gate_pipeline
from zuul.executor import infrafailure
from zuul.executor.protocol import (
    FUNCTION_EXECUTE,
    BuildProgress,
    BuildResult,
    ExecuteRequest,
    StopRequest,
    stop_function,
)
from zuul.lib.gearlib import GearServer, GearWorker
from zuul.model import item as m

HOSTNAME = 'sim-executor'
FLAKE_LINE = 'ssh: connect to host 203.0.113.5 port 22: Connection reset by peer'
INFRA_PATTERN = 'Connection reset by peer'
MODES = ('released', 'batching', 'reuse', 'retry', 'all')
# A flaky build fails this far into its run.
FLAKE_FRACTION = 0.3


# -- the simulated executor -----------------------------------------------------

@dataclass(eq=False)
class SimBuild:
    uuid: str
    job: object             # the gear job to answer
    tested: list            # change numbers of the request's items
    start: float
    end: float
    result: str
    failure_class: str | None = None
    stopped_at: float | None = None
    answered: bool = False


class Clock:
    def __init__(self):
        self.now = 0.0


class SimExecutor:
    """``executor:execute`` and ``executor:stop:<host>`` on a virtual clock."""

    def __init__(self, port: int, clock: Clock, bad: set, flake: float, duration: float,
                 seed: int):
        self.clock = clock
        self.bad = bad
        self.flake = flake
        self.duration = duration
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.builds: dict[str, SimBuild] = {}
        self.received = 0
        self.stops_pending = 0
        self.worker = GearWorker(HOSTNAME)
        self.worker.addServer('127.0.0.1', port)
        self.worker.waitForServer()
        self.worker.registerFunction(FUNCTION_EXECUTE)
        self.worker.registerFunction(stop_function(HOSTNAME))
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while self.running:
            try:
                job = self.worker.getJob()
            except gear.InterruptedError:
                continue
            try:
                name = job.name.decode() if isinstance(job.name, bytes) else job.name
                if name == FUNCTION_EXECUTE:
                    self._execute(job)
                else:
                    self._stop(job)
            except Exception as exc:   # pragma: no cover - benchmark diagnostics
                print(f'sim executor: {exc!r}', file=sys.stderr)

    def _execute(self, job) -> None:
        request = ExecuteRequest.from_json(job.arguments)
        tested = [int(i.number) for i in request.items if i.number is not None]
        now = self.clock.now
        if any(n in self.bad for n in tested):
            build = SimBuild(request.uuid, job, tested, now, now + self.duration,
                             m.FAILURE, infrafailure.TEST)
        elif self.random.random() < self.flake:
            build = SimBuild(request.uuid, job, tested, now,
                             now + self.duration * FLAKE_FRACTION,
                             *self._flake_result(request))
        else:
            build = SimBuild(request.uuid, job, tested, now, now + self.duration, m.SUCCESS)
        job.sendWorkData(BuildProgress(worker_hostname=HOSTNAME).to_json())
        with self.lock:
            self.builds[build.uuid] = build
            self.received += 1

    @staticmethod
    def _flake_result(request) -> tuple[str, str]:
        """What the real executor decides for a console showing
        FLAKE_LINE: RETRY when an infra-failure pattern matches it."""
        for regex in infrafailure.compile_patterns(request.infra_failure_patterns):
            if regex.search(FLAKE_LINE):
                return 'RETRY', infrafailure.pattern_class(regex.pattern)
        return m.FAILURE, infrafailure.TEST

    def _stop(self, job) -> None:
        stop = StopRequest.from_json(job.arguments)
        with self.lock:
            build = self.builds.get(stop.uuid)
            if build is not None and not build.answered:
                build.stopped_at = self.clock.now
                build.answered = True
                build.job.sendWorkComplete(BuildResult(result='ABORTED').to_json())
        job.sendWorkComplete(b'{}')

    def next_end(self) -> float | None:
        with self.lock:
            ends = [b.end for b in self.builds.values() if not b.answered]
        return min(ends) if ends else None

    def finish_due(self) -> list[str]:
        """Answer every build ending now; their uuids."""
        done = []
        with self.lock:
            for build in self.builds.values():
                if not build.answered and build.end <= self.clock.now:
                    build.answered = True
                    result = BuildResult(result=build.result, start_time=build.start,
                                         end_time=build.end,
                                         failure_class=build.failure_class)
                    build.job.sendWorkComplete(result.to_json())
                    done.append(build.uuid)
        return done

    def node_hours(self) -> float:
        with self.lock:
            return sum(((b.stopped_at if b.stopped_at is not None else b.end) - b.start)
                       for b in self.builds.values() if b.answered) / 3600.0

    def stop(self) -> None:
        self.running = False
        self.worker.stopWaitingForJobs()
        self.worker.shutdown()


# -- configuration per mode -------------------------------------------------------

def pipelines(mode: str, bisect: str = 'parallel') -> str:
    batching = f'    batching:\n      max: 8\n      adaptive: true\n      bisect: {bisect}\n' \
        if mode in ('batching', 'all') else ''
    reuse = '    reuse-results: true\n' if mode in ('reuse', 'all') else ''
    return gerrit_gate_pipeline(batching) + f"""
- job:
    name: unit-tests
    run: playbooks/noop.yaml
{reuse}"""


APP_CONFIG = """
- project:
    gate:
      jobs:
        - unit-tests
"""


def tenant_conf(mode: str) -> str:
    patterns = f"    infra-failure-patterns: ['{INFRA_PATTERN}']\n" \
        if mode in ('retry', 'all') else ''
    return textwrap.dedent("""
        - tenant:
            name: example
        """) + patterns + textwrap.indent(textwrap.dedent("""
        source:
          gerrit:
            config-projects:
              - org/project-config
            untrusted-projects:
              - org/app
              - org/lib
        """), '    ')


# -- one run ----------------------------------------------------------------------

@dataclass
class Outcome:
    mode: str
    rate: float
    changes: int
    merged: list = field(default_factory=list)          # change numbers, in order
    failed: list = field(default_factory=list)
    merge_minutes: list = field(default_factory=list)
    node_hours: float = 0.0
    builds: int = 0
    problems: list = field(default_factory=list)
    wall: float = 0.0


class Run:
    def __init__(self, mode: str, rate: float, n_changes: int, flake: float,
                 interval: float, duration: float, seed: int, bisect: str = 'parallel'):
        self.mode = mode
        self.bisect = bisect
        rng = random.Random(seed)
        self.bad_index = {i for i in range(n_changes) if rng.random() < rate}
        self.outcome = Outcome(mode, rate, n_changes)
        self.n_changes = n_changes
        self.flake = flake
        self.interval = interval
        self.duration = duration
        self.seed = seed
        self.clock = Clock()
        self.reports: list = []   # (change, action, virtual time, [(job, result, tested)])
        self.lost: set = set()    # builds answered whose result the scheduler never took

    def execute(self, timeout: float) -> Outcome:
        t0 = self.started = time.time()
        root = tempfile.mkdtemp(prefix='zg', dir='/tmp')
        zk = LocalZooKeeper(os.path.join(root, 'zk'))
        zk.start()
        gear_port = free_port()
        gear_server = GearServer(port=gear_port, host='127.0.0.1')
        gerrit = GerritFixture(os.path.join(root, 'gerrit'))
        key = os.path.join(root, 'id')
        os.system(f'ssh-keygen -q -t ed25519 -N "" -f {key}')
        system = ZuulSystem(root, gerrit, zk.hosts, gear_port, key)
        system.executor.start = lambda: None
        system.executor.stop = lambda: None
        executor = None
        try:
            with open(os.path.join(root, 'main.yaml'), 'w') as f:
                f.write(tenant_conf(self.mode))
            system.create_projects(app_config=APP_CONFIG,
                                   pipelines=pipelines(self.mode, self.bisect))
            changes = self._create_changes(system.store)
            executor = SimExecutor(gear_port, self.clock, self.bad, self.flake,
                                   self.duration, self.seed)
            system.start()
            scheduler = system.scheduler
            # In memory only: the durable-state writes are not measured here.
            scheduler.state_store = None
            scheduler.event_queue = None
            self._observe_reports(scheduler)
            self._simulate(system, executor, changes, timeout)
            self.outcome.node_hours = executor.node_hours()
            self.outcome.builds = executor.received
            if self.lost:
                print(f'{self.mode}: {len(self.lost)} answered builds never got a result '
                      'in the scheduler', file=sys.stderr)
        finally:
            if executor is not None:
                executor.stop()
            system.stop()
            gerrit.server.stop()
            gear_server.shutdown()
            zk.stop()
            shutil.rmtree(root, ignore_errors=True)
        self._summarize()
        self.outcome.wall = time.time() - t0
        return self.outcome

    def _create_changes(self, store) -> list:
        changes = []
        for i in range(self.n_changes):
            files = {'FAIL': f'{i}\n'} if i in self.bad_index else {f'f{i}.txt': f'{i}\n'}
            changes.append(store.create_change('org/app', 'master', f'Change {i}', files))
        self.bad = {changes[i].number for i in self.bad_index}
        self.approved_at = {}
        return changes

    def _observe_reports(self, scheduler) -> None:
        """Record each result report: the change, the action, when, and
        for each job the build that counted and what it tested."""
        ctx = scheduler.ctx_by_tenant['example']
        real = ctx.report

        def report(pipeline, item, action):
            if action in ('success', 'failure', 'merge-failure'):
                self.reports.append((item.change.number, action, self.clock.now,
                                     tested_by(item)))
            return real(pipeline, item, action)
        ctx.report = report

    def _simulate(self, system, executor: SimExecutor, changes, timeout: float) -> None:
        store = system.store
        manager = system.scheduler.tenants['example'].managers['gate']
        pending = list(changes)
        deadline = time.time() + timeout
        next_arrival = 0.0
        while True:
            if time.time() > deadline:
                raise SystemExit(f'gate simulation ({self.mode}): gave up after {timeout} s')
            self._wait_quiet(system, executor, manager)
            end = executor.next_end()
            if not pending and end is None:
                if not list(manager.all_items()):
                    return
                raise SystemExit(f'gate simulation ({self.mode}): items left with no build '
                                 f'running: {[i.change.number for i in manager.all_items()]}')
            if pending and (end is None or next_arrival <= end):
                self.clock.now = max(self.clock.now, next_arrival)
                change = pending.pop(0)
                self.approved_at[change.number] = self.clock.now
                store.approve(change, 'Workflow', 1, who='core')
                self._wait_enqueued(manager, change)
                next_arrival += self.interval
                if len(self.approved_at) % 25 == 0:
                    self._progress(manager)
            else:
                self.clock.now = end
                executor.finish_due()

    def _progress(self, manager) -> None:
        """A line on stderr every 25 approvals (a 200-change run takes
        minutes; the merger's git work grows with the queue's depth)."""
        print(f'  {self.mode}: {len(self.approved_at)}/{self.n_changes} approved, '
              f'{len(self.reports)} reported, {len(list(manager.all_items()))} in the gate, '
              f'virtual {self.clock.now / 60:.0f} min, '
              f'{time.time() - self.started:.0f} s', file=sys.stderr, flush=True)

    @staticmethod
    def _wait_enqueued(manager, change) -> None:
        limit = time.time() + 60
        while time.time() < limit:
            if any(i.change.number == change.number for i in list(manager.all_items())):
                return
            time.sleep(0.005)
        raise SystemExit(f'change {change.number} was not enqueued')

    def _wait_quiet(self, system, executor: SimExecutor, manager) -> None:
        """Until no event is queued, no merge pending, every launched
        build received by the executor and every answered build's result
        taken in by the scheduler (one that is not within 5 s is counted
        as lost and no longer waited for)."""
        scheduler = system.scheduler
        unresolved: dict[str, float] = {}

        def waiting_result(build) -> bool:
            sim = executor.builds.get(build.uuid)
            if build.result is not None or sim is None or not sim.answered:
                return False
            first = unresolved.setdefault(build.uuid, time.time())
            if time.time() - first < 5:
                return True
            self.lost.add(build.uuid)
            return False

        def busy():
            try:
                if any(i.current_build_set.merge_state == m.MERGE_PENDING
                       for i in list(manager.all_items())):
                    return 'a merge'
                if executor.received < len(system.launches):
                    return 'a launch'
                if scheduler.executor.pins.pending:
                    return 'a pin (result reuse asks the merger off the loop)'
                if any(i.pending_report is not None for i in list(manager.all_items())):
                    return 'a report (Gerrit reports are sent off the loop)'
                if any(getattr(c, 'workers_busy', lambda: 0)()
                       for c in scheduler.connections.all()):
                    return "a connection's worker (a report or a change read ahead)"
                if any(waiting_result(b) for b in list(system.builds)
                       if b.uuid not in self.lost):
                    return 'a result'
                return None
            except (RuntimeError, ValueError):
                return 'the pipeline changing'  # changed while looked at
        # Polled (the loop's own wait looks at ``busy`` only every 0.1 s);
        # quiet when seen so twice in a row (a pass may start new work).
        deadline = time.time() + 120
        calm = 0
        done = system.merge_server.jobs_done
        while calm < 2:
            if system.merge_server.jobs_done != done:   # the merger progresses
                done = system.merge_server.jobs_done
                deadline = time.time() + 120
            if time.time() > deadline:
                pending = [i.change.number for i in manager.all_items()
                           if i.current_build_set.merge_state == m.MERGE_PENDING]
                raise SystemExit(f'the scheduler did not settle: waiting for {busy()} '
                                 f'(merges pending for {pending}); received '
                                 f'{executor.received} of {len(system.launches)} builds')
            calm = calm + 1 if scheduler.loop.wait_idle(0.05) and not busy() else 0
            time.sleep(0.005)

    def _summarize(self) -> None:
        out = self.outcome
        for change, action, when, builds in self.reports:
            if action == 'success':
                out.merged.append(change)
                out.merge_minutes.append((when - self.approved_at[change]) / 60.0)
            else:
                out.failed.append(change)
        out.problems = untested_merges(self.reports, out.merged, self.bad)


def tested_by(item) -> list:
    """(job, result, tested change numbers) of the build counting for
    each of the item's jobs (its own, a reused one, or its batch tail's)."""
    bs = item.current_build_set
    out = []
    for job in bs.jobs or ():
        build = bs.build_for(job.name)
        if build is None:
            out.append((job.name, None, []))
            continue
        owner = build.build_set
        tested = [i.change.number for i in owner.dependent_items] + [owner.item.change.number]
        out.append((job.name, build.result, tested))
    return out


def untested_merges(reports, merged: list, bad: set) -> list[str]:
    """Why a merged change was not tested exactly as it merged (empty
    when every one was)."""
    problems = [f'bad change {c} merged' for c in merged if c in bad]
    for change, action, _, builds in reports:
        if action != 'success':
            continue
        if not builds:
            problems.append(f'{change} merged with no job')
        for job, result, tested in builds:
            start = merged.index(tested[0]) if tested and tested[0] in merged else -1
            if result != m.SUCCESS or change not in tested or start < 0 or \
                    merged[start:start + len(tested)] != tested:
                problems.append(f'{change}: {job} {result} tested {tested}')
    return problems


# -- the table ----------------------------------------------------------------------

def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float('nan')


def row(o: Outcome, base: Outcome | None) -> list[str]:
    per = o.node_hours / len(o.merged) if o.merged else float('nan')
    saving = ''
    if base is not None and base.merged and o.merged and o is not base:
        base_per = base.node_hours / len(base.merged)
        saving = f'{(1 - per / base_per) * 100:+.0f}%'.replace('+', '-', 1) \
            if per <= base_per else f'+{(per / base_per - 1) * 100:.0f}%'
    return [f'{o.rate:.0%}', o.mode, f'{per:.2f}', saving,
            f'{statistics.median(o.merge_minutes):.0f} / {pct(o.merge_minutes, 0.95):.0f}'
            if o.merge_minutes else '-',
            str(o.builds), f'{len(o.merged)}/{len(o.failed)}',
            'yes' if not o.problems else f'NO ({len(o.problems)})', f'{o.wall:.0f}']


HEADERS = ['fail', 'mode', 'node-h/merged', 'vs released', 'merge min p50/p95',
           'builds', 'merged/failed', 'all tested', 'wall s']


WIDTHS = [4, 8, 13, 11, 17, 6, 13, 10, 6]


def print_row(cells: list[str]) -> None:
    """One line of the table, printed as soon as its run ends."""
    print('  '.join(c.ljust(w) for c, w in zip(cells, WIDTHS)), flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--changes', type=int, default=200)
    parser.add_argument('--rates', default='0.05,0.15',
                        help='failure rates (share of bad changes), comma separated')
    parser.add_argument('--flake', type=float, default=0.02,
                        help='share of builds failing with an infrastructure error')
    parser.add_argument('--modes', default=','.join(MODES))
    parser.add_argument('--interval', type=float, default=6.0,
                        help='virtual minutes between approvals')
    parser.add_argument('--duration', type=float, default=60.0,
                        help='virtual minutes a build takes')
    parser.add_argument('--seed', type=int, default=21)
    parser.add_argument('--bisect', choices=('parallel', 'halves'), default='parallel',
                        help="batching's bisect (batching and all modes)")
    parser.add_argument('--timeout', type=float, default=1800.0,
                        help='give up on one run after this many seconds')
    parser.add_argument('--quick', action='store_true',
                        help='a smoke run: 12 changes, 15%% failing, released and all')
    args = parser.parse_args(argv)
    if args.quick:
        args.changes, args.rates, args.modes = 12, '0.15', 'released,all'
    modes = [m_.strip() for m_ in args.modes.split(',') if m_.strip()]
    for mode in modes:
        if mode not in MODES:
            parser.error(f'unknown mode {mode!r} (one of {", ".join(MODES)})')
    problems = []
    print_row(HEADERS)
    print_row(['-' * w for w in WIDTHS])
    for rate in (float(r) for r in args.rates.split(',')):
        base = None
        for mode in modes:
            print(f'running {mode} at {rate:.0%} failing ({args.changes} changes)',
                  file=sys.stderr, flush=True)
            outcome = Run(mode, rate, args.changes, args.flake, args.interval * 60,
                          args.duration * 60, args.seed, args.bisect).execute(args.timeout)
            base = outcome if mode == 'released' else base
            print_row(row(outcome, base))
            problems += [f'{mode} {rate:.0%}: {p}' for p in outcome.problems]
    for problem in problems:
        print(f'UNTESTED MERGE: {problem}')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
