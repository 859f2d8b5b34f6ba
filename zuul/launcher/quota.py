"""How many more nodes a provider can take.

A provider's limit is the smaller of its configured ``quota``
(``instances``/``cores``/``ram``, seed 001: "the minimum of the quota
reported by the driver (if available) or the values here") and what its
adapter reports, when this launcher has the adapter.  Usage is counted
from the node records of the provider, each node taking what its label
takes (the adapter's ``label_quota`` when known, else one instance).
"""

from __future__ import annotations

import logging

from nodepool.driver import Quota
from nodepool.zk.records import Node
from zuul.launcher.providers import POOL, max_instances, quota_settings

log = logging.getLogger('zuul.launcher.quota')

QUEUED = 'queued'


def configured_limit(resolved) -> Quota:
    quota = quota_settings(resolved)
    return Quota(instances=max_instances(resolved), cores=quota.get('cores'),
                 ram=quota.get('ram'))


class ProviderQuota:
    """The quota arithmetic of one provider (``served`` may be None when
    this launcher does not run the provider: then only the configured
    limit and one instance per node count)."""

    def __init__(self, resolved, served=None):
        self.resolved = resolved
        self.served = served
        self._label_quotas: dict[str, Quota] = {}

    def need(self, label: str | None) -> Quota:
        if self.served is None or label is None:
            return Quota(instances=1)
        quota = self._label_quotas.get(label)
        if quota is None:
            try:
                quota = self.served.adapter.label_quota(self.served.pool, label)
            except Exception as e:
                log.warning('Provider %s: what a %s node takes is unknown: %s',
                            self.resolved.canonical_name, label, e)
                return Quota(instances=1)
            self._label_quotas[label] = quota
        return quota

    def limits(self) -> list[Quota]:
        out = [configured_limit(self.resolved)]
        if self.served is not None:
            pool = self.served.config.pools.get(POOL)
            if pool is not None:
                out.append(Quota(pool.max_servers, pool.max_cores, pool.max_ram))
            try:
                out.append(self.served.adapter.quota())
            except Exception as e:
                log.warning('Provider %s: quota unknown: %s', self.resolved.canonical_name, e)
        return out

    def used(self, nodes: list[Node], count_queued: bool) -> Quota:
        total = Quota(0, 0, 0)
        for node in nodes:
            if node.provider != self.resolved.canonical_name:
                continue
            if not count_queued and node.launch_state == QUEUED:
                continue
            total = total.plus(self.need(node.type))
        return total

    def free(self, nodes: list[Node], label: str | None, count_queued: bool = True) -> float:
        """How many more ``label`` nodes fit now."""
        used = self.used(nodes, count_queued)
        need = self.need(label)
        return min(limit.minus(used).count(need) for limit in self.limits())
