"""One provider's loop (seed 001, "The individual provider loop").

Whoever holds ``/zuul/provider/<quoted canonical name>`` makes a pass
over the provider's node records:

- ``building`` nodes are driven through the launch state machine
  (``zuul.launcher.node_machine``), one quick step at a time, its state
  kept on the record so any launcher resumes it;
- ``used`` nodes (and ``in-use`` ones nobody holds any more: their
  requestor died) are deleted, or made ``ready`` again for providers
  that reuse nodes (static);
- ``deleting`` nodes are deleted (again, if a delete failed);
- ``ready`` nodes allocated to a request that no longer exists are
  returned to the pool, queued ones are dropped; idle ready nodes older
  than their label's ``max-ready-age`` are deleted, and held nodes past
  their ``hold_expiration`` (or ``[launcher] max_hold_age``);
- static providers have their hosts registered as ready nodes (one per
  slot, with ids derived from provider, host, port and slot);
- every ``cleanup_interval``: instances the provider lists that no
  node record accounts for are deleted once they have been seen for
  ``leak_grace`` seconds.

Pausing (seed 001: "If quota available, unpause provider"): the loop is
paused while queued nodes wait for room in the provider (reason
``quota``), and after the adapter refused a launch with ``QuotaError``
(reason ``quota-error``: the provider knows of less room than the
launcher counted) until one of the provider's nodes goes away or
``QUOTA_PAUSE`` seconds pass.  A paused loop starts no queued node; the
holder of the loop's lock writes the state to
``/zuul/launcher/provider-state/<quoted canonical name>`` whenever it
changes, and the global loop assigns new nodes to paused providers only
when no other capable provider has room.

Nodes are locked (non-blocking) before anything that races with a
requestor (used, in-use, ready nodes); building nodes belong to the
provider lock's holder alone.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from nodepool.zk.api import RecordGoneError
from nodepool.zk.priority import request_order
from nodepool.zk.records import (
    BUILDING,
    DELETING,
    HOLD,
    IN_USE,
    READY,
    USED,
    Node,
    ProviderState,
    read_many,
    request_sort_key,
)
from zuul.launcher.locks import LockedLoop, LoopLock
from zuul.launcher.node_machine import NodeLaunchSteps, decline, node_tag
from zuul.launcher.providers import ServedProvider
from zuul.launcher.quota import QUEUED, ProviderQuota
from zuul.model.launcher import quote_name

log = logging.getLogger('zuul.launcher.provider')

PROVIDER_LOCK_ROOT = '/zuul/provider'
PROVIDER_STATE_ROOT = '/zuul/launcher/provider-state'
#: Seconds a provider stays paused after it refused a launch with
#: ``QuotaError``, unless one of its nodes goes away before.
QUOTA_PAUSE = 30.0
#: Threads working on the nodes of one provider pass in parallel.
WORKERS = 16


def provider_lock_path(canonical_name: str) -> str:
    return f'{PROVIDER_LOCK_ROOT}/{quote_name(canonical_name)}'


def provider_state_path(canonical_name: str) -> str:
    return f'{PROVIDER_STATE_ROOT}/{quote_name(canonical_name)}'


def static_node_id(provider: str, host: str, port: int, slot: int) -> str:
    """The same id for the same slot of the same host, whichever launcher
    registers it (and after every restart)."""
    digest = hashlib.sha256(f'{provider}\0{host}\0{port}\0{slot}'.encode()).hexdigest()
    return f'static-{digest[:20]}'


def _is_ipv4(name: str) -> bool:
    try:
        return ipaddress.ip_address(name).version == 4
    except ValueError:
        return False


class ProviderLoop(LockedLoop):
    """The loop of one provider in this launcher."""

    def __init__(self, launcher, served: ServedProvider):
        self.launcher = launcher
        self.served = served
        self.zk = launcher.zk
        self.name = served.name
        self.adapter = served.adapter
        self.lock = LoopLock(self.zk.client, provider_lock_path(self.name), launcher.id,
                             launcher.settings.lock_hold, launcher.lock_retry,
                             wake=lambda: launcher.wake_provider(self.name))
        self.quota = ProviderQuota(served.resolved, served)
        self.steps = NodeLaunchSteps(self)
        self.pool = ThreadPoolExecutor(max_workers=WORKERS,
                                       thread_name_prefix=f'zuul-launcher-{served.resolved.name}')
        self.active = False            # nodes in flight: poll again soon
        self.passes = 0
        self._last_cleanup = 0.0
        self._leaks_seen: dict[str, float] = {}
        #: Why the loop starts no queued node now (None: it is not paused).
        self.paused: str | None = None
        #: After a QuotaError: [monotonic deadline, nodes then (None: count
        #: at the next pass)].
        self._quota_error: list | None = None
        self._state_written: tuple | None = None
        self._state_lock = threading.Lock()

    # -- reading -------------------------------------------------------------------

    def _nodes(self) -> list[Node]:
        """This provider's node records, read from ZooKeeper (when the
        caches cannot be fenced, see zuul.launcher.cache; the node cache
        still says which records belong to other providers)."""
        cache = self.launcher.node_cache
        ids = []
        for node_id in self.zk.get_node_ids():
            cached = cache.get(node_id) if cache is not None else None
            if cached is None or cached.provider == self.name:
                ids.append(node_id)
        tree = self.zk.tree
        records = read_many(self.zk.client, [
            (tree.node_path(i), lambda raw, stat, i=i: Node.deserialize(raw, id=i, stat=stat))
            for i in ids])
        return [n for n in records if n.provider == self.name]

    # -- one pass ------------------------------------------------------------------

    def _pass(self) -> None:
        # run_once has just checked (or taken) the lock: a round trip.
        snapshot = self.launcher.snapshot(self.name, round_trip_done=True)
        if snapshot is not None:
            nodes, requests = snapshot
            # id -> serving order (queued launches start in that order)
            request_ids = {r.id: request_order(r) for r in requests}
        else:
            nodes = self._nodes()
            request_ids = None
        if self.adapter.reuses_nodes:
            self._register_static(nodes)
        if request_ids is None:
            request_ids = set(self.zk.get_request_ids())
        work = []          # (node, function, args): independent per node
        in_flight = [n for n in nodes if n.state == BUILDING and n.launch_state != QUEUED]
        for node in self._start_queued(nodes, request_ids) + in_flight:
            work.append((node, self.steps.step, (node, request_ids)))
        for node in sorted(nodes, key=lambda n: (n.state_time, n.id)):
            if node.state == BUILDING:
                continue
            if node.state == USED:
                work.append((node, self._release, (node,)))
            elif node.state == IN_USE:
                work.append((node, self._check_abandoned, (node,)))
            elif node.state == DELETING:
                work.append((node, self._delete, (node,)))
            elif node.state == READY and node.allocated_to and \
                    node.allocated_to not in request_ids:
                work.append((node, self._unallocate, (node, request_ids)))
            elif node.state == READY and not node.allocated_to and self._too_old(node):
                work.append((node, self._expire, (node,)))
            elif node.state == HOLD and self._hold_over(node):
                work.append((node, self._end_hold, (node,)))
        # Round trips, not CPU, bound a pass: nodes are worked on in
        # parallel (each node by one thread; the provider lock keeps
        # other launchers out).
        futures = [(node, self.pool.submit(self._guarded, node, fn, *args))
                   for node, fn, args in work]
        # Every one finishes before the pass ends (and the lock may move).
        results = [(node, f.result()) for node, f in futures]
        self.active = any(result is True and node.state == BUILDING
                          for node, result in results)
        if any(n.launch_state == QUEUED for n in nodes if n.state == BUILDING):
            self._free_idle(nodes)
        now = time.monotonic()
        if now - self._last_cleanup >= self.launcher.settings.cleanup_interval:
            self._last_cleanup = now
            self._clean_leaks(nodes)

    def _guarded(self, node: Node, fn, *args):
        try:
            return fn(*args)
        except RecordGoneError:
            return False
        except Exception:
            log.exception('Provider %s: node %s (%s) failed', self.name, node.id, node.state)
            return False

    def _start_queued(self, nodes: list[Node], request_ids) -> list[Node]:
        """Queued nodes that fit now, highest-priority request first (the
        decision is serial; the launches then run in parallel).  Queued
        nodes whose request is gone are dropped."""
        queued = [n for n in nodes if n.state == BUILDING and n.launch_state == QUEUED]
        orders = request_ids if isinstance(request_ids, dict) else {}

        def order(node: Node):
            request_id = node.allocated_to or '0-0'
            priority, sequence = request_sort_key(request_id)
            return (node.allocated_to is None,
                    orders.get(request_id, (priority, 0, sequence)), node.id)
        queued.sort(key=order)
        started = []
        paused = 'quota-error' if self._quota_error_pause(nodes) else None
        for node in queued:
            if node.allocated_to is not None and node.allocated_to not in request_ids:
                try:
                    self.steps.drop(node)
                except Exception:
                    log.exception('Provider %s: dropping node %s failed', self.name, node.id)
                continue
            if paused:
                break
            if self.quota.free(nodes, node.type, count_queued=False) <= 0:
                paused = 'quota'
                break
            if not self.steps.has_image(node):
                continue          # its Zuul image has no upload in service yet: wait
            self.steps.prepare(node)
            started.append(node)
        self._set_paused(paused)
        return started

    # -- pausing -------------------------------------------------------------------

    def pause_for_quota(self, reason: str) -> None:
        """The adapter refused a launch for lack of room (from a worker)."""
        if self._quota_error is None:
            log.warning('Provider %s: out of quota (%s); paused', self.name, reason)
        self._quota_error = [time.monotonic() + QUOTA_PAUSE, None]
        # At once (before the node is given up), so the global loop
        # sends no new node here meanwhile.
        self._set_paused('quota-error')

    def _quota_error_pause(self, nodes: list[Node]) -> bool:
        if self._quota_error is None:
            return False
        occupying = sum(1 for n in nodes
                        if not (n.state == BUILDING and n.launch_state == QUEUED))
        deadline, count = self._quota_error
        if count is None:
            self._quota_error[1] = occupying
        elif occupying < count or time.monotonic() >= deadline:
            self._quota_error = None
            return False
        return True

    def _set_paused(self, reason: str | None) -> None:
        with self._state_lock:
            self._write_state(reason)

    def _write_state(self, reason: str | None) -> None:
        if reason != self.paused:
            if reason:
                log.info('Provider %s: paused (%s)', self.name, reason)
            else:
                log.info('Provider %s: unpaused', self.name)
        self.paused = reason
        state = (reason, self.lock._since)    # written again after each new lock turn
        if state == self._state_written:
            return
        record = ProviderState(provider=self.name, paused=reason is not None, reason=reason,
                               launcher=self.launcher.id, since=time.time())
        path = provider_state_path(self.name)
        try:
            try:
                self.zk.client.set(path, record.serialize())
            except NoNodeError:
                self.zk.client.create(path, record.serialize(), makepath=True)
        except NodeExistsError:
            return             # next pass
        except KazooException as e:
            log.warning('Provider %s: writing its state failed: %s', self.name, e)
            return
        self._state_written = state
        self.launcher.wake_requests()

    # -- nodes after use -------------------------------------------------------------

    def _locked(self, node: Node) -> Node | None:
        """The node locked and re-read, or None if someone holds it."""
        stub = Node(id=node.id)
        if not self.zk.lock_node(stub, blocking=False, identifier=self.launcher.id):
            return None
        fresh = self.zk.get_node(node.id)
        if fresh is None:
            self.zk.unlock_node(stub)
            return None
        fresh.lock = stub.lock
        return fresh

    def _release(self, node: Node) -> None:
        node = self._locked(node)
        if node is None:
            return
        if node.state not in (USED, IN_USE):
            self.zk.unlock_node(node)
            return
        if self.adapter.reuses_nodes:
            self._make_ready(node)
            return
        self._remove(node)

    def _make_ready(self, node: Node) -> None:
        request = node.allocated_to
        node.set_state(READY)
        node.allocated_to = None
        node.request_index = None
        node.event_id = None
        node.launch_state = 'ready'
        try:
            self.zk.store_node(node)
        finally:
            self.zk.unlock_node(node)
        log.info('%s: %s ready again after request %s', node_tag(node), node.hostname,
                 request)
        self.launcher.wake_requests()

    def _remove(self, node: Node) -> bool:
        """Delete the instance and the record of a locked node."""
        node.set_state(DELETING)
        self.zk.store_node(node)
        if node.external_id and not self.adapter.reuses_nodes:
            try:
                self.adapter.delete(node.external_id)
            except Exception as e:
                log.warning('%s: deleting instance %s failed: %s (retried later)',
                            node_tag(node), node.external_id, e)
                self.zk.unlock_node(node)
                return False
        self.zk.delete_node(node)
        log.info('%s: deleted from %s', node_tag(node), self.name)
        self.launcher.wake_requests()
        return True

    def _delete(self, node: Node) -> None:
        node = self._locked(node)
        if node is not None:
            self._remove(node)

    def _check_abandoned(self, node: Node) -> None:
        """An in-use node nobody holds: its requestor is gone."""
        if self.zk.is_node_locked(node.id):
            return
        locked = self._locked(node)
        if locked is None:
            return
        if locked.state != IN_USE:
            self.zk.unlock_node(locked)
            return
        log.warning('%s: in use but unlocked (its requestor is gone): releasing',
                    node_tag(locked))
        if self.adapter.reuses_nodes:
            self._make_ready(locked)
        else:
            self._remove(locked)

    def _unallocate(self, node: Node, request_ids: set[str]) -> None:
        locked = self._locked(node)
        if locked is None:
            return
        try:
            if locked.state == READY and locked.allocated_to and \
                    locked.allocated_to not in request_ids and \
                    self.zk.get_request(locked.allocated_to) is None:
                log.info('%s: request gone; node returned to the pool', node_tag(locked))
                locked.allocated_to = None
                locked.request_index = None
                locked.event_id = None
                self.zk.store_node(locked)
        finally:
            self.zk.unlock_node(locked)
        self.launcher.wake_requests()

    def _too_old(self, node: Node) -> bool:
        """An idle ready node past its label's ``max-ready-age``."""
        label = self.served.resolved.labels.get(node.type)
        return bool(label is not None and label.max_ready_age and
                    not self.adapter.reuses_nodes and
                    time.time() - node.state_time > label.max_ready_age)

    def _expire(self, node: Node) -> None:
        locked = self._locked(node)
        if locked is None:
            return
        if locked.state == READY and locked.allocated_to is None and self._too_old(locked):
            log.info('%s: ready longer than max-ready-age; deleting', node_tag(locked))
            self._remove(locked)
        else:
            self.zk.unlock_node(locked)

    def _hold_over(self, node: Node) -> bool:
        """A held node past its ``hold_expiration`` or ``max_hold_age``."""
        limits = [x for x in (node.hold_expiration or 0,
                              self.launcher.settings.max_hold_age or 0) if x > 0]
        return bool(limits) and time.time() - node.state_time > min(limits)

    def _end_hold(self, node: Node) -> None:
        locked = self._locked(node)
        if locked is None:
            return
        if locked.state != HOLD or not self._hold_over(locked):
            self.zk.unlock_node(locked)
            return
        log.info('%s: held long enough; releasing', node_tag(locked))
        if self.adapter.reuses_nodes:
            self._make_ready(locked)
        else:
            self._remove(locked)

    def _free_idle(self, nodes: list[Node]) -> None:
        """Queued launches wait for room: delete one idle, unallocated
        ready node of a label nobody waits for (it would have been used)."""
        if self.adapter.reuses_nodes:
            return
        queued = [n for n in nodes if n.state == BUILDING and n.launch_state == QUEUED]
        if not queued or self.quota.free(nodes, queued[0].type, count_queued=False) > 0:
            return
        needed = {n.type for n in queued}
        idle = [n for n in nodes if n.state == READY and n.allocated_to is None
                and n.type not in needed]
        for node in sorted(idle, key=lambda n: (n.state_time, n.id)):
            locked = self._locked(node)
            if locked is None:
                continue
            if locked.state == READY and locked.allocated_to is None:
                log.info('Provider %s: deleting idle node %s (%s) to make room',
                         self.name, node.id, node.type)
                self._remove(locked)
                return
            self.zk.unlock_node(locked)

    # -- static hosts ------------------------------------------------------------------

    def _register_static(self, nodes: list[Node]) -> None:
        hosts = self.adapter.static_hosts()
        existing = {n.id: n for n in nodes}
        wanted = set()
        for host in hosts:
            node_id = static_node_id(self.name, host.name, host.connection_port, host.slot)
            wanted.add(node_id)
            if node_id in existing:
                continue
            try:
                keys = self.adapter.scan_host_keys(host)
            except Exception as e:
                log.warning('Static node %s: not registered: %s', host.name, e)
                continue
            node = Node(type=host.labels[0], labels=list(host.labels), provider=self.name,
                        pool=host.pool, hostname=host.name, interface_ip=host.name,
                        public_ipv4=host.name if _is_ipv4(host.name) else None,
                        connection_port=host.connection_port,
                        connection_type=host.connection_type, username=host.username,
                        host_keys=keys, python_path=host.python_path,
                        shell_type=host.shell_type, state=READY, slot=host.slot,
                        external_id=host.name, launch_state='ready',
                        attributes=dict(host.attributes))
            node.id = node_id
            if self._create_with_id(node):
                nodes.append(node)
                log.info('Static node %s slot %d registered as node %s (%s)', host.name,
                         host.slot, node_id, ', '.join(host.labels))
                self.launcher.wake_requests()
        for node in nodes:
            if node.id not in wanted and node.id.startswith('static-') and \
                    node.state == READY and not node.allocated_to:
                locked = self._locked(node)
                if locked is not None:
                    log.info('Static node %s left the configuration; node %s removed',
                             node.hostname, node.id)
                    self.zk.delete_node(locked)

    def _create_with_id(self, node: Node) -> bool:
        now = time.time()
        node.created_time = node.state_time = node.updated_time = now
        tree = self.zk.tree
        tx = self.zk.client.transaction()
        tx.create(tree.node_path(node.id), node.serialize())
        tx.create(tree.node_lock_path(node.id))
        results = tx.commit()
        if any(isinstance(r, Exception) for r in results):
            if not any(isinstance(r, NodeExistsError) for r in results):
                log.warning('Static node %s: registering failed: %s', node.id, results)
            return False
        return True

    # -- leaks ---------------------------------------------------------------------------

    def _clean_leaks(self, nodes: list[Node]) -> None:
        if self.adapter.reuses_nodes:
            return
        try:
            instances = self.adapter.list()
        except Exception as e:
            log.warning('Provider %s: listing instances failed: %s', self.name, e)
            return
        known = {n.id: n for n in nodes}
        now = time.monotonic()
        seen = {}
        for inst in instances:
            node = known.get(inst.node_id) if inst.node_id else None
            if node is not None and node.external_id in (None, inst.external_id) and \
                    (node.external_id == inst.external_id or node.state == BUILDING):
                continue
            if inst.node_id and node is None:
                fresh = self.zk.get_node(inst.node_id)
                if fresh is not None and fresh.provider == self.name and \
                        fresh.external_id == inst.external_id:
                    continue
            first = self._leaks_seen.get(inst.external_id, now)
            seen[inst.external_id] = first
            if now - first < self.launcher.settings.leak_grace:
                continue
            try:
                self.adapter.delete(inst.external_id)
                seen.pop(inst.external_id, None)
                log.warning('Provider %s: deleted leaked instance %s (node %s)', self.name,
                            inst.external_id, inst.node_id)
            except Exception as e:
                log.warning('Provider %s: deleting leaked instance %s failed: %s',
                            self.name, inst.external_id, e)
        self._leaks_seen = seen


