"""Several active schedulers: a scheduler never acts on an event of a
tenant with a layout older than the newest one, and reads the tenant's
layout version on its loop only when it must (zuul/scheduler/ownership.py):
the version read after an event, by the thread that hands the event to
the loop, travels with it. Real ZooKeeper."""

from __future__ import annotations

from types import SimpleNamespace

from zuul.model.events import TriggerEvent
from zuul.scheduler.ownership import TenantOwnership
from zuul.scheduler.state import event_data
from zuul.zk.tenant_events import LayoutVersions, TenantEventQueues


class _Scheduler:
    def __init__(self):
        self.events = []
        self.reconfigured = []
        self.loop = SimpleNamespace(add_trigger_event=self.events.append)
        self.tenants = {'t': SimpleNamespace(layout=SimpleNamespace(tenant=None))}

    def reconfigure(self, tenant_names=None, projects=None, keep_shared=False):
        self.reconfigured.append((tenant_names, projects))


def _owner(client):
    scheduler = _Scheduler()
    owner = TenantOwnership(scheduler, client, 'sched-a')
    owner.owned['t'] = object()
    owner.known_versions['t'] = LayoutVersions(client).bump('t', ['org/a'])
    reads = []
    get = owner.versions.get
    owner.versions.get = lambda tenant: reads.append(tenant) or get(tenant)
    return scheduler, owner, reads


def _event(number):
    return event_data(TriggerEvent(type='patchset-created', connection='gerrit',
                                   project='org/a', change_number=number))


def test_an_event_after_another_schedulers_reconfiguration_rebuilds_the_layout(zk_chroot):
    client = zk_chroot.client()
    scheduler, owner, reads = _owner(client)
    # Another scheduler re-read org/b, then an event of the tenant came.
    LayoutVersions(zk_chroot.client()).bump('t', ['org/b'])
    TenantEventQueues(zk_chroot.client()).put('t', _event(1))
    assert owner.feed('t') == 1
    [event] = scheduler.events
    assert event._layout_version == 2
    # On the loop: the layout is rebuilt before the event is acted on.
    assert owner.ensure_newest_layout('t', seen=event._layout_version)
    assert scheduler.reconfigured == [(['t'], ['org/b'])]
    assert owner.known_versions['t'] == 2


def test_an_event_with_no_newer_layout_costs_the_loop_no_zookeeper_read(zk_chroot):
    client = zk_chroot.client()
    scheduler, owner, reads = _owner(client)
    TenantEventQueues(zk_chroot.client()).put('t', _event(1))
    assert owner.feed('t') == 1
    [event] = scheduler.events
    assert event._layout_version == 1
    reads.clear()
    assert not owner.ensure_newest_layout('t', seen=event._layout_version)
    assert reads == [] and scheduler.reconfigured == []
    # Routed here by this scheduler: the version is read after the write.
    owner.scheduler._tenant_may_want = lambda *a: True
    owner.scheduler.ctx_by_tenant = {'t': None}
    owner.scheduler.tenants['t'].name = 't'
    LayoutVersions(zk_chroot.client()).bump('t', ['org/c'])
    owner.route(TriggerEvent(type='patchset-created', connection='gerrit',
                             project='org/a', change_number=2), _event(2))
    assert scheduler.events[-1]._layout_version == 2
    assert owner.ensure_newest_layout('t', seen=scheduler.events[-1]._layout_version)
    assert scheduler.reconfigured == [(['t'], ['org/c'])]
