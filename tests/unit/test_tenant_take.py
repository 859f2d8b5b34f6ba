"""Several active schedulers: a scheduler whose take of a tenant fails
half-way (its saved pipelines cannot all be read back) leaves nothing of
the tenant behind: the lock is free for another scheduler, the items
restored before the failure are gone from its memory, the saved state is
untouched, and it can take the tenant again once restoring works. And
the intake routes an event by its own layout only while no other
scheduler has a newer one of the tenant. The real Scheduler and pipeline
managers, a real ZooKeeper."""

from __future__ import annotations

from tests.harness.waiting import wait_for
from tests.harness.zookeeper import zk_chroot, zk_client, zookeeper_server  # noqa: F401
from tests.unit.scheduler_support import enqueue_ref, start_system
from zuul.scheduler.ownership import TenantOwnership
from zuul.zk.tenant_events import tenant_lock_path

MAIN = """
- tenant:
    name: t1
    source:
      gerrit:
        config-projects: [org/config1]
"""

CONFIG = """
- pipeline:
    name: post
    manager: independent
    trigger: {}
- job:
    name: base
    parent: null
- job:
    name: held
- project:
    post:
      jobs: [held]
"""


def _items(scheduler) -> int:
    return sum(1 for m in scheduler.tenants['t1'].managers.values() for _ in m.all_items())


def test_a_take_that_fails_half_way_leaves_nothing_behind(tmp_path, zk_client):  # noqa: F811
    scheduler, executor = start_system(tmp_path, MAIN, {'org/config1': {'master': CONFIG}})
    try:
        ownership = TenantOwnership(scheduler, zk_client, 'sched-a:1')
        scheduler.ownership = ownership
        scheduler.owns = ownership.owns
        restore = scheduler.restore_tenant
        calls = []

        def half_restore(name):
            # the first pipeline came back, then reading the next one failed
            calls.append(name)
            enqueue_ref(scheduler, name, 'post', 'org/config1')
            raise RuntimeError('pipeline check: unable to look up a change')
        scheduler.restore_tenant = half_restore
        assert ownership.take('t1') is False
        assert calls == ['t1']
        assert not ownership.owns('t1')
        assert zk_client.Lock(tenant_lock_path('t1')).contenders() == []
        assert _items(scheduler) == 0, 'items of the failed take stayed in memory'
        # Restoring works again: the tenant is taken, with nothing doubled.
        scheduler.restore_tenant = restore
        assert ownership.take('t1') is True
        assert ownership.owns('t1')
        assert zk_client.Lock(tenant_lock_path('t1')).contenders() == ['sched-a:1']
        assert _items(scheduler) == 0
        ownership.release_all()
    finally:
        executor.finish_all()
        scheduler.stop()


def test_forgetting_a_tenant_drops_its_items_and_nothing_else(tmp_path):
    scheduler, executor = start_system(tmp_path, MAIN, {'org/config1': {'master': CONFIG}})
    try:
        enqueue_ref(scheduler, 't1', 'post', 'org/config1')
        assert _items(scheduler) == 1
        assert len(executor.running) == 1
        assert scheduler.forget_tenant_items('t1') == 1
        assert _items(scheduler) == 0
        assert scheduler.forget_tenant_items('no-such-tenant') == 0
        # the build is not cancelled: the tenant's next holder adopts it
        assert len(executor.running) == 1
    finally:
        executor.finish_all()
        scheduler.stop()


def test_an_event_is_routed_to_a_tenant_whose_newer_layout_this_scheduler_lacks(
        tmp_path, zk_client):  # noqa: F811
    """A scheduler takes events for every tenant. For a project its own
    layout of the tenant does not have, it stores nothing, unless another
    scheduler has reconfigured the tenant since (the project may have
    joined there): then the tenant's holder decides, on the newest
    layout."""
    from zuul.model.events import TriggerEvent
    from zuul.zk.tenant_events import LayoutVersions
    scheduler, executor = start_system(tmp_path, MAIN, {'org/config1': {'master': CONFIG}})
    try:
        ownership = TenantOwnership(scheduler, zk_client, 'sched-b:2')
        ownership.known_versions['t1'] = LayoutVersions(zk_client).bump('t1', None)
        event = TriggerEvent(type='patchset-created', connection='gerrit',
                             project='org/joined', branch='master', change_number=7,
                             patchset=1)
        assert ownership.route(event, {'type': 'patchset-created'}) == 0
        assert ownership.queues.children('t1') == []
        # another scheduler re-read org/joined into the tenant's layout
        LayoutVersions(zk_client).bump('t1', ['org/joined'])
        wait_for(lambda: ownership.layout_behind('t1'), timeout=10,
                 what='the newer layout version seen')
        assert ownership.route(event, {'type': 'patchset-created'}) == 1
        assert len(ownership.queues.children('t1')) == 1
    finally:
        executor.finish_all()
        scheduler.stop()


def test_a_newer_layout_of_a_tenant_it_does_not_hold_wakes_the_scheduler_at_once(
        tmp_path, zk_client):  # noqa: F811
    """Another scheduler reconfigures a tenant: this one is woken by the
    version's watch and asks for the refresh at once, not at its next
    look at the locks (a tick of an hour here, so only the watch can)."""
    from zuul.zk.tenant_events import LayoutVersions
    scheduler, executor = start_system(tmp_path, MAIN, {'org/config1': {'master': CONFIG}})
    try:
        ownership = TenantOwnership(scheduler, zk_client, 'sched-b:2', tick=3600)
        ownership.known_versions['t1'] = LayoutVersions(zk_client).bump('t1', None)
        requested = []
        ownership._request = lambda what, tenant: requested.append((what, tenant))
        ownership._step()
        assert ('refresh', 't1') not in requested, 'refresh asked with no newer layout'
        ownership._wake.clear()
        LayoutVersions(zk_client).bump('t1', ['org/config1'])
        wait_for(ownership._wake.is_set, timeout=10, what='the watch waking the thread')
        ownership._step()
        assert ('refresh', 't1') in requested
    finally:
        executor.finish_all()
        scheduler.stop()
