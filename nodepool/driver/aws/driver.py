"""The aws driver's configuration: released Nodepool's syntax.

    - name: ec2-us-west-2
      driver: aws
      region-name: us-west-2
      profile-name: nodepool          # a profile of the AWS config/credentials files
      rate: 2                         # seconds between API calls
      boot-timeout: 180               # running -> SSH answers
      launch-timeout: 600             # RunInstances -> running
      launch-retries: 3
      max-cores: 200                  # vCPUs (besides the account's quota)
      cloud-images:
        - name: debian
          image-filters:              # or image-id: ami-0123...
            - name: name
              values: [debian-12-amd64-*]
          username: admin
          python-path: /usr/bin/python3
      pools:
        - name: main
          max-servers: 10
          subnet-id: subnet-0123
          security-group-id: sg-0123
          public-ipv4: true
          host-key-checking: true
          labels:
            - name: debian-small
              cloud-image: debian
              instance-type: t3.medium
              key-name: zuul
              volume-type: gp3
              volume-size: 40
              iops: 3000
              userdata: "#cloud-config\\n"
              iam-instance-profile: {name: ci-nodes}
              tags: {team: ci}
              dynamic-tags: {request: '{request.id}'}
              use-spot: false

Credentials and the endpoint come from boto3's usual places (the
profile, ``AWS_*`` environment variables, the instance's role;
``AWS_ENDPOINT_URL`` for another endpoint).
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
    unique_entries,
)

DEFAULT_BOOT_TIMEOUT = 180
DEFAULT_LAUNCH_TIMEOUT = 3600
DEFAULT_USERNAME = 'zuul'

CONNECTION = {'username': str, 'python-path': str, 'shell-type': str,
              'connection-type': str, 'connection-port': int}

CLOUD_IMAGE = {
    v.Required('name'): str,
    'image-id': str,
    'image-filters': [{v.Required('name'): str, v.Required('values'): [str]}],
    'architecture': str,
    **CONNECTION,
}

PROVIDER_DISKIMAGE = {
    v.Required('name'): str,
    'pause': bool,
    'import-method': v.Any('snapshot', 'image', 'ebs-direct'),
    'architecture': str,
    'volume-type': str,
    'volume-size': int,
    'iops': int,
    'throughput': int,
    'tags': {str: v.Coerce(str)},
    'ena-support': bool,
    'imds-support': str,
    'meta': dict,
    **CONNECTION,
}

LABEL = {
    **POOL_LABEL_COMMON,
    'cloud-image': str,
    'diskimage': str,
    'instance-type': str,
    'ebs-optimized': bool,
    'key-name': str,
    'iam-instance-profile': v.Any({v.Required('name'): str}, {v.Required('arn'): str}),
    'volume-type': str,
    'volume-size': int,
    'iops': int,
    'throughput': int,
    'userdata': str,
    'tags': {str: v.Coerce(str)},
    'dynamic-tags': {str: str},
    'use-spot': bool,
    'imdsv2': v.Any('required', 'optional'),
    'dedicated-host': bool,
    'host-key-checking': bool,
}

POOL = {
    **POOL_COMMON,
    'max-servers': int,
    'max-cores': int,
    'max-ram': int,
    'max-resources': {str: int},
    'subnet-id': str,
    'security-group-id': str,
    'public-ipv4': bool,
    'public-ipv6': bool,
    'use-internal-ip': bool,
    'host-key-checking': bool,
    'ignore-provider-quota': bool,
    'labels': [LABEL],
}

PROVIDER = {
    **PROVIDER_COMMON,
    v.Required('region-name'): str,
    'profile-name': str,
    'max-cores': int,
    'max-ram': int,
    'max-resources': {str: int},
    'image-format': v.Any('ova', 'vhd', 'vhdx', 'vmdk', 'raw'),
    'image-import-timeout': int,
    'object-storage': {v.Required('bucket-name'): str},
    'cloud-images': [CLOUD_IMAGE],
    'diskimages': [PROVIDER_DISKIMAGE],
    'pools': [POOL],
}


def _check(raw: dict, images: dict, diskimages: dict) -> None:
    problems: list[v.Invalid] = []
    for name, entry in images.items():
        if 'image-id' in entry and 'image-filters' in entry:
            i = list(images).index(name)
            problems.append(v.Invalid(f'cloud-image {name!r}: give image-id or image-filters, '
                                      'not both', path=['cloud-images', i, 'image-filters']))
    for i, pool in enumerate(raw.get('pools') or []):
        for j, label in enumerate(pool.get('labels') or []):
            where = ['pools', i, 'labels', j]
            image, disk = label.get('cloud-image'), label.get('diskimage')
            if (image is None) == (disk is None):
                problems.append(v.Invalid(f'label {label["name"]!r} needs one of cloud-image '
                                          'and diskimage', path=where))
            elif image is not None and image not in images:
                problems.append(v.Invalid(f'label {label["name"]!r} uses cloud-image '
                                          f'{image!r}, which is not under cloud-images',
                                          path=where + ['cloud-image']))
            elif disk is not None and disk not in diskimages:
                problems.append(v.Invalid(f'label {label["name"]!r} uses diskimage {disk!r}, '
                                          'which the provider does not list',
                                          path=where + ['diskimage']))
            if 'instance-type' not in label:
                problems.append(v.Invalid(f'label {label["name"]!r} needs an instance-type',
                                          path=where))
    if problems:
        raise v.MultipleInvalid(problems)


class AwsDriver(Driver):
    name = 'aws'

    def provider_schema(self) -> v.Schema:
        return v.Schema(PROVIDER)

    def load_provider(self, raw: dict) -> ProviderConfig:
        from nodepool.driver.settings import ProviderDiskImage
        unique_pools(raw)
        problems: list[v.Invalid] = []
        images = unique_entries(raw, 'cloud-images', problems)
        diskimages = unique_entries(raw, 'diskimages', problems)
        if problems:
            raise v.MultipleInvalid(problems)
        _check(raw, images, diskimages)
        provider = common_provider(raw)
        boot = raw.get('boot-timeout', DEFAULT_BOOT_TIMEOUT)
        launch = raw.get('launch-timeout', DEFAULT_LAUNCH_TIMEOUT)
        provider.boot_timeout = boot + launch
        provider.settings = {
            'region-name': raw['region-name'], 'profile-name': raw.get('profile-name'),
            'boot-timeout': boot, 'launch-timeout': launch,
            'max-cores': raw.get('max-cores'), 'max-ram': raw.get('max-ram'),
            'image-format': raw.get('image-format', 'raw'),
            'image-import-timeout': raw.get('image-import-timeout', 3600),
            'bucket': (raw.get('object-storage') or {}).get('bucket-name'),
            'cloud-images': {name: dict(entry) for name, entry in images.items()},
        }
        for name, entry in diskimages.items():
            provider.diskimages[name] = ProviderDiskImage(
                name=name, pause=entry.get('pause', False), meta=dict(entry.get('meta') or {}),
                settings={k: val for k, val in entry.items() if k not in ('name', 'pause',
                                                                            'meta')})
        for raw_pool in raw.get('pools') or []:
            pool = PoolConfig(name=raw_pool['name'], provider=provider.name,
                              max_servers=raw_pool.get('max-servers'),
                              max_cores=raw_pool.get('max-cores'),
                              max_ram=raw_pool.get('max-ram'),
                              priority=raw_pool.get('priority', provider.priority),
                              node_attributes=dict(raw_pool.get('node-attributes') or {}))
            pool.settings = {k: raw_pool.get(k) for k in (
                'subnet-id', 'security-group-id', 'public-ipv4', 'public-ipv6',
                'use-internal-ip', 'ignore-provider-quota')}
            pool.settings['host-key-checking'] = raw_pool.get('host-key-checking', True)
            for raw_label in raw_pool.get('labels') or []:
                image = images.get(raw_label.get('cloud-image') or '') or \
                    diskimages.get(raw_label.get('diskimage') or '') or {}
                label = image_label(raw_label, image, DEFAULT_USERNAME,
                                    pool.settings['host-key-checking'])
                label.diskimage = raw_label.get('diskimage')
                pool.labels[label.name] = label
            provider.pools[pool.name] = pool
        return provider

    def get_adapter(self, provider: ProviderConfig):
        from nodepool.driver.aws.adapter import AwsAdapter
        return AwsAdapter(provider)
