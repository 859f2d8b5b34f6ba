"""nodepool-launcher on a real ZooKeeper with the simulated provider:
request ordering, declining, failing, pausing, replacing failed boots,
cancelling, min-ready, and what survives a lost session."""

from __future__ import annotations

import threading
import time

from nodepool.driver import DriverRegistry, ProviderError
from nodepool.driver.simulated.driver import SimulatedDriver
from nodepool.launcher.ratelimit import RateLimitedAdapter
from nodepool.zk.records import (
    BUILDING,
    FAILED,
    FULFILLED,
    IN_USE,
    PENDING,
    READY,
    REQUESTED,
    LauncherRecord,
    NodeRequest,
)
from tests.functional import test_nodepool_support as support
from tests.functional.test_nodepool_support import (
    fast_settings,
    node_states,
    request_state,
    sim_config,
    wait_until,
)

launchers = support.launchers
requestor = support.requestor
zk = support.zk

SMALL_ONLY = """
labels:
  - name: small
  - name: other
providers:
  - name: {name}
    driver: simulated
    pools:
      - name: main
        max-servers: 5
        labels:
          - name: {label}
"""


def two_label_config(name, label):
    return SMALL_ONLY.format(name=name, label=label)


def test_requests_served_by_priority_then_fifo(launchers, requestor, zk):
    order = []
    lock = threading.Lock()

    def done(handle):
        with lock:
            order.append(handle.requestor_data['name'])
        requestor.release(handle)   # frees the single server for the next

    submitted = [('r1', 300), ('r2', 100), ('r3', 200), ('r4', 100), ('r5', 300)]
    handles = [requestor.submit(['small'], priority=p, callback=done,
                                requestor_data={'name': name}) for name, p in submitted]
    assert [h.id.split('-')[0] for h in handles] == ['300', '100', '200', '100', '300']
    launcher = launchers.make(sim_config(max_servers=1))
    for h in handles:
        assert h.wait(30), h.id
    assert order == ['r2', 'r4', 'r3', 'r1', 'r5']
    assert all(h.fulfilled for h in handles)
    wait_until(launcher, lambda: not zk.get_nodes(), 'used nodes deleted')


def test_request_declined_by_every_launcher_fails(launchers, requestor, zk):
    a = launchers.make(two_label_config('prov-a', 'small'))
    b = launchers.make(two_label_config('prov-b', 'other'))
    wait_until(a, lambda: len(zk.get_launcher_ids()) == 2, 'two launchers')
    ids = {a.workers[0].id, b.workers[0].id}

    bad = requestor.submit(['nosuchlabel'])
    assert bad.wait(30)
    assert bad.failed
    assert set(bad.request.declined_by) == ids
    assert bad.request.state == FAILED

    good = requestor.submit(['other'])
    assert good.wait(30)
    assert good.fulfilled
    assert set(good.request.declined_by) <= {a.workers[0].id}   # A may not have looked
    assert good.nodes[0].provider == 'prov-b'
    requestor.release(good)

    mixed = requestor.submit(['small', 'other'])   # no single provider has both
    assert mixed.wait(30)
    assert mixed.failed


def test_declined_request_fails_when_the_last_other_launcher_goes_away(
        launchers, zk_chroot, zk):
    launcher = launchers.make(two_label_config('prov-a', 'small'))
    ghost_client = zk_chroot.client()
    from nodepool.zk.api import NodepoolZooKeeper
    ghost = NodepoolZooKeeper(ghost_client)
    ghost.register_launcher(LauncherRecord(id='ghost-1-1', hostname='ghost', pid=1))
    wait_until(launcher, lambda: 'ghost-1-1' in launcher.launcher_ids, 'ghost registered')

    request = NodeRequest(node_types=['other'], requestor='test')
    zk.submit_request(request)
    me = launcher.workers[0].id
    wait_until(launcher, lambda: me in (zk.get_request(request.id).declined_by or []),
               'declined by the real launcher')
    assert request_state(zk, request.id) == REQUESTED   # the ghost has not declined

    ghost_client.stop()   # its ephemeral registration goes
    wait_until(launcher, lambda: request_state(zk, request.id) == FAILED,
               'request failed after the ghost left')
    assert zk.get_request(request.id).declined_by == [me]


def test_fulfilled_from_ready_nodes_without_launching(launchers, requestor, zk):
    launcher = launchers.make(sim_config(min_ready=1))
    adapter = launcher.adapters['sim']
    wait_until(launcher, lambda: [(n.state, n.allocated_to) for n in zk.get_nodes()]
               == [(READY, None)], 'a min-ready node')
    ready = zk.get_nodes()[0]
    created = len(adapter.created)

    handle = requestor.submit(['small'])
    assert handle.wait(30)
    assert [n.id for n in handle.nodes] == [ready.id]
    assert handle.nodes[0].state == IN_USE
    assert zk.is_node_locked(ready.id)
    assert zk.get_request(handle.id) is None            # the requestor deleted it
    assert len(adapter.created) - created <= 1          # at most min-ready's top-up
    requestor.release(handle)


