"""The global request loop (seed 001, "The global queue process").

One launcher at a time (whoever holds ``/zuul/launcher/global-lock``,
see ``zuul.launcher.locks``) makes a pass over every open request in ``/zuul/node-requests``,
highest priority first, and over every node of each request:

- a node that has a record (``allocated_to`` the request, with its
  ``request_index``) is left to its provider's loop;
- otherwise the providers that serve the node's canonical label and
  have neither declined that node (``node_declines``: a permanent
  failure) nor failed it temporarily (``node_temp_failures``) are
  candidates.  None serve it, or all declined it: the request fails.
  All that did not decline it failed it temporarily: those temporary
  failures are cleared and they are candidates again (seed 001: "If
  all providers have failed the request, clear all temp failures"; not
  twice within ``TEMP_RETRY_DELAY`` seconds for one node);
- a ready, unallocated node of the label is taken first (min-ready and
  static nodes), preferring a provider the request already uses;
- else a node record is created (``building``, ``launch_state``
  ``queued``) in the first candidate with free quota, preferring a
  provider the request already uses, then the provider priority; a
  paused provider (``zuul.launcher.provider_loop``) counts as having no
  room.  If none has room, in the first candidate, which launches it
  when room appears.  Static providers are only ever used through their ready
  nodes.
- once every node of a request is ready, the request is fulfilled with
  the node ids in ``node_types`` order.

Requests are written with the version read (a provider loop may add a
decline meanwhile: the pass then retries next time).  Node records are
read before requests, and a provider loop records a decline before it
deletes the node, so a pass never misses a decline for a node it sees
gone.  A pass reads the launcher's watch-driven caches after fencing
them (``zuul.launcher.cache``: one round trip, then only the records
that changed are read), so what it sees is at least as fresh as reading
every record after taking the lock: a launcher taking over never acts on
another's stale view, nor on a view missing its own last writes.  If
the caches cannot be fenced (the session was lost and they are
resyncing) the pass reads every record.
"""

from __future__ import annotations

import logging
import time

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from nodepool.zk.api import RecordChangedError, RecordGoneError
from nodepool.zk.priority import request_order
from nodepool.zk.records import (
    BUILDING,
    FAILED,
    FULFILLED,
    PENDING,
    READY,
    REQUESTED,
    Node,
    NodeRequest,
)
from zuul.launcher.locks import LockedLoop, LoopLock
from zuul.launcher.providers import POOL
from zuul.launcher.quota import QUEUED, ProviderQuota

log = logging.getLogger('zuul.launcher.requests')

GLOBAL_LOCK = '/zuul/launcher/global-lock'
#: Seconds before the temporary failures of one node are cleared again
#: (the first time they are cleared at once).
TEMP_RETRY_DELAY = 5.0


def tag(request: NodeRequest) -> str:
    """How log lines name a request (with the event id to follow a
    change across daemons)."""
    return f'[e: {request.event_id}] request {request.id}'


def node_labels(node: Node) -> list[str]:
    return list(node.labels) if node.labels else [node.type]


def priority_of(resolved) -> tuple:
    try:
        prio = int(resolved.settings.get('priority', 100))
    except (TypeError, ValueError):
        prio = 100
    return prio, resolved.canonical_name


class _Writes:
    """The writes of one pass, sent without waiting for each other (a
    pass is bound by round trips) and all waited for before the pass
    ends (so before the global lock is released)."""

    def __init__(self, zk):
        self.zk = zk
        self.creates: list = []
        self.sets: list = []

    def create_node(self, node: Node, done) -> None:
        now = time.time()
        node.created_time = node.state_time = node.updated_time = now
        result = self.zk.client.create_async(f'{self.zk.tree.node_root}/', node.serialize(),
                                             sequence=True)
        self.creates.append((node, result, done))

    def store_request(self, request: NodeRequest, version: int, done=None) -> None:
        result = self.zk.client.set_async(self.zk.tree.request_path(request.id),
                                          request.serialize(), version)
        self.sets.append((request, result, done))

    def flush(self) -> None:
        lock_dirs = []
        for node, result, done in self.creates:
            try:
                node.id = result.get().rsplit('/', 1)[1]
            except KazooException as e:
                log.warning('Creating a node record failed: %s', e)
                continue
            # The lock directory exists from the start (see NodepoolZooKeeper).
            lock_dirs.append(self.zk.client.create_async(self.zk.tree.node_lock_path(node.id)))
            done(node)
        for request, result, done in self.sets:
            try:
                request.stat = result.get()
            except BadVersionError:
                log.debug('%s: changed meanwhile (next pass)', tag(request))
                continue
            except NoNodeError:
                log.debug('%s: gone', tag(request))
                continue
            if done is not None:
                done()
        for result in lock_dirs:
            try:
                result.get()
            except NodeExistsError:
                pass
        self.creates, self.sets = [], []


