"""zuul-launcher against nodepool-launcher: request -> nodes-held latency
and requests per second, with one and with two launcher processes, on
the same instant simulated provider (one shared cloud directory) and
one local ZooKeeper.

    .venv/bin/python -m benchmarks.launcher [--requests N] [--concurrency C]

Each configuration gets its own ZooKeeper chroot and its own launcher
processes (forked); the requestor is this process, doing what Zuul's
scheduler does (submit, watch, lock the nodes, mark them in-use, delete
the request; then release them as used, which makes the launcher delete
them).  zuul-launcher runs with its default intervals; requests carry
canonical label names and go to ``/zuul/node-requests``.

Scenarios (as benchmarks/nodepool.py): one request at a time (the
latency of an idle system), a burst of N one-node requests, C
requestors in a closed loop, and a burst of N/4 three-node requests.

The scaling table (``--scale-providers P --latency L``; 0 providers
skips it) runs the burst and closed-loop scenarios against P providers
of the label, every provider API call (create, poll, delete, list)
taking L seconds (and ``--cpu-per-call`` seconds of CPU), so provider
loops held by different launchers could overlap.  Each scaling row says
how many CPU seconds the launcher processes, ZooKeeper and the
requestor (this process) used during it: on a machine with few cores
the sum against the wall time shows whether a second launcher had a
core to run on.  With ``BENCH_OPS=1`` each launcher process prints,
when it stops, the ZooKeeper requests it sent, by kind.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time

from benchmarks.nodepool import OpCounter, Run, burst, latency_row, print_table
from nodepool.zk import paths
from nodepool.zk.api import NodepoolZooKeeper, connect
from nodepool.zk.localserver import LocalZooKeeper
from nodepool.zk.requestor import NodeRequestClient

LABEL = 'review.example.org/org/config/small'

NODEPOOL_PROVIDER = """
  - name: sim{suffix}
    driver: simulated
    state-dir: {state_dir}
    pools:
      - name: main
        max-servers: {max_servers}
        labels:
          - name: small
"""

#: Seconds every provider API call waits, and seconds of CPU it burns
#: (a client library parsing the API's answers, holding the GIL), set
#: before the launchers fork.
LATENCY = [0.0]
CPU_PER_CALL = [0.0]


def nodepool_config(max_servers: int, state_dir: str, providers: int) -> str:
    text = 'labels:\n  - name: small\nproviders:\n'
    for i in range(providers):
        suffix = '' if providers == 1 else f'-{i}'
        text += NODEPOOL_PROVIDER.format(suffix=suffix, max_servers=max_servers,
                                         state_dir=f'{state_dir}/sim{suffix}')
    return text


def latency_registry():
    """The simulated driver, every API call taking ``LATENCY`` seconds."""
    from nodepool.driver import DriverRegistry
    from nodepool.driver.simulated.adapter import SimulatedAdapter
    from nodepool.driver.simulated.driver import SimulatedDriver

    class SlowAdapter(SimulatedAdapter):
        def _wait(self):
            if LATENCY[0]:
                time.sleep(LATENCY[0])
            if CPU_PER_CALL[0]:
                end = time.thread_time() + CPU_PER_CALL[0]
                while time.thread_time() < end:
                    pass

        def create(self, spec):
            self._wait()
            return super().create(spec)

        def poll(self, external_id):
            self._wait()
            return super().poll(external_id)

        def delete(self, external_id):
            self._wait()
            return super().delete(external_id)

        def list(self):
            self._wait()
            return super().list()

    class SlowDriver(SimulatedDriver):
        def get_adapter(self, provider):
            return SlowAdapter(provider)
    return DriverRegistry([SlowDriver()])


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (and its reaped children)."""
    with open(f'/proc/{pid}/stat') as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf('SC_CLK_TCK')


def closed_loop(client, n: int, concurrency: int, labels) -> tuple[Run, float]:
    run = Run(client)
    remaining = [n - concurrency]
    lock = threading.Lock()

    def next_one():
        with lock:
            if remaining[0] <= 0:
                return
            remaining[0] -= 1
        threading.Thread(target=run.submit, args=(list(labels), next_one)).start()

    start = time.perf_counter()
    for _ in range(min(concurrency, n)):
        run.submit(list(labels), next_one)
    run.wait(n)
    return run, time.perf_counter() - start


# -- launcher processes -------------------------------------------------------------


