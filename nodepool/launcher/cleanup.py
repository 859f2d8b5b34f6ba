"""The cleanup loop: finds what a dead or careless component left behind.

Seed 000's three cases, and what else leaks in practice:

- a ``ready`` node allocated to a request that no longer exists, for
  longer than ``allocation_timeout``: returned to the pool;
- a ``building``/``testing`` node without a lock (its launcher died):
  deleted;
- an ``in-use`` node without a lock (its requestor died) and a ``used``
  node: deleted, or back to ``ready`` for static nodes;
- a ``deleting`` node nobody is deleting (a provider refused): retried;
- a ready unallocated node older than its label's ``max-ready-age``;
- a ``hold`` node past its ``hold_expiration`` or the top-level
  ``max-hold-age`` (whichever is shorter): deleted;
- an instance a provider reports that has no node record: deleted;
- what a provider leaks besides instances (``ProviderAdapter.cleanup_leaks``);
- a ``pending`` request whose lock is gone (its launcher died): put back
  to ``requested``, its ready nodes unallocated;
- lock directories of requests that no longer exist.

Node-state cases run on every wake-up (a node became ``used``); the rest
once per ``cleanup_interval``, and at once when another launcher's
registration goes (its session ended, taking its locks with it: what it
was building or had pending is recovered without waiting for the
period).  ``min-ready`` runs here too.
"""

from __future__ import annotations

import logging
import threading
import time

from nodepool.launcher.min_ready import MinReadyKeeper
from nodepool.launcher.static import StaticNodeRegistrar
from nodepool.zk import paths
from nodepool.zk.api import RecordGoneError
from nodepool.zk.records import (
    BUILDING,
    DELETING,
    HOLD,
    IN_USE,
    PENDING,
    READY,
    REQUESTED,
    TESTING,
    USED,
    Node,
    NodeRequest,
)

log = logging.getLogger('nodepool.launcher.cleanup')


CACHE_SYNC_WAIT = 10.0   # seconds a full pass waits for a resyncing cache


