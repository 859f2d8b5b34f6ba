"""What keeping each build's reproduction data costs (issue 32).

    .venv/bin/python -m benchmarks.reproduction [--rows 20000] [--rounds 7]

The scheduler writes, at every launch, the build's ExecuteRequest with
its secrets left out into the build database; zuul-web reads one back by
build uuid. With a realistic request (8 playbooks with roles and a
secret each, 200 job variables, three items ahead, 12 projects in the
repo state), in a fresh SQLite file holding --rows earlier records, this
prints a table: the size of one record, the time to make it
(public_request), to write it (record_reproduction) and to read it back
(get_reproduction, as /build/<uuid>/reproduction does). Times are the
median of --rounds runs, in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid as uuidlib

from zuul.driver.sql.history import BuildHistory
from zuul.executor.protocol import (
    ExecuteRequest,
    ItemSpec,
    JobSpec,
    NodeSpec,
    PlaybookSpec,
    RoleSpec,
    ZuulContext,
)
from zuul.executor.reproduction import public_request


def sample_request() -> ExecuteRequest:
    playbooks = [PlaybookSpec('gerrit', 'org/config', 'master', f'playbooks/p{n}.yaml',
                              trusted=n % 2 == 0,
                              roles=[RoleSpec('gerrit', 'zuul/zuul-jobs')],
                              secrets={f's{n}': {'token': 'x' * 64}}) for n in range(8)]
    items = [ItemSpec('gerrit', f'org/p{n}', 'review.example.org', 'master',
                      f'refs/changes/{n:02d}/{n}/1', number=n, patchset=1,
                      message='A change\n\n' + 'body ' * 40) for n in range(4)]
    state = {'gerrit': {f'org/p{n}': {'refs/heads/master': f'{n:040x}'} for n in range(12)}}
    return ExecuteRequest(
        uuid=uuidlib.uuid4().hex,
        job=JobSpec(name='tox-py311', pre_run=playbooks[:3], run=playbooks[3:5],
                    post_run=playbooks[5:],
                    vars={f'var_{n}': {'__ansible_unsafe': f'value {n}'} for n in range(200)}),
        zuul=ZuulContext(tenant='t', pipeline='gate', buildset=uuidlib.uuid4().hex),
        nodes=[NodeSpec(name=['controller'], label='ubuntu-jammy', interface_ip='10.0.0.1')],
        items=items, repo_state=state)


def _median_ms(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rows', type=int, default=20000)
    parser.add_argument('--rounds', type=int, default=7)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        history = BuildHistory(f'sqlite:///{os.path.join(tmp, "h.sqlite")}')
        history.migrate()
        request = sample_request()
        data = public_request(request)
        rows = [{'uuid': uuidlib.uuid4().hex, 'tenant': 't', 'data': json.dumps(data)}
                for _ in range(args.rows)]
        with history.engine.begin() as conn:
            conn.execute(history.tables['reproduction'].insert(), rows)
        target = rows[len(rows) // 2]['uuid']
        rounds = args.rounds
        make = _median_ms(lambda: public_request(request), rounds)
        write = _median_ms(lambda: history.record_reproduction(
            't', uuidlib.uuid4().hex, data), rounds)
        read = _median_ms(lambda: history.get_reproduction('t', target), rounds)
        figures = [('record size (bytes)', f'{len(json.dumps(data))}'),
                   ('public_request (ms)', f'{make:.2f}'),
                   ('record_reproduction (ms)', f'{write:.2f}'),
                   (f'get_reproduction of {args.rows} (ms)', f'{read:.2f}')]
    width = max(len(k) for k, _ in figures)
    print(f'{"measure":<{width}}  value')
    for key, value in figures:
        print(f'{key:<{width}}  {value}')


if __name__ == '__main__':
    main()
