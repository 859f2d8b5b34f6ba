"""One accepted request, from ``pending`` to ``fulfilled``.

The handler holds the request lock throughout.  Each requested label is
a slot: filled from a ready unallocated node of the pool, or by
launching a new one (the launch runs in its own thread).  A launch that
fails empties its slot and the next ``advance`` launches a replacement;
after ``launch-retries`` failures the pool declines the request instead,
so another provider may serve it (seed 000: no failed request for a
transient error).  If the request vanishes (the requestor cancelled it),
every node it had is returned to the pool.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from nodepool.launcher.state_machine import NodeLaunchStateMachine
from nodepool.zk.api import RecordGoneError
from nodepool.zk.records import FULFILLED, MIN_READY_REQUESTOR, Node, NodeRequest

log = logging.getLogger('nodepool.launcher.request')

ACTIVE = 'active'
FINISHED = 'finished'


@dataclass(eq=False)
class Slot:
    label: str
    node: Node | None = None
    launch: NodeLaunchStateMachine | None = None

    @property
    def ready(self) -> bool:
        return self.node is not None and (self.launch is None or self.launch.succeeded)


class RequestHandler:
    def __init__(self, worker, request: NodeRequest):
        self.worker = worker
        self.request = request
        self.slots = [Slot(label) for label in request.node_types]
        self.failures = 0
        #: What the provider said when a launch last failed.
        self.last_error: str | None = None
        #: The availability zone of the request's nodes, once one is known
        #: (the first reused node's, or the adapter's choice at the first
        #: launch); None when the provider has no zones.
        self.az: str | None = None
        self.canceled = False
        self.declining = False
        self.state = ACTIVE

    @property
    def id(self) -> str:
        return self.request.id

    @property
    def empty_slots(self) -> list[Slot]:
        return [s for s in self.slots if s.node is None]

    @property
    def launching(self) -> list[Slot]:
        return [s for s in self.slots if s.launch is not None and not s.launch.finished]

    # -- progress ----------------------------------------------------------------

    def advance(self) -> bool:
        """Fill what can be filled now; True if no slot is left empty."""
        if self.canceled or self.declining:
            return True
        # A min-ready request exists to add a node; reusing one would not.
        reuse = self.request.requestor != MIN_READY_REQUESTOR or not self.worker.can_launch
        for slot in self.empty_slots:
            node = self.worker.take_ready_node(slot.label, self.request, self.az) \
                if reuse else None
            if node is not None:
                slot.node = node
                if self.az is None:
                    self.az = node.az
                log.info('Request %s: reusing ready node %s (%s)', self.id, node.id,
                         slot.label)
                continue
            if not self.worker.can_launch or self.worker.free_capacity(slot.label) <= 0:
                continue
            if self.az is None:
                # Every node of a request in one availability zone (seed 000).
                self.az = self.worker.choose_az()
            launch = self.worker.launch_node(slot.label, self.request, self.az)
            if launch is None:
                continue   # its image has no ready upload (any more): wait
            slot.launch = launch
            slot.node = launch.node
        return not self.empty_slots

    def poll(self) -> bool:
        """Collect finished launches and finish the request when it can be
        finished; True once the handler is done."""
        for slot in self.slots:
            if slot.launch is not None and slot.launch.finished and \
                    not slot.launch.succeeded:
                if slot.launch.quota_error:
                    # The provider has less room than we counted: wait for
                    # room (the pool pauses) instead of failing the request.
                    self.worker.pause_for_quota(slot.launch.error)
                    log.info('Request %s: node %s refused for quota (%s); waiting for room',
                             self.id, slot.node.id, slot.launch.error)
                else:
                    self.failures += 1
                    self.last_error = slot.launch.error
                    log.info('Request %s: node %s failed (%s); %s', self.id, slot.node.id,
                             slot.launch.error,
                             'declining' if self.failures > self.worker.launch_retries
                             else 'launching a replacement')
                slot.node = None
                slot.launch = None
        if not self.canceled and not self.worker.request_exists(self.id):
            self.canceled = True
            log.info('Request %s vanished; returning its nodes to the pool', self.id)
        if not self.canceled and not self.declining and \
                self.failures > self.worker.launch_retries:
            self.declining = True
        if self.canceled or self.declining:
            return self._wind_down()
        if self.empty_slots or self.launching:
            return False
        return self._fulfil()

    # -- endings -----------------------------------------------------------------

    def _fulfil(self) -> bool:
        # Only we write the request while we hold its lock (the requestor
        # may only delete it), so our copy is current.
        request = self.request
        request.nodes = [s.node.id for s in self.slots]
        request.set_state(FULFILLED)
        zk = self.worker.zk
        try:
            if request.requestor == MIN_READY_REQUESTOR:
                zk.store_request(request)
            else:
                # The request and every lock in one transaction: the
                # requestor finds the nodes unlocked as soon as it looks.
                zk.fulfil_request(request, [s.node for s in self.slots])
        except RecordGoneError:
            self.canceled = True
            return self._wind_down()
        log.info('Request %s fulfilled with nodes %s', self.id, request.nodes)
        if request.requestor == MIN_READY_REQUESTOR:
            # Nodes made for min-ready join the pool unallocated; the
            # request has served its purpose.
            self._release_nodes(deallocate=True)
            zk.unlock_request(request)
            zk.delete_request(request)
        self.slots = [Slot(s.label) for s in self.slots]
        self._finish()
        return True

    def _wind_down(self) -> bool:
        """Cancelled or declining: wait for launches in flight, then hand
        every node back (ready ones stay, unallocated)."""
        if self.launching:
            return False
        for slot in self.slots:
            if slot.launch is not None and not slot.launch.succeeded:
                slot.node = None
        self._release_nodes(deallocate=True)
        if self.declining and not self.canceled:
            self.worker.decline_after_failures(self.request, self.last_error)
        self._finish()
        return True

    def _release_nodes(self, deallocate: bool) -> None:
        zk = self.worker.zk
        for slot in self.slots:
            node = slot.node
            if node is None:
                continue
            if deallocate:
                node.allocated_to = None
                node.tenant_name = None
                try:
                    zk.store_node(node)
                except RecordGoneError:
                    pass
            zk.unlock_node(node)
        self.slots = [Slot(s.label) for s in self.slots]

    def _finish(self) -> None:
        self.worker.zk.unlock_request(self.request)
        if self.canceled:
            self.worker.zk.delete_request_lock_dir(self.id)
        self.state = FINISHED

    def abandon(self) -> None:
        """The session (and every lock) is gone: stop touching anything."""
        for slot in self.slots:
            if slot.launch is not None:
                slot.launch.abandoned = True
        self.state = FINISHED
