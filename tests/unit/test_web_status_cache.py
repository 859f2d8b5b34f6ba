"""zuul-web's one-second status cache (zuul/web/status_cache.py) on an
injected clock: pollers within the second share one RPC call, concurrent
pollers wait for the call in flight, an action on the queues and the
passing second make it ask again, and errors are never kept."""

from __future__ import annotations

import threading

import pytest

from zuul.lib import rpc_protocol as p
from zuul.web.status_cache import CachedStatusRPC


class CountingRPC:
    def __init__(self):
        self.calls = []
        self.fail = False
        self.gate = None   # an Event the status call waits for

    def call(self, function, request):
        self.calls.append((function, request.tenant))
        if self.gate is not None:
            self.gate.wait(30)
        if self.fail:
            raise p.RPCError('Unknown tenant nope')
        return {'tenant': request.tenant, 'n': len(self.calls)}

    def shutdown(self):
        self.calls.append(('shutdown', None))


class Clock:
    now = 100.0

    def __call__(self):
        return self.now


def status(cache, tenant='t1'):
    return cache.call(p.STATUS_GET, p.RPCRequest(tenant=tenant))


def test_pollers_within_the_ttl_share_one_call_per_tenant():
    rpc, clock = CountingRPC(), Clock()
    cache = CachedStatusRPC(rpc, 1.0, clock)
    first = status(cache)
    clock.now += 0.9
    assert status(cache) is first
    assert status(cache, 't2')['tenant'] == 't2'
    assert rpc.calls == [(p.STATUS_GET, 't1'), (p.STATUS_GET, 't2')]
    clock.now += 0.1
    assert status(cache) is not first and len(rpc.calls) == 3


@pytest.mark.parametrize('function', [p.ENQUEUE, p.ENQUEUE_REF, p.DEQUEUE, p.PROMOTE])
def test_an_action_on_the_queues_forgets_the_tenant(function):
    rpc, clock = CountingRPC(), Clock()
    cache = CachedStatusRPC(rpc, 1.0, clock)
    status(cache)
    other = status(cache, 't2')
    cache.call(function, p.RPCRequest(tenant='t1'))
    status(cache)
    assert status(cache, 't2') is other
    assert [f for f, _ in rpc.calls] == [p.STATUS_GET, p.STATUS_GET, function, p.STATUS_GET]


def test_other_calls_pass_through_and_errors_are_not_kept():
    rpc, clock = CountingRPC(), Clock()
    cache = CachedStatusRPC(rpc, 1.0, clock)
    cache.call(p.JOB_LIST, p.RPCRequest(tenant='t1'))
    cache.call(p.JOB_LIST, p.RPCRequest(tenant='t1'))
    rpc.fail = True
    for _ in range(2):
        with pytest.raises(p.RPCError):
            status(cache)
    assert [f for f, _ in rpc.calls] == [p.JOB_LIST] * 2 + [p.STATUS_GET] * 2
    cache.shutdown()
    assert rpc.calls[-1] == ('shutdown', None)


def test_no_cache_with_a_zero_ttl():
    rpc = CountingRPC()
    cache = CachedStatusRPC(rpc, 0, Clock())
    status(cache)
    status(cache)
    assert len(rpc.calls) == 2


def test_concurrent_pollers_wait_for_the_call_in_flight():
    rpc, clock = CountingRPC(), Clock()
    rpc.gate = threading.Event()
    cache = CachedStatusRPC(rpc, 1.0, clock)
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(status(cache)))
               for _ in range(5)]
    for t in threads:
        t.start()
    rpc.gate.set()
    for t in threads:
        t.join(30)
    assert len(rpc.calls) == 1
    assert len(answers) == 5 and all(a is answers[0] for a in answers)
