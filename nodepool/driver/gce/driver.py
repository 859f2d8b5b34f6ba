"""The gce driver's configuration: released Nodepool's syntax.

    - name: gcloud
      driver: gce
      project: my-project
      region: us-central1
      zone: us-central1-a
      rate: 2
      boot-timeout: 120
      launch-retries: 3
      cloud-images:
        - name: debian
          image-project: debian-cloud
          image-family: debian-12
          username: zuul
          key: ssh-ed25519 AAAA... zuul
      pools:
        - name: main
          max-servers: 8
          use-internal-ip: false
          host-key-checking: true
          labels:
            - name: debian
              cloud-image: debian
              instance-type: e2-medium
              volume-type: pd-standard
              volume-size: 20

Credentials are Google's application default credentials
(``GOOGLE_APPLICATION_CREDENTIALS`` names a service account key).
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
DEFAULT_USERNAME = 'zuul'

CLOUD_IMAGE = {
    v.Required('name'): str,
    'image-id': str,
    'image-project': str,
    'image-family': str,
    'username': str,
    'key': str,
    'python-path': str,
    'shell-type': str,
    'connection-type': str,
    'connection-port': int,
}

LABEL = {
    **POOL_LABEL_COMMON,
    v.Required('cloud-image'): str,
    v.Required('instance-type'): str,
    'volume-type': str,
    'volume-size': int,
}

POOL = {
    **POOL_COMMON,
    'max-servers': int,
    'use-internal-ip': bool,
    'host-key-checking': bool,
    'labels': [LABEL],
}

PROVIDER = {
    **PROVIDER_COMMON,
    v.Required('project'): str,
    v.Required('region'): str,
    v.Required('zone'): str,
    'cloud-images': [CLOUD_IMAGE],
    'pools': [POOL],
}


class GceDriver(Driver):
    name = 'gce'

    def provider_schema(self) -> v.Schema:
        return v.Schema(PROVIDER)

    def load_provider(self, raw: dict) -> ProviderConfig:
        unique_pools(raw)
        images = {i['name']: dict(i) for i in raw.get('cloud-images') or []}
        problems = []
        for i, pool in enumerate(raw.get('pools') or []):
            for j, label in enumerate(pool.get('labels') or []):
                if label['cloud-image'] not in images:
                    problems.append(v.Invalid(
                        f'label {label["name"]!r} uses cloud-image {label["cloud-image"]!r}, '
                        'which is not under cloud-images',
                        path=['pools', i, 'labels', j, 'cloud-image']))
        for name, image in images.items():
            if not image.get('image-id') and not image.get('image-family'):
                i = list(images).index(name)
                problems.append(v.Invalid(f'cloud-image {name!r} needs image-id or '
                                          'image-family', path=['cloud-images', i]))
        if problems:
            raise v.MultipleInvalid(problems)
        provider = common_provider(raw)
        provider.boot_timeout = raw.get('boot-timeout', DEFAULT_BOOT_TIMEOUT)
        provider.settings = {'project': raw['project'], 'region': raw['region'],
                             'zone': raw['zone'], 'cloud-images': images}
        for raw_pool in raw.get('pools') or []:
            pool = PoolConfig(name=raw_pool['name'], provider=provider.name,
                              max_servers=raw_pool.get('max-servers'),
                              priority=raw_pool.get('priority', provider.priority),
                              node_attributes=dict(raw_pool.get('node-attributes') or {}))
            pool.settings = {'use-internal-ip': raw_pool.get('use-internal-ip', False),
                             'host-key-checking': raw_pool.get('host-key-checking', True)}
            for raw_label in raw_pool.get('labels') or []:
                image = images[raw_label['cloud-image']]
                label = image_label(raw_label, image, DEFAULT_USERNAME)
                pool.labels[label.name] = label
            provider.pools[pool.name] = pool
        return provider

    def get_adapter(self, provider: ProviderConfig):
        from nodepool.driver.gce.adapter import GceAdapter
        return GceAdapter(provider)
