"""Several active schedulers (issue 29) on real processes: two
``zuul-scheduler`` processes with ``[scheduler] standby = false``, a
``zuul-executor`` process, the development Gerrit, real ZooKeeper and
Gearman, and two tenants. Each scheduler processes the tenant whose lock
it holds; SIGKILL of one moves its tenant to the other, which finishes
the gate run it left; a reconfiguration made by one is seen by the
other before it acts on its tenant's next event."""

from __future__ import annotations

import configparser
import os
import signal
import textwrap
import time

import pytest
from kazoo.client import KazooClient

from tests.functional.system_support import zuul_system  # noqa: F401
from tests.functional.test_fault_scheduler import _saved_running_builds
from tests.functional.test_scheduler_restart import APP, _projects
from tests.harness.daemons import DaemonProcess
from tests.harness.waiting import wait_for
from zuul.zk.pipeline_state import PipelineStateStore
from zuul.zk.tenant_events import LayoutVersions, tenant_lock_path

TENANTS = """
- tenant:
    name: example
    source:
      gerrit:
        config-projects:
          - org/project-config
        untrusted-projects:
          - org/app
          - org/lib
- tenant:
    name: second
    source:
      gerrit:
        config-projects:
          - org/project-config
        untrusted-projects:
          - org/app2
          - org/lib
"""


def _scheduler(system, name: str) -> DaemonProcess:
    """An active scheduler process on its own zuul.conf (own state dir,
    pid file and command socket, as on another host)."""
    config = configparser.RawConfigParser()
    config.read(system.conf_path)
    home = os.path.join(system.root, name)
    os.makedirs(home, exist_ok=True)
    config['zookeeper']['session_timeout'] = '4'
    config['scheduler'].update({'state_dir': os.path.join(home, 'state'),
                                'pidfile': os.path.join(home, 'scheduler.pid'),
                                'standby': 'false'})
    path = os.path.join(home, 'zuul.conf')
    with open(path, 'w') as f:
        config.write(f)
    daemon = DaemonProcess(system, 'scheduler', name, path)
    system.daemons[name] = daemon
    daemon.start(wait=False)
    wait_for(lambda: 'Scheduler started with tenants' in daemon.log(), timeout=120,
             what=f'{name} started')
    return daemon


class _ZooKeeper:
    def __init__(self, system):
        self.client = KazooClient(hosts=system.conf.zookeeper.hosts)
        self.client.start(timeout=30)

    def owner(self, tenant: str) -> str | None:
        holders = self.client.Lock(tenant_lock_path(tenant)).contenders()
        return holders[0] if holders else None

    def close(self):
        self.client.stop()
        self.client.close()


def _two_schedulers(system):
    release = os.path.join(system.root, 'release')
    _projects(system, release)
    system.store.create_project('org/app2', {'.zuul.yaml': textwrap.dedent(APP),
                                             'README': 'app2\n'})
    with open(os.path.join(system.root, 'main.yaml'), 'w') as f:
        f.write(textwrap.dedent(TENANTS))
    system.start(scheduler=False, executor=False)
    system.start_daemon('executor')
    a = _scheduler(system, 'scheduler-a')
    wait_for(lambda: system.gerrit.server.stream_count() >= 1, timeout=60,
             what='the event stream')
    b = _scheduler(system, 'scheduler-b')
    zk = _ZooKeeper(system)
    def holder(tenant):
        owner = zk.owner(tenant)
        pid = owner.rsplit(':', 1)[1] if owner else None
        return next((d for d in system.daemons.values() if d.kind == 'scheduler' and
                     str(d.pid) == pid), None)
    # Both tenants idle: the first scheduler gives one up to the second.
    wait_for(lambda: {holder('example'), holder('second')} == {a, b}, timeout=60,
             what='each scheduler holding one tenant')
    return release, zk, holder, a, b


