"""Merger speed: N changes across M projects merged as one queue.

    .venv/bin/python -m benchmarks.merger [--changes 20] [--projects 5]
                                          [--files 200] [--rounds 5]

Upstream repos are local bare repos (so the numbers are git's and ours,
not a network's).  Rows: a cold cache (clones every project), a warm
cache (fetch + merge), the executor's reproduction from a recorded
repo_state, workspace checkouts, one row per merge mode on a warm cache,
and the same merge through Gearman (MergeClient -> MergeServer).  Each
figure is the median of --rounds runs, in seconds.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time

from nodepool.zk.localserver import free_port
from tests.functional.test_merger_support import Upstream
from zuul.lib.gearlib import GearServer
from zuul.merger.client import MergeClient
from zuul.merger.merger import Merger
from zuul.merger.protocol import MERGE_MODES, MergeItem
from zuul.merger.repos import RepoUrlResolver
from zuul.merger.server import MergeServer


def build_upstream(root: str, changes: int, projects: int, files: int) -> list[MergeItem]:
    """``projects`` repos of ``files`` files; ``changes`` changes spread
    round-robin, each editing its own file on the branch tip (so all but
    the first per project need a real merge)."""
    upstream = Upstream(root)
    names = [f'org/project{p}' for p in range(projects)]
    for name in names:
        upstream.create(name, {f'src/file{i}.txt': f'{name} {i}\n' * 20 for i in range(files)})
    items = []
    for n in range(1, changes + 1):
        name = names[(n - 1) % projects]
        ref = upstream.add_change(name, n, {f'src/file{n}.txt': f'change {n}\n'})
        items.append(MergeItem('gerrit', name, 'master', ref, n, 1))
    return items


def with_mode(items: list[MergeItem], mode: str) -> list[MergeItem]:
    return [MergeItem(i.connection, i.project, i.branch, i.ref, i.number, i.patchset, mode)
            for i in items]


def timed(fn) -> float:
    start = time.monotonic()
    fn()
    return time.monotonic() - start


def check(outcome) -> None:
    if not outcome.merged:
        raise SystemExit(f'benchmark merge failed: {outcome.error or outcome.conflict}')


class Bench:
    def __init__(self, root: str, items: list[MergeItem], upstream_root: str):
        self.root = root
        self.items = items
        self.resolver = RepoUrlResolver({'gerrit': upstream_root})
        self.count = 0

    def merger(self) -> Merger:
        self.count += 1
        return Merger(f'{self.root}/cache{self.count}', self.resolver,
                      git_user_email='bench@example.org', git_user_name='Bench')

    def cold(self) -> float:
        merger = self.merger()
        return timed(lambda: check(merger.merge_changes(self.items)))

    def warm(self, merger: Merger, mode: str = 'merge-resolve') -> float:
        items = with_mode(self.items, mode)
        return timed(lambda: check(merger.merge_changes(items)))

    def reproduce(self, merger: Merger, state: dict) -> float:
        return timed(lambda: check(merger.merge_changes(self.items, repo_state=state)))

    def workspace(self, merger: Merger, state: dict, projects: list) -> float:
        self.count += 1
        dest = f'{self.root}/ws{self.count}'
        took = timed(lambda: merger.prepare_workspace(state, projects, dest,
                                                      {'gerrit': 'review.example.org'}))
        shutil.rmtree(dest)
        return took


def gearman_rounds(bench: Bench, rounds: int) -> list[float]:
    port = free_port()
    gearman = GearServer(port=port, host='127.0.0.1')
    server = MergeServer([('127.0.0.1', port)], bench.merger(), hostname='bench')
    server.start()
    client = MergeClient('127.0.0.1', port)
    try:
        client.merge_items(bench.items, None).wait(300)  # warm the cache
        times = []
        for _ in range(rounds):
            start = time.monotonic()
            result = client.merge_items(bench.items, None).wait(300)
            times.append(time.monotonic() - start)
            if result is None or not result.merged:
                raise SystemExit(f'gearman merge failed: {result}')
        return times
    finally:
        client.stop()
        server.stop()
        gearman.shutdown()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--changes', type=int, default=20)
    parser.add_argument('--projects', type=int, default=5)
    parser.add_argument('--files', type=int, default=200, help='files per project')
    parser.add_argument('--rounds', type=int, default=5)
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix='zmb')
    try:
        items = build_upstream(f'{root}/up', args.changes, args.projects, args.files)
        bench = Bench(root, items, f'{root}/up')
        rows = []
        rows.append(('cold cache: clone + merge', [bench.cold() for _ in range(args.rounds)]))
        warm = bench.merger()
        first = warm.merge_changes(items)
        check(first)
        rows.append(('warm cache: fetch + merge', [bench.warm(warm)
                                                   for _ in range(args.rounds)]))
        executor = bench.merger()
        executor.merge_changes(items, repo_state=first.base_state)
        rows.append(('executor: reproduce from repo_state',
                     [bench.reproduce(executor, first.base_state)
                      for _ in range(args.rounds)]))
        projects = sorted({('gerrit', i.project, None) for i in items})
        rows.append((f'workspace checkout of {len(projects)} projects',
                     [bench.workspace(executor, first.repo_state, projects)
                      for _ in range(args.rounds)]))
        for mode in MERGE_MODES:
            rows.append((f'warm, mode {mode}', [bench.warm(warm, mode)
                                                for _ in range(args.rounds)]))
        rows.append(('warm, over Gearman (client -> server)',
                     gearman_rounds(bench, args.rounds)))
        print(f'\n{args.changes} changes across {args.projects} projects '
              f'({args.files} files each), median of {args.rounds} rounds\n')
        print(f'| {"operation":<42} | {"seconds":>8} | {"ms/change":>9} |')
        print(f'| {"-" * 42} | {"-" * 7}: | {"-" * 8}: |')
        for name, times in rows:
            median = statistics.median(times)
            print(f'| {name:<42} | {median:>8.3f} | {median * 1000 / args.changes:>9.1f} |')
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
