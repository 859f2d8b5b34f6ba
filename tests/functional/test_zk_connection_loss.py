"""Calls whose connection goes while they are in flight, on a real
ZooKeeper: the server may have applied them or not, and the client only
hears ``ConnectionLoss``.  Each write of the Nodepool API must end up
applied exactly once, or the caller must be told the truth.

(Over a real ensemble, losing a member produces exactly this; here the
loss is injected at the call so both outcomes are tested every time.)
"""

from __future__ import annotations

import pytest
from kazoo.exceptions import ConnectionLoss

from nodepool.zk.api import NodepoolZooKeeper
from nodepool.zk.records import BUILDING, FULFILLED, PENDING, Node, NodeRequest

APPLIED = 'applied'        # the server did it; the answer was lost
NOT_APPLIED = 'not-applied'  # the request never reached a serving server


class LossyTransaction:
    def __init__(self, real, client):
        self._real = real
        self._client = client

    def __getattr__(self, name):
        return getattr(self._real, name)

    def commit(self):
        return self._client._lossy('commit', self._real.commit)


class LossyClient:
    """A started KazooClient whose next ``method`` call(s) lose their
    answer (``APPLIED``) or never happen (``NOT_APPLIED``)."""

    def __init__(self, real):
        self._real = real
        self._faults: dict[str, list[str]] = {}
        self.injected: list[tuple[str, str]] = []

    def fail_next(self, method: str, *outcomes: str) -> None:
        self._faults.setdefault(method, []).extend(outcomes)

    def __getattr__(self, name):
        attr = getattr(self._real, name)
        if name in ('create', 'set') and callable(attr):
            return lambda *a, **kw: self._lossy(name, attr, *a, **kw)
        return attr

    def transaction(self):
        return LossyTransaction(self._real.transaction(), self)

    def _lossy(self, name, call, *args, **kw):
        faults = self._faults.get(name)
        if not faults:
            return call(*args, **kw)
        outcome = faults.pop(0)
        self.injected.append((name, outcome))
        if outcome == APPLIED:
            call(*args, **kw)
        raise ConnectionLoss()


@pytest.fixture
def lossy(zk_chroot):
    client = LossyClient(zk_chroot.client())
    return client, NodepoolZooKeeper(client)


@pytest.fixture
def other(zk_chroot):
    return NodepoolZooKeeper(zk_chroot.client())


@pytest.mark.parametrize('outcome', [APPLIED, NOT_APPLIED])
def test_a_submitted_request_exists_once(lossy, other, outcome):
    client, zk = lossy
    client.fail_next('create', outcome)
    request = NodeRequest(node_types=['small'], requestor='test')
    request_id = zk.submit_request(request)
    assert client.injected == [('create', outcome)]
    assert other.get_request_ids() == [request_id]
    assert other.get_request(request_id).node_types == ['small']


@pytest.mark.parametrize('outcome', [APPLIED, NOT_APPLIED])
def test_a_created_node_exists_once_and_is_locked(lossy, other, outcome):
    client, zk = lossy
    client.fail_next('create', outcome)
    node = Node(type='small', provider='p', pool='main', state=BUILDING)
    node_id = zk.create_locked_node(node, identifier='me')
    assert client.injected == [('create', outcome)]
    assert other.get_node_ids() == [node_id]
    assert node.lock.is_acquired and other.is_node_locked(node_id)
    stub = Node(id=node_id)
    assert not other.lock_node(stub, blocking=False)


@pytest.mark.parametrize('outcome', [APPLIED, NOT_APPLIED])
def test_a_request_lock_taken_while_the_answer_was_lost_is_held(lossy, other, outcome):
    client, zk = lossy
    request = NodeRequest(node_types=['small'], requestor='test')
    other.submit_request(request)
    client.fail_next('commit', outcome)
    mine = NodeRequest(id=request.id)
    assert zk.lock_request(mine, blocking=False, identifier='me')
    assert client.injected == [('commit', outcome)]
    theirs = NodeRequest(id=request.id)
    assert not other.lock_request(theirs, blocking=False)
    zk.unlock_request(mine)
    # Released for real: nobody's contender is left behind.
    assert other.lock_request(theirs, blocking=False)


@pytest.mark.parametrize('outcome', [APPLIED, NOT_APPLIED])
def test_a_versioned_write_whose_answer_was_lost_is_not_a_conflict(lossy, other, outcome):
    client, zk = lossy
    request = NodeRequest(node_types=['small'], requestor='test')
    other.submit_request(request)
    mine = zk.get_request(request.id)
    mine.set_state(PENDING)
    client.fail_next('set', outcome)
    zk.store_request(mine, expected_version=mine.stat.version)
    assert other.get_request(request.id).state == PENDING
    assert mine.stat.version == other.get_request(request.id).stat.version


def test_a_real_conflict_is_still_one(lossy, other):
    from nodepool.zk.api import RecordChangedError
    client, zk = lossy
    request = NodeRequest(node_types=['small'], requestor='test')
    other.submit_request(request)
    mine = zk.get_request(request.id)
    theirs = other.get_request(request.id)
    theirs.declined_by = ['someone']
    other.store_request(theirs)
    mine.set_state(PENDING)
    client.fail_next('set', NOT_APPLIED)
    with pytest.raises(RecordChangedError):
        zk.store_request(mine, expected_version=mine.stat.version)


@pytest.mark.parametrize('outcome', [APPLIED, NOT_APPLIED])
def test_a_fulfilment_whose_answer_was_lost_is_done_once(lossy, other, outcome):
    client, zk = lossy
    request = NodeRequest(node_types=['small'], requestor='test')
    other.submit_request(request)
    mine = zk.get_request(request.id)
    assert zk.lock_request(mine, blocking=False, identifier='me')
    node = Node(type='small', provider='p', pool='main', state=BUILDING,
                allocated_to=request.id)
    zk.create_locked_node(node, identifier='me')
    mine.nodes = [node.id]
    mine.set_state(FULFILLED)
    client.fail_next('commit', outcome)
    zk.fulfil_request(mine, [node])
    assert client.injected == [('commit', outcome)]
    assert other.get_request(request.id).state == FULFILLED
    assert not other.is_node_locked(node.id) and not other.is_request_locked(request.id)
    assert node.lock is None and mine.lock is None