class UnservableProviderLoop:
    """A provider this launcher should serve but cannot (its driver
    refuses the settings, its adapter does not start): whoever holds its
    lock declines every node assigned to it, so requests move to other
    providers (or fail) instead of waiting for ever."""

    def __init__(self, launcher, name: str, reason: str):
        self.launcher = launcher
        self.zk = launcher.zk
        self.name = name
        self.reason = reason
        self.active = False
        self.lock = LoopLock(self.zk.client, provider_lock_path(name), launcher.id,
                             launcher.settings.lock_hold, launcher.lock_retry,
                             wake=lambda: launcher.wake_provider(name))

    def run_once(self) -> bool:
        if not self.lock.acquire():
            return False
        try:
            snapshot = self.launcher.snapshot(self.name, round_trip_done=True)
            nodes = snapshot[0] if snapshot is not None else self.zk.get_nodes()
            for node in nodes:
                if node.provider != self.name or node.state != BUILDING:
                    continue
                try:
                    if node.allocated_to and node.request_index is not None:
                        decline(self.zk, node, f'(provider unusable: {self.reason})')
                    self.zk.delete_node(node)
                except Exception:
                    log.exception('Provider %s: declining node %s failed', self.name,
                                  node.id)
            self.launcher.wake_requests()
        finally:
            self.lock.pass_done()
        return True
