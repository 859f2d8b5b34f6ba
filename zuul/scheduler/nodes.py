"""Node requests for the scheduler, over Nodepool's ZooKeeper protocol
(nodepool/zk/requestor.py). Results come back as ``nodes-provisioned``
result events on the scheduler thread.

Two node systems run side by side during a migration (seed 001, "Upgrade
Process"): a label defined by a ``label`` object in the tenant's live
layout is requested from zuul-launcher (``/zuul/node-requests``, under
its *canonical* name), any other label from Nodepool
(``/nodepool/requests``), as before.  A nodeset that mixes both kinds is
split into one request per system and the build starts when both are
fulfilled (``RoutedRequest``); if either fails, the other is withdrawn
and its nodes returned.  The nodes of such a job then come from two
systems (and so two providers): that is the price of migrating label by
label.  A tenant with ``use-nodepool: false`` never sends a request to
Nodepool: the job fails with NODE_FAILURE and says which label.

With ``[scheduler] relative_priority`` on, each request also carries a
*relative priority* (nodepool/zk/priority.py): the position of its item
among the live items of its shared queue (dependent pipelines) or of its
project (other pipelines), 0 first.  Launchers serve requests by
precedence, then relative priority, then age.  After every pass over the
pipelines ``NodesAdapter.reprioritize`` rewrites the requests still
waiting whose item moved up (items ahead of it left).

``ProviderPublisher`` writes the providers of every tenant's live layout
to ZooKeeper for zuul-launcher after every (re)configuration.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
from dataclasses import dataclass, field

log = logging.getLogger('zuul.scheduler.nodes')

# Pipeline precedence -> node request priority (lower is served first).
PRIORITY = {'high': 100, 'normal': 200, 'low': 300}

# The two node systems (keys of NodesAdapter.clients).
NODEPOOL = 'nodepool'
ZUUL_LAUNCHER = 'zuul-launcher'

# Outcomes of a RoutedRequest (the same words as the requestor's).
WAITING, ACCEPTED, FAILED, CANCELED, RELEASED = (
    'waiting', 'accepted', 'failed', 'canceled', 'released')


@dataclass
class NodeSet:
    """The nodes of one build: ``nodes`` is a list of (names, node record
    dict) in nodeset order, as zuul/scheduler/builds.py node_specs wants."""

    handle: object
    nodes: list = field(default_factory=list)

    @property
    def node_ids(self) -> list[str]:
        return [n.get('id') for _, n in self.nodes]


#: Where a node's credentials (a Kubernetes token) ride in the node dict
#: from the lock to the executor's request; never stored.
SECRET_KEY = 'secret'
#: Node kinds whose users need credentials (nodepool.driver.kubernetes).
CREDENTIAL_TYPES = ('kubectl', 'namespace', 'project')


def with_secret(client, node: dict) -> dict:
    """``node`` with its credentials, read from beside its record by the
    requestor that holds its lock (nodepool.zk.api ``store_node_secret``)."""
    if client is None or node.get('connection_type') not in CREDENTIAL_TYPES:
        return node
    try:
        secret = client.zk.get_node_secret(str(node.get('id')))
    except Exception:
        log.exception('Unable to read the credentials of node %s', node.get('id'))
        secret = None
    if secret:
        node[SECRET_KEY] = secret
    return node


def _client_of(routed, index: int):
    for part in getattr(routed, 'parts', ()):
        if index in part.indices:
            return part.client
    return None


class RoutingError(Exception):
    """A nodeset this tenant cannot request (the message says why)."""


def route_labels(layout, labels: list[str]) -> list[tuple[str, str]]:
    """(system, label as the request names it) per label, in order:
    zuul-launcher with the canonical name when the layout defines a
    ``label`` object of that name, else Nodepool with the name as
    written.  ``layout`` is the tenant's live (non-speculative) layout."""
    table = getattr(layout, 'labels', None) or {}
    tenant = getattr(layout, 'tenant', None)
    use_nodepool = getattr(tenant, 'use_nodepool', True)
    out = []
    for label in labels:
        obj = table.get(label)
        if obj is not None:
            out.append((ZUUL_LAUNCHER, getattr(obj, 'canonical_name', None) or label))
        elif not use_nodepool:
            name = getattr(tenant, 'name', '?')
            raise RoutingError(f'label "{label}" is not defined by a label object in '
                               f'tenant {name}, which does not use Nodepool '
                               f'(use-nodepool: false)')
        else:
            out.append((NODEPOOL, label))
    return out


