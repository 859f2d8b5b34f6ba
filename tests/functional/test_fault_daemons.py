"""Nothing is lost when a daemon dies (issue 16): faults injected into
real ``zuul-executor`` and ``zuul-merger`` processes (SIGKILL of the
whole process tree, as a host or OOM kill does), with the scheduler,
the development Gerrit, ZooKeeper and Gearman running as usual.

- A build whose executor is killed is retried on another executor, as a
  new attempt, and its node is returned; with ``attempts: 1`` the job
  ends RETRY_LIMIT.  A scheduler process killed and started again on the
  same zuul.conf reports the next change.
- A merge whose merger is killed while it runs is submitted again and
  done by another merger (and the change merges once).

Every assertion is on what Gerrit ends up with: each change reported
exactly once (one vote, one message per pipeline run), merged where it
should be, and no build or Gearman job left behind.
"""

from __future__ import annotations

import os
import socket

from tests.functional.system_support import (  # noqa: F401 - fixture
    BASE_PIPELINES,
    zuul_system,
)
from tests.functional.test_e2e_zuul_launcher import (  # noqa: F401 - fixture
    needs_netns,
    nodepool_launcher,
)
from tests.harness.daemons import gear_jobs
from tests.harness.waiting import wait_for

# A trusted playbook (config project) that says when it runs and then
# holds its build until the test creates the release file.
HOLD_PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Tell the test this build runs
      file:
        path: "{{ marker_dir }}/started-{{ zuul.build }}"
        state: touch
    - name: Run until the test says so
      wait_for:
        path: "{{ marker_dir }}/release"
        timeout: 120
"""

HOLD_JOBS = """
- job:
    name: hold
    run: playbooks/hold.yaml
    vars:
      marker_dir: {markers}
- job:
    name: hold-once
    parent: hold
    attempts: 1
"""


def _project(job: str) -> str:
    return f"""
- project:
    queue: integrated
    check:
      jobs:
        - {job}
    gate:
      jobs:
        - {job}
