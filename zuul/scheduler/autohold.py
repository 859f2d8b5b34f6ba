"""Autohold: keep the nodes of the next failing build(s) of a job for a
person to log into (``zuul autohold``).

Requests are kept in ZooKeeper at ``/zuul/hold-requests/<id>`` (JSON), so
they survive a scheduler restart. When a build of a matching job fails,
its nodes are put in the ``hold`` state (with ``hold_job`` and the reason
as the comment) instead of being returned; ``nodepool list`` shows them
held and the launcher leaves them alone until someone deletes them."""

from __future__ import annotations

import json
import logging
import threading
import uuid
from dataclasses import asdict, dataclass, field

import re2

log = logging.getLogger('zuul.scheduler.autohold')

ROOT = '/zuul/hold-requests'
# Results whose nodes are held (the build failed in the job's own work).
HOLD_RESULTS = ('FAILURE', 'POST_FAILURE', 'RETRY_LIMIT', 'TIMED_OUT')


@dataclass
class AutoholdRequest:
    tenant: str
    project: str
    job: str
    ref_filter: str = '.*'
    reason: str = ''
    max_count: int = 1
    current_count: int = 0
    node_hold_expiration: int = 86400
    nodes: list = field(default_factory=list)   # [{"build": uuid, "nodes": [ids]}]
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:10])

    def to_dict(self) -> dict:
        return asdict(self)

    def matches(self, tenant: str, project: str, job: str, ref: str) -> bool:
        if self.current_count >= self.max_count:
            return False
        if (tenant, job) != (self.tenant, self.job):
            return False
        if project != self.project and project.split('/', 1)[-1] != self.project:
            return False
        return re2.search(self.ref_filter, ref or '') is not None


class AutoholdStore:
    """Hold requests, cached here and written through to ZooKeeper
    (``zk`` is a kazoo client; None keeps them in memory only)."""

    def __init__(self, zk=None):
        self.zk = zk
        self.lock = threading.Lock()
        self.requests: dict[str, AutoholdRequest] = {}
        if zk is not None:
            zk.ensure_path(ROOT)
            for child in zk.get_children(ROOT):
                data, _ = zk.get(f'{ROOT}/{child}')
                try:
                    request = AutoholdRequest(**json.loads(data))
                except (TypeError, ValueError):
                    log.error('Ignoring malformed hold request %s', child)
                    continue
                self.requests[request.id] = request

    def _save(self, request: AutoholdRequest) -> None:
        if self.zk is None:
            return
        data = json.dumps(request.to_dict()).encode()
        path = f'{ROOT}/{request.id}'
        if self.zk.exists(path):
            self.zk.set(path, data)
        else:
            self.zk.create(path, data, makepath=True)

    def add(self, request: AutoholdRequest) -> AutoholdRequest:
        try:
            re2.compile(request.ref_filter)
        except re2.error as e:
            raise ValueError(f'Invalid ref filter "{request.ref_filter}": {e}') from None
        if request.max_count < 1:
            raise ValueError('The count must be at least 1')
        with self.lock:
            self.requests[request.id] = request
            self._save(request)
        log.info('Autohold %s: %s/%s job %s ref %s, %d build(s): %s', request.id,
                 request.tenant, request.project, request.job, request.ref_filter,
                 request.max_count, request.reason)
        return request

    def list(self, tenant: str) -> list[AutoholdRequest]:
        with self.lock:
            return [r for r in self.requests.values() if r.tenant == tenant]

    def claim(self, tenant: str, project: str, job: str, ref: str, build: str,
              node_ids: list[str]) -> AutoholdRequest | None:
        """The request that holds this failed build's nodes, counted."""
        with self.lock:
            for request in self.requests.values():
                if request.matches(tenant, project, job, ref):
                    request.current_count += 1
                    request.nodes.append({'build': build, 'nodes': list(node_ids)})
                    self._save(request)
                    return request
        return None