def test_two_active_schedulers_share_the_tenants_and_survive_sigkill(zuul_system):  # noqa: F811,E501
    system = zuul_system
    release, zk, holder, a, b = _two_schedulers(system)
    try:
        store = system.store
        one = store.create_change('org/app', 'master', 'One', {'one.txt': 'x\n'})
        two = store.create_change('org/app2', 'master', 'Two', {'two.txt': 'x\n'})
        wait_for(lambda: system.verified(one) == 1 and system.verified(two) == 1,
                 timeout=240, what='check votes in both tenants')
        # Each tenant's events were processed by its holder, not the other.
        owner_one, owner_two = holder('example'), holder('second')
        assert owner_one is not owner_two
        created_one = f'patchset-created gerrit org/app {one.number},1'
        created_two = f'patchset-created gerrit org/app2 {two.number},1'
        assert created_one in _processing(owner_one.log())
        assert created_two in _processing(owner_two.log())
        assert created_two not in _processing(owner_one.log())
        assert created_one not in _processing(owner_two.log())
        # The zuul command reaches the scheduler that receives the events
        # (a); an enqueue into b's tenant is carried out by b.
        b_change, b_tenant, b_project = (one, 'example', 'org/app') if owner_one is b \
            else (two, 'second', 'org/app2')
        system.rpc('zuul:enqueue', tenant=b_tenant, pipeline='check', project=b_project,
                   change=f'{b_change.number},1')
        wait_for(lambda: len([m for m in system.messages(b_change)
                              if 'Build succeeded' in m]) == 2, timeout=240,
                 what='the enqueued check run')
        spec = f'{b_change.number},1'
        assert len(_enqueued(b.log(), spec)) == 2, _enqueued(b.log(), spec)
        assert not _enqueued(a.log(), spec)
        with pytest.raises(Exception, match='99999'):
            system.rpc('zuul:enqueue', tenant=b_tenant, pipeline='check',
                       project=b_project, change='99999,1')
        for change in (one, two):
            store.approve(change, 'Workflow', 1, who='core')
        states = PipelineStateStore(zk.client)
        wait_for(lambda: _running_held(states, 'example') == 1 and
                 _running_held(states, 'second') == 1, timeout=240,
                 what='both gate builds running and saved')
        # A third scheduler joins while both tenants are busy: it takes
        # none (and must not touch their saved state).
        c = _scheduler(system, 'scheduler-c')
        wait_for(lambda: 'Scheduler started with tenants' in c.log(), timeout=60,
                 what='the third scheduler')
        # The first scheduler also receives Gerrit's events: it goes.
        tenant = 'example' if owner_one is a else 'second'
        assert {holder('example'), holder('second')} == {a, b}
        killed_at = time.monotonic()
        a.kill()
        # Its tenant goes to the scheduler below its share (the third).
        wait_for(lambda: holder(tenant) in (b, c), timeout=60,
                 what='another scheduler holding the killed one\'s tenant')
        moved = time.monotonic() - killed_at
        taker = holder(tenant)
        assert taker is c, (taker, tenant)
        # It holds the lock first, then restores the tenant and says so.
        wait_for(lambda: f'processes tenant {tenant} (' in taker.log(), timeout=60,
                 what=f'the taker restoring {tenant}')
        assert f'processes tenant {tenant} (1 items restored)' in taker.log(), \
            taker.log()[-3000:]
        wait_for(lambda: system.gerrit.server.stream_count() >= 1, timeout=60,
                 what='a survivor receiving the events')
        with open(release, 'w') as f:
            f.write('go\n')
        wait_for(lambda: all(store.get_change(c.number).status == 'MERGED'
                             for c in (one, two)), timeout=240,
                 what='both merged after the SIGKILL')
        for change, tenant in ((one, 'example'), (two, 'second')):
            assert len([m for m in system.messages(change) if 'gate pipeline' in m]) == 1
            assert system.verified(change) == 2
            # The build database is written right after the report.
            wait_for(lambda tenant=tenant, change=change: system.build_history(
                tenant=tenant, job_name='held', change=change.number), timeout=30,
                what=f'the held build of {tenant} in the build database')
            held = system.build_history(tenant=tenant, job_name='held',
                                        change=change.number)
            assert len(held) == 1, held      # adopted, not run again
            assert held[0]['result'] == 'SUCCESS'
        print(f'tenant moved {moved:.1f} s after SIGKILL (session timeout 4 s)')
    finally:
        zk.close()


def _enqueued(log: str, spec: str) -> list[str]:
    """The check reports on ``spec`` this scheduler made."""
    return [line for line in log.splitlines() if f'Reporting success on {spec}:' in line]


def _processing(log: str) -> str:
    return '\n'.join(line for line in log.splitlines() if 'Processing trigger event' in line)


def _running_held(states, tenant: str) -> int:
    return _saved_running_builds_of(states, tenant).get('held', 0)


def _saved_running_builds_of(states, tenant: str) -> dict:
    class _Tenant:
        def load(self, _tenant, pipeline):
            return states.load(tenant, pipeline)
    return _saved_running_builds(_Tenant())


def test_reconfiguration_on_one_scheduler_is_seen_by_the_other(zuul_system):  # noqa: F811
    system = zuul_system
    _, zk, holder, _, _ = _two_schedulers(system)
    try:
        store = system.store
        owner, other = holder('second'), holder('example')
        # org/app2's check job changes on its branch without any event
        # (as if the event were lost): only a full reconfiguration of the
        # *other* scheduler reads it.
        head = store.branch_head('org/app2', 'master')
        sha = store.repos.commit_files('org/app2', head, {'.zuul.yaml': textwrap.dedent("""
            - job:
                name: noop-renamed
                parent: noop-ok
            - project:
                check:
                  jobs:
                    - noop-renamed
            """)}, 'New check job', store.account('admin'), int(time.time()))
        store.repos.update_ref('org/app2', 'refs/heads/master', sha)
        versions = LayoutVersions(zk.client)
        before = versions.get('second')['version']
        os.kill(other.pid, signal.SIGHUP)
        wait_for(lambda: versions.get('second')['version'] > before, timeout=120,
                 what='the other scheduler\'s new layout version')
        change = store.create_change('org/app2', 'master', 'After', {'a.txt': 'x\n'})
        wait_for(lambda: system.verified(change) == 1, timeout=240, what='check vote')
        report = system.messages(change)[-1]
        assert 'noop-renamed' in report and 'noop-ok' not in report, report
        assert 'rebuilding it from the config cache' in owner.log(), owner.log()[-3000:]
        assert holder('second') is owner     # the same holder, its layout refreshed
    finally:
        zk.close()
