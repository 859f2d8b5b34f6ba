"""The tenants' status published in ZooKeeper (zuul/zk/status.py) and
zuul-web reading it (zuul/web/status_cache.py): no status request
reaches the scheduler while a status is published."""

from __future__ import annotations

from types import SimpleNamespace

from zuul.lib import rpc_protocol as p
from zuul.web.status_cache import CachedStatusRPC
from zuul.zk.status import StatusStore


class _RPC:
    def __init__(self, answer=None):
        self.calls = []
        self.answer = answer

    def call(self, function, request):
        self.calls.append((function, request.tenant))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_published_status_round_trip_and_hostile_names(zk_chroot):
    zk = zk_chroot.client()
    store = StatusStore(zk)
    big = {'tenant': 'example', 'pipelines': [{'name': 'check', 'change_queues': [],
                                               'blob': 'x' * 3_000_000}]}
    assert store.publish('example', big)
    assert StatusStore(zk_chroot.client()).read('example') == big
    assert not store.publish('example', big)        # unchanged: not written again
    # A tenant named like a path stays one znode under its tenant.
    store.publish('../../zuul/scheduler', {'tenant': 'x'})
    assert not zk.exists('/zuul/scheduler/status')
    assert store.read('../../zuul/scheduler') == {'tenant': 'x'}
    assert store.read('nobody') is None
    # Damaged (or another version): not served, the scheduler is asked.
    header = store.path('example')
    zk.set(header, b'{"version": 99, "generation": 1, "shards": 1}')
    assert store.read('example') is None


def test_web_serves_the_published_status_without_asking_the_scheduler():
    published = SimpleNamespace(read=lambda tenant: {'tenant': tenant, 'from': 'zk'}
                                if tenant == 'example' else None)
    rpc = _RPC(answer={'from': 'scheduler'})
    cached = CachedStatusRPC(rpc, ttl=0, published=published)
    for _ in range(3):
        assert cached.call(p.STATUS_GET, p.RPCRequest(tenant='example'))['from'] == 'zk'
    assert rpc.calls == []
    # Nothing published for the tenant: the scheduler answers.
    assert cached.call(p.STATUS_GET, p.RPCRequest(tenant='other')) == {'from': 'scheduler'}
    assert rpc.calls == [(p.STATUS_GET, 'other')]


def test_zookeeper_away_means_the_scheduler_answers():
    def broken(tenant):
        raise ConnectionError('no quorum')
    rpc = _RPC(answer={'from': 'scheduler'})
    cached = CachedStatusRPC(rpc, ttl=1.0, published=SimpleNamespace(read=broken))
    assert cached.call(p.STATUS_GET, p.RPCRequest(tenant='example')) == {'from': 'scheduler'}
