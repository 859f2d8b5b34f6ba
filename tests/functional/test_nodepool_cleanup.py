"""The launcher's cleanup loop on a real ZooKeeper: what dead launchers,
dead requestors and careless providers leave behind."""

from __future__ import annotations

import time

from nodepool.zk.records import (
    BUILDING,
    DELETING,
    FULFILLED,
    HOLD,
    IN_USE,
    PENDING,
    READY,
    REQUESTED,
    Node,
    NodeRequest,
)
from tests.functional import test_nodepool_support as support
from tests.functional.test_nodepool_support import (
    request_state,
    sim_config,
    wait_until,
)

launchers = support.launchers
requestor = support.requestor
zk = support.zk


def fulfilled_raw(launcher, zk, labels=('small',)) -> NodeRequest:
    """A request fulfilled for a requestor that then does nothing."""
    request = NodeRequest(node_types=list(labels), requestor='careless')
    zk.submit_request(request)
    wait_until(launcher, lambda: request_state(zk, request.id) == FULFILLED, 'fulfilled')
    return zk.get_request(request.id)


def test_ready_node_of_vanished_request_returns_after_the_timeout(launchers, zk):
    launcher = launchers.make(sim_config())
    request = fulfilled_raw(launcher, zk)
    node_id = request.nodes[0]
    zk.delete_request(request)      # cancelled right after it was fulfilled

    launcher.run_cleanup()
    assert zk.get_node(node_id).allocated_to == request.id   # not yet: 300 s

    wait_until(launcher, lambda: launcher.request_cache.get(request.id) is None,
               'the launcher sees the request gone')
    launcher.clock = lambda: time.time() + 301
    launcher.run_cleanup()
    node = zk.get_node(node_id)
    assert (node.state, node.allocated_to) == (READY, None)


def test_ready_node_of_live_request_is_left_alone(launchers, zk):
    launcher = launchers.make(sim_config())
    request = fulfilled_raw(launcher, zk)
    launcher.clock = lambda: time.time() + 3600
    launcher.run_cleanup()
    assert zk.get_node(request.nodes[0]).allocated_to == request.id


def test_building_node_without_lock_is_deleted(launchers, zk):
    launcher = launchers.make(sim_config())
    adapter = launcher.adapters['sim']
    # What a launcher that died mid-boot leaves: a building record, no
    # lock, an instance at the provider.
    node = Node(type='small', provider='sim', pool='main', state=BUILDING,
                launcher='dead-launcher-1-1')
    zk.store_node(node)
    node.external_id = adapter.add_instance(node.id)
    zk.store_node(node)
    wait_until(launcher, lambda: getattr(launcher.node_cache.get(node.id), 'external_id',
                                         None), 'the launcher sees the node')

    launcher.run_cleanup()
    wait_until(launcher, lambda: zk.get_node(node.id) is None, 'building node deleted')
    assert node.external_id in adapter.deleted


def test_locked_building_node_is_left_alone(launchers, zk):
    node = Node(type='small', provider='sim', pool='main', state=BUILDING,
                launcher='other-launcher-1-1')
    zk.store_node(node)
    assert zk.lock_node(node, blocking=False)
    launcher = launchers.make(sim_config())
    launcher.run_cleanup()
    assert zk.get_node(node.id).state == BUILDING
    zk.unlock_node(node)


def test_in_use_node_of_a_dead_requestor_is_deleted(launchers, requestor, zk_chroot, zk):
    launcher = launchers.make(sim_config())
    handle = requestor.submit(['small'])
    assert handle.wait(30)
    node_id = handle.nodes[0].id
    launcher.run_cleanup()
    assert zk.get_node(node_id).state == IN_USE          # locked: in use

    zk_chroot.expire_session(requestor.zk.client)        # the requestor dies
    launcher.run_cleanup()
    wait_until(launcher, lambda: zk.get_node(node_id) is None, 'in-use node deleted')


def test_used_node_is_deleted_promptly(launchers, requestor, zk):
    launcher = launchers.make(sim_config())
    handle = requestor.submit(['small'])
    assert handle.wait(30)
    requestor.release(handle)
    # No cleanup pass asked for: the node turning used wakes it.
    wait_until(launcher, lambda: zk.get_node(handle.nodes[0].id) is None, 'used node deleted')
    assert launcher.adapters['sim'].deleted == launcher.adapters['sim'].created


def test_failed_delete_is_retried(launchers, requestor, zk):
    launcher = launchers.make(sim_config())
    adapter = launcher.adapters['sim']
    adapter.fail_next_deletes(1)
    handle = requestor.submit(['small'])
    assert handle.wait(30)
    node_id = handle.nodes[0].id
    requestor.release(handle)
    # The provider refuses once: the record stays "deleting", unlocked,
    # for the next pass to try again.

    def refused_or_gone():
        node = zk.get_node(node_id)
        return node is None or (node.state == DELETING and not zk.is_node_locked(node_id)
                                and not launcher.is_deleting(node_id))
    wait_until(launcher, refused_or_gone, 'delete refused')
    launcher.run_cleanup()
    wait_until(launcher, lambda: zk.get_node(node_id) is None, 'deleted on retry')
    assert adapter.failed_deletes == [adapter.created[0]]
    assert adapter.deleted == [adapter.created[0]]
    assert not adapter.instances


