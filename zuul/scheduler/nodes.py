"""Node requests for the scheduler, over Nodepool's ZooKeeper protocol
(nodepool/zk/requestor.py). Results come back as ``nodes-provisioned``
result events on the scheduler thread."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

log = logging.getLogger('zuul.scheduler.nodes')

# Pipeline precedence -> node request priority (lower is served first).
PRIORITY = {'high': 100, 'normal': 200, 'low': 300}


@dataclass
class NodeSet:
    """The nodes of one build: ``nodes`` is a list of (names, node record
    dict) in nodeset order, as zuul/scheduler/builds.py node_specs wants."""

    handle: object
    nodes: list = field(default_factory=list)

    @property
    def node_ids(self) -> list[str]:
        return [n.get('id') for _, n in self.nodes]


class NodesAdapter:
    """What SchedulerContext.request_nodes/cancel_node_request/
    return_nodes call."""

    def __init__(self, client, scheduler):
        self.client = client
        self.scheduler = scheduler

    def request(self, item, job, pipeline):
        labels = [label for _, label in job.nodes]
        names = [name for name, _ in job.nodes]
        priority = PRIORITY.get(getattr(pipeline, 'precedence', 'normal'), 200)

        def done(handle):
            nodeset = None
            if handle.fulfilled:
                nodeset = NodeSet(handle, [((name,), {**node.to_dict(), 'id': node.id})
                                           for name, node in zip(names, handle.nodes)])
            self.scheduler.add_result_event('nodes-provisioned', item=item,
                                            job_name=job.name, request=handle,
                                            nodeset=nodeset, failed=not handle.fulfilled)
        log.info('[e: %s] Requesting nodes %s for %s', item.event_id, labels, job.name)
        return self.client.submit(labels, priority=priority, callback=done,
                                  requestor_data={'job': job.name,
                                                  'buildset': item.current_build_set.uuid},
                                  event_id=item.event_id)

    def cancel(self, handle) -> None:
        try:
            self.client.cancel(handle)
        except Exception:
            log.exception('Unable to cancel node request %s', getattr(handle, 'id', None))

    def hold(self, nodeset, job_name: str, request) -> None:
        """Put the nodes in the ``hold`` state (Nodepool keeps them) and
        unlock them: an autohold request claimed this failed build."""
        from nodepool.zk.records import HOLD
        from nodepool.zk.requestor import ACCEPTED, RELEASED
        handle = nodeset.handle
        with handle.lock:
            if handle.outcome != ACCEPTED:
                return
            for node in handle.nodes:
                try:
                    node.set_state(HOLD)
                    node.hold_job = job_name
                    node.comment = f'autohold {request.id}: {request.reason}'
                    # Nodepool deletes the node once this has passed.
                    node.hold_expiration = request.node_hold_expiration or None
                    self.client.zk.store_node(node)
                    log.info('Node %s held for autohold %s', node.id, request.id)
                except Exception:
                    log.exception('Unable to hold node %s', node.id)
                finally:
                    self.client.zk.unlock_node(node)
            handle.outcome = RELEASED

    def release(self, nodeset) -> None:
        if nodeset is None:
            return
        try:
            self.client.release(nodeset.handle)
        except Exception:
            log.exception('Unable to return nodes %s', nodeset.node_ids)