def run_nodepool(hosts: str, max_servers: int, state_dir: str, providers: int,
                 conn) -> None:
    from nodepool.config import load_config_text
    from nodepool.launcher.launcher import Launcher
    from nodepool.launcher.settings import LauncherSettings
    logging.basicConfig(level=logging.WARNING)
    zk = NodepoolZooKeeper(connect(hosts), owns_client=True)
    ops = OpCounter(zk.client) if os.environ.get('BENCH_OPS') else None
    config = load_config_text(nodepool_config(max_servers, state_dir, providers))
    launcher = Launcher(config, zk, LauncherSettings(cleanup_interval=3600,
                                                     boot_poll_interval=0.01),
                        registry=latency_registry())
    launcher.start()
    launcher.wait_for(launcher.registered, what='registration')
    conn.send('ready')
    conn.recv()
    launcher.stop()
    zk.close()
    report_ops('nodepool-launcher', ops)


def report_ops(name: str, ops) -> None:
    if ops is not None:
        counts = ops.snapshot()
        print(f'{name} {os.getpid()}: {sum(counts.values())} ZooKeeper requests: '
              f'{dict(counts.most_common())}', file=sys.stderr)


def run_zuul(hosts: str, max_servers: int, state_dir: str, providers: int,
             conn) -> None:
    from zuul.configloader.zuulconf import LauncherSettingsConf
    from zuul.launcher.server import ZuulLauncher
    logging.basicConfig(level=getattr(logging, os.environ.get('BENCH_LOG', 'WARNING')),
                        format=f'%(asctime)s {os.getpid()} %(name)s %(message)s', force=True)
    client = connect(hosts)
    ops = OpCounter(client) if os.environ.get('BENCH_OPS') else None
    launcher = ZuulLauncher(client, {'sim': {'driver': 'simulated',
                                             'options': {'state-dir': state_dir}}},
                            LauncherSettingsConf(cleanup_interval=3600),
                            registry=latency_registry())
    launcher.start()
    deadline = time.monotonic() + 30
    while len(launcher.loops) < providers and time.monotonic() < deadline:
        time.sleep(0.05)
    conn.send('ready')
    conn.recv()
    launcher.stop()
    client.stop()
    client.close()
    report_ops('zuul-launcher', ops)


def publish_zuul_providers(client, max_servers: int, state_dir: str,
                           count: int) -> None:
    from zuul.model.launcher import ResolvedLabel, ResolvedProvider
    from zuul.zk.launcher_config import publish
    project = 'review.example.org/org/config'
    published = {}
    for i in range(count):
        name = 'sim' if count == 1 else f'sim-{i}'
        settings = {'quota': {'instances': max_servers}}
        if count > 1:
            settings['state-dir'] = f'{state_dir}/{name}'
        provider = ResolvedProvider(canonical_name=f'{project}/{name}', name=name,
                                    section=f'{project}/{name}-section', connection='sim',
                                    settings=settings)
        provider.labels[LABEL] = ResolvedLabel(canonical_name=LABEL, name='small',
                                               image=None, flavor=None)
        published[provider.canonical_name] = provider
    publish(client, published)


# -- one configuration ------------------------------------------------------------------