def test_deleting_node_left_by_a_dead_launcher_is_deleted(launchers, zk):
    launcher = launchers.make(sim_config())
    adapter = launcher.adapters['sim']
    node = Node(type='small', provider='sim', pool='main', state=DELETING,
                launcher='dead-1-1')
    zk.store_node(node)
    node.external_id = adapter.add_instance(node.id)
    zk.store_node(node)
    wait_until(launcher, lambda: zk.get_node(node.id) is None, 'deleted')
    assert node.external_id in adapter.deleted


def test_leaked_instance_is_deleted(launchers, zk):
    launcher = launchers.make(sim_config())
    adapter = launcher.adapters['sim']
    leaked = adapter.add_instance('0000099999')
    kept_node = Node(type='small', provider='sim', pool='main', state=READY)
    zk.store_node(kept_node)
    kept = adapter.add_instance(kept_node.id)
    launcher.run_cleanup()
    wait_until(launcher, lambda: leaked not in adapter.instances, 'leaked instance deleted')
    assert kept in adapter.instances


def test_pending_request_of_a_dead_launcher_is_requeued(launchers, zk):
    # A dead launcher's leftovers: the request pending (no lock) with a
    # ready node allocated to it.
    request = NodeRequest(node_types=['small'], requestor='zuul')
    zk.submit_request(request)
    request.set_state(PENDING)
    zk.store_request(request)
    stray = Node(type='small', provider='elsewhere', pool='p', state=READY,
                 allocated_to=request.id)
    zk.store_node(stray)

    launcher = launchers.make(sim_config())
    launcher.run_cleanup()
    wait_until(launcher, lambda: request_state(zk, request.id) == FULFILLED,
               'requeued and fulfilled')
    assert zk.get_node(stray.id).allocated_to is None
    assert stray.id not in zk.get_request(request.id).nodes


def test_stale_request_lock_dirs_are_removed(launchers, zk):
    launcher = launchers.make(sim_config())
    request = NodeRequest(node_types=['nope'], requestor='x')
    zk.submit_request(request)
    wait_until(launcher, lambda: request_state(zk, request.id) not in (None, REQUESTED),
               'request handled')
    zk.client.delete(f'/nodepool/requests/{request.id}')   # a requestor that left
    assert request.id in zk.get_request_lock_ids()
    wait_until(launcher, lambda: launcher.request_cache.get(request.id) is None,
               'the launcher sees it gone')
    launcher.run_cleanup()
    assert request.id not in zk.get_request_lock_ids()


def test_max_ready_age_deletes_idle_nodes(launchers, zk):
    config = sim_config().replace('  - name: large\n', '  - name: large\n    max-ready-age: 60\n',
                                  1)
    launcher = launchers.make(config)
    idle = Node(type='large', provider='sim', pool='main', state=READY)
    zk.store_node(idle)
    wait_until(launcher, lambda: launcher.node_cache.get(idle.id), 'the launcher sees it')
    launcher.run_cleanup()
    assert zk.get_node(idle.id) is not None
    launcher.clock = lambda: time.time() + 61
    launcher.run_cleanup()
    wait_until(launcher, lambda: zk.get_node(idle.id) is None, 'old ready node deleted')


def test_held_nodes_expire_by_hold_expiration_or_max_hold_age(launchers, zk):
    config = 'max-hold-age: 600\n' + sim_config()
    launcher = launchers.make(config)
    forever = Node(type='small', provider='sim', pool='main', state=HOLD)
    short = Node(type='small', provider='sim', pool='main', state=HOLD, hold_expiration=60)
    long = Node(type='small', provider='sim', pool='main', state=HOLD, hold_expiration=3600)
    for node in (forever, short, long):
        zk.store_node(node)
    wait_until(launcher, lambda: all(launcher.node_cache.get(n.id)
                                     for n in (forever, short, long)), 'the launcher sees them')
    launcher.run_cleanup()
    assert all(zk.get_node(n.id).state == HOLD for n in (forever, short, long))
    launcher.clock = lambda: time.time() + 61
    launcher.run_cleanup()
    wait_until(launcher, lambda: zk.get_node(short.id) is None, 'expired hold deleted')
    assert zk.get_node(long.id).state == HOLD and zk.get_node(forever.id).state == HOLD
    # max-hold-age (600 s) caps both the longer expiration and "for ever"
    launcher.clock = lambda: time.time() + 601
    launcher.run_cleanup()
    wait_until(launcher, lambda: zk.get_node(long.id) is None and
               zk.get_node(forever.id) is None, 'max-hold-age applied')


def test_held_node_without_limits_stays(launchers, zk):
    launcher = launchers.make(sim_config())
    held = Node(type='small', provider='sim', pool='main', state=HOLD)
    zk.store_node(held)
    wait_until(launcher, lambda: launcher.node_cache.get(held.id), 'the launcher sees it')
    launcher.clock = lambda: time.time() + 10 * 365 * 86400
    launcher.run_cleanup()
    assert zk.get_node(held.id).state == HOLD
