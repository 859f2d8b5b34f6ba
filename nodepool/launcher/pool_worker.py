"""One worker per provider pool: it scans the request queue in order and
follows seed 000's algorithm.

For each ``requested`` request, lowest priority number first, then
oldest first:

1. a label this pool does not offer, or more nodes than the pool could
   ever hold: decline (add our launcher id to ``declined_by``; when every
   registered launcher has declined, mark the request ``failed``);
2. otherwise accept it (``pending``) and fill it from ready nodes or new
   launches;
3. if it cannot be filled with what is free now, pause: no further
   requests until this one has all its nodes.

A request we already declined is only looked at again to see whether it
has become unsatisfiable (its last other launcher went away).

Each worker registers itself as a launcher at
``/nodepool/launchers/<hostname>-<pid>-<tid>`` and registers again when
its ZooKeeper session was replaced.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from nodepool.driver import Quota
from nodepool.launcher.handler import FINISHED, RequestHandler
from nodepool.launcher.state_machine import NodeLaunchStateMachine, request_info
from nodepool.launcher.tenant_limits import (
    node_resources,
    over_limit,
    tenant_limits,
    tenant_usage,
)
from nodepool.zk import paths
from nodepool.zk.api import ZOOKEEPER_DOWN, RecordChangedError, RecordGoneError
from nodepool.zk.priority import request_order
from nodepool.zk.records import (
    BUILDING,
    FAILED,
    HOLD,
    IN_USE,
    PENDING,
    READY,
    REQUESTED,
    USED,
    LauncherRecord,
    Node,
    NodeRequest,
)

log = logging.getLogger('nodepool.launcher.pool')


class PoolWorker(threading.Thread):
    def __init__(self, launcher, provider, pool, adapter):
        super().__init__(daemon=True, name=f'pool-{provider.name}-{pool.name}')
        self.launcher = launcher
        self.zk = launcher.zk
        self.provider = provider
        self.pool = pool
        self.adapter = adapter
        self.id: str | None = None
        self.handlers: dict[str, RequestHandler] = {}
        self.paused_handler: RequestHandler | None = None
        self.wake_event = threading.Event()
        self.registered = threading.Event()
        self.launch_retries = provider.launch_retries
        self.can_launch = not adapter.reuses_nodes
        self._running = True
        self._session = None
        # Nodes being created, not yet in the node cache: id -> (when, label).
        self._new_nodes: dict[str, tuple[float, str]] = {}
        self._label_quotas: dict[tuple[str, str], Quota] = {}
        self._launching: set[str] = set()
        self._creating = threading.Lock()
        self._freeing: set[str] = set()
        self._deferred: set[str] = set()
        self._yielded: set[str] = set()      # requests left to a preferred pool
        self._over_tenant_limit: set[str] = set()   # deferred by tenant-resource-limits
        self._tenant_limits = tenant_limits(launcher.config.tenant_resource_limits)
        self._published_paused = False
        self._quota_pause: tuple[float, int] | None = None
        self._deferred_view: frozenset[str] = frozenset()
        self._static_labels = {(h.name, h.connection_port): list(h.labels)
                               for h in adapter.static_hosts() if h.pool == pool.name}

    @property
    def paused(self) -> bool:
        return self.paused_handler is not None

    @property
    def deferred(self) -> frozenset[str]:
        """Requests waiting for an image upload (see _waiting_for_images)."""
        return self._deferred_view

    # -- thread ---------------------------------------------------------------------

    def run(self) -> None:
        self.id = f'{self.launcher.settings.hostname}-{os.getpid()}-{threading.get_ident()}'
        while self._running:
            try:
                self._cycle()
            except ZOOKEEPER_DOWN as e:
                # The next cycle (woken when the session is back) carries on.
                log.warning('Pool %s/%s: cycle interrupted, ZooKeeper unavailable (%s)',
                            self.provider.name, self.pool.name, e.__class__.__name__)
            except Exception:
                log.exception('Pool %s/%s: cycle failed', self.provider.name, self.pool.name)
            self.launcher.notify_changed()
            self.wake_event.wait(self.launcher.settings.poll_interval)
            self.wake_event.clear()
        if self.id is not None and self.registered.is_set():
            try:
                self.zk.unregister_launcher(self.id)
            except Exception:
                log.warning('Pool %s/%s: could not unregister', self.provider.name,
                            self.pool.name)

    def wake(self) -> None:
        self.wake_event.set()

    def stop(self) -> None:
        self._running = False
        self.wake()

    def abandon_all(self) -> list[RequestHandler]:
        handlers = list(self.handlers.values())
        for handler in handlers:
            handler.abandon()
        self.handlers.clear()
        self.paused_handler = None
        return handlers

    # -- one pass ------------------------------------------------------------------

    def _cycle(self) -> None:
        self._ensure_registered()
        try:
            self._cycle_requests()
        finally:
            self._publish_pause_state()

    def _cycle_requests(self) -> None:
        self._poll_handlers()
        if self.paused_handler is not None:
            handler = self.paused_handler
            if handler.state == FINISHED or handler.advance():
                self.paused_handler = None
                log.info('Pool %s/%s: unpaused (request %s)', self.provider.name,
                         self.pool.name, handler.id)
            else:
                self._free_quota(handler)
                return
        self._scan()

    def _ensure_registered(self) -> None:
        session = self.zk.session_id
        if session is None and self.registered.is_set():
            # Disconnected, not necessarily expired (a ZooKeeper member
            # went, or quorum): our locks may well still be ours.  The
            # calls of this cycle wait for the connection; a new session
            # is noticed by the next one.
            return
        if session == self._session and self.registered.is_set():
            return
        if self._session is not None and session != self._session:
            dropped = self.abandon_all()
            self._new_nodes.clear()
            with self._creating:
                self._launching.clear()
            log.warning('Pool %s/%s: ZooKeeper session replaced; abandoned requests %s',
                        self.provider.name, self.pool.name, [h.id for h in dropped])
        self._publish(paused=self.paused_handler is not None)
        self._session = session
        self.registered.set()
        log.info('Pool %s/%s registered as launcher %s', self.provider.name, self.pool.name,
                 self.id)

    def _publish(self, paused: bool) -> None:
        """Write this pool's launcher record (labels, priority, paused)."""
        record = LauncherRecord(id=self.id, hostname=self.launcher.settings.hostname,
                                pid=os.getpid(), provider=self.provider.name,
                                pool=self.pool.name, supported_labels=sorted(self.pool.labels),
                                priority=self.pool.priority, paused=paused)
        self.zk.register_launcher(record)
        self._published_paused = paused

    def _publish_pause_state(self) -> None:
        paused = self.paused_handler is not None
        if paused != getattr(self, '_published_paused', False) and self.registered.is_set():
            try:
                self._publish(paused)
            except Exception:
                log.exception('Pool %s/%s: could not publish its pause state',
                              self.provider.name, self.pool.name)

    def _yields_to(self, request: NodeRequest) -> str | None:
        """The id of a preferred pool (lower ``priority``, not paused, not
        declined, offering every label of the request) this pool leaves
        the request to; None if there is none."""
        wanted = set(request.node_types)
        for record in self.launcher.launcher_records().values():
            if record.id == self.id or record.priority >= self.pool.priority:
                continue
            if record.paused or record.id in request.declined_by:
                continue
            if wanted <= set(record.supported_labels):
                return record.id
        return None

    def _poll_handlers(self) -> None:
        for handler in list(self.handlers.values()):
            if handler.poll():
                del self.handlers[handler.id]
                if self.paused_handler is handler:
                    self.paused_handler = None
                continue
            if handler.empty_slots and not handler.advance() and self.paused_handler is None:
                self.paused_handler = handler
                log.info('Pool %s/%s: paused for request %s', self.provider.name,
                         self.pool.name, handler.id)

    def _scan(self) -> None:
        # Precedence, then relative priority, then first come first served.
        requests = sorted(self.launcher.request_cache.values(), key=request_order)
        self._deferred &= {r.id for r in requests}
        self._yielded &= {r.id for r in requests}
        self._over_tenant_limit &= {r.id for r in requests}
        for request in requests:
            if not self._running or self.paused_handler is not None:
                return
            if request.state != REQUESTED or request.id in self.handlers:
                continue
            if self.id in request.declined_by:
                self._maybe_fail(request)
                continue
            if self._waiting_for_images(request):
                continue
            if self._tenant_deferred(request):
                continue
            preferred = self._yields_to(request)
            if preferred is not None:
                if request.id not in self._yielded:
                    log.info('Request %s: left to preferred pool %s by %s/%s', request.id,
                             preferred, self.provider.name, self.pool.name)
                    self._yielded.add(request.id)
                continue
            self._consider(request)

    # -- deciding ------------------------------------------------------------------

    def _waiting_for_images(self, request: NodeRequest) -> bool:
        """A request this pool could serve but for a label whose built
        image has no ready upload here (or is paused): it is deferred,
        neither accepted nor declined, until the upload appears (the
        image cache wakes us)."""
        labels = [self.pool.labels.get(t) for t in set(request.node_types)]
        if any(label is None for label in labels):
            return False   # not ours to wait for: the normal decline
        missing = sorted(label.name for label in labels if label.diskimage and
                         self.launcher.image_for(self.provider, label) is None)
        if missing and request.id not in self._deferred:
            log.info('Request %s: deferred by pool %s/%s until an image is ready for %s',
                     request.id, self.provider.name, self.pool.name, ', '.join(missing))
        if missing:
            self._deferred.add(request.id)
        else:
            self._deferred.discard(request.id)
        self._deferred_view = frozenset(self._deferred)
        return bool(missing)

    def _tenant_deferred(self, request: NodeRequest) -> bool:
        """A request whose tenant would go over its
        ``tenant-resource-limits``: left ``requested`` for a later pass
        (see nodepool.launcher.tenant_limits)."""
        tenant = request.tenant
        limit = self._tenant_limits.get(tenant) if tenant else None
        if limit is None or any(t not in self.pool.labels for t in request.node_types):
            return False
        need = Quota(0, 0, 0)
        for label in request.node_types:
            need = need.plus(self.label_quota(label))
        used = tenant_usage(self.launcher.node_cache.values(), tenant)
        reason = over_limit(limit, used, need)
        if reason is None:
            self._over_tenant_limit.discard(request.id)
            return False
        if request.id not in self._over_tenant_limit:
            log.info('Request %s: deferred by pool %s/%s: tenant %s would exceed its '
                     'resource limits (%s)', request.id, self.provider.name, self.pool.name,
                     tenant, reason)
            self._over_tenant_limit.add(request.id)
        return True

    def _consider(self, cached: NodeRequest) -> None:
        stub = NodeRequest(id=cached.id)
        if not self.zk.lock_request(stub, blocking=False, identifier=self.id):
            return
        # Decide on a private copy of the cached request and write it with
        # a version check: if the cache was stale, read it and decide again.
        request = NodeRequest.from_dict(cached.to_dict(), id=cached.id, stat=cached.stat)
        for _ in range(3):
            if request is None or request.state != REQUESTED or \
                    self.id in request.declined_by:
                self.zk.unlock_request(stub)
                if request is None:
                    self.zk.delete_request_lock_dir(cached.id)
                return
            request.lock = stub.lock
            try:
                if self._decide(request):
                    return
            except RecordChangedError:
                request = self.zk.get_request(cached.id)
                continue
            except RecordGoneError:
                self.zk.unlock_request(stub)
                return
        self.zk.unlock_request(stub)

    def _decide(self, request: NodeRequest) -> bool:
        """Decline or accept a locked request; True when it is dealt with."""
        version = request.stat.version if request.stat is not None else -1
        reason = self.decline_reason(request)
        if reason:
            self._decline(request, reason, expected_version=version)
            return True
        request.set_state(PENDING)
        self.zk.store_request(request, expected_version=version)
        handler = RequestHandler(self, request)
        self.handlers[request.id] = handler
        log.info('Request %s (%s, %s): accepted by pool %s/%s', request.id,
                 request.node_types, request.requestor, self.provider.name, self.pool.name)
        if not handler.advance():
            self.paused_handler = handler
            log.info('Pool %s/%s: paused for request %s', self.provider.name,
                     self.pool.name, request.id)
        return True

    def decline_reason(self, request: NodeRequest) -> str | None:
        missing = sorted({t for t in request.node_types if t not in self.pool.labels})
        if missing:
            return f'label {", ".join(missing)} not offered'
        if self.launcher.broken_providers.get(self.provider.name):
            return f'provider unavailable: {self.launcher.broken_providers[self.provider.name]}'
        if not self.can_launch:
            for label in set(request.node_types):
                want = request.node_types.count(label)
                have = sum(1 for labels in self._static_slot_labels() if label in labels)
                if want > have:
                    return f'{want} {label} nodes requested, the pool has {have}'
            if len(request.node_types) > len(self._static_slot_labels()):
                return 'more nodes than the pool has'
            return None
        need = Quota(0, 0, 0)
        for label in request.node_types:
            need = need.plus(self.label_quota(label))
        for what, limit in (('the pool', self._pool_limits()),
                            ('the provider', self._provider_quota())):
            if limit.count(need) < 1:
                return (f'{len(request.node_types)} nodes exceed the quota of {what} '
                        f'(needed: {_describe(need, limit)}; allowed: '
                        f'{_describe(limit, limit)})')
        return None

    def _decline(self, request: NodeRequest, reason: str, unlock: bool = True,
                 expected_version: int = -1) -> None:
        declined_by = [*request.declined_by, self.id]
        launchers = set(self.zk.get_launcher_ids())
        state = FAILED if launchers <= set(declined_by) else request.state
        original = (request.declined_by, request.state, request.state_time)
        request.declined_by = declined_by
        if state != request.state:
            request.set_state(state)
        try:
            self.zk.store_request(request, expected_version=expected_version)
        except RecordGoneError:
            pass
        except RecordChangedError:
            request.declined_by, request.state, request.state_time = original
            raise
        if state == FAILED:
            log.info('Request %s: declined by %s (%s); every launcher declined: failed',
                     request.id, self.id, reason)
        else:
            log.info('Request %s: declined by %s (%s)', request.id, self.id, reason)
        if unlock:
            self.zk.unlock_request(request)

    def decline_after_failures(self, held: NodeRequest, reason: str | None = None) -> None:
        """Give an accepted request back after repeated launch failures
        (the handler still holds its lock and unlocks it afterwards); the
        provider's last reason goes on the request (``failure_reason``)."""
        request = self.zk.get_request(held.id)
        if request is None:
            return
        request.lock = held.lock
        request.nodes = []
        request.set_state(REQUESTED)
        if reason:
            request.failure_reason = f'{self.provider.name}: {reason}'
        self._decline(request, f'{self.launch_retries + 1} launch failures'
                      + (f': {reason}' if reason else ''), unlock=False)

    # -- quota errors -----------------------------------------------------------------

    #: Seconds the pool launches nothing after the provider refused a
    #: launch for want of room, unless one of its nodes goes before.
    QUOTA_PAUSE = 30.0

    def _occupying(self) -> int:
        return sum(1 for n in self.launcher.node_cache.values()
                   if n.provider == self.provider.name and
                   n.state in (READY, IN_USE, USED, HOLD))

    def pause_for_quota(self, reason: str | None) -> None:
        nodes = self._occupying()
        if self._quota_pause is None:
            log.warning('Pool %s/%s: the provider is out of quota (%s); paused',
                        self.provider.name, self.pool.name, reason)
        self._quota_pause = (time.monotonic() + self.QUOTA_PAUSE, nodes)

    def _quota_paused(self) -> bool:
        if self._quota_pause is None:
            return False
        until, nodes = self._quota_pause
        if time.monotonic() >= until or self._occupying() < nodes:
            self._quota_pause = None
            log.info('Pool %s/%s: trying the provider again after its quota error',
                     self.provider.name, self.pool.name)
            return False
        return True

    def _maybe_fail(self, cached: NodeRequest) -> None:
        if not self.launcher.launcher_ids <= set(cached.declined_by):
            return
        stub = NodeRequest(id=cached.id)
        if not self.zk.lock_request(stub, blocking=False, identifier=self.id):
            return
        try:
            request = self.zk.get_request(cached.id)
            if request is None or request.state != REQUESTED:
                return
            if set(self.zk.get_launcher_ids()) <= set(request.declined_by):
                request.set_state(FAILED)
                log.info('Request %s: every remaining launcher has declined: failed',
                         request.id)
                self.zk.store_request(request)
        except RecordGoneError:
            pass
        finally:
            self.zk.unlock_request(stub)

    # -- nodes ---------------------------------------------------------------------

    def _static_slot_labels(self) -> list[list[str]]:
        return [h.labels for h in self.adapter.static_hosts() if h.pool == self.pool.name]

    def labels_of(self, node: Node) -> list[str]:
        if self.can_launch:
            return [node.type]
        return self._static_labels.get((node.hostname, node.connection_port), [node.type])

    def _mine(self, node: Node) -> bool:
        return node.provider == self.provider.name and node.pool == self.pool.name

    def take_ready_node(self, label: str, request: NodeRequest,
                        az: str | None = None) -> Node | None:
        """A ready unallocated node of ``label`` (in ``az``, if given),
        locked and allocated."""
        candidates = [n for n in self.launcher.node_cache.values()
                      if self._mine(n) and n.state == READY and n.allocated_to is None
                      and label in self.labels_of(n) and n.id not in self._freeing
                      and (az is None or n.az == az)]
        candidates.sort(key=lambda n: (n.state_time, n.id))
        for cached in candidates:
            stub = Node(id=cached.id)
            if not self.zk.lock_node(stub, blocking=False, identifier=self.id):
                continue
            node = self.zk.get_node(cached.id)
            if node is None or node.state != READY or node.allocated_to is not None or \
                    label not in self.labels_of(node):
                self.zk.unlock_node(stub)
                continue
            node.lock = stub.lock
            node.allocated_to = request.id
            node.type = label
            node.tenant_name = request.tenant
            if not node.resources:
                node.resources = node_resources(self.label_quota(label))
            try:
                self.zk.store_node(node)
            except RecordGoneError:
                continue
            return node
        return None

    def launch_node(self, label: str, request: NodeRequest,
                    az: str | None = None) -> NodeLaunchStateMachine | None:
        """Start launching a node (in ``az``, if given); None if its image
        has no ready upload."""
        pool_label = self.pool.labels[label]
        image = None
        if pool_label.diskimage:
            image = self.launcher.image_for(self.provider, pool_label)
            if image is None:
                return None
        username, python_path, shell_type = self._login_settings(pool_label)
        node = Node(type=label, provider=self.provider.name, pool=self.pool.name,
                    state=BUILDING, allocated_to=request.id, launcher=self.id,
                    tenant_name=request.tenant,
                    resources=node_resources(self.label_quota(label)),
                    username=username, python_path=python_path, shell_type=shell_type,
                    attributes=dict(self.pool.node_attributes),
                    image_id=image.image_id if image else None, az=az)
        built = self.launcher.config.diskimages.get(pool_label.diskimage or '')
        if built is not None:
            # Nodes from a built image are reached as the image says.
            node.connection_type = built.connection_type
            node.connection_port = built.connection_port
        with self._creating:
            self.zk.create_locked_node(node, identifier=self.id)
            self._new_nodes[node.id] = (time.monotonic(), label)
            self._launching.add(node.id)
        machine = NodeLaunchStateMachine(
            self.zk, self.adapter, node, pool_label.settings, self.provider.boot_timeout,
            self.launcher.settings.boot_poll_interval, on_done=self._launch_done,
            semaphore=self.launcher.launch_semaphore(self.provider.name), image=image,
            launch_timeout=None if self.adapter.times_own_launch
            else self.provider.launch_timeout, request=request_info(request))
        log.info('Request %s: launching node %s (%s) in %s/%s', request.id, node.id, label,
                 self.provider.name, self.pool.name)
        self.launcher.track(machine)
        machine.start()
        return machine

    def _login_settings(self, pool_label) -> tuple[str | None, str, str | None]:
        """username, python-path, shell-type: the label's, falling back (for
        labels that boot a built image) to the top-level diskimage's."""
        image = self.launcher.config.diskimages.get(pool_label.diskimage or '')
        if image is None:
            return pool_label.username, pool_label.python_path, pool_label.shell_type
        return (pool_label.username or image.username,
                pool_label.python_path if pool_label.python_path != 'auto'
                else image.python_path,
                pool_label.shell_type or image.shell_type)

    def is_launching(self, node_id: str) -> bool:
        """Whether this worker is bringing up ``node_id`` right now."""
        with self._creating:
            return node_id in self._launching

    def _launch_done(self, machine: NodeLaunchStateMachine) -> None:
        self.launcher.untrack(machine)
        try:
            self.launcher.stats.launch_done(machine)
        except Exception:
            log.exception('Unable to report the launch of node %s', machine.node.id)
        with self._creating:
            self._launching.discard(machine.node.id)
        if not machine.succeeded:
            self._new_nodes.pop(machine.node.id, None)
        self.wake()

    # -- quota ---------------------------------------------------------------------

    # Limits are ``Quota``s (instances, cores, RAM): the pool's own
    # (max-servers, max-cores, max-ram) and the provider's (what its cloud
    # allows, less what others use there).  Usage is counted from the
    # node records of the provider, each node taking what its label takes.

    def label_quota(self, label: str | None, pool_name: str | None = None) -> Quota:
        """What one node of ``label`` in this (or another) pool of the
        provider takes; asked of the adapter once per label."""
        if label is None:
            return Quota(instances=1)
        key = (pool_name or self.pool.name, label)
        quota = self._label_quotas.get(key)
        if quota is None:
            pool = self.provider.pools.get(key[0])
            if pool is None or label not in pool.labels:
                return Quota(instances=1)
            try:
                quota = self.adapter.label_quota(pool, label)
            except Exception as e:
                # The provider cannot say now (its API is down): count the
                # node as an instance, and ask again next time.
                log.warning('Pool %s/%s: what a %s node takes is unknown: %s',
                            self.provider.name, self.pool.name, label, e)
                return Quota(instances=1)
            self._label_quotas[key] = quota
        return quota

    def _pool_limits(self) -> Quota:
        return Quota(self.pool.max_servers, self.pool.max_cores, self.pool.max_ram)

    def _provider_quota(self) -> Quota:
        if self.pool.settings.get('ignore-provider-quota'):
            return Quota()
        return self.adapter.quota()

    def _usage(self) -> tuple[Quota, Quota]:
        """What the nodes of this pool, and of the whole provider, take
        (including launches the node cache has not shown yet)."""
        nodes = [(n.id, n.pool, n.type) for n in self.launcher.node_cache.values()
                 if n.provider == self.provider.name]
        seen = {node_id for node_id, _, _ in nodes}
        now = time.monotonic()
        for node_id, (when, label) in list(self._new_nodes.items()):
            if node_id in seen or now - when > 60:
                del self._new_nodes[node_id]
            else:
                nodes.append((node_id, self.pool.name, label))
        pool_used = provider_used = Quota(0, 0, 0)
        for _, pool, label in nodes:
            need = self.label_quota(label, pool)
            provider_used = provider_used.plus(need)
            if pool == self.pool.name:
                pool_used = pool_used.plus(need)
        return pool_used, provider_used

    def capacity(self, label: str | None = None) -> float:
        """How many nodes of ``label`` the pool could hold at most."""
        need = self.label_quota(label)
        return min(self._pool_limits().count(need), self._provider_quota().count(need))

    def free_capacity(self, label: str | None = None) -> float:
        """How many more nodes of ``label`` (or one-instance nodes) fit now."""
        if self._quota_paused():
            return 0
        need = self.label_quota(label)
        pool_used, provider_used = self._usage()
        return min(self._pool_limits().minus(pool_used).count(need),
                   self._provider_quota().minus(provider_used).count(need))

    def choose_az(self) -> str | None:
        """The availability zone for a request's first launch."""
        try:
            return self.adapter.choose_az(self.pool)
        except Exception as e:
            log.warning('Pool %s/%s: choosing an availability zone failed: %s',
                        self.provider.name, self.pool.name, e)
            return None

    def _free_quota(self, handler: RequestHandler) -> None:
        """Paused for want of room: delete one ready, unallocated node of a
        label the paused request does not need (it would have been used)."""
        needed = {s.label for s in handler.empty_slots}
        if not self.can_launch or self._freeing or \
                all(self.free_capacity(label) > 0 for label in needed):
            return
        idle = [n for n in self.launcher.node_cache.values()
                if self._mine(n) and n.state == READY and n.allocated_to is None
                and n.type not in needed]
        idle.sort(key=lambda n: (n.state_time, n.id))
        for cached in idle:
            stub = Node(id=cached.id)
            if not self.zk.lock_node(stub, blocking=False, identifier=self.id):
                continue
            node = self.zk.get_node(cached.id)
            if node is None or node.state != READY or node.allocated_to is not None:
                self.zk.unlock_node(stub)
                continue
            node.lock = stub.lock
            self._freeing.add(node.id)
            log.info('Pool %s/%s: deleting idle node %s (%s) to make room for request %s',
                     self.provider.name, self.pool.name, node.id, node.type, handler.id)
            self.launcher.delete_node(node, self.adapter,
                                      on_done=lambda m: self._freed(m.node.id))
            return

    def _freed(self, node_id: str) -> None:
        self._freeing.discard(node_id)
        self.wake()

    def request_exists(self, request_id: str) -> bool:
        if self.launcher.request_cache.get(request_id) is not None:
            return True
        return self.zk.exists(paths.request_path(request_id)) is not None


def _describe(quota: Quota, limit: Quota) -> str:
    """``quota``'s fields that ``limit`` limits."""
    return ', '.join(f'{getattr(quota, f)} {f}' for f in Quota.FIELDS
                     if getattr(limit, f) is not None)