@dataclass
class _Part:
    """One system's share of a routed request."""

    system: str
    client: object
    indices: list[int]          # positions in the nodeset
    handle: object = None       # the requestor's RequestHandle


@dataclass(eq=False)
class RoutedRequest:
    """What the scheduler keeps in ``bs.node_requests``: one request per
    node system, answered together.  ``nodes`` are the requestor's Node
    records in nodeset order once ``accepted``."""

    labels: list[str]
    parts: list[_Part] = field(default_factory=list)
    outcome: str = WAITING
    nodes: list = field(default_factory=list)
    #: Why it failed, for the report line.
    error_detail: str | None = None
    callback: object = None
    lock: threading.RLock = field(default_factory=threading.RLock)
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def id(self) -> str:
        return ','.join(f'{p.system}:{getattr(p.handle, "id", None)}' for p in self.parts)

    @property
    def fulfilled(self) -> bool:
        return self.outcome in (ACCEPTED, RELEASED)

    @property
    def failed(self) -> bool:
        return self.outcome == FAILED

    def systems(self) -> list[str]:
        return [p.system for p in self.parts]

    def wait(self, timeout: float | None = None) -> bool:
        return self.done.wait(timeout)

    # -- answers from the requestor clients (their threads) ------------------

    def part_done(self, handle) -> None:
        """A part was fulfilled or failed.  Other parts are withdrawn
        outside our lock: their clients call back holding their handle's
        lock, so holding ours while taking theirs could deadlock."""
        with self.lock:
            if self.outcome != WAITING:
                return
            if handle.failed:
                self.outcome = FAILED
                if len(self.parts) > 1:
                    # Which half; a plain NODE_FAILURE reads as released Zuul's.
                    system = next((p.system for p in self.parts if p.handle is handle), '?')
                    self.error_detail = f'({system} could not provide the nodes)'
            elif all(p.handle is not None and p.handle.fulfilled for p in self.parts):
                nodes = [None] * len(self.labels)
                for part in self.parts:
                    for index, node in zip(part.indices, part.handle.nodes):
                        nodes[index] = node
                self.nodes = nodes
                self.outcome = ACCEPTED
            else:
                return
            outcome = self.outcome
        if outcome == FAILED:
            self._withdraw()
        self._finish()

    def fail(self, why: str) -> None:
        with self.lock:
            self.outcome = FAILED
            self.error_detail = why
        self._withdraw()
        self._finish()

    def cancel(self) -> None:
        with self.lock:
            if self.outcome in (CANCELED, RELEASED):
                return
            self.outcome = CANCELED
        self._withdraw()
        self.done.set()

    def release(self) -> None:
        with self.lock:
            if self.outcome != ACCEPTED:
                return
            self.outcome = RELEASED
        for part in self.parts:
            try:
                part.client.release(part.handle)
            except Exception:
                log.exception('Unable to return the nodes of request %s', part.handle.id)
        self.done.set()

    def _withdraw(self) -> None:
        for part in self.parts:
            if part.handle is None:
                continue
            try:
                part.client.cancel(part.handle)   # releases nodes already taken
            except Exception:
                log.exception('Unable to withdraw node request %s', part.handle.id)

    def _finish(self) -> None:
        self.done.set()
        if self.callback is not None:
            try:
                self.callback(self)
            except Exception:
                log.exception('Node request callback failed for %s', self.id)


