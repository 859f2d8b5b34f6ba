"""Durable scheduler state end to end (issue 16): the development Gerrit,
a real ZooKeeper, real Gearman, the merger and the executor running real
playbooks. The scheduler is stopped in the middle of a gate run (builds
running, items queued behind) without a final save, a new one starts on
the same zuul.conf, and the outcome in Gerrit is what one uninterrupted
scheduler would have produced: same order, one report per change, builds
adopted rather than run again."""

from __future__ import annotations

import os
import textwrap

import pytest

from tests.functional.system_support import (  # noqa: F401 - fixture
    CHECK_MARKER,
    NOOP,
    PIPELINES,
    zuul_system,
)
from tests.harness.waiting import wait_for

HOLD = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Wait until the test lets the build end
      wait_for:
        path: "{{ release_file }}"
        timeout: 300
"""

HOLDING_JOB = """
- job:
    name: held
    run: playbooks/hold.yaml
    vars:
      release_file: {release}
"""

APP = """
- project:
    queue: integrated
    check:
      jobs:
        - noop-ok
    gate:
      jobs:
        - held
"""


def _projects(system, release: str) -> None:
    store = system.store
    store.create_project('org/project-config', {
        'zuul.d/pipelines.yaml': textwrap.dedent(PIPELINES) +
        textwrap.dedent(HOLDING_JOB.format(release=release)),
        'playbooks/check-marker.yaml': textwrap.dedent(CHECK_MARKER),
        'playbooks/noop.yaml': textwrap.dedent(NOOP),
        'playbooks/hold.yaml': textwrap.dedent(HOLD)})
    store.create_project('org/app', {'.zuul.yaml': textwrap.dedent(APP), 'README': 'app\n'})
    store.create_project('org/lib', {'README': 'lib\n'})


def _with_build_records(system, zk_chroot) -> None:
    """The in-process executor records its builds in ZooKeeper, as the
    zuul-executor daemon does with [zookeeper] hosts."""
    from zuul.zk.builds import BuildRecords
    system.executor.build_records = BuildRecords(zk_chroot.client())


def _start_with_held_job(system, zk_chroot) -> str:
    """Start the system whose gate job waits for the returned file."""
    release = os.path.join(system.root, 'release')
    _projects(system, release)
    _with_build_records(system, zk_chroot)
    system.start()
    return release


def _crash(system) -> None:
    """Stop the scheduler the way a SIGKILL would leave things: no final
    save (what is in ZooKeeper is what the batches wrote)."""
    system.scheduler.state_store = None
    system.scheduler.event_queue = None
    system.service.stop()


def _gate_items(system) -> list:
    manager = system.scheduler.tenants['example'].managers['gate']
    return [item.change.number for item in manager.all_items()]


@pytest.mark.parametrize('builds_end', ['after-restart', 'while-down'])
def test_gate_survives_a_scheduler_crash_with_builds_running(zuul_system, zk_chroot,  # noqa: F811
                                                             builds_end):
    """Builds still running are adopted (their results come through
    their ZooKeeper records); builds that ended while no scheduler ran
    have their results applied at start."""
    system = zuul_system
    release = _start_with_held_job(system, zk_chroot)
    store = system.store
    changes = [store.create_change('org/app', 'master', f'Change {n}', {f'f{n}.txt': 'x\n'})
               for n in range(3)]
    wait_for(lambda: all(system.verified(c) == 1 for c in changes), timeout=240,
             what='check votes')
    for change in changes:
        store.approve(change, 'Workflow', 1, who='core')
    wait_for(lambda: len([b for b in system.builds if b.job.name == 'held']) == 3,
             timeout=240, what='three held builds running')
    running = {b.uuid for b in system.builds if b.job.name == 'held'}
    assert system.scheduler.loop.wait_idle(30)     # the batch that launched them was saved
    order = _gate_items(system)
    assert order == [c.number for c in changes]
    _crash(system)
    from zuul.zk.builds import COMPLETED, BuildRecords
    records = BuildRecords(zk_chroot.client())

    def release_builds():
        with open(release, 'w') as f:
            f.write('go\n')

    def while_down():
        if builds_end == 'while-down':
            release_builds()
            wait_for(lambda: all((records.get(u) or {}).get('state') == COMPLETED
                                 for u in running), timeout=120, what='builds ended')
    system.restart_scheduler(down=while_down)
    assert system.scheduler.restored_items >= 3
    assert _gate_items(system) == order or builds_end == 'while-down'   # same order
    release_builds()
    wait_for(lambda: all(store.get_change(c.number).status == 'MERGED' for c in changes),
             timeout=240, what='all three merged')
    system.settle()
    # The held builds were adopted, not launched again.
    assert not [e for e in system.launches if e['job'] == 'held']
    for change in changes:
        gate_reports = [m for m in system.messages(change) if 'gate pipeline' in m]
        assert len(gate_reports) == 1, system.messages(change)
        starts = [m for m in system.messages(change) if 'Starting gate jobs' in m]
        assert len(starts) <= 1, system.messages(change)
        assert system.verified(change) == 2
    assert not set(records.uuids()) & running    # results applied, records gone


def test_trigger_event_left_unprocessed_is_processed_after_restart(zuul_system, zk_chroot):  # noqa: F811,E501
    """An event stored by a scheduler that died before processing it is
    processed by the next one."""
    from zuul.scheduler.state import event_data
    from zuul.zk.pipeline_state import TriggerEventQueue
    system = zuul_system
    _projects(system, os.path.join(system.root, 'release'))
    system.start()
    store = system.store
    change = store.create_change('org/app', 'master', 'Lost event', {'x.txt': 'x\n'})
    wait_for(lambda: system.verified(change) == 1, timeout=240, what='check vote')
    system.settle()

    def while_down():
        from zuul.model.events import TriggerEvent
        event = TriggerEvent(type='comment-added', connection='gerrit', project='org/app',
                             branch='master', change_number=change.number, patchset=1,
                             ref=f'refs/changes/{change.number % 100:02d}/{change.number}/1',
                             comment='recheck')
        TriggerEventQueue(zk_chroot.client()).put(event_data(event))
    system.restart_scheduler(down=while_down)
    wait_for(lambda: len([m for m in system.messages(change) if 'Build succeeded' in m]) == 2,
             timeout=240, what='the recheck run')


def test_standby_scheduler_takes_over_a_gate_run(zuul_system, zk_chroot):  # noqa: F811
    """Two schedulers on one zuul.conf: the second stands by on the leader
    lock, takes over when the first dies, and finishes its gate run."""
    import threading

    from zuul.scheduler.service import SchedulerService
    system = zuul_system
    release = _start_with_held_job(system, zk_chroot)
    standby = SchedulerService(system.conf)
    started = threading.Thread(target=standby.start, daemon=True)
    started.start()
    try:
        wait_for(lambda: standby.leader_lock is not None and
                 len(standby.leader_lock.contenders()) == 2, what='standby waiting')
        assert not standby.is_leader
        store = system.store
        change = store.create_change('org/app', 'master', 'Take over', {'t.txt': 'x\n'})
        wait_for(lambda: system.verified(change) == 1, timeout=240, what='check vote')
        store.approve(change, 'Workflow', 1, who='core')
        wait_for(lambda: any(b.job.name == 'held' and b.start_time for b in system.builds),
                 timeout=240, what='held build running')
        assert system.scheduler.loop.wait_idle(30)     # its batch was saved
        _crash(system)
        started.join(60)
        assert standby.is_leader and not started.is_alive()
        system.service = standby
        system._record_launches()
        assert _gate_items(system) == [change.number]
        with open(release, 'w') as f:
            f.write('go\n')
        wait_for(lambda: store.get_change(change.number).status == 'MERGED', timeout=240,
                 what='merged by the new leader')
        system.settle()
        assert not [e for e in system.launches if e['job'] == 'held']
        assert len([m for m in system.messages(change) if 'gate pipeline' in m]) == 1
    finally:
        if system.service is not standby:
            standby.stop()


def test_events_while_no_scheduler_ran_are_caught_up(zuul_system):  # noqa: F811
    """Gerrit events that nobody listened to (no scheduler was running)
    are synthesized from Gerrit's timestamps by the next scheduler."""
    system = zuul_system
    release = os.path.join(system.root, 'release')
    with open(release, 'w') as f:
        f.write('go\n')
    _projects(system, release)
    system.start()
    store = system.store
    first = store.create_change('org/app', 'master', 'Checked before', {'a.txt': 'x\n'})
    wait_for(lambda: system.verified(first) == 1, timeout=240, what='check vote')
    system.settle()
    new = []

    def while_down():
        store.approve(first, 'Workflow', 1, who='core')
        new.append(store.create_change('org/app', 'master', 'Proposed while down',
                                       {'b.txt': 'x\n'}))
    system.restart_scheduler(down=while_down)
    wait_for(lambda: store.get_change(first.number).status == 'MERGED', timeout=240,
             what='the approval given while down gated the change')
    wait_for(lambda: system.verified(new[0]) == 1, timeout=240,
             what='the change proposed while down was checked')
    system.settle()
    assert len([m for m in system.messages(first) if 'gate pipeline' in m]) == 1
    assert len([m for m in system.messages(new[0]) if 'Build succeeded' in m]) == 1


