"""The simulated driver's configuration.

    - name: sim
      driver: simulated
      boot-delay: 0.0        # seconds until an instance is ready
      quota: 50              # instances the "cloud" allows (optional)
      state-dir: /tmp/sim    # share the cloud between launchers (optional)
      pools:
        - name: main
          max-servers: 10
          labels:
            - name: small

Instances exist only in the launcher's memory (or, with ``state-dir``,
as files there that every launcher using the directory shares) and have
documentation addresses (192.0.2.0/24); nothing can log in to them.
Tests reach the adapter (``launcher.adapters[name]``) to inject
failures.
"""

from __future__ import annotations

import voluptuous as v

from nodepool.driver import Driver, unique_pools
from nodepool.driver.settings import ProviderConfig, common_pool, common_provider
from nodepool.driver.settings import pool_schema as make_pool_schema
from nodepool.driver.settings import provider_schema as make_provider_schema
from nodepool.driver.simulated.adapter import SimulatedAdapter


class SimulatedDriver(Driver):
    name = 'simulated'

    def provider_schema(self) -> v.Schema:
        pool = make_pool_schema(label={}, **{'max-servers': int})
        return make_provider_schema(pool, **{'boot-delay': v.Any(int, float),
                                             'quota': int, 'state-dir': str})

    def load_provider(self, raw: dict) -> ProviderConfig:
        unique_pools(raw)
        provider = common_provider(raw)
        provider.settings = {'boot-delay': float(raw.get('boot-delay', 0)),
                             'quota': raw.get('quota'),
                             'state-dir': raw.get('state-dir')}
        for raw_pool in raw['pools']:
            pool = common_pool(provider, raw_pool)
            provider.pools[pool.name] = pool
        return provider

    def get_adapter(self, provider: ProviderConfig) -> SimulatedAdapter:
        return SimulatedAdapter(provider)
