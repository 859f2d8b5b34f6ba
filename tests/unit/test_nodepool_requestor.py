"""The requestor side (what Zuul uses) against a real launcher on a real
ZooKeeper: taking nodes, giving them back, cancelling, and surviving a
dropped connection or an expired session."""

from __future__ import annotations

from nodepool.zk.records import IN_USE, PENDING, READY, USED
from nodepool.zk.requestor import ACCEPTED, CANCELED, RELEASED
from tests.functional import test_nodepool_support as support
from tests.functional.test_nodepool_support import (
    request_state,
    sim_config,
    wait_until,
)

launchers = support.launchers
requestor = support.requestor
zk = support.zk


def test_fulfilled_nodes_are_locked_in_use_and_request_deleted(launchers, requestor, zk):
    launchers.make(sim_config())
    seen = []
    handle = requestor.submit(['small', 'large'], priority=200, callback=seen.append,
                              requestor_data={'job': 'tox-py311'}, event_id='ev-1')
    assert handle.wait(30)
    assert seen == [handle]
    assert handle.outcome == ACCEPTED
    assert [n.type for n in handle.nodes] == ['small', 'large']
    for node in handle.nodes:
        stored = zk.get_node(node.id)
        assert stored.state == IN_USE
        assert stored.allocated_to == handle.request.id
        assert stored.interface_ip and stored.host_keys and stored.connection_port == 22
        assert zk.is_node_locked(node.id)
    assert zk.get_request(handle.request.id) is None
    assert handle.request.requestor_data == {'job': 'tox-py311'}
    assert handle.request.event_id == 'ev-1'


def test_release_marks_used_and_unlocks(launchers, requestor, zk):
    launcher = launchers.make(sim_config())
    handle = requestor.submit(['small'])
    assert handle.wait(30)
    node_id = handle.nodes[0].id
    launcher.cleanup.stop()         # keep the used node around to look at it
    launcher.cleanup.join(10)
    requestor.release(handle)
    assert handle.outcome == RELEASED
    node = zk.get_node(node_id)
    assert node.state == USED
    assert not zk.is_node_locked(node_id)
    requestor.release(handle)       # twice is harmless


def test_cancel_before_fulfilment_deletes_the_request(launchers, requestor, zk):
    launcher = launchers.make(sim_config())
    launcher.adapters['sim'].hold_boots()
    called = []
    handle = requestor.submit(['small'], callback=called.append)
    wait_until(launcher, lambda: request_state(zk, handle.id) == PENDING, 'pending')
    requestor.cancel(handle)
    assert handle.outcome == CANCELED
    assert zk.get_request(handle.id) is None
    launcher.adapters['sim'].release_boots()
    wait_until(launcher, lambda: [(n.state, n.allocated_to) for n in zk.get_nodes()]
               == [(READY, None)], 'node back in the pool')
    assert called == []


def test_cancel_after_fulfilment_releases_the_nodes(launchers, requestor, zk):
    launchers.make(sim_config())
    handle = requestor.submit(['small'])
    assert handle.wait(30)
    node_id = handle.nodes[0].id
    requestor.cancel(handle)
    assert handle.outcome == CANCELED
    node = zk.get_node(node_id)
    assert node is None or node.state in (USED, 'deleting')
    assert not requestor.outstanding


def test_failed_request_reports_failure(launchers, requestor, zk):
    launchers.make(sim_config())
    handle = requestor.submit(['no-such-label'])
    assert handle.wait(30)
    assert handle.failed and not handle.fulfilled
    assert handle.nodes == []
    assert zk.get_request(handle.request.id) is None   # the requestor cleaned up


def test_watch_survives_a_dropped_connection(launchers, requestor, zk_chroot, zk):
    launcher = launchers.make(sim_config())
    adapter = launcher.adapters['sim']
    adapter.hold_boots()
    handle = requestor.submit(['small'])
    wait_until(launcher, lambda: request_state(zk, handle.id) == PENDING, 'pending')
    first_id = handle.id
    zk_chroot.drop_connection(requestor.zk.client)
    adapter.release_boots()
    assert handle.wait(30)
    assert handle.fulfilled
    assert handle.id == first_id and handle.resubmits == 0


def test_request_lost_with_an_expired_session_is_submitted_again(launchers, requestor,
                                                                 zk_chroot, zk):
    handle = requestor.submit(['small'])
    first_id = handle.id
    zk_chroot.expire_session(requestor.zk.client)   # the ephemeral request goes
    launcher = launchers.make(sim_config())
    assert handle.wait(30)
    assert handle.fulfilled
    assert handle.resubmits == 1
    assert handle.id != first_id
    assert zk.get_request(first_id) is None
    wait_until(launcher, lambda: all(zk.is_node_locked(n.id) for n in handle.nodes),
               'nodes held')