"""


def _setup(system, job: str) -> str:
    """Projects whose org/app runs ``job`` in check and gate; returns
    the marker directory the hold playbook talks through."""
    markers = os.path.join(system.root, 'markers')
    os.makedirs(markers)
    system.create_projects(app_config=_project(job),
                           pipelines=BASE_PIPELINES + HOLD_JOBS.format(markers=markers),
                           config_files={'playbooks/hold.yaml': HOLD_PLAYBOOK})
    return markers


def _started(markers: str) -> list[str]:
    """Uuids of the builds whose hold playbook runs (or ran)."""
    return sorted(name[len('started-'):] for name in os.listdir(markers)
                  if name.startswith('started-'))


def _wait_value(get, timeout: float, what: str):
    """wait_for, returning the first true value of ``get()``."""
    found = []
    wait_for(lambda: found.append(get()) or found[-1], timeout=timeout, what=what)
    return found[-1]


def _no_jobs_left(system) -> bool:
    """No build or merge queued or running in Gearman."""
    return not any(total for total, _ in gear_jobs(system.gear_port).values())


def _executors(system, n: int):
    # Merges go to the in-process merger only: executors take builds.
    return [system.start_daemon('executor', name=f'ex{i}', disable_merger='true')
            for i in range(1, n + 1)]


def test_build_of_a_killed_executor_is_retried_on_another(zuul_system):  # noqa: F811
    # Scheduler and executors are processes; only the merger is in here.
    system = zuul_system
    markers = _setup(system, 'hold')
    executors = _executors(system, 2)
    system.start(scheduler=False, executor=False)
    scheduler = system.start_daemon('scheduler')
    change = system.store.create_change('org/app', 'master', 'Held', {'app.py': 'ok\n'})
    first, = _wait_value(lambda: _started(markers), timeout=120, what='the build running')
    victim = system.executor_of(first)
    assert victim is not None, 'no executor holds the running build'
    victim.kill()
    survivor, = [e for e in executors if e is not victim]
    # the retry is a new build, on the executor that is left
    retry = _wait_value(lambda: [u for u in _started(markers) if u != first], timeout=120,
                        what='the retried build running')[0]
    assert retry in survivor.build_dirs()
    open(os.path.join(markers, 'release'), 'w').close()
    wait_for(lambda: system.verified(change), timeout=120, what='the check vote')
    system.wait_idle()
    assert system.verified(change) == 1
    (report,) = system.messages(change)
    assert 'Build succeeded' in report and '- hold ' in report and 'SUCCESS' in report
    # two attempts of one job, the second on the survivor, and nothing held
    assert _started(markers) == sorted([first, retry])
    assert survivor.build_dirs() == set()
    builds = system.build_history(project='org/app')
    # the lost attempt is kept (RETRY, not final) as released Zuul shows it
    assert sorted((b['job_name'], b['result'], b['uuid'], b['final']) for b in builds) == \
        sorted([('hold', 'SUCCESS', retry, True), ('hold', 'RETRY', first, False)])
    # A scheduler killed when idle and started again on the same
    # zuul.conf reports the next change (once).
    scheduler.restart(kill=True)
    later = system.store.create_change('org/app', 'master', 'Later', {'b.py': 'ok\n'})
    wait_for(lambda: system.verified(later), timeout=120, what='the vote after restart')
    system.wait_idle()
    assert system.verified(later) == 1 and len(system.messages(later)) == 1
    assert len(system.messages(change)) == 1


def test_a_killed_build_with_no_attempts_left_is_retry_limit(zuul_system):  # noqa: F811
    system = zuul_system
    markers = _setup(system, 'hold-once')
    open(os.path.join(markers, 'release'), 'w').close()     # nothing waits
    executors = _executors(system, 2)
    system.start(executor=False)
    change = system.store.create_change('org/app', 'master', 'Once', {'app.py': 'ok\n'})
    # find the executor as soon as it took the build (before ansible runs)
    victim = _wait_value(lambda: next((e for e in executors if e.build_dirs()), None),
                      timeout=120, what='an executor taking the build')
    victim.kill()
    wait_for(lambda: system.verified(change), timeout=120, what='the check vote')
    wait_for(lambda: _no_jobs_left(system), timeout=30, what='Gearman idle')
    system.settle()
    assert system.verified(change) == -1
    (report,) = system.messages(change)
    assert 'Build failed' in report and '- hold-once ' in report and 'RETRY_LIMIT' in report
    assert len(system.launches) == 1
    assert all(not e.build_dirs() for e in executors if e is not victim)


def test_merge_of_a_killed_merger_is_done_by_another(zuul_system):  # noqa: F811
    system = zuul_system
    store = system.store
    system.create_projects(pipelines=BASE_PIPELINES)
    # Merger processes only (the in-process executor takes no merges).
    m1 = system.start_daemon('merger', name='m1')
    system.start(merger=False)
    change = store.create_change('org/app', 'master', 'Gated', {'gated.txt': 'yes\n'})
    wait_for(lambda: system.verified(change) == 1, timeout=120, what='the check vote')
    # A second merger whose Gerrit never answers (a TCP listener that
    # accepts and says nothing): the merge it takes hangs in git fetch
    # until it is killed.  m1 takes nothing meanwhile.
    blackhole = socket.socket()
    blackhole.bind(('127.0.0.1', 0))
    blackhole.listen(16)
    try:
        assert m1.command('pause') == 'ok'
        m2 = system.start_daemon('merger', name='m2', sections={
            'connection gerrit': {'port': blackhole.getsockname()[1]}})
        store.approve(change, 'Workflow', 1, who='core')
        wait_for(lambda: gear_jobs(system.gear_port).get('merger:merge') == (1, 1),
                 timeout=60, what='m2 running the gate merge')
        m2.kill()
        # the merge is not lost: it waits in Gearman for a merger...
        wait_for(lambda: gear_jobs(system.gear_port).get('merger:merge') == (1, 0),
                 timeout=30, what='the merge job submitted again')
        # ...and m1, killed while paused and started again, does it
        m1.restart(kill=True)
        wait_for(lambda: store.get_change(change.number).status == 'MERGED', timeout=120,
                 what='the change merged')
    finally:
        blackhole.close()
    wait_for(lambda: _no_jobs_left(system), timeout=30, what='Gearman idle')
    system.settle()
    assert system.verified(change) == 2
    check, start, gate = system.messages(change)
    assert 'Build succeeded' in check and 'gate' not in check
    assert start == 'Starting gate jobs.'
    assert 'Build succeeded (gate pipeline)' in gate
    head = store.branch_head('org/app', 'master')
    log = store.repos.git('org/app', 'log', '--format=%s', head).splitlines()
    assert log.count('Gated') == 1
    assert [(x['pipeline'], x['job']) for x in system.launches] == [
        ('check', 'check-marker'), ('gate', 'check-marker')]


def test_a_restarted_executor_removes_the_build_dirs_it_left(zuul_system):  # noqa: F811
    system = zuul_system
    executor = system.start_daemon('executor', name='ex1', disable_merger='true')
    stale = os.path.join(executor.job_dir, 'c9fe5a486a994c56a1bd2820dd770152')
    os.makedirs(os.path.join(stale, 'work', 'src'))
    executor.restart(kill=True)
    assert executor.build_dirs() == set()


# The hold playbook, on a node: the build has its node in use while held.
HOLD_ON_NODE_PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - command: "true"
""" + HOLD_PLAYBOOK

