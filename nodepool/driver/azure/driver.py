"""The azure driver's configuration: released Nodepool's syntax.

    - name: azure-central
      driver: azure
      location: centralus
      resource-group: nodepool
      resource-group-location: centralus
      auth-path: /etc/nodepool/azure.json   # a service principal (sdk-auth form)
      subnet-id: /subscriptions/.../subnets/default
      cloud-images:
        - name: ubuntu
          username: zuul
          key: ssh-ed25519 AAAA... zuul
          image-reference:
            publisher: Canonical
            offer: 0001-com-ubuntu-server-jammy
            sku: 22_04-lts
            version: latest
      pools:
        - name: main
          max-servers: 10
          use-internal-ip: false
          labels:
            - name: ubuntu
              cloud-image: ubuntu
              hardware-profile:
                vm-size: Standard_B1ls
              tags: {team: ci}
"""

from __future__ import annotations

import voluptuous as v

from nodepool.driver import Driver, unique_pools
from nodepool.driver.settings import (
    POOL_COMMON,
    POOL_LABEL_COMMON,
    PROVIDER_COMMON,
    PoolConfig,
    ProviderConfig,
    common_provider,
    image_label,
)

DEFAULT_BOOT_TIMEOUT = 120
DEFAULT_LAUNCH_TIMEOUT = 600

IMAGE_REFERENCE = {v.Required('publisher'): str, v.Required('offer'): str,
                   v.Required('sku'): str, v.Required('version'): str}

CLOUD_IMAGE = {
    v.Required('name'): str,
    'username': str,
    'password': str,
    'key': str,
    'generate-password': bool,
    'image-reference': IMAGE_REFERENCE,
    'image-id': str,
    'image-filter': dict,
    'python-path': str,
    'shell-type': str,
    'connection-type': str,
    'connection-port': int,
}

LABEL = {
    **POOL_LABEL_COMMON,
    'cloud-image': str,
    'diskimage': str,
    v.Required('hardware-profile'): {v.Required('vm-size'): str},
    'tags': {str: v.Coerce(str)},
    'dynamic-tags': {str: str},
    'user-data': str,
    'custom-data': str,
    'volume-size': int,
    'host-key-checking': bool,
}

POOL = {
    **POOL_COMMON,
    'max-servers': int,
    'max-cores': int,
    'max-ram': int,
    'use-internal-ip': bool,
    'host-key-checking': bool,
    'ipv4': bool,
    'ipv6': bool,
    'labels': [LABEL],
}

PROVIDER = {
    **PROVIDER_COMMON,
    v.Required('location'): str,
    v.Required('resource-group'): str,
    'resource-group-location': str,
    v.Required('auth-path'): str,
    'subnet-id': str,
    'network': v.Any(str, {'resource-group': str, v.Required('network'): str,
                           'subnet': str}),
    'cloud-images': [CLOUD_IMAGE],
    'diskimages': [dict],
    'pools': [POOL],
}


class AzureDriver(Driver):
    name = 'azure'

    def provider_schema(self) -> v.Schema:
        return v.Schema(PROVIDER)

    def load_provider(self, raw: dict) -> ProviderConfig:
        unique_pools(raw)
        images = {i['name']: dict(i) for i in raw.get('cloud-images') or []}
        problems = []
        if not raw.get('subnet-id') and not raw.get('network'):
            problems.append(v.Invalid('give subnet-id or network', path=['subnet-id']))
        for name, image in images.items():
            if not image.get('image-reference') and not image.get('image-id'):
                problems.append(v.Invalid(f'cloud-image {name!r} needs image-reference or '
                                          'image-id',
                                          path=['cloud-images', list(images).index(name)]))
        for i, pool in enumerate(raw.get('pools') or []):
            for j, label in enumerate(pool.get('labels') or []):
                if label.get('cloud-image') not in images:
                    problems.append(v.Invalid(
                        f'label {label["name"]!r} needs a cloud-image from cloud-images',
                        path=['pools', i, 'labels', j, 'cloud-image']))
        if problems:
            raise v.MultipleInvalid(problems)
        provider = common_provider(raw)
        boot = raw.get('boot-timeout', DEFAULT_BOOT_TIMEOUT)
        launch = raw.get('launch-timeout', DEFAULT_LAUNCH_TIMEOUT)
        provider.boot_timeout = boot + launch
        network = raw.get('network')
        subnet = raw.get('subnet-id')
        provider.settings = {
            'location': raw['location'], 'resource-group': raw['resource-group'],
            'resource-group-location': raw.get('resource-group-location', raw['location']),
            'auth-path': raw['auth-path'], 'subnet-id': subnet, 'network': network,
            'boot-timeout': boot, 'launch-timeout': launch, 'cloud-images': images}
        for raw_pool in raw.get('pools') or []:
            pool = PoolConfig(name=raw_pool['name'], provider=provider.name,
                              max_servers=raw_pool.get('max-servers'),
                              max_cores=raw_pool.get('max-cores'),
                              max_ram=raw_pool.get('max-ram'),
                              priority=raw_pool.get('priority', provider.priority),
                              node_attributes=dict(raw_pool.get('node-attributes') or {}))
            pool.settings = {'use-internal-ip': raw_pool.get('use-internal-ip', False),
                             'host-key-checking': raw_pool.get('host-key-checking', True)}
            for raw_label in raw_pool.get('labels') or []:
                image = images[raw_label['cloud-image']]
                label = image_label(raw_label, image, 'zuul', pool.settings['host-key-checking'])
                pool.labels[label.name] = label
            provider.pools[pool.name] = pool
        return provider

    def get_adapter(self, provider: ProviderConfig):
        from nodepool.driver.azure.adapter import AzureAdapter
        return AzureAdapter(provider)