class RequestAssigner(LockedLoop):
    """One launcher's side of the global request loop."""

    def __init__(self, launcher):
        self.launcher = launcher
        self.zk = launcher.zk
        self.lock = LoopLock(self.zk.client, GLOBAL_LOCK, launcher.id,
                             launcher.settings.lock_hold, launcher.lock_retry,
                             wake=launcher.wake_requests)
        self.passes = 0
        self.cached_passes = 0

    # -- one pass ------------------------------------------------------------------

    def _read(self) -> tuple[list[Node], list[NodeRequest]]:
        # run_once has just checked (or taken) the lock: a round trip.
        snapshot = self.launcher.snapshot(round_trip_done=True)
        if snapshot is not None:
            self.cached_passes += 1
            return snapshot
        nodes = self.zk.get_nodes()           # nodes first: see the module docstring
        return nodes, sorted(self.zk.get_requests(), key=request_order)

    def _pass(self) -> None:
        nodes, requests = self._read()
        providers = self.launcher.published_providers()
        served = {label for p in providers.values() for label in p.labels}
        if any(label not in served for r in requests if r.state in (REQUESTED, PENDING)
               for label in r.node_types):
            # Before failing a request for an unknown label, make sure the
            # scheduler did not publish it a moment ago (watches lag).
            self.launcher.refresh_providers()
            providers = self.launcher.published_providers()
        quotas = {name: ProviderQuota(p, self.launcher.served(name))
                  for name, p in providers.items()}
        by_request: dict[str, dict[int, Node]] = {}
        for node in nodes:
            if node.allocated_to and node.request_index is not None:
                by_request.setdefault(node.allocated_to, {})[node.request_index] = node
        self.writes = _Writes(self.zk)
        try:
            for request in requests:
                if request.state not in (REQUESTED, PENDING):
                    continue
                try:
                    self._handle(request, by_request.setdefault(request.id, {}), nodes,
                                 providers, quotas)
                except (RecordGoneError, RecordChangedError) as e:
                    log.debug('%s: %s (next pass)', tag(request), e)
            self._min_ready(nodes, providers, quotas)
        finally:
            self.writes.flush()

    def _handle(self, request: NodeRequest, mine: dict[int, Node], nodes: list[Node],
                providers: dict, quotas: dict) -> None:
        version = request.stat.version if request.stat is not None else -1
        changed = False
        if request.state == REQUESTED:
            request.set_state(PENDING)
            changed = True
            log.info('%s: accepted (%s)', tag(request), ', '.join(request.node_types))
        for index, label in enumerate(request.node_types):
            if index in mine:
                continue
            capable = sorted((p for p in providers.values() if label in p.labels),
                             key=priority_of)
            upload_provider = (request.image_upload or {}).get('provider')
            if upload_provider:
                capable = [p for p in capable if p.canonical_name == upload_provider]
            if not capable:
                self._fail(request, version, f'no provider serves label {label}')
                return
            declined = set(request.node_declines.get(str(index), []))
            temporary = set(request.node_temp_failures.get(str(index), []))
            usable = [p for p in capable if p.canonical_name not in declined]
            if not usable:
                self._fail(request, version, f'every provider declined node {index} '
                           f'({label}): {", ".join(sorted(declined))}')
                return
            open_ = [p for p in usable if p.canonical_name not in temporary]
            if not open_:
                last = request.node_temp_cleared.get(str(index), 0)
                if time.time() - last < TEMP_RETRY_DELAY:
                    continue      # cleared a moment ago: not a busy loop (next pass)
                log.info('%s: every provider failed node %d (%s) temporarily (%s); '
                         'trying again', tag(request), index, label,
                         ', '.join(sorted(temporary)))
                request.node_temp_failures.pop(str(index), None)
                request.node_temp_cleared[str(index)] = time.time()
                changed = True
                open_ = usable
            preferred = {n.provider for n in mine.values()}
            open_.sort(key=lambda p: (p.canonical_name not in preferred, priority_of(p)))
            node = self._reuse(request, index, label, open_, nodes)
            if node is None:
                node = self._assign(request, index, label, open_, nodes, quotas)
            if node is not None:
                mine[index] = node
        if len(mine) == len(request.node_types) and \
                all(n.state == READY for n in mine.values()):
            request.nodes = [mine[i].id for i in range(len(request.node_types))]
            request.set_state(FULFILLED)
            providers_used = ', '.join(sorted({n.provider for n in mine.values()}))
            self.writes.store_request(request, version, lambda: log.info(
                '%s: fulfilled with nodes %s (%s)', tag(request), request.nodes,
                providers_used))
        elif changed:
            self.writes.store_request(request, version)

    def _fail(self, request: NodeRequest, version: int, reason: str) -> None:
        request.set_state(FAILED)
        request.extra['failure_reason'] = reason
        self.writes.store_request(request, version,
                                  lambda: log.warning('%s: failed: %s', tag(request), reason))

    def _reuse(self, request: NodeRequest, index: int, label: str, providers: list,
               nodes: list[Node]) -> Node | None:
        """A ready unallocated node of ``label``, allocated to the request."""
        order = {p.canonical_name: i for i, p in enumerate(providers)}
        candidates = [n for n in nodes if n.state == READY and n.allocated_to is None
                      and n.provider in order and label in node_labels(n)]
        candidates.sort(key=lambda n: (order[n.provider], n.state_time, n.id))
        for cached in candidates:
            stub = Node(id=cached.id)
            if not self.zk.lock_node(stub, blocking=False, identifier=self.launcher.id):
                continue
            try:
                node = self.zk.get_node(cached.id)
                if node is None or node.state != READY or node.allocated_to is not None:
                    continue
                node.allocated_to = request.id
                node.request_index = index
                node.event_id = request.event_id
                node.type = label
                self.zk.store_node(node)
            except RecordGoneError:
                continue
            finally:
                self.zk.unlock_node(stub)
            cached.allocated_to = request.id
            log.info('%s: node %s (%s, ready in %s) allocated', tag(request), node.id,
                     label, node.provider)
            return node
        return None

    def _assign(self, request: NodeRequest | None, index: int | None, label: str,
                providers: list, nodes: list[Node], quotas: dict) -> Node | None:
        launchable = [p for p in providers if not self.launcher.is_static(p)]
        if not launchable:
            return None   # static nodes only: wait for one to be ready
        choice = next((p for p in launchable
                       if not self.launcher.provider_paused(p.canonical_name)
                       and quotas[p.canonical_name].free(nodes, label) > 0), None)
        waiting = choice is None
        choice = choice or launchable[0]
        node = Node(type=label, provider=choice.canonical_name, pool=POOL, state=BUILDING,
                    allocated_to=request.id if request else None, request_index=index,
                    launch_state=QUEUED, launcher=self.launcher.id,
                    event_id=request.event_id if request else None)
        what = tag(request) if request else 'min-ready'

        def created(node):
            log.info('%s: node %s (%s) assigned to %s%s', what, node.id, label,
                     choice.canonical_name, ' (waiting for quota)' if waiting else '')
            self.launcher.wake_provider(choice.canonical_name)
        self.writes.create_node(node, created)
        nodes.append(node)
        return node

    # -- min-ready -------------------------------------------------------------------

    def _min_ready(self, nodes: list[Node], providers: dict, quotas: dict) -> None:
        wanted: dict[str, int] = {}
        for provider in providers.values():
            for label in provider.labels.values():
                if label.min_ready:
                    wanted[label.canonical_name] = max(wanted.get(label.canonical_name, 0),
                                                       label.min_ready)
        for label, count in sorted(wanted.items()):
            have = sum(1 for n in nodes if n.allocated_to is None and n.type == label
                       and n.state in (BUILDING, READY))
            capable = sorted((p for p in providers.values() if label in p.labels),
                             key=priority_of)
            for _ in range(count - have):
                roomy = [p for p in capable
                         if quotas[p.canonical_name].free(nodes, label) > 0]
                if not roomy or self._assign(None, None, label, roomy, nodes,
                                             quotas) is None:
                    break