@dataclass(eq=False)
class AlternativesRequest:
    """What the scheduler keeps in ``bs.node_requests`` for a job whose
    nodeset has alternatives: the request of the alternative being tried
    (``current``) and the alternatives left. One answer is posted: the
    first alternative fulfilled, or the last one's failure."""

    item: object
    job: object
    pipeline: object
    remaining: list
    current: RoutedRequest | None = None
    canceled: bool = False
    lock: threading.RLock = field(default_factory=threading.RLock)

    @property
    def id(self) -> str:
        return getattr(self.current, 'id', '')

    @property
    def fulfilled(self) -> bool:
        return self.current is not None and self.current.fulfilled

    @property
    def failed(self) -> bool:
        return self.current is not None and self.current.failed and not self.remaining

    def wait(self, timeout: float | None = None) -> bool:
        current = self.current
        return current.wait(timeout) if current is not None else False

    def cancel(self) -> None:
        with self.lock:
            self.canceled = True
            current = self.current
        if current is not None:
            current.cancel()


class RestoredNodes:
    """The nodes of a build adopted after a scheduler restart, locked
    again by this scheduler: ``release`` marks them used and unlocks."""

    def __init__(self, taken: list, systems: list):
        self.taken = taken
        self.systems = systems
        self.id = 'restored'

    def release(self) -> None:
        taken, self.taken = self.taken, []
        for client, node in taken:
            try:
                client.release_nodes([node])
            except Exception:
                log.exception('Unable to return node %s', node.id)

    def cancel(self) -> None:
        self.release()


