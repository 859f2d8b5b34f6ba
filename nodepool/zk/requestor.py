"""The requestor side of node requests (what Zuul's scheduler uses).

Seed 000's protocol, step by step:

1. ``submit`` creates ``/nodepool/requests/<priority>-<seq>`` (ephemeral,
   state ``requested``), reads it back and sets a watch.
2. Every time the watch fires (and after every reconnect, when watches
   may have been lost) the request is read again with a new watch.
3. ``fulfilled``: every node in ``nodes`` is locked and marked
   ``in-use``, the request is deleted, and the callback gets the nodes.
   ``failed``: the request is deleted and the callback is told so.  A
   request that vanished without either (our session expired, so the
   ephemeral znode went with it) is submitted again.
4. ``release`` marks the nodes ``used`` and unlocks them; ``cancel``
   deletes a request still in flight (the launcher returns any nodes it
   had allocated to the pool) or releases nodes already handed over.
5. ``revise`` rewrites the ``relative_priority`` of a request no launcher
   has taken yet (see nodepool/zk/priority.py).

Callbacks run on this client's own thread, one at a time.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass, field
from typing import Callable

from kazoo.protocol.states import KazooState

from nodepool.zk.api import (
    ZOOKEEPER_DOWN,
    NodepoolZooKeeper,
    RecordChangedError,
    RecordGoneError,
)
from nodepool.zk.priority import relative_priority as relative_priority_of
from nodepool.zk.priority import set_relative_priority
from nodepool.zk.records import FAILED, FULFILLED, IN_USE, REQUESTED, USED, Node, NodeRequest

log = logging.getLogger('nodepool.zk.requestor')

# Outcomes of a request handle.
WAITING = 'waiting'
ACCEPTED = 'accepted'      # fulfilled, nodes locked and in-use
REFUSED = 'failed'         # Nodepool marked it failed
CANCELED = 'canceled'
RELEASED = 'released'      # nodes returned (used)


@dataclass(eq=False)
class RequestHandle:
    """One outstanding (or finished) node request of this client."""

    node_types: list[str]
    priority: int
    requestor_data: dict
    event_id: str | None
    callback: Callable[[RequestHandle], None] | None
    request: NodeRequest | None = None
    outcome: str = WAITING
    nodes: list[Node] = field(default_factory=list)
    resubmits: int = 0
    #: Further NodeRequest fields to set (e.g. zuul-launcher's
    #: ``image_upload``), kept for resubmits.
    request_fields: dict = field(default_factory=dict)
    #: Served before requests of the same priority with a higher one
    #: (kept for resubmits; ``revise`` changes it).
    relative_priority: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.RLock = field(default_factory=threading.RLock)

    @property
    def id(self) -> str | None:
        return self.request.id if self.request else None

    @property
    def fulfilled(self) -> bool:
        return self.outcome in (ACCEPTED, RELEASED)

    @property
    def failed(self) -> bool:
        return self.outcome == REFUSED

    def wait(self, timeout: float | None = None) -> bool:
        return self.done.wait(timeout)


class NodeRequestClient:
    """Submits node requests and takes the nodes when they are ready."""

    def __init__(self, zk: NodepoolZooKeeper, requestor: str = 'zuul',
                 lock_timeout: float = 30.0, max_resubmits: int = 10):
        self.zk = zk
        self.requestor = requestor
        self.lock_timeout = lock_timeout
        self.max_resubmits = max_resubmits
        self._handles: set[RequestHandle] = set()
        self._handles_lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._running = False

    # -- lifecycle --------------------------------------------------------------

    def start(self) -> None:
        self._running = True
        self.zk.client.add_listener(self._session_listener)
        self._thread = threading.Thread(target=self._run, name='node-request-client',
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._running = False
        self.zk.client.remove_listener(self._session_listener)
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(10)

    @property
    def outstanding(self) -> list[RequestHandle]:
        with self._handles_lock:
            return [h for h in self._handles if h.outcome == WAITING]

    # -- the API ---------------------------------------------------------------

    def submit(self, node_types: list[str], priority: int | str = 100,
               callback: Callable[[RequestHandle], None] | None = None,
               requestor_data: dict | None = None,
               event_id: str | None = None,
               request_fields: dict | None = None,
               relative_priority: int = 0) -> RequestHandle:
        """``request_fields``: further NodeRequest fields by name (for
        zuul-launcher: ``image_upload``, the upload a validation node
        must boot from).  ``relative_priority``: see ``revise``."""
        handle = RequestHandle(list(node_types), int(priority), dict(requestor_data or {}),
                               event_id, callback, request_fields=dict(request_fields or {}),
                               relative_priority=int(relative_priority))
        with handle.lock:
            self._create(handle)
            with self._handles_lock:
                self._handles.add(handle)
        self._queue.put(handle)
        return handle

    def cancel(self, handle: RequestHandle) -> None:
        """Withdraw a request; nodes already handed over are released."""
        with handle.lock:
            if handle.outcome == ACCEPTED:
                self._release_nodes(handle)
                handle.outcome = CANCELED
            elif handle.outcome == WAITING:
                handle.outcome = CANCELED
                if handle.request is not None:
                    self.zk.delete_request(handle.request)
                    log.info('Canceled node request %s', handle.id)
            self._finish(handle)

    def revise(self, handle: RequestHandle, relative_priority: int) -> bool:
        """Give a waiting request a new relative priority (lower is
        served first among requests of the same priority).  Only a
        request still ``requested`` is rewritten, and only if no launcher
        wrote it since it was read: one a launcher is working on keeps
        its place.  True if ZooKeeper now holds the new value."""
        with handle.lock:
            handle.relative_priority = int(relative_priority)
            if handle.outcome != WAITING or handle.request is None:
                return False
            request = self.zk.get_request(handle.id)
            if request is None or request.state != REQUESTED:
                return False
            if relative_priority_of(request) == handle.relative_priority:
                return True
            set_relative_priority(request, handle.relative_priority)
            try:
                self.zk.store_request(request, expected_version=request.stat.version)
            except (RecordGoneError, RecordChangedError):
                return False
            log.info('Node request %s: relative priority %d', request.id,
                     handle.relative_priority)
            return True

    def release(self, handle: RequestHandle) -> None:
        """The requestor is done with the nodes: mark them used, unlock."""
        with handle.lock:
            if handle.outcome != ACCEPTED:
                return
            self._release_nodes(handle)
            handle.outcome = RELEASED
            self._finish(handle)

    def release_nodes(self, nodes: list[Node]) -> None:
        """Mark nodes this client holds ``used`` and unlock them."""
        for node in nodes:
            try:
                node.set_state(USED)
                self.zk.store_node(node)
                log.info('Node %s used', node.id)
            except RecordGoneError:
                log.warning('Node %s vanished before it was released', node.id)
            finally:
                self.zk.unlock_node(node)

    # -- internals ---------------------------------------------------------------

    def _create(self, handle: RequestHandle) -> None:
        request = NodeRequest(node_types=list(handle.node_types), requestor=self.requestor,
                              requestor_data=handle.requestor_data,
                              event_id=handle.event_id)
        for name, value in handle.request_fields.items():
            setattr(request, name, value)
        set_relative_priority(request, handle.relative_priority)
        self.zk.submit_request(request, priority=handle.priority)
        handle.request = request
        log.info('Submitted node request %s for %s', request.id, handle.node_types)

    def _session_listener(self, state) -> None:
        if state == KazooState.CONNECTED:
            # Watches may be gone (session expired) or missed: check
            # every outstanding request again (which re-sets its watch).
            for handle in self.outstanding:
                self._queue.put(handle)

    def _watch_for(self, handle: RequestHandle):
        watch = getattr(handle, '_watch', None)
        if watch is None:
            def watch(event, handle=handle):
                self._queue.put(handle)
            handle._watch = watch
        return watch

    def _run(self) -> None:
        while self._running:
            handle = self._queue.get()
            if handle is None:
                continue
            try:
                self._check(handle)
            except ZOOKEEPER_DOWN as e:
                # Every outstanding request is checked again on reconnect.
                log.warning('Checking node request %s interrupted: %s', handle.id,
                            e.__class__.__name__)
            except Exception:
                log.exception('Checking node request %s failed', handle.id)

    def _check(self, handle: RequestHandle) -> None:
        with handle.lock:
            if handle.outcome != WAITING:
                return
            request = self.zk.get_request(handle.id, watch=self._watch_for(handle))
            if request is None:
                self._lost(handle)
                return
            handle.request = request
            if request.state == FULFILLED:
                self._accept(handle)
            elif request.state == FAILED:
                log.info('Node request %s failed (declined by %s)', request.id,
                         request.declined_by)
                handle.outcome = REFUSED
                self.zk.delete_request(request)
                self._finish(handle)

    def _lost(self, handle: RequestHandle) -> None:
        handle.resubmits += 1
        if handle.resubmits > self.max_resubmits:
            log.error('Node request %s lost too often; giving up', handle.id)
            handle.outcome = REFUSED
            self._finish(handle)
            return
        log.warning('Node request %s vanished; submitting it again', handle.id)
        self._create(handle)
        self._queue.put(handle)

    def _accept(self, handle: RequestHandle) -> None:
        request = handle.request
        nodes: list[Node] = []
        ok = len(request.nodes) == len(request.node_types)
        for node_id in request.nodes if ok else ():
            node = self._lock_node(node_id, request.id)
            if node is None:
                ok = False
                break
            nodes.append(node)
        if not ok:
            log.warning('Could not lock the nodes of request %s; submitting again',
                        request.id)
            for node in nodes:
                self.zk.unlock_node(node)
            self.zk.delete_request(request)
            self._lost(handle)
            return
        for node in nodes:
            node.set_state(IN_USE)
            self.zk.store_node(node)
        self.zk.delete_request(request)
        handle.nodes = nodes
        handle.outcome = ACCEPTED
        log.info('Node request %s fulfilled with nodes %s', request.id,
                 [n.id for n in nodes])
        self._finish(handle, keep=True)

    def _lock_node(self, node_id: str, request_id: str) -> Node | None:
        """The node, locked and re-read, if it is still ours to take."""
        stub = Node(id=node_id)
        if not self.zk.lock_node(stub, timeout=self.lock_timeout,
                                 identifier=self.requestor):
            return None
        node = self.zk.get_node(node_id)
        if node is None or node.allocated_to != request_id:
            self.zk.unlock_node(stub)
            return None
        node.lock = stub.lock
        return node

    def _release_nodes(self, handle: RequestHandle) -> None:
        self.release_nodes(handle.nodes)

    def _finish(self, handle: RequestHandle, keep: bool = False) -> None:
        if not keep:
            with self._handles_lock:
                self._handles.discard(handle)
        first = not handle.done.is_set()
        handle.done.set()
        if first and handle.callback is not None and handle.outcome in (ACCEPTED, REFUSED):
            try:
                handle.callback(handle)
            except Exception:
                log.exception('Node request callback failed for %s', handle.id)
