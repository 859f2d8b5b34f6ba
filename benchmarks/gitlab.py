"""GitLab merge requests through check and gate: webhook -> first report
latency and GitLab API calls per merge request.

Real parts: the GitLab stand-in as its own process (REST API v4, git over
HTTP, webhooks sent as GitLab sends them; tests/fakes/gitlab), zuul-web as
a process taking the webhooks, ZooKeeper, Gearman, zuul-merger cloning
and fetching ``refs/merge-requests/<n>/head`` with the token, and the
scheduler daemon's service. The executor is the "instant executor" of
benchmarks/scheduler.py (SUCCESS at once), so the numbers are about Zuul
and its use of the GitLab API, not Ansible.

    .venv/bin/python -m benchmarks.gitlab [--mrs N]

Prints a table: webhook sent -> first report (check: the result note;
gate: the merge), median and p95, and Zuul's API requests per merge
request in check and in gate, by kind and by endpoint.
"""

from __future__ import annotations

import argparse
import collections
import time

from benchmarks.hosted import hosted_run, median_p95_ms
from benchmarks.scheduler import print_measures, wait_all
from tests.fakes.gitlab.store import parse_time
from tests.functional.gitlab_support import GITLAB_PIPELINES, WIDGET, GitlabSide
from tests.functional.system_support import BASE_PIPELINES
from zuul.driver.gitlab.client import _route


def _delivered(gl, iid: int, action: str) -> float | None:
    """When the stand-in sent the merge request webhook ``action``."""
    for delivery in gl.deliveries():
        if delivery['kind'] == 'merge_request' and delivery['action'] == action and \
                delivery.get('iid') == iid:
            return delivery['time']
    return None


def _first_note(gl, mr) -> float | None:
    notes = gl.get(gl.mr_path(WIDGET, mr['iid']) + '/notes?sort=asc&per_page=100')
    times = [parse_time(n['created_at']) for n in notes
             if not n['system'] and n['author']['username'] == 'zuul']
    return times[0] if times else None


def _calls(requests) -> tuple[collections.Counter, collections.Counter]:
    kinds, routes = collections.Counter(), collections.Counter()
    for r in requests:
        if r['user'] != 'zuul':
            continue
        if r['method'] == 'GIT':
            kinds['git'] += 1
        else:
            kinds['reads' if r['method'] == 'GET' else 'writes'] += 1
        routes[f'{r["method"]} {_route(r["path"])}'] += 1
    return kinds, routes


def run(n_mrs: int, timeout: float) -> list[tuple[str, str]]:
    with hosted_run('glb', GitlabSide) as h:
        system, side = h.system, h.side
        side.configure()
        system.create_projects(pipelines=BASE_PIPELINES + GITLAB_PIPELINES)
        h.start_executor()
        system.start()
        side.start_web()
        gl = side.standin
        system.wait_idle(timeout=timeout)
        gl.clear_requests()
        mrs = []
        for i in range(n_mrs):
            mrs.append(gl.open_mr(WIDGET, f'Change {i}', {f'f{i}.txt': f'{i}\n'}))
        wait_all(lambda mr: _first_note(gl, mr), mrs, 'checked', timeout)
        system.wait_idle(timeout=timeout)
        check_kinds, check_routes = _calls(gl.control('GET', 'requests'))
        gl.clear_requests()
        for mr in mrs:
            gl.approve(WIDGET, mr['iid'])
        wait_all(lambda mr: gl.mr(WIDGET, mr['iid'])['state'] == 'merged', mrs, 'merged',
                 timeout)
        system.wait_idle(timeout=timeout)
        gate_kinds, gate_routes = _calls(gl.control('GET', 'requests'))
        opened = [_first_note(gl, mr) - _delivered(gl, mr['iid'], 'open') for mr in mrs]
        merged = [parse_time(gl.mr(WIDGET, mr['iid'])['merged_at']) -
                  _delivered(gl, mr['iid'], 'approved') for mr in mrs]
        rows = [('merge requests through check, then gate', str(n_mrs)),
                ('check: webhook sent -> first report (note), median / p95 (ms)',
                 median_p95_ms(opened)),
                ('gate: approval webhook sent -> merged, median / p95 (ms)',
                 median_p95_ms(merged))]
        for label, kinds, routes in (('check', check_kinds, check_routes),
                                     ('gate', gate_kinds, gate_routes)):
            rows.append((f'{label}: API requests per merge request (reads + writes)',
                         f'{(kinds["reads"] + kinds["writes"]) / n_mrs:.1f} '
                         f'({kinds["reads"] / n_mrs:.1f} + {kinds["writes"] / n_mrs:.1f})'))
            rows.append((f'{label}: git HTTP requests per merge request (ref lists, packs)',
                         f'{kinds["git"] / n_mrs:.1f}'))
            for route, count in sorted(routes.items()):
                rows.append((f'  {label}: {route}', f'{count / n_mrs:.2f}'))
        client = system.service.connections.get('gitlab').client
        rows.append(('scheduler: requests retried / sent', f'{client.retried} / '
                                                             f'{client.calls}'))
        return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--mrs', type=int, default=20)
    parser.add_argument('--timeout', type=float, default=900.0)
    args = parser.parse_args(argv)
    started = time.time()
    rows = run(args.mrs, args.timeout)
    rows.append(('wall time (s)', f'{time.time() - started:.0f}'))
    print_measures(rows)


if __name__ == '__main__':
    main()
