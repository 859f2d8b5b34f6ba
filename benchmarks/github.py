"""GitHub pull requests through check and gate: webhook -> status latency
and GitHub API calls per pull request.

Real parts: zuul-web taking signed webhook deliveries over HTTP, ZooKeeper,
Gearman, zuul-merger fetching over git-over-HTTP with the App's
installation token, the scheduler daemon's service, and a fake GitHub
speaking the REST API (tests/fakes/github.py). The executor is the
"instant executor" of benchmarks/scheduler.py (SUCCESS at once), so the
numbers are about Zuul and its use of the GitHub API, not Ansible.

    .venv/bin/python -m benchmarks.github [--prs N]

Runs twice: without the change cache (every lookup of a pull request
asks GitHub, on the scheduler's loop: how the driver worked before) and
with it (each event's pull request read once, ahead, on the
installation's worker; the scheduler's lookups answered from the cache).
Prints a table: delivery -> pending status and delivery -> final status
(median, p95) in check and gate, and API requests per pull request by
kind (reads answered 304 are counted apart: GitHub does not charge them).
"""

from __future__ import annotations

import argparse
import collections
import os
import threading
import time

from benchmarks.hosted import hosted_run, median_p95_ms
from benchmarks.scheduler import wait_all
from tests.functional.github_support import (
    GITHUB_PIPELINES,
    REPO,
    GithubSide,
    github_config_files,
)
from tests.functional.system_support import BASE_PIPELINES


def _status_time(side, pr, context, states):
    """When the first status of ``context`` in one of ``states`` was
    posted on the pull request's head."""
    for status in side.fake.repo(REPO).get('status_log', []):
        if status['sha'] == pr['head']['sha'] and status['context'] == context and \
                status['state'] in states:
            return status['received']
    return None


def _calls(requests) -> collections.Counter:
    kinds = collections.Counter()
    for method, path, _ in requests:
        if method == 'GIT':
            kinds['git (clone/fetch)'] += 1
        elif path.endswith('/access_tokens') or path.endswith('/installation'):
            kinds['app auth'] += 1
        elif method == 'GET':
            kinds['reads'] += 1
        else:
            kinds['writes'] += 1
    return kinds


def _count_loop_requests(client) -> collections.Counter:
    """Requests the client sends from the scheduler's loop thread, by
    method (wraps the client's one-request function)."""
    counts = collections.Counter()
    send = client._once

    def once(method, *args, **kwargs):
        if threading.current_thread().name == 'scheduler':
            counts[method] += 1
        return send(method, *args, **kwargs)
    client._once = once
    return counts


def run(n_prs: int, timeout: float, cache: bool = True) -> list[tuple[str, str]]:
    with hosted_run('gb', GithubSide) as h:
        system, side = h.system, h.side
        side.configure()
        system.create_projects(pipelines=BASE_PIPELINES + GITHUB_PIPELINES,
                               config_files=github_config_files(os.path.join(h.root, 'go')))
        from kazoo.client import KazooClient
        web_zk = KazooClient(hosts=h.zk.hosts)
        web_zk.start()
        side.start_web(web_zk)
        h.start_executor()
        system.start()
        github = system.service.connections.get('github')
        github.change_cache = cache
        on_loop = _count_loop_requests(github.client)
        sent, prs = {}, []
        for i in range(n_prs):
            pr = side.open_pull(f'Change {i}', {f'f{i}.txt': f'{i}\n'})
            sent[pr['number']] = time.time()
            prs.append(pr)
        wait_all(lambda pr: _status_time(side, pr, 'example/gh-check', ('success',)),
                 prs, 'checked', timeout)
        check_calls = _calls(side.fake.requests)
        check_loop = dict(on_loop)
        approved = {}
        mark = len(side.fake.requests)
        for pr in prs:
            approved[pr['number']] = time.time()
            side.approve(pr)
        pulls = side.fake.repo(REPO)['pulls']
        wait_all(lambda pr: pulls[pr['number']]['merged'], prs, 'merged', timeout)
        gate_calls = _calls(side.fake.requests[mark:])
        gate_loop = {k: on_loop[k] - check_loop.get(k, 0) for k in on_loop}
        rows = [('pull requests through check, then gate', str(n_prs))]
        for label, context, starts in (('check', 'example/gh-check', sent),
                                       ('gate', 'example/gh-gate', approved)):
            pending = [_status_time(side, pr, context, ('pending',)) -
                       starts[pr['number']] for pr in prs]
            final = [_status_time(side, pr, context, ('success',)) - starts[pr['number']]
                     for pr in prs]
            rows.append((f'{label}: delivery -> pending status, median / p95 (ms)',
                         median_p95_ms(pending)))
            rows.append((f'{label}: delivery -> final status, median / p95 (ms)',
                         median_p95_ms(final)))
        for label, calls in (('check', check_calls), ('gate', gate_calls)):
            for kind in ('reads', 'writes', 'app auth', 'git (clone/fetch)'):
                rows.append((f'{label}: {kind} per pull request',
                             f'{calls[kind] / n_prs:.1f}'))
        for label, loop in (('check', check_loop), ('gate', gate_loop)):
            rows.append((f'{label}: reads on the scheduler loop per pull request',
                         f'{loop.get("GET", 0) / n_prs:.1f}'))
            rows.append((f'{label}: writes on the scheduler loop per pull request',
                         f'{sum(v for k, v in loop.items() if k != "GET") / n_prs:.1f}'))
        client = github.client
        rows.append(('scheduler: reads answered 304 (not charged) / requests sent',
                     f'{client.not_modified} / {client.calls}'))
        return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--prs', type=int, default=50)
    parser.add_argument('--timeout', type=float, default=900.0)
    args = parser.parse_args(argv)
    before = run(args.prs, args.timeout, cache=False)
    after = run(args.prs, args.timeout, cache=True)
    print_comparison(before, after)


def print_comparison(before, after) -> None:
    """measure | no change cache (before) | change cache (after)"""
    width = max(len(r[0]) for r in before)
    print(f'{"measure":<{width}}  {"no cache (before)":>18}  {"cache (after)":>14}')
    print('-' * (width + 36))
    for (name, old), (_, new) in zip(before, after):
        print(f'{name:<{width}}  {old:>18}  {new:>14}')


if __name__ == '__main__':
    main()
