"""The metastatic driver's configuration: released Nodepool's syntax.

    - name: meta
      driver: metastatic
      pools:
        - name: main
          max-servers: 10
          labels:
            - name: small-node
              backing-label: large-node     # served by another provider
              max-parallel-jobs: 2          # nodes carved out of one backing node
              grace-time: 600               # keep an idle backing node this long
              min-retention-time: 0         # ... and at least this long in all
              host-key-checking: true

A metastatic node is a slot of a backing node: the same host, address,
user and host keys; up to ``max-parallel-jobs`` of them share one.
"""

from __future__ import annotations

import voluptuous as v

from nodepool.driver import Driver, unique_pools
from nodepool.driver.settings import (
    POOL_COMMON,
    POOL_LABEL_COMMON,
    PROVIDER_COMMON,
    ProviderConfig,
    common_pool,
    common_provider,
)

LABEL = {
    **POOL_LABEL_COMMON,
    v.Required('backing-label'): str,
    'max-parallel-jobs': v.All(int, v.Range(min=1)),
    'grace-time': v.All(v.Any(int, float), v.Range(min=0)),
    'min-retention-time': v.All(v.Any(int, float), v.Range(min=0)),
    'max-age': v.All(v.Any(int, float), v.Range(min=0)),
    'host-key-checking': bool,
}

POOL = {**POOL_COMMON, 'max-servers': int, v.Required('labels'): [LABEL]}
PROVIDER = {**PROVIDER_COMMON, v.Required('pools'): [POOL]}


class MetastaticDriver(Driver):
    name = 'metastatic'

    def provider_schema(self) -> v.Schema:
        return v.Schema(PROVIDER)

    def load_provider(self, raw: dict) -> ProviderConfig:
        unique_pools(raw)
        provider = common_provider(raw)
        for i, raw_pool in enumerate(raw['pools']):
            pool = common_pool(provider, raw_pool)
            for j, label in enumerate(pool.labels.values()):
                if label.settings['backing-label'] == label.name:
                    raise v.Invalid(f'label {label.name!r} cannot be its own backing label',
                                    path=['pools', i, 'labels', j, 'backing-label'])
                label.settings.setdefault('max-parallel-jobs', 1)
                label.settings.setdefault('grace-time', 60)
                label.settings.setdefault('min-retention-time', 0)
            provider.pools[pool.name] = pool
        return provider

    def get_adapter(self, provider: ProviderConfig):
        from nodepool.driver.metastatic.adapter import MetastaticAdapter
        return MetastaticAdapter(provider)