def test_build_running_across_a_gearman_restart_reports_through_zookeeper(
        zuul_system, zk_chroot, gearman_server, caplog):  # noqa: F811
    """The Gearman server restarts while a build runs: the executor keeps
    running it, the scheduler takes its result from the build's ZooKeeper
    record; the build is not run twice and the change is reported once."""
    system = zuul_system
    release = _start_with_held_job(system, zk_chroot)
    store = system.store
    change = store.create_change('org/app', 'master', 'Across', {'g.txt': 'x\n'})
    wait_for(lambda: system.verified(change) == 1, timeout=240, what='check vote')
    store.approve(change, 'Workflow', 1, who='core')
    wait_for(lambda: any(b.job.name == 'held' and b.start_time for b in system.builds),
             timeout=240, what='held build running')
    caplog.set_level('INFO', logger='zuul.scheduler.builds')
    gearman_server.restart()
    with open(release, 'w') as f:
        f.write('go\n')
    wait_for(lambda: store.get_change(change.number).status == 'MERGED', timeout=240,
             what='merged')
    system.settle()
    assert len([e for e in system.launches if e['job'] == 'held']) == 1
    assert len([m for m in system.messages(change) if 'gate pipeline' in m]) == 1
    assert 'result taken from its ZooKeeper record' in caplog.text
