"""Scheduler faults on real processes (issue 16): ``zuul-scheduler``
processes, a ``zuul-executor`` process recording its builds in ZooKeeper,
the development Gerrit, real ZooKeeper and Gearman. The leading scheduler
is SIGKILLed in the middle of a gate run; the standby takes over from the
saved state. What is asserted is what users see: Gerrit's final state and
the build history."""

from __future__ import annotations

import configparser
import os
import time

import pytest
from kazoo.client import KazooClient

from tests.functional.system_support import zuul_system  # noqa: F401
from tests.functional.test_scheduler_restart import _projects
from tests.harness.daemons import DaemonProcess
from tests.harness.waiting import wait_for
from zuul.zk.pipeline_state import PipelineStateStore


def _saved_running_builds(store) -> dict:
    """Job name -> how many unfinished builds the gate's saved state in
    ZooKeeper holds (read through ``store``, a PipelineStateStore, as the
    standby will read it)."""
    state = store.load('example', 'gate') or {}
    counts: dict = {}
    for queue in state.get('queues', ()):
        for item in queue.get('items', ()):
            for name, build in (item['buildset'].get('builds') or {}).items():
                if build.get('result') is None:
                    counts[name] = counts.get(name, 0) + 1
    return counts


def _session_timeout(system, seconds: int) -> None:
    """A short ZooKeeper session: a killed leader's lock goes sooner."""
    config = configparser.RawConfigParser()
    config.read(system.conf_path)
    config['zookeeper']['session_timeout'] = str(seconds)
    with open(system.conf_path, 'w') as f:
        config.write(f)


def _standby(system, name: str) -> DaemonProcess:
    """A second scheduler on its own host's zuul.conf (its own state dir and
    command socket, as on another machine)."""
    config = configparser.RawConfigParser()
    config.read(system.conf_path)
    home = os.path.join(system.root, name)
    os.makedirs(home, exist_ok=True)
    config['scheduler']['state_dir'] = os.path.join(home, 'state')
    config['scheduler']['pidfile'] = os.path.join(home, 'scheduler.pid')
    path = os.path.join(home, 'zuul.conf')
    with open(path, 'w') as f:
        config.write(f)
    daemon = DaemonProcess(system, 'scheduler', name, path)
    system.daemons[name] = daemon
    return daemon.start(wait=False)


def test_standby_takes_over_when_the_leader_is_killed_mid_gate(zuul_system):  # noqa: F811
    system = zuul_system
    release = os.path.join(system.root, 'release')
    _projects(system, release)
    _session_timeout(system, 4)
    system.start(scheduler=False, executor=False)
    system.start_daemon('executor')
    leader = system.start_daemon('scheduler')
    standby = _standby(system, 'scheduler-b')
    wait_for(lambda: 'Standing by' in standby.log(), timeout=60, what='standby waiting')
    store = system.store
    changes = [store.create_change('org/app', 'master', f'Change {n}', {f'k{n}.txt': 'x\n'})
               for n in range(2)]
    wait_for(lambda: all(system.verified(c) == 1 for c in changes), timeout=240,
             what='check votes')
    for change in changes:
        store.approve(change, 'Workflow', 1, who='core')
    wait_for(lambda: len([j for j in system.queued_items() if j[0] == 'gate']) == 2 and
             all(job.get('start_time') or job.get('url')
                 for p in system.status()['pipelines'] if p['name'] == 'gate'
                 for q in p['change_queues'] for h in q['heads'] for i in h
                 for job in i['jobs']),
             timeout=240, what='both gate builds running')
    # The leader saves in batches: kill it once ZooKeeper holds both
    # running builds (what the standby must adopt), not after a guess.
    client = KazooClient(hosts=system.conf.zookeeper.hosts)
    client.start(timeout=30)
    try:
        saved = PipelineStateStore(client)
        wait_for(lambda: _saved_running_builds(saved) == {'held': 2}, timeout=60,
                 what='the running gate builds saved in ZooKeeper')
    finally:
        client.stop()
        client.close()
    killed_at = time.monotonic()
    leader.kill()
    wait_for(lambda: 'Scheduler started with tenants' in standby.log(), timeout=60,
             what='the standby leading')
    takeover = time.monotonic() - killed_at
    assert '2 items restored' in standby.log() or '(2 items' in standby.log(), \
        standby.log()[-3000:]
    with open(release, 'w') as f:
        f.write('go\n')
    wait_for(lambda: all(store.get_change(c.number).status == 'MERGED' for c in changes),
             timeout=240, what='both merged after the takeover')
    system.wait_idle()
    for change in changes:
        assert len([m for m in system.messages(change) if 'gate pipeline' in m]) == 1
        assert system.verified(change) == 2
        held = [b for b in system.build_history(job_name='held', change=change.number)]
        assert len(held) == 1, held      # adopted, not run a second time
        assert held[0]['result'] == 'SUCCESS'
    print(f'takeover after SIGKILL: {takeover:.1f} s (session timeout 4 s)')


