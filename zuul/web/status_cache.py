"""zuul-web's short-lived cache of each tenant's status JSON.

Every open status page asks for its tenant's status every few seconds;
with many pages open that would be many RPC round trips carrying the
same megabyte. ``CachedStatusRPC`` wraps the RPC client: a tenant's
status is asked of the scheduler at most once per ``ttl`` seconds
(concurrent askers wait for the one call in flight), and an action that
changes a queue (enqueue, dequeue, promote) forgets the tenant's copy so
the page that acted sees its effect at once. With ``published`` (a
zuul.zk.status.StatusStore), the status comes from what the scheduler
published in ZooKeeper, and only a tenant with none published is asked
of the scheduler. Access checks happen before
the RPC call (zuul/web/api.py), so a cached copy is only handed to
callers allowed to read the tenant.
"""

from __future__ import annotations

import logging
import threading
import time

from zuul.lib import rpc_protocol as p

log = logging.getLogger('zuul.web.status_cache')

# RPC functions after which a tenant's queues may have changed.
QUEUE_CHANGES = frozenset({p.ENQUEUE, p.ENQUEUE_REF, p.DEQUEUE, p.PROMOTE})


class CachedStatusRPC:
    """An RPC client (``call(function, request)``) answering
    ``zuul:status_get`` from a per-tenant copy at most ``ttl`` seconds old;
    everything else goes to ``rpc`` (other attributes too)."""

    def __init__(self, rpc, ttl: float = 1.0, clock=time.monotonic, published=None):
        self.rpc = rpc
        # zuul.zk.status.StatusStore: the status the scheduler publishes
        # in ZooKeeper, read instead of asking the scheduler (None: ask).
        self.published = published
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[float, object]] = {}
        self._tenant_locks: dict[str, threading.Lock] = {}

    def __getattr__(self, name):
        return getattr(self.rpc, name)

    def call(self, function, request):
        if function == p.STATUS_GET and (self.ttl > 0 or self.published is not None):
            return self._status(request)
        try:
            return self.rpc.call(function, request)
        finally:
            if function in QUEUE_CHANGES:
                self.forget(request.tenant)

    def forget(self, tenant: str | None) -> None:
        with self._lock:
            self._entries.pop(tenant, None)

    def _read_published(self, tenant):
        """The tenant's status as last published in ZooKeeper; None when
        there is none (an older scheduler, a tenant not loaded yet)."""
        if self.published is None:
            return None
        try:
            return self.published.read(tenant)
        except Exception:   # ZooKeeper away: the scheduler answers
            log.exception('Unable to read the status of %s from ZooKeeper', tenant)
            return None

    def _fresh(self, tenant):
        with self._lock:
            entry = self._entries.get(tenant)
        if entry is not None and self.clock() - entry[0] < self.ttl:
            return entry
        return None

    def _status(self, request):
        tenant = request.tenant
        entry = self._fresh(tenant)
        if entry is not None:
            return entry[1]
        with self._lock:
            tenant_lock = self._tenant_locks.setdefault(tenant, threading.Lock())
        with tenant_lock:   # one call in flight per tenant; the others reuse it
            entry = self._fresh(tenant)
            if entry is not None:
                return entry[1]
            asked = self.clock()
            status = self._read_published(tenant)
            if status is None:
                status = self.rpc.call(p.STATUS_GET, request)   # errors are not cached
            with self._lock:
                self._entries[tenant] = (asked, status)
            return status
