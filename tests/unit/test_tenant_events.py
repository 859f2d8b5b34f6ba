"""What several active schedulers share per tenant in ZooKeeper
(zuul/zk/tenant_events.py): layout versions raised safely by concurrent
writers, the projects another scheduler must take from the cache again,
per-tenant event queues, and tenant names that cannot leave their
znode."""

from __future__ import annotations

import threading

from zuul.zk.tenant_events import (
    TENANT_LOCK_ROOT,
    LayoutVersions,
    TenantEventQueues,
    projects_since,
    tenant_lock_path,
)


def test_layout_versions_rise_once_per_writer_even_concurrently(zk_chroot):
    versions = LayoutVersions(zk_chroot.client())
    assert versions.get('t') == {'version': 0, 'changes': []}
    assert versions.bump('t', ['org/a']) == 1
    got = []
    threads = [threading.Thread(target=lambda i=i: got.append(
        LayoutVersions(zk_chroot.client()).bump('t', [f'org/p{i}']))) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(got) == list(range(2, 10))      # none lost, none twice
    record = versions.get('t')
    assert record['version'] == 9 and len(record['changes']) == 9


def test_projects_since_names_what_changed_or_everything():
    record = {'version': 4, 'changes': [[2, ['a']], [3, ['b', 'c']], [4, ['a']]]}
    assert projects_since(record, 1) == ['a', 'b', 'c']
    assert projects_since(record, 3) == ['a']
    assert projects_since(record, 4) is None      # nothing newer: never asked
    # A full reconfiguration in between, or versions no longer remembered:
    # every project of the tenant.
    assert projects_since({'version': 3, 'changes': [[2, ['a']], [3, None]]}, 1) is None
    assert projects_since(record, 0) is None


def test_damaged_layout_record_counts_as_version_zero(zk_chroot):
    client = zk_chroot.client()
    versions = LayoutVersions(client)
    client.create(versions.path('t'), b'{not json', makepath=True)
    assert versions.get('t')['version'] == 0
    assert versions.bump('t', None) == 1


def test_hostile_tenant_names_stay_in_their_znode(zk_chroot):
    client = zk_chroot.client()
    name = '../../zuul/scheduler/leader'
    assert tenant_lock_path(name).count('/') == TENANT_LOCK_ROOT.count('/') + 1
    queues = TenantEventQueues(client)
    path = queues.put(name, {'type': 'x', 'event_id': '1'})
    assert path.startswith(queues.root(name) + '/')
    assert queues.root(name).split('/')[4] == '..%2F..%2Fzuul%2Fscheduler%2Fleader'
    assert queues.read(path) == {'type': 'x', 'event_id': '1'}
    assert not client.exists('/zuul/scheduler/leader/trigger')
    # An unreadable event is dropped, not retried for ever.
    client.set(path, b'\xff not json')
    assert queues.read(path) is None and queues.children(name) == []
