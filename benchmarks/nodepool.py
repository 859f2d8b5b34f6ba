"""Node request throughput and latency: a launcher with an instant
simulated provider over a real ZooKeeper (this machine's), and a
requestor client doing what Zuul does (submit, watch, lock the nodes,
mark them in-use, delete the request; then release them as used).

    .venv/bin/python -m benchmarks.nodepool [--requests N] [--concurrency C]

The launcher runs in its own process, as it does in production (Zuul's
scheduler is another process); both talk to one ZooKeeper server.

Scenarios:

- burst: N one-node requests submitted at once; each fulfilled request
  is released at once (its node is deleted, freeing quota).
- closed-loop: C requestors, each submitting its next request when the
  previous one is fulfilled and released.
- multi-node: N/4 three-node requests at once.
- one at a time: N/4 requests in sequence (the latency of an idle system).

Latency is from submit to the requestor holding the nodes (in-use).
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import statistics
import threading
import time

from nodepool.config import load_config_text
from nodepool.launcher.launcher import Launcher
from nodepool.launcher.settings import LauncherSettings
from nodepool.zk.api import NodepoolZooKeeper
from nodepool.zk.localserver import LocalZooKeeper
from nodepool.zk.requestor import NodeRequestClient

CONFIG = """
labels:
  - name: small
providers:
  - name: sim
    driver: simulated
    pools:
      - name: main
        max-servers: {max_servers}
        labels:
          - name: small
"""


class Run:
    def __init__(self, client: NodeRequestClient):
        self.client = client
        self.latencies: list[float] = []
        self.lock = threading.Lock()
        self.done = threading.Condition(self.lock)
        self.finished = 0

    def submit(self, labels, on_done=None):
        start = time.perf_counter()

        def fulfilled(handle):
            elapsed = time.perf_counter() - start
            self.client.release(handle)
            with self.lock:
                self.latencies.append(elapsed)
                self.finished += 1
                self.done.notify_all()
            if on_done is not None:
                on_done()
        return self.client.submit(labels, callback=fulfilled)

    def wait(self, count: int, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        with self.lock:
            while self.finished < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f'{self.finished} of {count} fulfilled')
                self.done.wait(left)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[index]


def burst(client, n: int, labels=('small',)) -> tuple[Run, float]:
    run = Run(client)
    start = time.perf_counter()
    for _ in range(n):
        run.submit(list(labels))
    run.wait(n)
    return run, time.perf_counter() - start


def closed_loop(client, n: int, concurrency: int) -> tuple[Run, float]:
    run = Run(client)
    remaining = [n - concurrency]
    lock = threading.Lock()

    def next_one():
        with lock:
            if remaining[0] <= 0:
                return
            remaining[0] -= 1
        threading.Thread(target=run.submit, args=(['small'], next_one)).start()

    start = time.perf_counter()
    for _ in range(min(concurrency, n)):
        run.submit(['small'], next_one)
    run.wait(n)
    return run, time.perf_counter() - start


def row(name: str, run: Run, wall: float) -> list[str]:
    ms = [v * 1000 for v in run.latencies]
    return [name, str(len(ms)), f'{wall:.2f}', f'{len(ms) / wall:.1f}',
            f'{percentile(ms, 50):.1f}', f'{percentile(ms, 90):.1f}',
            f'{percentile(ms, 99):.1f}', f'{max(ms):.1f}', f'{statistics.mean(ms):.1f}']


def print_table(rows: list[list[str]]) -> None:
    headers = ['scenario', 'requests', 'wall s', 'req/s', 'p50 ms', 'p90 ms', 'p99 ms',
               'max ms', 'mean ms']
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print(' | '.join(h.ljust(w) for h, w in zip(headers, widths)))
    print('-+-'.join('-' * w for w in widths))
    for r in rows:
        print(' | '.join(v.ljust(w) for v, w in zip(r, widths)))


def run_launcher(hosts: str, max_servers: int, ready, stop) -> None:
    """The launcher process."""
    logging.basicConfig(level=logging.WARNING)
    zk = NodepoolZooKeeper.from_hosts(hosts)
    config = load_config_text(CONFIG.format(max_servers=max_servers))
    launcher = Launcher(config, zk, LauncherSettings(cleanup_interval=3600,
                                                     boot_poll_interval=0.01))
    launcher.start()
    launcher.wait_for(launcher.registered, what='registration')
    ready.set()
    stop.wait()
    launcher.stop()
    zk.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--requests', type=int, default=200)
    parser.add_argument('--concurrency', type=int, default=10)
    parser.add_argument('--max-servers', type=int, default=50)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rows = []
    ctx = multiprocessing.get_context('fork')
    with LocalZooKeeper() as server:
        ready, stop = ctx.Event(), ctx.Event()
        proc = ctx.Process(target=run_launcher,
                           args=(server.hosts, args.max_servers, ready, stop))
        proc.start()
        client_zk = NodepoolZooKeeper.from_hosts(server.hosts)
        client = NodeRequestClient(client_zk)
        client.start()
        try:
            if not ready.wait(60):
                raise SystemExit('the launcher did not start')
            burst(client, 10)   # warm up
            rows.append(row('one at a time', *closed_loop(client, max(1, args.requests // 4),
                                                          1)))
            rows.append(row('burst', *burst(client, args.requests)))
            rows.append(row(f'closed-loop x{args.concurrency}',
                            *closed_loop(client, args.requests, args.concurrency)))
            rows.append(row('multi-node (3)',
                            *burst(client, max(1, args.requests // 4), ('small',) * 3)))
        finally:
            client.stop()
            stop.set()
            proc.join(60)
            client_zk.close()
    print(f'nodepool: {args.requests} requests, simulated instant provider, '
          f'max-servers {args.max_servers}, launcher and requestor in separate processes, '
          'one local ZooKeeper')
    print_table(rows)


if __name__ == '__main__':
    main()