NODE_JOBS = """
- job:
    name: hold-on-node
    run: playbooks/hold-on-node.yaml
    nodeset:
      nodes:
        - name: node
          label: ubuntu-jammy
    vars:
      marker_dir: {markers}
"""


@needs_netns
def test_node_of_a_killed_build_is_returned(zuul_system, nodepool_launcher):  # noqa: F811
    system = zuul_system
    nodes = nodepool_launcher      # the launcher's ZooKeeper client
    markers = os.path.join(system.root, 'markers')
    os.makedirs(markers)
    system.create_projects(app_config=_project('hold-on-node'),
                           pipelines=BASE_PIPELINES + NODE_JOBS.format(markers=markers),
                           config_files={'playbooks/hold-on-node.yaml': HOLD_ON_NODE_PLAYBOOK})
    executors = _executors(system, 2)
    system.start(executor=False)
    change = system.store.create_change('org/app', 'master', 'On a node', {'a.py': 'ok\n'})
    first, = _wait_value(lambda: _started(markers), timeout=120, what='the build running')
    (held,) = [n.id for n in nodes.get_nodes() if n.state == 'in-use']
    victim = system.executor_of(first)
    victim.kill()
    retry = _wait_value(lambda: [u for u in _started(markers) if u != first], timeout=120,
                        what='the retried build running')[0]
    assert retry in next(e for e in executors if e is not victim).build_dirs()
    # the killed build's node went back (used, then deleted by the
    # launcher); the retry runs on a node of its own
    wait_for(lambda: held not in [n.id for n in nodes.get_nodes()
                                  if n.state in ('in-use', 'ready')],
             timeout=60, what='the killed build\'s node returned')
    open(os.path.join(markers, 'release'), 'w').close()
    wait_for(lambda: system.verified(change), timeout=120, what='the check vote')
    system.wait_idle()
    assert system.verified(change) == 1 and len(system.messages(change)) == 1
    wait_for(lambda: not [n for n in nodes.get_nodes() if n.state in ('in-use', 'used')],
             timeout=60, what='every node returned and deleted')
    assert len(system.launches) == 2
