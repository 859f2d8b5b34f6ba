"""The Nodepool wire records and the ZooKeeper API on a real server."""

from __future__ import annotations

import json

import pytest

from nodepool.zk.cache import RecordCache
from nodepool.zk.records import (
    BUILDING,
    READY,
    SCHEMA_VERSION,
    LauncherRecord,
    Node,
    NodeRequest,
    WireVersionError,
    request_sort_key,
)
from tests.functional import test_nodepool_support as support
from tests.harness.waiting import wait_for

zk = support.zk

# -- records (no ZooKeeper) -------------------------------------------------------


def test_request_round_trip_keeps_unknown_keys():
    data = {'node_types': ['a', 'b'], 'requestor': 'zuul', 'state': 'requested',
            'declined_by': ['l1'], 'created_time': 1.5, 'future_field': {'x': 1}}
    request = NodeRequest.from_dict(data, id='100-0000000007')
    assert request.priority == '100'
    assert request.sort_key == (100, 7)
    out = request.to_dict()
    assert out['future_field'] == {'x': 1}
    assert out['schema_version'] == SCHEMA_VERSION
    assert 'id' not in out and 'lock' not in out and 'stat' not in out


def test_node_fields_match_the_seed_and_released_names():
    node = Node(type='ubuntu', provider='rax', region='ord', az=None, public_ipv4='1.2.3.4',
                allocated_to='100-0000000001', state=READY, image_id='/nodepool/image/x')
    d = json.loads(node.serialize())
    for key in ('type', 'provider', 'region', 'az', 'public_ipv4', 'private_ipv4',
                'public_ipv6', 'allocated_to', 'state', 'created_time', 'updated_time',
                'image_id', 'launcher', 'connection_port', 'connection_type', 'username',
                'host_keys', 'interface_ip'):
        assert key in d
    assert Node.deserialize(node.serialize(), id='1').address == '1.2.3.4'


def test_newer_schema_fails_loudly():
    with pytest.raises(WireVersionError):
        Node.from_dict({'type': 'x', 'schema_version': SCHEMA_VERSION + 1})
    with pytest.raises(ValueError):
        NodeRequest.from_dict(['not', 'a', 'dict'])


def test_unknown_states_are_refused():
    with pytest.raises(ValueError):
        Node().set_state('exploded')
    with pytest.raises(ValueError):
        NodeRequest().set_state('maybe')


def test_sort_key_orders_priority_then_sequence():
    ids = ['300-0000000001', '100-0000000009', '200-0000000002', '100-0000000003']
    assert sorted(ids, key=request_sort_key) == [
        '100-0000000003', '100-0000000009', '200-0000000002', '300-0000000001']


# -- the API on a real ZooKeeper ----------------------------------------------------


def test_request_paths_and_ephemeral(zk, zk_chroot):
    request = NodeRequest(node_types=['a'], requestor='t')
    rid = zk.submit_request(request, priority=200)
    assert rid.startswith('200-') and len(rid) == 14
    stat = zk.client.exists(f'/nodepool/requests/{rid}')
    assert stat.ephemeralOwner == zk.client.client_id[0]
    got = zk.get_request(rid)
    assert got.node_types == ['a'] and got.state == 'requested' and got.created_time > 0
    assert zk.get_request_ids() == [rid]


def test_request_lock_at_its_path(zk, zk_chroot):
    request = NodeRequest(node_types=['a'])
    zk.submit_request(request)
    assert zk.lock_request(request, blocking=False, identifier='me')
    assert zk.client.get_children(f'/nodepool/requests-lock/{request.id}')
    other = type(zk)(zk_chroot.client())
    stub = NodeRequest(id=request.id)
    assert not other.lock_request(stub, blocking=False)
    zk.unlock_request(request)
    assert other.lock_request(stub, blocking=False)
    other.unlock_request(stub)
    zk.delete_request(request)
    assert zk.get_request(request.id) is None
    assert request.id not in zk.get_request_lock_ids()


def test_node_ids_are_sequential_ten_digits_with_a_lock(zk, zk_chroot):
    a, b = Node(type='x', state=BUILDING), Node(type='x', state=BUILDING)
    zk.store_node(a)
    zk.store_node(b)
    assert len(a.id) == 10 and a.id.isdigit() and int(b.id) == int(a.id) + 1
    assert zk.lock_node(a, blocking=False)
    assert zk.is_node_locked(a.id)
    assert zk.client.get_children(f'/nodepool/nodes/{a.id}/lock')
    other = type(zk)(zk_chroot.client())
    assert not other.lock_node(Node(id=a.id), blocking=False)
    a.set_state(READY)
    zk.store_node(a)
    zk.delete_node(a)      # with the lock held
    assert zk.get_node(a.id) is None
    zk.unlock_node(a)      # harmless after deletion


def test_locking_a_deleted_node_does_not_resurrect_it(zk):
    node = Node(type='x')
    zk.store_node(node)
    zk.delete_node(node)
    assert not zk.lock_node(Node(id=node.id), blocking=False)
    assert zk.client.exists(f'/nodepool/nodes/{node.id}') is None


def test_launcher_registration_is_ephemeral(zk, zk_chroot):
    other_client = zk_chroot.client()
    other = type(zk)(other_client)
    other.register_launcher(LauncherRecord(id='host-1-2', hostname='host', pid=1,
                                           supported_labels=['a']))
    assert zk.get_launcher_ids() == ['host-1-2']
    assert zk.get_launchers()[0].supported_labels == ['a']
    other_client.stop()
    assert zk.get_launcher_ids() == []


def test_record_cache_follows_changes_and_resyncs_after_expiry(zk, zk_chroot):
    client = zk_chroot.client()
    seen = []
    cache = RecordCache(client, '/nodepool/nodes', Node,
                        on_change=lambda name, rec: seen.append(name))
    cache.start()
    node = Node(type='x', state=BUILDING)
    zk.store_node(node)
    wait_for(lambda: cache.get(node.id) is not None, 10, what='cache sees the node')
    node.set_state(READY)
    zk.store_node(node)
    wait_for(lambda: cache.get(node.id).state == READY, 10, what='cache sees the update')

    zk_chroot.expire_session(client)
    zk.delete_node(node)          # while the cache's session is gone
    other = Node(type='y')
    zk.store_node(other)
    wait_for(lambda: cache.get(node.id) is None and cache.get(other.id) is not None, 30,
             what='cache resynced')
    cache.stop()