class NodesAdapter:
    """What SchedulerContext.request_nodes/cancel_node_request/
    return_nodes call.  ``client`` serves Nodepool's tree;
    ``launcher_client`` (optional) zuul-launcher's."""

    def __init__(self, client, scheduler, launcher_client=None,
                 relative_priority: bool = False):
        self.client = client
        self.launcher_client = launcher_client
        self.scheduler = scheduler
        self.relative_priority = relative_priority
        # Requests still waiting -> (item, relative priority last written);
        # only touched on the scheduler's thread.
        self._waiting: dict[RoutedRequest, tuple] = {}

    @property
    def clients(self) -> dict:
        return {NODEPOOL: self.client, ZUUL_LAUNCHER: self.launcher_client}

    def _manager_of(self, item):
        for state in getattr(self.scheduler, 'tenants', {}).values():
            for manager in state.managers.values():
                if item.queue in getattr(manager, 'queues', ()):
                    return manager
        return None

    def queue_position(self, item) -> int:
        """The item's relative priority: its index among the live items
        of its shared queue in a dependent pipeline, else among the live
        items of its project in the pipeline (0 if it is in none)."""
        manager = self._manager_of(item)
        if manager is None or item.queue is None:
            return 0
        if getattr(manager, 'dependent', False):
            items = [i for i in item.queue.queue if i.live]
        else:
            project = item.change.project
            items = [i for i in manager.all_items()
                     if i.live and i.change.project == project]
        return next((n for n, i in enumerate(items) if i is item), 0)

    def reprioritize(self) -> int:
        """Bring the relative priority of every waiting request up to
        date with its item's position (on the scheduler's thread, after a
        pass over the pipelines); the number of requests revised."""
        revised = 0
        for routed, (item, written) in list(self._waiting.items()):
            if routed.outcome != WAITING:
                del self._waiting[routed]
                continue
            position = self.queue_position(item)
            if position == written:
                continue
            self._waiting[routed] = (item, position)
            revised += 1
            log.info('[e: %s] Relative priority of node request %s: %d (was %d)',
                     item.event_id, routed.id, position, written)
            for part in routed.parts:
                if part.handle is None:
                    continue
                try:
                    part.client.revise(part.handle, position)
                except Exception:
                    log.exception('Unable to revise node request %s', part.handle.id)
        return revised

    def _tenant_layout(self, item):
        """The live layout of the item's tenant: node config is not
        speculative, so a change adding a label does not route itself."""
        tenants = getattr(self.scheduler, 'tenants', {})
        frozen_with = getattr(item.current_build_set, 'layout', None)
        name = getattr(getattr(frozen_with, 'tenant', None), 'name', None)
        if name in tenants:
            return tenants[name].layout
        for state in tenants.values():
            for manager in state.managers.values():
                if item.queue in getattr(manager, 'queues', ()):
                    return state.layout
        return frozen_with

    def request(self, item, job, pipeline):
        """Request the job's nodes; a nodeset with ``alternatives`` (see
        zuul/model/freeze.py resolve_nodeset_alternatives) is requested
        alternative after alternative until one is fulfilled."""
        frozen = getattr(job, 'frozen', None)
        alternatives = list(getattr(frozen, 'nodeset_alternatives', None) or ())
        if not alternatives:
            return self._request(item, job, pipeline, list(job.nodes), self._answer(item, job))
        chain = AlternativesRequest(item, job, pipeline, alternatives)
        self._request(item, job, pipeline, list(job.nodes), self._next_alternative(chain),
                      chain)
        return chain

    def _answer(self, item, job, handle=None, nodeset_object=None):
        """The callback posting a request's outcome (``handle``: what the
        scheduler keeps, when not the request itself)."""
        def done(routed, nodes):
            nodeset = None
            if routed.fulfilled:
                if nodeset_object is not None:
                    # An alternative was fulfilled: the job runs on it.
                    job.frozen.nodeset_object = nodeset_object
                    job.nodes = nodes
                nodeset = NodeSet(routed, [
                    ((name,), with_secret(_client_of(routed, i),
                                          {**node.to_dict(), 'id': node.id, 'type': label}))
                    for i, ((name, label), node) in enumerate(zip(nodes, routed.nodes))])
            self.scheduler.add_result_event('nodes-provisioned', item=item,
                                            job_name=job.name,
                                            request=handle or routed, nodeset=nodeset,
                                            failed=not routed.fulfilled,
                                            error_detail=routed.error_detail)
        return done

    def _next_alternative(self, chain: AlternativesRequest, nodeset_object=None):
        """The callback of one alternative's request: a failure requests
        the next alternative (on the requestor's thread, which may submit);
        the last one's outcome, or a success, is posted."""
        post = self._answer(chain.item, chain.job, chain, nodeset_object)

        def done(routed, nodes):
            with chain.lock:
                if chain.canceled or routed.fulfilled or not chain.remaining:
                    pass
                else:
                    value = chain.remaining.pop(0)
                    log.info('[e: %s] Nodes for %s could not be provided %s; requesting '
                             'the next alternative nodeset', chain.item.event_id,
                             chain.job.name, routed.error_detail or '')
                    try:
                        self._request_alternative(chain, value)
                        return
                    except Exception:
                        log.exception('Unable to request the next alternative for %s',
                                      chain.job.name)
            post(routed, nodes)
        return done

    def _request_alternative(self, chain: AlternativesRequest, value):
        from zuul.configloader.nodeset import NodesetParser
        frozen = chain.job.frozen
        layout = chain.item.current_build_set.layout
        if isinstance(value, str):
            nodeset = (getattr(layout, 'nodesets', None) or {}).get(value)
            if nodeset is None:
                raise RoutingError(f'nodeset "{value}" is no longer defined')
        else:
            nodeset = NodesetParser().parse(value if isinstance(value, dict)
                                            else {'nodes': value},
                                            frozen.source_context, anonymous=True)
        nodes = [(n.name, n.label) for n in nodeset.nodes]
        return self._request(chain.item, chain.job, chain.pipeline, nodes,
                             self._next_alternative(chain, nodeset), chain)

    def _request(self, item, job, pipeline, nodes, on_done, chain=None):
        labels = [label for _, label in nodes]
        priority = PRIORITY.get(getattr(pipeline, 'precedence', 'normal'), 200)
        layout = self._tenant_layout(item)
        tenant = getattr(getattr(layout, 'tenant', None), 'name', None) or \
            getattr(layout, 'tenant_name', None)
        routed = RoutedRequest(labels, callback=lambda r: on_done(r, nodes))
        if chain is not None:
            chain.current = routed  # before any answer, which may be at once
        try:
            routes = route_labels(layout, labels)
            if any(s == ZUUL_LAUNCHER for s, _ in routes) and self.launcher_client is None:
                raise RoutingError('this scheduler has no zuul-launcher client')
        except RoutingError as e:
            log.warning('[e: %s] Cannot request nodes for %s: %s', item.event_id,
                        job.name, e)
            routed.fail(f'({e})')
            return routed
        for system in (NODEPOOL, ZUUL_LAUNCHER):
            indices = [i for i, (s, _) in enumerate(routes) if s == system]
            if indices:
                routed.parts.append(_Part(system, self.clients[system], indices))
        data = {'job': job.name, 'buildset': item.current_build_set.uuid}
        if tenant:
            data['tenant'] = tenant
        relative = self.queue_position(item) if self.relative_priority else 0
        self._submit_parts(item, job, routed, routes, (priority, relative), data)
        if self.relative_priority:
            self._waiting[routed] = (item, relative)
        return routed

    def _submit_parts(self, item, job, routed, routes, priorities, data) -> None:
        priority, relative = priorities
        # An image-validate item's nodes boot from the upload under test.
        from zuul.scheduler.images import image_upload_for
        upload = image_upload_for(item)
        # Answers wait for every part to be submitted (part_done takes
        # the lock), so a fast answer never sees a part without a handle.
        with routed.lock:
            try:
                for part in routed.parts:
                    node_types = [routes[i][1] for i in part.indices]
                    log.info('[e: %s] Requesting nodes %s for %s from %s', item.event_id,
                             node_types, job.name, part.system)
                    fields = {'image_upload': upload} \
                        if upload and part.system == ZUUL_LAUNCHER else None
                    part.handle = part.client.submit(
                        node_types, priority=priority, callback=routed.part_done,
                        requestor_data=data, event_id=item.event_id,
                        request_fields=fields, relative_priority=relative)
            except Exception:
                routed.cancel()     # withdraw what was submitted
                raise

    def cancel(self, handle) -> None:
        try:
            handle.cancel()
        except Exception:
            log.exception('Unable to cancel node request %s', getattr(handle, 'id', None))

    def hold(self, nodeset, job_name: str, request) -> None:
        """Put the nodes in the ``hold`` state (their launcher keeps them)
        and unlock them: an autohold request claimed this failed build."""
        from nodepool.zk.records import HOLD
        routed = nodeset.handle
        if not isinstance(routed, RoutedRequest):
            routed.release()    # a restored build's nodes: returned, not held
            return
        with routed.lock:
            if routed.outcome != ACCEPTED:
                return
            routed.outcome = RELEASED
        for part in routed.parts:
            zk = part.client.zk
            with part.handle.lock:
                if part.handle.outcome != ACCEPTED:
                    continue
                for node in part.handle.nodes:
                    try:
                        node.set_state(HOLD)
                        node.hold_job = job_name
                        node.comment = f'autohold {request.id}: {request.reason}'
                        # The launcher deletes the node once this has passed.
                        node.hold_expiration = request.node_hold_expiration or None
                        zk.store_node(node)
                        log.info('Node %s held for autohold %s', node.id, request.id)
                    except Exception:
                        log.exception('Unable to hold node %s', node.id)
                    finally:
                        zk.unlock_node(node)
                # The nodes are no longer this client's to release.
                part.handle.outcome = RELEASED
        routed.done.set()

    # -- saved state (zuul.scheduler.state) ----------------------------------

    def nodeset_data(self, nodeset) -> dict | None:
        """What a restarted scheduler needs to return a running build's
        nodes: the nodes as the executor got them and each one's system."""
        routed = getattr(nodeset, 'handle', None)
        systems = [None] * len(nodeset.nodes)
        if isinstance(routed, RoutedRequest):
            for part in routed.parts:
                for index in part.indices:
                    systems[index] = part.system
        elif isinstance(routed, RestoredNodes):
            systems = list(routed.systems)
        else:
            return None
        # Credentials are never kept in pipeline state: read again on restore.
        return {'nodes': [[list(names), {k: val for k, val in node.items() if k != SECRET_KEY}]
                          for names, node in nodeset.nodes],
                'systems': systems}

    def restore_nodeset(self, data: dict) -> NodeSet | None:
        """Lock a running build's nodes again (the old scheduler's locks
        went with its session) so they are returned when it ends."""
        from nodepool.zk.records import Node
        taken = []
        for (names, node), system in zip(data['nodes'], data['systems']):
            client = self.clients.get(system)
            if client is None:
                continue
            stub = Node(id=str(node.get('id')))
            try:
                if not client.zk.lock_node(stub, timeout=10,
                                           identifier='zuul-scheduler'):
                    log.warning('Node %s of a restored build is locked by someone else',
                                stub.id)
                    continue
                record = client.zk.get_node(stub.id)
            except Exception:
                log.exception('Unable to lock node %s of a restored build', stub.id)
                continue
            if record is None:
                client.zk.unlock_node(stub)
                continue
            record.lock = stub.lock
            taken.append((client, record))
            with_secret(client, node)
        handle = RestoredNodes(taken, list(data['systems']))
        return NodeSet(handle, [(tuple(names), node) for names, node in data['nodes']])

    def release(self, nodeset) -> None:
        if nodeset is None:
            return
        try:
            nodeset.handle.release()
        except Exception:
            log.exception('Unable to return nodes %s', nodeset.node_ids)


