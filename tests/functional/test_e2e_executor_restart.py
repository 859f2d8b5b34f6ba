"""Stopping or restarting an executor never fails a change: real
``zuul-executor`` processes under the scheduler daemon, the development
Gerrit, ZooKeeper and Gearman.

- SIGTERM (what systemd's stop sends) or ``zuul-executor stop`` while a
  build runs: the build comes back RETRY, class ``infra:executor-stopped``,
  and runs again -- on another executor, or on the same one once it is
  started again -- without using up the job's ``attempts`` (the job here
  has ``attempts: 1``, so a counted retry would be RETRY_LIMIT).  The
  change gets one report, a success.
- ``zuul-executor graceful``: the executor takes no new build, finishes
  the one it runs (reported as usual) and exits.
"""

from __future__ import annotations

import os

import pytest

from tests.functional.system_support import zuul_system  # noqa: F401 - fixture
from tests.functional.test_fault_daemons import (
    _executors,
    _no_jobs_left,
    _setup,
    _started,
    _wait_value,
)
from tests.harness.daemons import gear_workers
from tests.harness.waiting import wait_for


def _history(system, change):
    return sorted((b['job_name'], b['result'], b['final'], b['failure_class'])
                  for b in system.build_history(project='org/app', change=change.number))


@pytest.mark.parametrize('how', ['sigterm', 'stop-command'])
def test_a_stopped_executor_never_fails_a_change(zuul_system, how):  # noqa: F811
    system = zuul_system
    markers = _setup(system, 'hold-once')
    executors = _executors(system, 2)
    system.start(executor=False)
    change = system.store.create_change('org/app', 'master', 'Held', {'app.py': 'ok\n'})
    first, = _wait_value(lambda: _started(markers), timeout=120, what='the build running')
    victim = system.executor_of(first)
    if how == 'sigterm':
        assert victim.terminate(timeout=60) == 0
    else:
        assert victim.command('stop') == 'ok'
        victim.proc.wait(60)
    survivor, = [e for e in executors if e is not victim]
    retry = _wait_value(lambda: [u for u in _started(markers) if u != first], timeout=120,
                        what='the build running again')[0]
    assert retry in survivor.build_dirs()
    open(os.path.join(markers, 'release'), 'w').close()
    wait_for(lambda: system.verified(change), timeout=120, what='the check vote')
    wait_for(lambda: _no_jobs_left(system), timeout=30, what='Gearman idle')
    system.settle()
    assert system.verified(change) == 1
    (report,) = system.messages(change)
    assert 'Build succeeded' in report and 'RETRY' not in report
    assert _history(system, change) == [
        ('hold-once', 'RETRY', False, 'infra:executor-stopped'),
        ('hold-once', 'SUCCESS', True, None)]


def test_a_build_waits_for_its_executor_to_return(zuul_system):  # noqa: F811
    system = zuul_system
    markers = _setup(system, 'hold-once')
    executor, = _executors(system, 1)
    system.start(executor=False)
    change = system.store.create_change('org/app', 'master', 'Held', {'app.py': 'ok\n'})
    first, = _wait_value(lambda: _started(markers), timeout=120, what='the build running')
    assert executor.terminate(timeout=60) == 0
    # nothing reported while no executor runs: the build waits in Gearman
    wait_for(lambda: not gear_workers(system.gear_port).get(f'executor:{executor.hostname}'),
             timeout=30, what='the executor gone')
    assert system.verified(change) == 0 and system.messages(change) == []
    open(os.path.join(markers, 'release'), 'w').close()
    executor.start()
    wait_for(lambda: system.verified(change), timeout=120, what='the check vote')
    system.settle()
    assert system.verified(change) == 1 and len(system.messages(change)) == 1
    assert [u for u in _started(markers) if u != first]


def test_graceful_finishes_the_running_build_first(zuul_system):  # noqa: F811
    system = zuul_system
    markers = _setup(system, 'hold-once')
    executor, = _executors(system, 1)
    system.start(executor=False)
    change = system.store.create_change('org/app', 'master', 'Held', {'app.py': 'ok\n'})
    first, = _wait_value(lambda: _started(markers), timeout=120, what='the build running')
    assert executor.command('graceful') == 'ok'
    # it stops taking builds at once, and keeps running this one
    wait_for(lambda: 'executor:execute' not in gear_workers(system.gear_port).get(
        f'executor:{executor.hostname}', ()), timeout=30, what='no more builds taken')
    assert executor.running and first in executor.build_dirs()
    open(os.path.join(markers, 'release'), 'w').close()
    wait_for(lambda: system.verified(change), timeout=120, what='the check vote')
    assert executor.proc.wait(60) == 0
    system.settle()
    assert system.verified(change) == 1
    assert _started(markers) == [first]
    assert _history(system, change) == [('hold-once', 'SUCCESS', True, None)]
