"""Keeping ``min-ready`` nodes of each label around.

For every label with ``min-ready`` that one of our pools offers, count
the unallocated nodes of that label that are ready or on their way, plus
our min-ready requests still in flight; submit a one-node request (at a
low priority) for each one missing.  Those requests go through the
queue like any other; when one is fulfilled its node is unallocated and
the request deleted (see RequestHandler).
"""

from __future__ import annotations

import logging

from nodepool.zk import paths
from nodepool.zk.records import (
    BUILDING,
    FAILED,
    MIN_READY_REQUESTOR,
    READY,
    TESTING,
    NodeRequest,
)

log = logging.getLogger('nodepool.launcher.min_ready')


class MinReadyKeeper:
    def __init__(self, launcher):
        self.launcher = launcher
        self.zk = launcher.zk
        self.submitted: dict[str, str] = {}   # request id -> label

    def labels(self) -> dict[str, int]:
        offered = set()
        for worker in self.launcher.workers:
            if worker.provider.name not in self.launcher.broken_providers:
                offered.update(worker.pool.labels)
        return {name: label.min_ready for name, label in self.launcher.config.labels.items()
                if label.min_ready > 0 and name in offered}

    def run(self) -> None:
        wanted = self.labels()
        if not wanted and not self.submitted:
            return
        nodes = self.launcher.node_cache.values()
        allocated = {n.allocated_to for n in nodes if n.allocated_to}
        in_flight: dict[str, int] = {}
        for request_id, label in list(self.submitted.items()):
            if self._alive(request_id) or request_id in allocated:
                in_flight[label] = in_flight.get(label, 0) + 1
            else:
                del self.submitted[request_id]
        for label, minimum in sorted(wanted.items()):
            have = sum(1 for n in nodes if n.type == label and n.allocated_to is None
                       and n.state in (BUILDING, TESTING, READY))
            have += in_flight.get(label, 0)
            for _ in range(minimum - have):
                request = NodeRequest(node_types=[label], requestor=MIN_READY_REQUESTOR)
                self.zk.submit_request(request,
                                       priority=self.launcher.settings.min_ready_priority)
                self.submitted[request.id] = label
                log.info('Request %s: submitted for min-ready of %s (%d of %d)',
                         request.id, label, have, minimum)
                have += 1

    def _alive(self, request_id: str) -> bool:
        cached = self.launcher.request_cache.get(request_id)
        if cached is not None and cached.state == FAILED:
            # Nobody can make this label now; try again later.
            self.zk.delete_request(request_id)
            return False
        if cached is not None:
            return True
        return self.zk.exists(paths.request_path(request_id)) is not None
