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
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import shutil
import tempfile
import threading
import time

from benchmarks.nodepool import Run, burst, latency_row, print_table
from nodepool.zk import paths
from nodepool.zk.api import NodepoolZooKeeper, connect
from nodepool.zk.localserver import LocalZooKeeper
from nodepool.zk.requestor import NodeRequestClient

LABEL = 'review.example.org/org/config/small'

NODEPOOL_CONFIG = """
labels:
  - name: small
providers:
  - name: sim
    driver: simulated
    state-dir: {state_dir}
    pools:
      - name: main
        max-servers: {max_servers}
        labels:
          - name: small
"""


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


def run_nodepool(hosts: str, max_servers: int, state_dir: str, conn) -> None:
    from nodepool.config import load_config_text
    from nodepool.launcher.launcher import Launcher
    from nodepool.launcher.settings import LauncherSettings
    logging.basicConfig(level=logging.WARNING)
    zk = NodepoolZooKeeper(connect(hosts), owns_client=True)
    config = load_config_text(NODEPOOL_CONFIG.format(max_servers=max_servers,
                                                     state_dir=state_dir))
    launcher = Launcher(config, zk, LauncherSettings(cleanup_interval=3600,
                                                     boot_poll_interval=0.01))
    launcher.start()
    launcher.wait_for(launcher.registered, what='registration')
    conn.send('ready')
    conn.recv()
    launcher.stop()
    zk.close()


def run_zuul(hosts: str, max_servers: int, state_dir: str, conn) -> None:
    from zuul.configloader.zuulconf import LauncherSettingsConf
    from zuul.launcher.server import ZuulLauncher
    logging.basicConfig(level=logging.WARNING)
    client = connect(hosts)
    launcher = ZuulLauncher(client, {'sim': {'driver': 'simulated',
                                             'options': {'state-dir': state_dir}}},
                            LauncherSettingsConf(cleanup_interval=3600))
    launcher.start()
    deadline = time.monotonic() + 30
    while not launcher.loops and time.monotonic() < deadline:
        time.sleep(0.05)
    conn.send('ready')
    conn.recv()
    launcher.stop()
    client.stop()
    client.close()


def publish_zuul_provider(client, max_servers: int) -> None:
    from zuul.model.launcher import ResolvedLabel, ResolvedProvider
    from zuul.zk.launcher_config import publish
    project = 'review.example.org/org/config'
    provider = ResolvedProvider(canonical_name=f'{project}/sim', name='sim',
                                section=f'{project}/sim-section', connection='sim',
                                settings={'quota': {'instances': max_servers}})
    provider.labels[LABEL] = ResolvedLabel(canonical_name=LABEL, name='small', image=None,
                                           flavor=None)
    publish(client, {provider.canonical_name: provider})


# -- one configuration ------------------------------------------------------------------


def wait_quiet(observer, tree, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    delay = 0.001
    while observer.get_children(tree.node_root) or observer.get_children(tree.request_root):
        if time.monotonic() > deadline:
            raise TimeoutError('nodes or requests left over')
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def measure(system: str, launchers: int, server: LocalZooKeeper, args) -> list:
    chroot = f'/bench-{system}-{launchers}'
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
        publish_zuul_provider(client_zk.client, args.max_servers)
    ctx = multiprocessing.get_context('fork')
    target = run_zuul if system == 'zuul' else run_nodepool
    procs = []
    for _ in range(launchers):
        conn, child = ctx.Pipe()
        proc = ctx.Process(target=target, args=(hosts, args.max_servers, state_dir, child))
        proc.start()
        procs.append((proc, conn))
    requestor = NodeRequestClient(client_zk)
    requestor.start()
    rows = []
    try:
        for proc, conn in procs:
            if not conn.poll(60) or conn.recv() != 'ready':
                raise SystemExit(f'a {system} launcher did not start')
        burst(requestor, 10, labels)   # warm up
        wait_quiet(client_zk.client, tree)
        quarter = max(1, args.requests // 4)
        scenarios = [
            ('one at a time', lambda: closed_loop(requestor, quarter, 1, labels)),
            ('burst', lambda: burst(requestor, args.requests, labels)),
            (f'closed-loop x{args.concurrency}',
             lambda: closed_loop(requestor, args.requests, args.concurrency, labels)),
            ('multi-node (3)', lambda: burst(requestor, quarter, labels * 3)),
        ]
        name = f'{"zuul-launcher" if system == "zuul" else "nodepool-launcher"} x{launchers}'
        for scenario, run_it in scenarios:
            run, wall = run_it()
            wait_quiet(client_zk.client, tree)
            rows.append(latency_row(f'{name}: {scenario}', run, wall))
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
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rows = []
    with LocalZooKeeper() as server:
        for launchers in [int(n) for n in args.launchers.split(',')]:
            for system in args.systems.split(','):
                rows.extend(measure(system, launchers, server, args))
    print(f'{args.requests} requests, simulated instant provider (shared cloud directory), '
          f'max-servers {args.max_servers}, launchers and requestor in separate processes, '
          'one local ZooKeeper')
    print()
    print_table(['configuration: scenario', 'requests', 'wall s', 'req/s', 'p50 ms',
                 'p90 ms', 'p99 ms', 'max ms', 'mean ms'], rows)


if __name__ == '__main__':
    main()
