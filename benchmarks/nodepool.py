"""Node request throughput and latency, and the ZooKeeper work behind
each request: a launcher with an instant simulated provider over a real
ZooKeeper (this machine's), and a requestor client doing what Zuul does
(submit, watch, lock the nodes, mark them in-use, delete the request;
then release them as used).

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

ZooKeeper operations are counted in both processes by wrapping their
kazoo client's request queue (``KazooClient._call``: every request the
client sends, a transaction counting once; pings are not requests).  A
scenario's count runs from before its first submit until its last node
is deleted, so it covers a request's whole life: the requestor's side,
the launcher's (including the reads its watches trigger) and the
cleanup of the used nodes.  The server's own count of write
transactions (the growth of its zxid, from ``srvr``) is shown beside
the client-side count of writes as a cross-check.  The round-trip time
is the median of plain ``get('/')`` calls in the same run, right after
the scenario, so latency can be read as a number of round trips.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import statistics
import threading
import time
from collections import Counter

from nodepool.config import load_config_text
from nodepool.launcher.launcher import Launcher
from nodepool.launcher.settings import LauncherSettings
from nodepool.zk import paths
from nodepool.zk.api import NodepoolZooKeeper, connect
from nodepool.zk.localserver import LocalZooKeeper, four_letter_word
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

# kazoo request classes that change the tree (one server transaction each).
WRITES = {'Create', 'Create2', 'Delete', 'SetData', 'SetACL', 'Transaction', 'Reconfig'}
RTT_SAMPLES = 200


class OpCounter:
    """Counts the requests a KazooClient sends, by kind."""

    def __init__(self, client):
        self._lock = threading.Lock()
        self._counts: Counter = Counter()
        real = client._call

        def counted(request, async_object):
            with self._lock:
                self._counts[type(request).__name__] += 1
            return real(request, async_object)
        client._call = counted

    def snapshot(self) -> Counter:
        with self._lock:
            return Counter(self._counts)


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


# -- the launcher process ---------------------------------------------------------


def run_launcher(hosts: str, max_servers: int, conn) -> None:
    """The launcher process: answers 'counts' with its ZooKeeper request
    counts until told 'stop'."""
    logging.basicConfig(level=logging.WARNING)
    client = connect(hosts)
    counter = OpCounter(client)
    zk = NodepoolZooKeeper(client, owns_client=True)
    config = load_config_text(CONFIG.format(max_servers=max_servers))
    launcher = Launcher(config, zk, LauncherSettings(cleanup_interval=3600,
                                                     boot_poll_interval=0.01))
    launcher.start()
    launcher.wait_for(launcher.registered, what='registration')
    conn.send('ready')
    while True:
        command = conn.recv()
        if command == 'counts':
            conn.send(counter.snapshot())
        elif command == 'stop':
            break
    launcher.stop()
    zk.close()


# -- measuring ---------------------------------------------------------------------


class Meter:
    """Counts of both processes and the server, around one scenario."""

    def __init__(self, server: LocalZooKeeper, requestor_counter: OpCounter, launcher_conn,
                 observer):
        self.server = server
        self.requestor_counter = requestor_counter
        self.launcher_conn = launcher_conn
        self.observer = observer     # an uncounted client of our own

    def zxid(self) -> int:
        text = four_letter_word(self.server.address, self.server.port, 'srvr')
        for line in text.splitlines():
            if line.startswith('Zxid:'):
                return int(line.split(':', 1)[1].strip(), 16)
        raise RuntimeError(f'no Zxid in srvr output: {text!r}')

    def snapshot(self) -> tuple[Counter, Counter, int]:
        self.launcher_conn.send('counts')
        return self.requestor_counter.snapshot(), self.launcher_conn.recv(), self.zxid()

    def wait_quiet(self, timeout: float = 120) -> None:
        """Until every node and request of the scenario is gone (the
        launcher deletes used nodes after the requestor let them go)."""
        deadline = time.monotonic() + timeout
        delay = 0.001
        while self.observer.get_children(paths.NODE_ROOT) or \
                self.observer.get_children(paths.REQUEST_ROOT):
            if time.monotonic() > deadline:
                raise TimeoutError('nodes or requests left over')
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def rtt_ms(self) -> float:
        samples = []
        for _ in range(RTT_SAMPLES):
            start = time.perf_counter()
            self.observer.get('/')
            samples.append((time.perf_counter() - start) * 1000)
        return statistics.median(samples)

    def measure(self, scenario):
        """Run ``scenario()`` -> (Run, wall); return it with the ZooKeeper
        figures: (run, wall, requestor ops, launcher ops, server txns, rtt)."""
        self.wait_quiet()
        req0, lau0, zxid0 = self.snapshot()
        run, wall = scenario()
        self.wait_quiet()
        req1, lau1, zxid1 = self.snapshot()
        return run, wall, req1 - req0, lau1 - lau0, zxid1 - zxid0, self.rtt_ms()


# -- output ------------------------------------------------------------------------


def latency_row(name: str, run: Run, wall: float) -> list[str]:
    ms = [v * 1000 for v in run.latencies]
    return [name, str(len(ms)), f'{wall:.2f}', f'{len(ms) / wall:.1f}',
            f'{percentile(ms, 50):.1f}', f'{percentile(ms, 90):.1f}',
            f'{percentile(ms, 99):.1f}', f'{max(ms):.1f}', f'{statistics.mean(ms):.1f}']


def zk_row(name: str, run: Run, req: Counter, lau: Counter, txns: int,
           rtt: float) -> list[str]:
    n = len(run.latencies)
    both = req + lau
    writes = sum(v for k, v in both.items() if k in WRITES)
    p50 = percentile([v * 1000 for v in run.latencies], 50)
    return [name, str(n), f'{sum(both.values()) / n:.1f}', f'{sum(req.values()) / n:.1f}',
            f'{sum(lau.values()) / n:.1f}', f'{(sum(both.values()) - writes) / n:.1f}',
            f'{writes / n:.1f}', f'{txns / n:.1f}', f'{rtt:.3f}', f'{p50:.1f}',
            f'{p50 / rtt:.0f}']


def kinds_row(name: str, run: Run, req: Counter, lau: Counter, kinds: list[str]) -> list[str]:
    n = len(run.latencies)
    both = req + lau
    return [name] + [f'{both.get(k, 0) / n:.1f}' for k in kinds]


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print(' | '.join(h.ljust(w) for h, w in zip(headers, widths)))
    print('-+-'.join('-' * w for w in widths))
    for r in rows:
        print(' | '.join(v.ljust(w) for v, w in zip(r, widths)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--requests', type=int, default=200)
    parser.add_argument('--concurrency', type=int, default=10)
    parser.add_argument('--max-servers', type=int, default=50)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    results = []
    ctx = multiprocessing.get_context('fork')
    with LocalZooKeeper() as server:
        conn, child_conn = ctx.Pipe()
        proc = ctx.Process(target=run_launcher,
                           args=(server.hosts, args.max_servers, child_conn))
        proc.start()
        client = connect(server.hosts)
        counter = OpCounter(client)
        client_zk = NodepoolZooKeeper(client, owns_client=True)
        observer = connect(server.hosts)
        requestor = NodeRequestClient(client_zk)
        requestor.start()
        meter = Meter(server, counter, conn, observer)
        try:
            if not conn.poll(60) or conn.recv() != 'ready':
                raise SystemExit('the launcher did not start')
            burst(requestor, 10)   # warm up
            quarter = max(1, args.requests // 4)
            scenarios = [
                ('one at a time', lambda: closed_loop(requestor, quarter, 1)),
                ('burst', lambda: burst(requestor, args.requests)),
                (f'closed-loop x{args.concurrency}',
                 lambda: closed_loop(requestor, args.requests, args.concurrency)),
                ('multi-node (3)', lambda: burst(requestor, quarter, ('small',) * 3)),
            ]
            for name, scenario in scenarios:
                results.append((name, *meter.measure(scenario)))
        finally:
            requestor.stop()
            conn.send('stop')
            proc.join(60)
            client_zk.close()
            observer.stop()
            observer.close()
    print(f'nodepool: {args.requests} requests, simulated instant provider, '
          f'max-servers {args.max_servers}, launcher and requestor in separate processes, '
          'one local ZooKeeper')
    print()
    print_table(['scenario', 'requests', 'wall s', 'req/s', 'p50 ms', 'p90 ms', 'p99 ms',
                 'max ms', 'mean ms'],
                [latency_row(name, run, wall) for name, run, wall, *_ in results])
    print()
    print('ZooKeeper operations per request (client requests; a transaction counts once)')
    print()
    print_table(['scenario', 'requests', 'ops/req', 'requestor', 'launcher', 'reads',
                 'writes', 'server txns', 'RTT ms', 'p50 ms', 'p50 in RTTs'],
                [zk_row(name, run, req, lau, txns, rtt)
                 for name, run, _, req, lau, txns, rtt in results])
    kinds = sorted({k for _, _, _, req, lau, _, _ in results for k in req + lau})
    print()
    print('by kind, per request (both processes)')
    print()
    print_table(['scenario', *kinds], [kinds_row(name, run, req, lau, kinds)
                                       for name, run, _, req, lau, _, _ in results])


if __name__ == '__main__':
    main()
