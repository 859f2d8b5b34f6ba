"""``tenant-resource-limits``: per-tenant limits across every provider.

    tenant-resource-limits:
      - tenant-name: example
        max-servers: 10
        max-cores: 200
        max-ram: 16384

A tenant's usage is added up from the node records of every provider
(each node records its tenant and what it takes, ``Node.tenant_name``
and ``Node.resources``).  A request of a tenant whose limit the request
would exceed is deferred: it stays ``requested``, neither accepted nor
declined, and the pool is not paused, so other tenants' requests are
served; it is looked at again on the next pass (node changes wake the
pools).  As in released Nodepool the limits are best effort: launchers
deciding at the same moment may go over them a little.  Requests
without a tenant, or of a tenant without limits, are not limited.
"""

from __future__ import annotations

from nodepool.driver import Quota

#: nodepool.yaml key -> the resource it limits (``Quota`` field).
LIMIT_KEYS = {'max-servers': 'instances', 'max-cores': 'cores', 'max-ram': 'ram'}


def tenant_limits(entries: list[dict]) -> dict[str, Quota]:
    """The configured limits by tenant name."""
    limits = {}
    for entry in entries:
        limits[entry['tenant-name']] = Quota(
            **{field: entry.get(key) for key, field in LIMIT_KEYS.items()})
    return limits


def node_resources(quota: Quota) -> dict:
    """What a node records it takes (``Node.resources``)."""
    return {f: getattr(quota, f) for f in Quota.FIELDS if getattr(quota, f) is not None}


def tenant_usage(nodes, tenant: str) -> Quota:
    """What the tenant's nodes take now (a node recording no resources
    counts as one instance)."""
    used = Quota(0, 0, 0)
    for node in nodes:
        if node.tenant_name != tenant:
            continue
        resources = node.resources or {'instances': 1}
        used = used.plus(Quota(**{f: resources.get(f) for f in Quota.FIELDS}))
    return used


def over_limit(limit: Quota, used: Quota, need: Quota) -> str | None:
    """Why ``need`` does not fit in what ``limit`` leaves after ``used``
    (None: it fits)."""
    if limit.minus(used).count(need) >= 1:
        return None
    parts = [f'{getattr(used, f) or 0} + {getattr(need, f) or 0} {f} > {getattr(limit, f)}'
             for f in Quota.FIELDS
             if getattr(limit, f) is not None and
             (getattr(used, f) or 0) + (getattr(need, f) or 0) > getattr(limit, f)]
    return ', '.join(parts) or 'over the limit'