def test_multi_node_request_comes_from_one_provider(launchers, requestor, zk):
    launchers.make(two_label_config('prov-a', 'small'))
    launchers.make(sim_config(provider='prov-b'))
    handle = requestor.submit(['small', 'large', 'small'])
    assert handle.wait(30)
    assert handle.fulfilled
    assert {n.provider for n in handle.nodes} == {'prov-b'}
    assert [n.type for n in handle.nodes] == ['small', 'large', 'small']
    requestor.release(handle)


def test_pool_pauses_at_quota_and_resumes(launchers, requestor, zk):
    launcher = launchers.make(sim_config(max_servers=2))
    first = requestor.submit(['small', 'small'])
    assert first.wait(30)
    second = requestor.submit(['small'])
    wait_until(launcher, lambda: launcher.paused_pools == ['sim/main'], 'pool paused')
    assert request_state(zk, second.id) == PENDING
    third = requestor.submit(['large'])
    wait_until(launcher, lambda: launcher.request_cache.get(third.id) is not None,
               'third request seen')
    # Paused: nothing behind the paused request is looked at.
    assert request_state(zk, third.id) == REQUESTED
    assert not launcher.request_cache.get(third.id).declined_by

    requestor.release(first)
    assert second.wait(30) and second.fulfilled
    requestor.release(second)
    assert third.wait(30) and third.fulfilled
    assert launcher.paused_pools == []
    requestor.release(third)


def test_request_larger_than_quota_is_declined(launchers, requestor):
    launchers.make(sim_config(max_servers=2))
    handle = requestor.submit(['small'] * 3)
    assert handle.wait(30)
    assert handle.failed
    assert handle.request.declined_by


def test_failed_boot_is_replaced(launchers, requestor, zk):
    launcher = launchers.make(sim_config())
    adapter = launcher.adapters['sim']
    adapter.fail_next_launches(2)
    handle = requestor.submit(['small'])
    assert handle.wait(30)
    assert handle.fulfilled
    assert len(adapter.created) == 3
    assert adapter.created[:2] == adapter.deleted[:2]
    assert list(node_states(zk)) == [handle.nodes[0].id]   # failed records are gone
    requestor.release(handle)


def test_repeated_boot_failures_decline_instead(launchers, requestor, zk):
    launcher = launchers.make(sim_config(launch_retries=1))
    adapter = launcher.adapters['sim']
    adapter.fail_next_launches(10)
    handle = requestor.submit(['small'])
    assert handle.wait(30)
    assert handle.failed
    assert handle.request.declined_by == [launcher.workers[0].id]
    assert len(adapter.created) == 2
    wait_until(launcher, lambda: not zk.get_nodes(), 'failed nodes removed')
    assert not adapter.instances


def test_cancelled_request_returns_its_nodes_to_the_pool(launchers, requestor, zk):
    launcher = launchers.make(sim_config())
    adapter = launcher.adapters['sim']
    adapter.hold_boots()
    handle = requestor.submit(['small', 'small'])
    wait_until(launcher, lambda: len([n for n in zk.get_nodes() if n.state == BUILDING]) == 2,
               'two nodes building')
    requestor.cancel(handle)
    assert zk.get_request(handle.request.id) is None
    adapter.release_boots()
    wait_until(launcher, lambda: [(n.state, n.allocated_to) for n in zk.get_nodes()]
               == [(READY, None), (READY, None)], 'nodes ready and unallocated')
    wait_until(launcher, lambda: not launcher.active_request_ids(), 'handler finished')
    assert not any(zk.is_node_locked(n.id) for n in zk.get_nodes())

    # ... and the next request gets them.
    again = requestor.submit(['small'])
    assert again.wait(30)
    assert len(adapter.created) == 2
    requestor.release(again)


def test_min_ready_is_kept(launchers, requestor, zk):
    launcher = launchers.make(sim_config(min_ready=2),
                              settings=fast_settings(min_ready_interval=0.2))

    def ready_unallocated():
        return sum(1 for n in zk.get_nodes()
                   if n.type == 'small' and n.state == READY and n.allocated_to is None)

    wait_until(launcher, lambda: ready_unallocated() == 2, 'two min-ready nodes')
    handle = requestor.submit(['small'])
    assert handle.wait(30)
    wait_until(launcher, lambda: ready_unallocated() == 2, 'min-ready topped up')
    assert len(zk.get_nodes()) == 3
    wait_until(launcher, lambda: not zk.get_requests(), 'min-ready requests cleaned up')
    requestor.release(handle)
    wait_until(launcher, lambda: len(zk.get_nodes()) == 2, 'used node deleted')


def test_launcher_session_expiry_requeues_its_requests(launchers, requestor, zk_chroot, zk):
    launcher = launchers.make(sim_config())
    adapter = launcher.adapters['sim']
    adapter.hold_boots()
    handle = requestor.submit(['small'])
    wait_until(launcher, lambda: request_state(zk, handle.id) == PENDING, 'pending')
    old_id = launcher.workers[0].id
    zk_chroot.expire_session(launcher.zk.client)
    # New session: registered again (same id), the request requeued by
    # the cleanup loop and served again.
    wait_until(launcher, lambda: old_id in zk.get_launcher_ids(), 're-registered')
    adapter.release_boots()
    launcher.run_cleanup()
    assert handle.wait(30)
    assert handle.fulfilled
    requestor.release(handle)
    wait_until(launcher, lambda: all(s != BUILDING for s in node_states(zk).values()),
               'no building leftovers')