class CleanupWorker(threading.Thread):
    def __init__(self, launcher):
        super().__init__(daemon=True, name='cleanup')
        self.launcher = launcher
        self.zk = launcher.zk
        self.settings = launcher.settings
        self.wake_event = threading.Event()
        self.passes = 0          # completed passes of any kind
        self.full_passes = 0     # completed full passes
        self._tickets = 0
        self._tickets_lock = threading.Lock()        # full passes asked for (request_full_pass)
        self.completed_ticket = 0
        self._running = True
        self.min_ready = MinReadyKeeper(launcher)
        self.static = StaticNodeRegistrar(launcher)

    # -- thread -------------------------------------------------------------------

    def run(self) -> None:
        next_full = 0.0
        next_min_ready = 0.0
        while self._running:
            now = time.monotonic()
            ticket = self._tickets
            full = ticket > self.completed_ticket or now >= next_full
            try:
                self.run_pass(full=full, min_ready=True)
            except Exception:
                log.exception('Cleanup pass failed')
            if full:
                next_full = now + self.settings.cleanup_interval
                self.full_passes += 1
                self.completed_ticket = ticket
            next_min_ready = now + self.settings.min_ready_interval
            self.passes += 1
            self.launcher.notify_changed()
            wait = max(0.0, min(next_full, next_min_ready) - time.monotonic())
            self.wake_event.wait(wait)
            self.wake_event.clear()

    def request_full_pass(self) -> int:
        """Ask for a full pass; it is done when ``completed_ticket`` reaches
        the number returned."""
        with self._tickets_lock:
            self._tickets += 1
            ticket = self._tickets
        self.wake_event.set()
        return ticket

    def wake(self, full: bool = False) -> None:
        if full:
            self.request_full_pass()
        else:
            self.wake_event.set()

    def stop(self) -> None:
        self._running = False
        self.wake_event.set()

    # -- a pass -------------------------------------------------------------------

    def run_pass(self, full: bool, min_ready: bool = True) -> None:
        steps = [self._node_states if full else self._quick_node_states]
        if full:
            # A pass over a cache still resyncing after a reconnect would
            # miss records whose reads failed while disconnected (a node
            # created as the session went): wait for the resync.
            for cache in (self.launcher.node_cache, self.launcher.request_cache):
                if not cache.wait_synced(CACHE_SYNC_WAIT):
                    log.warning('Cleanup: the %s cache is not synced after %ss; '
                                'this pass may miss records', cache.root, CACHE_SYNC_WAIT)
            steps += [self.static.sync, self._leaked_instances, self._provider_leaks,
                      self._lost_requests, self._stale_request_locks]
        if min_ready:
            steps.append(self.min_ready.run)
        for step in steps:
            if not self._running:
                return
            try:
                step()
            except Exception:
                log.exception('Cleanup step %s failed', step.__name__)

    # -- nodes --------------------------------------------------------------------

    def _quick_node_states(self) -> None:
        """On a wake-up: only what just changed matters (nodes turned used
        or deleting, ready nodes); checking every in-use node's lock each
        time would cost a ZooKeeper read per node per change."""
        self._node_states(states=(USED, DELETING, READY))

    def _node_states(self, states=None) -> None:
        launcher = self.launcher
        now = launcher.clock()
        registered = launcher.launcher_ids
        for node in launcher.node_cache.values():
            if states is not None and node.state not in states:
                continue
            if launcher.is_deleting(node.id):
                continue   # one of our delete threads has it
            adapter = launcher.adapters.get(node.provider)
            if adapter is None or node.provider in launcher.broken_providers:
                continue   # not a provider of ours
            age = now - (node.state_time or 0)
            if node.state == READY:
                self._ready_node(node, adapter, age)
            elif node.state in (BUILDING, TESTING):
                own = launcher.worker_by_id(node.launcher)
                if own is not None:
                    if own.is_launching(node.id):
                        continue   # ours, in progress
                elif node.launcher in registered and age < self.settings.building_grace:
                    continue   # another live launcher may be about to lock it
                if not self.zk.is_node_locked(node.id):
                    self._act(node, adapter, (BUILDING, TESTING), 'its launcher is gone')
            elif node.state == HOLD:
                expiry = self._hold_expiry(node)
                if expiry and age > expiry:
                    self._act(node, adapter, (HOLD,), f'held for longer than {expiry}s')
            elif node.state in (IN_USE, USED, DELETING):
                # A used (or deleting) node is usually still locked by
                # whoever marked it for a moment: look again as soon as
                # that lock goes.
                watch = self._lock_released if node.state in (USED, DELETING) else None
                if not self.zk.is_node_locked(node.id, watch=watch):
                    self._act(node, adapter, (IN_USE, USED, DELETING),
                              {IN_USE: 'in use but unlocked (its user is gone)',
                               USED: 'used', DELETING: 'marked for deletion'}[node.state])

    def _hold_expiry(self, node: Node) -> float:
        """How long a held node may stay (0: for ever)."""
        limits = [x for x in (node.hold_expiration or 0,
                              self.launcher.config.max_hold_age or 0) if x > 0]
        return min(limits) if limits else 0

    def _lock_released(self, event) -> None:
        self.wake()

    def _ready_node(self, node: Node, adapter, age: float) -> None:
        if node.allocated_to:
            if age <= self.settings.allocation_timeout:
                return
            if self._request_exists(node.allocated_to):
                return
            if self.zk.is_node_locked(node.id):
                return
            self._with_lock(node, self._deallocate)
            return
        label = self.launcher.config.labels.get(node.type)
        if label and label.max_ready_age and age > label.max_ready_age and \
                not adapter.reuses_nodes and not self.zk.is_node_locked(node.id):
            self._act(node, adapter, (READY,), f'older than max-ready-age '
                      f'{label.max_ready_age}s', unallocated_only=True)

    def _deallocate(self, node: Node) -> None:
        if node.state != READY or not node.allocated_to or \
                self._request_exists(node.allocated_to):
            return
        log.info('Node %s: request %s is gone; returning the node to the pool', node.id,
                 node.allocated_to)
        node.allocated_to = None
        self.zk.store_node(node)

    def _act(self, cached: Node, adapter, states, why: str,
             unallocated_only: bool = False) -> None:
        stub = Node(id=cached.id)
        if not self.zk.lock_node(stub, blocking=False, identifier='cleanup'):
            return
        node = self.zk.get_node(cached.id)
        if node is None or node.state not in states or \
                (unallocated_only and node.allocated_to):
            self.zk.unlock_node(stub)
            return
        node.lock = stub.lock
        if adapter.reuses_nodes and node.state in (IN_USE, USED, HOLD):
            log.info('Node %s (%s): %s; back to ready', node.id, node.hostname, why)
            node.allocated_to = None
            node.set_state(READY)
            try:
                self.zk.store_node(node)
            finally:
                self.zk.unlock_node(node)
            return
        log.info('Node %s (%s): %s; deleting', node.id, node.type, why)
        self.launcher.delete_node(node, adapter)

    def _with_lock(self, cached: Node, fn) -> None:
        stub = Node(id=cached.id)
        if not self.zk.lock_node(stub, blocking=False, identifier='cleanup'):
            return
        try:
            node = self.zk.get_node(cached.id)
            if node is not None:
                node.lock = stub.lock
                fn(node)
        except RecordGoneError:
            pass
        finally:
            self.zk.unlock_node(stub)

    def _request_exists(self, request_id: str) -> bool:
        if self.launcher.request_cache.get(request_id) is not None:
            return True
        return self.zk.exists(paths.request_path(request_id)) is not None

    # -- instances ----------------------------------------------------------------

    def _leaked_instances(self) -> None:
        for name, adapter in self.launcher.adapters.items():
            if adapter.reuses_nodes or name in self.launcher.broken_providers:
                continue
            try:
                instances = adapter.list()
            except Exception as e:
                log.warning('Provider %s: listing instances failed: %s', name, e)
                continue
            for inst in instances:
                if inst.node_id is None:
                    continue
                node = self.zk.get_node(inst.node_id)
                if node is not None and node.provider == name:
                    continue
                log.info('Provider %s: instance %s has no node record (node %s); '
                         'deleting it', name, inst.external_id, inst.node_id)
                self.launcher.delete_instance(adapter, inst.external_id)

    def _provider_leaks(self) -> None:
        """What providers leak besides instances (the openstack driver's
        unattached floating IPs and long-DOWN ports)."""
        for name, adapter in self.launcher.adapters.items():
            if adapter.reuses_nodes or name in self.launcher.broken_providers:
                continue
            try:
                adapter.cleanup_leaks()
            except Exception as e:
                log.warning('Provider %s: cleaning up leaked resources failed: %s', name, e)

    # -- requests -----------------------------------------------------------------

    def _lost_requests(self) -> None:
        ours = self.launcher.active_request_ids()
        for cached in self.launcher.request_cache.values():
            if cached.state != PENDING or cached.id in ours:
                continue
            if self.zk.is_request_locked(cached.id):
                continue
            stub = NodeRequest(id=cached.id)
            if not self.zk.lock_request(stub, blocking=False, identifier='cleanup'):
                continue
            try:
                request = self.zk.get_request(cached.id)
                if request is None or request.state != PENDING:
                    continue
                log.info('Request %s: pending without a lock (its launcher is gone); '
                         'requeued', request.id)
                request.set_state(REQUESTED)
                request.nodes = []
                self.zk.store_request(request)
                for node in self.launcher.node_cache.values():
                    if node.allocated_to == request.id and node.state == READY:
                        self._with_lock(node, self._unallocate_from(request.id))
            except RecordGoneError:
                pass
            finally:
                self.zk.unlock_request(stub)

    def _unallocate_from(self, request_id: str):
        def unallocate(node: Node) -> None:
            if node.state == READY and node.allocated_to == request_id:
                node.allocated_to = None
                self.zk.store_node(node)
        return unallocate

    def _stale_request_locks(self) -> None:
        existing = set(self.launcher.request_cache.names())
        for request_id in self.zk.get_request_lock_ids():
            if request_id in existing:
                continue
            if self.zk.exists(paths.request_path(request_id)) is None:
                self.zk.delete_request_lock_dir(request_id)
