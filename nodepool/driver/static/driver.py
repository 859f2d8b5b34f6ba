"""The static driver's configuration: fixed hosts that are registered as
ready nodes and returned to ready after use (as released Nodepool's)."""

from __future__ import annotations

import voluptuous as v

from nodepool.driver import Driver, unique_pools
from nodepool.driver.settings import PoolLabel, ProviderConfig, common_pool, common_provider
from nodepool.driver.settings import pool_schema as make_pool_schema
from nodepool.driver.settings import provider_schema as make_provider_schema
from nodepool.driver.static.adapter import StaticAdapter

NODE = {
    v.Required('name'): str,
    v.Required('labels'): v.Any(str, [str]),
    'username': str,
    'timeout': v.Any(int, float),
    'host-key-checking': bool,
    'host-key': v.Any(str, [str]),
    'connection-port': int,
    'connection-type': str,
    'python-path': str,
    'shell-type': str,
    'max-parallel-jobs': int,
}

DEFAULT_USERNAME = 'zuul'


def normalize_node(raw: dict) -> dict:
    labels = raw['labels']
    keys = raw.get('host-key') or []
    ctype = raw.get('connection-type', 'ssh')
    return {
        'name': raw['name'],
        'labels': [labels] if isinstance(labels, str) else list(labels),
        'username': raw.get('username', DEFAULT_USERNAME),
        'timeout': raw.get('timeout', 5),
        'host-key-checking': raw.get('host-key-checking', True),
        'host-key': [keys] if isinstance(keys, str) else list(keys),
        'connection-type': ctype,
        'connection-port': raw.get('connection-port', 5986 if ctype == 'winrm' else 22),
        'python-path': raw.get('python-path', 'auto'),
        'shell-type': raw.get('shell-type'),
        'max-parallel-jobs': raw.get('max-parallel-jobs', 1),
    }


class StaticDriver(Driver):
    name = 'static'

    def provider_schema(self) -> v.Schema:
        return make_provider_schema(make_pool_schema(label=None, nodes=[NODE]))

    def load_provider(self, raw: dict) -> ProviderConfig:
        unique_pools(raw)
        provider = common_provider(raw)
        seen = {}
        for pi, raw_pool in enumerate(raw['pools']):
            pool = common_pool(provider, raw_pool)
            nodes = [normalize_node(n) for n in raw_pool.get('nodes') or []]
            for ni, node in enumerate(nodes):
                key = (node['name'], node['connection-port'])
                if key in seen:
                    raise v.Invalid(f'static node {node["name"]} port '
                                    f'{node["connection-port"]} is defined twice',
                                    path=['pools', pi, 'nodes', ni, 'name'])
                if node['max-parallel-jobs'] < 1:
                    raise v.Invalid('max-parallel-jobs must be at least 1',
                                    path=['pools', pi, 'nodes', ni, 'max-parallel-jobs'])
                seen[key] = True
                for label in node['labels']:
                    pool.labels.setdefault(label, PoolLabel(
                        name=label, username=node['username'],
                        python_path=node['python-path'], shell_type=node['shell-type']))
            pool.settings['nodes'] = nodes
            provider.pools[pool.name] = pool
        return provider

    def get_adapter(self, provider: ProviderConfig) -> StaticAdapter:
        return StaticAdapter(provider)
