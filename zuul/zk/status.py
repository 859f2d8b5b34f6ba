"""Each tenant's status, published in ZooKeeper for zuul-web.

``/zuul/tenant/<tenant>/status``: the status JSON that the status page
and ``/api/tenant/<t>/status`` serve (zuul/scheduler/status.py), written
by the scheduler at most once a second while anything changes, in the
same compressed, sharded, generation-switched form as the pipeline state
(zuul/zk/pipeline_state.py), so a reader never sees half of one.
zuul-web reads it from here: no status request reaches a scheduler, and
a page poller costs the scheduler nothing.
"""

from __future__ import annotations

import zlib

from zuul.zk.pipeline_state import STATE_ROOT, PipelineStateStore, _quote

STATUS_KEY = 'status'


class StatusStore(PipelineStateStore):
    """``save(tenant, status)`` / ``read(tenant)`` of a tenant's status."""

    def path(self, tenant: str, pipeline: str = STATUS_KEY) -> str:
        return f'{STATE_ROOT}/{_quote(tenant)}/{STATUS_KEY}'

    def publish(self, tenant: str, status: dict) -> bool:
        return self.save(tenant, STATUS_KEY, status)

    def read(self, tenant: str) -> dict | None:
        try:
            return self.load(tenant, STATUS_KEY)
        except (ValueError, RuntimeError, zlib.error):
            return None     # another version, or damaged: ask the scheduler