def test_request_state_is_fulfilled_before_requestor_takes_it(launchers, zk):
    launcher = launchers.make(sim_config())
    request = NodeRequest(node_types=['small', 'large'], requestor='raw')
    zk.submit_request(request, priority=200)
    wait_until(launcher, lambda: request_state(zk, request.id) == FULFILLED, 'fulfilled')
    done = zk.get_request(request.id)
    nodes = [zk.get_node(i) for i in done.nodes]
    assert [n.type for n in nodes] == ['small', 'large']
    assert all(n.state == READY and n.allocated_to == request.id for n in nodes)
    assert not any(zk.is_node_locked(n.id) for n in nodes)
    assert done.state_time >= done.created_time


class BrokenDriver(SimulatedDriver):
    """A provider whose API cannot be reached."""

    name = 'broken'

    def get_adapter(self, provider):
        adapter = super().get_adapter(provider)

        def start():
            raise ProviderError('cloud API unreachable')
        adapter.start = start
        return adapter


def test_unreachable_provider_declines_so_requests_fail(launchers, requestor):
    registry = DriverRegistry([BrokenDriver(), SimulatedDriver()])
    config = sim_config().replace('driver: simulated', 'driver: broken')
    launcher = launchers.make(config, registry=registry)
    assert 'cloud API unreachable' in launcher.broken_providers['sim']
    handle = requestor.submit(['small'])
    assert handle.wait(30)
    assert handle.failed
    assert handle.request.declined_by == [launcher.workers[0].id]


def test_provider_rate_spaces_its_api_calls(launchers, requestor, zk):
    rate = 0.1
    config = sim_config().replace('    driver: simulated\n',
                                  f'    driver: simulated\n    rate: {rate}\n')
    launcher = launchers.make(config)
    wrapped = launcher.adapters['sim']
    assert isinstance(wrapped, RateLimitedAdapter) and wrapped.limiter.rate == rate
    wait_until(launcher, lambda: launcher.cleanup.passes >= 1, 'the first cleanup pass')
    calls = []

    def recorder(name, real):
        def record(*args):
            calls.append((name, time.monotonic()))
            return real(*args)
        return record
    for name in ('create', 'poll', 'delete', 'list'):
        setattr(wrapped.adapter, name, recorder(name, getattr(wrapped.adapter, name)))

    start = time.monotonic()
    handle = requestor.submit(['small', 'large'])
    assert handle.wait(30) and handle.fulfilled
    requestor.release(handle)
    wait_until(launcher, lambda: not zk.get_nodes(), 'used nodes deleted')
    names = [name for name, _ in calls]
    assert (names.count('create'), names.count('delete')) == (2, 2)
    assert names.count('poll') >= 2
    # Every call had a slot of its own, the slots ``rate`` apart and none
    # before ``start``: the last call cannot have come sooner than this.
    # (A lower bound: a loaded machine only makes it later.)
    assert max(t for _, t in calls) - start >= (len(calls) - 1) * rate


PRIORITY_CONFIG = """
labels:
  - name: small
  - name: large
providers:
  - name: preferred
    driver: simulated
    priority: 1
    pools:
      - name: main
        max-servers: 1
        labels:
          - name: small
  - name: spare
    driver: simulated
    pools:
      - name: main
        priority: 2
        max-servers: 3
        labels:
          - name: small
          - name: large
"""


def test_pools_yield_to_a_preferred_pool_until_it_pauses(launchers, requestor, zk):
    launcher = launchers.make(PRIORITY_CONFIG)
    records = launcher.launcher_records(max_age=0)
    assert sorted((r.provider, r.priority, r.paused) for r in records.values()) == \
        [('preferred', 1, False), ('spare', 2, False)]
    first = requestor.submit(['small'])
    assert first.wait(30) and first.fulfilled
    assert first.nodes[0].provider == 'preferred'
    # A label only the spare pool offers is not held back.
    large = requestor.submit(['large'])
    assert large.wait(30) and large.nodes[0].provider == 'spare'
    # The preferred pool takes the next request and pauses on it (it is
    # full); what comes while it is paused goes to the spare pool.
    second = requestor.submit(['small'])
    wait_until(launcher, lambda: 'preferred/main' in launcher.paused_pools, 'preferred paused')
    wait_until(launcher, lambda: any(r.paused for r in launcher.launcher_records(0).values()),
               'the pause published')
    third = requestor.submit(['small'])
    assert third.wait(30) and third.fulfilled
    assert third.nodes[0].provider == 'spare'
    assert request_state(zk, second.id) == PENDING
    requestor.release(first)
    assert second.wait(30) and second.nodes[0].provider == 'preferred'
    wait_until(launcher, lambda: not any(r.paused for r in
                                         launcher.launcher_records(0).values()),
               'the unpause published')
    for handle in (large, second, third):
        requestor.release(handle)