class ProviderPublisher:
    """Publishes the resolved providers of every tenant's live layout
    (``zuul.zk.launcher_config``), skipping ZooKeeper when nothing
    changed since the last publication.  A publication that failed (no
    ZooKeeper connection) is tried again when the connection is back,
    without waiting for the next reconfiguration."""

    def __init__(self, client):
        self.client = client
        self._last: str | None = None
        self._pending = None        # (providers, text) not yet written
        self._lock = threading.Lock()
        if hasattr(client, 'add_listener'):
            client.add_listener(self._session_listener)

    def publish(self, tenants: dict, configured=None) -> None:
        """``tenants``: name -> state with ``.layout`` (the scheduler's
        TenantState); never a speculative layout.  ``configured``: the
        tenant names main.yaml still has (others are left out), or None."""
        from zuul.zk import launcher_config
        # Copies: merge_tenants sets ``tenants`` on the providers it returns.
        per_tenant = {name: {c: copy.copy(p) for c, p in
                             (getattr(state.layout, 'resolved_providers', None) or {}).items()}
                      for name, state in tenants.items()
                      if configured is None or name in configured}
        providers = launcher_config.merge_tenants(per_tenant)
        text = json.dumps({c: p.to_dict() for c, p in providers.items()}, sort_keys=True)
        with self._lock:
            self._pending = (providers, text)
        self._write()

    def _write(self) -> None:
        from zuul.zk import launcher_config
        with self._lock:
            if self._pending is None:
                return
            providers, text = self._pending
            if text != self._last:
                try:
                    launcher_config.publish(self.client, providers)
                except Exception:
                    log.exception('Unable to publish the providers for zuul-launcher '
                                  '(tried again when ZooKeeper is back)')
                    return
                self._last = text
                log.info('Published %d provider(s) for zuul-launcher', len(providers))
            self._pending = None

    def _session_listener(self, state) -> None:
        from kazoo.protocol.states import KazooState
        if state == KazooState.CONNECTED and self._pending is not None:
            # Never block kazoo's event thread with ZooKeeper calls.
            threading.Thread(target=self._write, name='provider-publisher',
                             daemon=True).start()