@pytest.mark.parametrize('pipeline,when,standby', [('gate', 'before-it-lands', 'true'),
                                                   ('gate', 'after-it-lands', 'true'),
                                                   ('check', 'after-it-lands', 'true'),
                                                   ('gate', 'before-it-lands', 'false'),
                                                   ('check', 'after-it-lands', 'false')])
def test_scheduler_killed_while_sending_a_report(zuul_system, pipeline, when,  # noqa: F811
                                                 standby):
    """SIGKILL of the only scheduler while a report (gate: vote and submit;
    check: vote) is being sent: before Gerrit applied it, or after Gerrit
    applied it but before the scheduler heard back. After a restart every
    change is reported exactly once (and merged, in the gate). Also with
    ``standby = false`` (an active scheduler: events in the tenant's
    queue, the tenant taken again from its lock)."""
    import signal
    import threading
    system = zuul_system
    release = os.path.join(system.root, 'release')
    with open(release, 'w') as f:
        f.write('go\n')
    _projects(system, release)
    system.start(scheduler=False, executor=False)
    system.start_daemon('executor')
    scheduler = system.start_daemon('scheduler', standby=standby)
    store = system.store
    killed = threading.Event()
    real_review = store.review

    def is_the_report(who, submit, labels):
        if who != 'zuul':
            return False
        return submit if pipeline == 'gate' else (labels or {}).get('Verified') == 1

    def review(change, patchset, who, message='', labels=None, submit=False, **kw):
        if is_the_report(who, submit, labels) and not killed.is_set():
            if when == 'after-it-lands':
                real_review(change, patchset, who, message, labels, submit=submit, **kw)
            os.killpg(scheduler.pid, signal.SIGKILL)
            killed.set()
            if when == 'after-it-lands':
                return
            raise RuntimeError('the scheduler died before this review was applied')
        return real_review(change, patchset, who, message, labels, submit=submit, **kw)
    if pipeline == 'check':
        store.review = review
    changes = [store.create_change('org/app', 'master', f'Report {n}', {f'r{n}.txt': 'x\n'})
               for n in range(2)]
    if pipeline == 'gate':
        wait_for(lambda: all(system.verified(c) == 1 for c in changes), timeout=240,
                 what='check votes')
        store.review = review
        for change in changes:
            store.approve(change, 'Workflow', 1, who='core')
    assert killed.wait(240), 'no report was sent'
    scheduler.kill()
    scheduler.start()
    if pipeline == 'gate':
        wait_for(lambda: all(store.get_change(c.number).status == 'MERGED' for c in changes),
                 timeout=240, what='both merged after the restart')
    else:
        wait_for(lambda: all(system.verified(c) == 1 for c in changes), timeout=240,
                 what='both checked after the restart')
    system.wait_idle()
    marker = 'gate pipeline' if pipeline == 'gate' else 'Build succeeded'
    for change in changes:
        reports = [m for m in system.messages(change) if marker in m and
                   (pipeline == 'gate' or 'gate pipeline' not in m)]
        # On failure: what the scheduler did with the change, both starts.
        trail = [line for line in scheduler.log().splitlines() if line.startswith('---') or
                 f' {change.number},' in line and 'DEBUG' not in line]
        assert len(reports) == 1, (system.messages(change), trail)
        assert system.verified(change) == (2 if pipeline == 'gate' else 1)


@pytest.mark.parametrize('standby', ['true', 'false'])
def test_sigterm_stops_the_scheduler_while_zookeeper_is_gone(zuul_system, tmp_path,  # noqa: F811
                                                             standby):
    """ZooKeeper gone for good, then SIGTERM (systemd stopping the unit):
    the scheduler does not wait for a server that never answers; it says
    what is kept and exits 0 (before, the final save waited for ever)."""
    import signal
    import subprocess

    from nodepool.zk.localserver import LocalZooKeeper
    system = zuul_system
    _projects(system, os.path.join(system.root, 'release'))
    server = LocalZooKeeper(base_dir=str(tmp_path / 'zookeeper'))
    server.start()
    try:
        system.start(scheduler=False, executor=False)
        scheduler = system.start_daemon('scheduler', standby=standby, sections={
            'zookeeper': {'hosts': server.hosts}})
        wait_for(lambda: 'Scheduler started with tenants' in scheduler.log(), timeout=120,
                 what='the scheduler started')
    finally:
        server.stop()
    wait_for(lambda: 'Connection dropped' in scheduler.log() or
             'Connection time-out' in scheduler.log(), timeout=60,
             what='the scheduler to lose ZooKeeper')
    os.kill(scheduler.pid, signal.SIGTERM)
    try:
        status = scheduler.proc.wait(60)
    except subprocess.TimeoutExpired:
        scheduler.kill()
        pytest.fail('the scheduler was still stopping 60 s after SIGTERM')
    assert status == 0, scheduler.log()[-3000:]
    assert 'Stopping while ZooKeeper is unreachable' in scheduler.log()