def wait_quiet(observer, tree, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    delay = 0.001
    while observer.get_children(tree.node_root) or observer.get_children(tree.request_root):
        if time.monotonic() > deadline:
            raise TimeoutError('nodes or requests left over')
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def measure(system: str, launchers: int, server: LocalZooKeeper, args,
            providers: int = 1, scaling: bool = False) -> list:
    chroot = f'/bench-{system}-{launchers}-{providers}-{"s" if scaling else "d"}'
    admin = connect(server.hosts)
    admin.ensure_path(chroot)
    admin.stop()
    admin.close()
    hosts = server.hosts + chroot
    state_dir = tempfile.mkdtemp(prefix=f'bench-{system}-')
    tree = paths.ZUUL_LAUNCHER if system == 'zuul' else paths.NODEPOOL
    labels = (LABEL,) if system == 'zuul' else ('small',)
    client_zk = NodepoolZooKeeper(connect(hosts), owns_client=True, tree=tree)
    if system == 'zuul':
        publish_zuul_providers(client_zk.client, args.max_servers, state_dir, providers)
    ctx = multiprocessing.get_context('fork')
    target = run_zuul if system == 'zuul' else run_nodepool
    procs = []
    for _ in range(launchers):
        conn, child = ctx.Pipe()
        proc = ctx.Process(target=target, args=(hosts, args.max_servers, state_dir,
                                                providers, child))
        proc.start()
        procs.append((proc, conn))
    requestor = NodeRequestClient(client_zk)
    requestor.start()
    rows = []
    zk_pid = server.proc.pid if getattr(server, 'proc', None) is not None else None
    try:
        for proc, conn in procs:
            if not conn.poll(60) or conn.recv() != 'ready':
                raise SystemExit(f'a {system} launcher did not start')
        burst(requestor, 10, labels)   # warm up
        wait_quiet(client_zk.client, tree)
        quarter = max(1, args.requests // 4)
        scenarios = [
            ('burst', lambda: burst(requestor, args.requests, labels)),
            (f'closed-loop x{args.concurrency}',
             lambda: closed_loop(requestor, args.requests, args.concurrency, labels)),
        ]
        if not scaling:
            scenarios.insert(0, ('one at a time',
                                 lambda: closed_loop(requestor, quarter, 1, labels)))
            scenarios.append(('multi-node (3)', lambda: burst(requestor, quarter,
                                                              labels * 3)))
        name = f'{"zuul-launcher" if system == "zuul" else "nodepool-launcher"} x{launchers}'
        if scaling:
            name += f' ({providers} providers)'
        for scenario, run_it in scenarios:
            before = ([cpu_seconds(p.pid) for p, _ in procs],
                      cpu_seconds(zk_pid) if zk_pid else 0.0, cpu_seconds(os.getpid()))
            run, wall = run_it()
            wait_quiet(client_zk.client, tree)
            after = ([cpu_seconds(p.pid) for p, _ in procs],
                     cpu_seconds(zk_pid) if zk_pid else 0.0, cpu_seconds(os.getpid()))
            row = latency_row(f'{name}: {scenario}', run, wall)
            if scaling:
                launcher_cpu = sum(a - b for a, b in zip(after[0], before[0]))
                row += [f'{launcher_cpu:.1f}', f'{after[1] - before[1]:.1f}',
                        f'{after[2] - before[2]:.1f}']
            rows.append(row)
    finally:
        requestor.stop()
        for proc, conn in procs:
            conn.send('stop')
        for proc, _ in procs:
            proc.join(60)
        client_zk.close()
        shutil.rmtree(state_dir, ignore_errors=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--requests', type=int, default=100)
    parser.add_argument('--concurrency', type=int, default=10)
    parser.add_argument('--max-servers', type=int, default=50)
    parser.add_argument('--systems', default='nodepool,zuul')
    parser.add_argument('--launchers', default='1,2')
    parser.add_argument('--scale-providers', type=int, default=4,
                        help='providers in the scaling table (0: skip it)')
    parser.add_argument('--latency', type=float, default=0.05,
                        help='seconds per provider API call in the scaling table')
    parser.add_argument('--cpu-per-call', type=float, default=0.0,
                        help='CPU seconds each provider API call burns in the scaling table')
    parser.add_argument('--only-scaling', action='store_true')
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    headers = ['configuration: scenario', 'requests', 'wall s', 'req/s', 'p50 ms',
               'p90 ms', 'p99 ms', 'max ms', 'mean ms']
    rows, scale_rows = [], []
    with LocalZooKeeper() as server:
        launcher_counts = [int(n) for n in args.launchers.split(',')]
        if not args.only_scaling:
            for launchers in launcher_counts:
                for system in args.systems.split(','):
                    rows.extend(measure(system, launchers, server, args))
        if args.scale_providers > 0:
            LATENCY[0] = args.latency
            CPU_PER_CALL[0] = args.cpu_per_call
            for launchers in launcher_counts:
                for system in args.systems.split(','):
                    scale_rows.extend(measure(system, launchers, server, args,
                                              providers=args.scale_providers, scaling=True))
            LATENCY[0] = CPU_PER_CALL[0] = 0.0
    if rows:
        print(f'{args.requests} requests, simulated instant provider (shared cloud '
              f'directory), max-servers {args.max_servers}, launchers and requestor in '
              'separate processes, one local ZooKeeper')
        print()
        print_table(headers, rows)
    if scale_rows:
        print()
        print(f'Scaling: {args.scale_providers} providers of the label, every provider '
              f'API call taking {args.latency * 1000:g} ms (plus '
              f'{args.cpu_per_call * 1000:g} ms of CPU), max-servers {args.max_servers} '
              f'each; CPU seconds used during the row ({os.cpu_count()} cores)')
        print()
        print_table(headers + ['launchers cpu s', 'zk cpu s', 'requestor cpu s'],
                    scale_rows)


if __name__ == '__main__':
    main()
