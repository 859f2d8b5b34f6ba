"""Build history queries of zuul-web with many builds in the database.

    .venv/bin/python -m benchmarks.web_builds [--builds 100000] [--rounds 7]
                                              [--postgresql]

Fills a fresh SQLite database (and, with --postgresql, a throw-away
PostgreSQL cluster as tests/functional/test_web_postgres.py starts it)
with --builds builds in buildsets of four, over two tenants, 20 projects,
three pipelines and 30 jobs, then times the queries behind
/api/tenant/<t>/builds, /buildsets and /buildset/<uuid> through
BuildHistory: once without the indexes of schema migration 2 and once
with them.  Each figure is the median of --rounds runs, in milliseconds.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import random
import statistics
import tempfile
import time
import uuid as uuidlib

import sqlalchemy as sa

from zuul.driver.sql.history import _INDEXES, BuildHistory

PROJECTS = [f'org/project{n}' for n in range(20)]
PIPELINES = ['check', 'gate', 'post']
JOBS = [f'job-{n}' for n in range(30)]
RESULTS = ['SUCCESS'] * 8 + ['FAILURE', 'POST_FAILURE', 'TIMED_OUT', 'NODE_FAILURE']
EPOCH = datetime.datetime(2025, 1, 1)


def fill(history: BuildHistory, builds: int, seed: int = 1) -> dict:
    """Insert the rows in bulk; returns sample values to query for."""
    rng = random.Random(seed)
    t = history.tables
    buildsets, rows = [], []
    sample = {}
    for n in range(builds // 4):
        project = PROJECTS[n % len(PROJECTS)]
        pipeline = PIPELINES[n % len(PIPELINES)]
        start = EPOCH + datetime.timedelta(minutes=n)
        bs_uuid = uuidlib.uuid4().hex
        buildsets.append({'id': n + 1, 'uuid': bs_uuid, 'tenant': f'tenant-{n % 2}',
                          'pipeline': pipeline, 'project': project, 'change': 1000 + n // 3,
                          'patchset': str(n % 3 + 1), 'ref': f'refs/changes/{n}',
                          'newrev': f'{n:040x}', 'branch': 'master', 'result': 'SUCCESS',
                          'message': '', 'first_build_start_time': start,
                          'last_build_end_time': start + datetime.timedelta(minutes=20),
                          'updated': start})
        for j in range(4):
            duration = rng.randint(60, 3600)
            rows.append({'buildset_id': n + 1, 'uuid': uuidlib.uuid4().hex,
                         'job_name': JOBS[(n + j * 7) % len(JOBS)],
                         'result': rng.choice(RESULTS), 'start_time': start,
                         'end_time': start + datetime.timedelta(seconds=duration),
                         'voting': j != 3, 'final': True, 'held': False})
        if n == builds // 8:
            # values that exist in the sample's tenant (a filter matching
            # nothing measures a full scan, not a page)
            sample.update(buildset=bs_uuid, build=rows[-1]['uuid'], change=1000 + n // 3,
                          tenant=f'tenant-{n % 2}', project=project,
                          job=rows[-1]['job_name'])
    with history.engine.begin() as conn:
        for start in range(0, len(buildsets), 5000):
            conn.execute(sa.insert(t['buildset']), buildsets[start:start + 5000])
        for start in range(0, len(rows), 20000):
            conn.execute(sa.insert(t['build']), rows[start:start + 20000])
    return sample


def queries(history: BuildHistory, s: dict) -> list[tuple[str, callable]]:
    t = s['tenant']
    return [
        ('builds, newest 50', lambda: history.get_builds(t)),
        ('builds ?project=', lambda: history.get_builds(t, project=s['project'])),
        ('builds ?job_name=', lambda: history.get_builds(t, job_name=s['job'])),
        ('builds ?project=&job_name=', lambda: history.get_builds(
            t, project=s['project'], job_name=s['job'])),
        ('builds ?change=&patchset=', lambda: history.get_builds(
            t, change=s['change'], patchset='1')),
        ('builds ?result=TIMED_OUT', lambda: history.get_builds(t, result='TIMED_OUT')),
        ('builds ?voting=false', lambda: history.get_builds(t, voting=False)),
        ('builds ?uuid=', lambda: history.get_builds(t, uuid=s['build'])),
        ('builds ?pipeline=gate&skip=5000', lambda: history.get_builds(
            t, pipeline='gate', offset=5000)),
        ('builds ?sort=-duration', lambda: history.get_builds(t, sort='-duration')),
        ('buildsets, newest 50', lambda: history.get_buildsets(t)),
        ('buildsets ?project=', lambda: history.get_buildsets(t, project=s['project'])),
        ('buildset page (set + builds)', lambda: (
            history.get_buildsets(t, uuid=s['buildset'], limit=1),
            history.get_builds(t, buildset_uuid=s['buildset'], sort='id', limit=1000))),
    ]


def timed(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def drop_indexes(history: BuildHistory) -> None:
    with history.engine.begin() as conn:
        for key, column_sets in _INDEXES.items():
            table = history.tables[key]
            for columns in column_sets:
                conn.execute(sa.text(f'DROP INDEX {table.name}_{"_".join(columns)}_idx'))


def create_indexes(history: BuildHistory) -> None:
    from zuul.driver.sql.history import _migration_2
    with history.engine.begin() as conn:
        _migration_2(conn, history.tables, history.metadata)
        conn.execute(sa.text('ANALYZE'))  # both engines: plan with fresh statistics


def measure(name: str, dburi: str, builds: int, rounds: int) -> dict[str, tuple]:
    history = BuildHistory(dburi)
    history.migrate()
    start = time.perf_counter()
    sample = fill(history, builds)
    print(f'{name}: {builds} builds inserted in {time.perf_counter() - start:.1f} s')
    drop_indexes(history)
    without = {label: timed(fn, rounds) for label, fn in queries(history, sample)}
    create_indexes(history)
    results = {}
    for label, fn in queries(history, sample):
        fn()  # check it runs, warm the cache
        results[label] = (without[label], timed(fn, rounds))
    history.engine.dispose()
    return results


@contextlib.contextmanager
def postgresql():
    """A throw-away cluster (the test fixture's recipe); None if absent."""
    from tests.functional import test_web_postgres as pg
    if pg._skip_reason() is not None:
        print(f'PostgreSQL skipped: {pg._skip_reason()}')
        yield None
        return
    gen = pg.postgres.__wrapped__()
    try:
        yield next(gen)
    finally:
        with contextlib.suppress(StopIteration):
            next(gen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--builds', type=int, default=100_000)
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument('--postgresql', action='store_true')
    args = parser.parse_args()
    tables = {}
    with tempfile.TemporaryDirectory() as tmp:
        tables['SQLite'] = measure('SQLite', f'sqlite:///{os.path.join(tmp, "h.db")}',
                                   args.builds, args.rounds)
    if args.postgresql:
        with postgresql() as url:
            if url:
                tables['PostgreSQL'] = measure('PostgreSQL', url, args.builds, args.rounds)
    print(f'\n{args.builds} builds; median of {args.rounds} runs, ms '
          '(without the migration-2 indexes / with them)')
    header = f'{"query":<32}' + ''.join(f'{name:>22}' for name in tables)
    print(header)
    print('-' * len(header))
    for label in next(iter(tables.values())):
        cells = ''.join(f'{f"{r[label][0]:8.1f} / {r[label][1]:6.1f}":>22}'
                        for r in tables.values())
        print(f'{label:<32}{cells}')


if __name__ == '__main__':
    main()
