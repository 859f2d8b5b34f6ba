"""The openstack driver's configuration: released Nodepool's syntax.

    - name: provider1
      driver: openstack            # the default driver
      cloud: example               # an entry of clouds.yaml
      region-name: region1
      rate: 1.0                    # seconds between API calls
      boot-timeout: 120            # ACTIVE -> SSH answers
      launch-timeout: 900          # create -> ACTIVE
      launch-retries: 3
      hostname-format: '{label.name}-{provider.name}-{node.id}'
      image-name-format: '{image_name}-{timestamp}'
      clean-floating-ips: true     # cleanup deletes unattached floating IPs
      port-cleanup-interval: 600   # ... and ports DOWN this long (0: never)
      diskimages:                  # built images this provider takes
        - name: ubuntu-jammy
          config-drive: true
          meta: {key: value}
      cloud-images:                # images the cloud already has
        - name: cirros
          image-name: cirros-0.6   # or image-id; default: the name
          username: cirros
      pools:
        - name: main
          max-servers: 10
          max-cores: 40
          max-ram: 81920
          availability-zones: [az1, az2]
          networks: [public]
          security-groups: [default]
          host-key-checking: true
          auto-floating-ip: true   # a floating IP when no public IPv4
          labels:
            - name: ubuntu-jammy
              diskimage: ubuntu-jammy    # or cloud-image: cirros
              min-ram: 8192              # smallest flavor with this much
              flavor-name: Performance   # (with min-ram: a name filter)
              key-name: infra-root-keys
              dynamic-instance-properties:   # server metadata, per request
                request_info: 'Created for request {request.id}'

Released Nodepool's timeouts differ from the framework's single one:
``launch-timeout`` bounds the time until the server is ``ACTIVE`` and
``boot-timeout`` the time from then until SSH answers.  The adapter
enforces both; the framework's overall deadline
(``ProviderConfig.boot_timeout``) is their sum.

``nodepool-id`` is deprecated in released Nodepool and has no effect: it
is accepted with a warning.
"""

from __future__ import annotations

from types import SimpleNamespace

import voluptuous as v

from nodepool.driver import Driver, unique_pools
from nodepool.driver.settings import (
    POOL_COMMON,
    POOL_LABEL_COMMON,
    PROVIDER_COMMON,
    PoolConfig,
    ProviderConfig,
    ProviderDiskImage,
    common_provider,
    image_label,
    unique_entries,
)

DEFAULT_HOSTNAME_FORMAT = '{label.name}-{provider.name}-{node.id}'
DEFAULT_IMAGE_NAME_FORMAT = '{image_name}-{timestamp}'
DEFAULT_RATE = 1.0
DEFAULT_BOOT_TIMEOUT = 60
DEFAULT_LAUNCH_TIMEOUT = 3600
DEFAULT_VOLUME_SIZE = 50
DEFAULT_USERNAME = 'zuul'

CONNECTION = {'connection-type': str, 'connection-port': int}

PROVIDER_DISKIMAGE = {
    v.Required('name'): str,
    'pause': bool,
    'config-drive': bool,
    'meta': dict,
    **CONNECTION,
}

CLOUD_IMAGE = {
    v.Required('name'): str,
    'config-drive': bool,
    'image-id': str,
    'image-name': str,
    'username': str,
    'python-path': str,
    'shell-type': str,
    **CONNECTION,
}

LABEL = {
    **POOL_LABEL_COMMON,
    'diskimage': str,
    'cloud-image': str,
    'flavor-name': str,
    'min-ram': int,
    'key-name': str,
    'console-log': bool,
    'boot-from-volume': bool,
    'volume-size': int,
    'instance-properties': {str: v.Coerce(str)},
    'dynamic-instance-properties': {str: str},
    'userdata': str,
    'networks': [str],
    'host-key-checking': bool,
}

POOL = {
    **POOL_COMMON,
    'max-servers': int,
    'max-cores': int,
    'max-ram': int,
    'ignore-provider-quota': bool,
    'availability-zones': [str],
    'networks': [str],
    'security-groups': [str],
    'auto-floating-ip': bool,
    'host-key-checking': bool,
    'labels': [LABEL],
}

PROVIDER = {
    **PROVIDER_COMMON,
    'cloud': str,
    'region-name': str,
    'hostname-format': str,
    'image-name-format': str,
    'clean-floating-ips': bool,
    'port-cleanup-interval': int,
    'post-upload-hook': str,
    'nodepool-id': str,
    'diskimages': [PROVIDER_DISKIMAGE],
    'cloud-images': [CLOUD_IMAGE],
    # Builder configurations list providers without pools.
    'pools': [POOL],
}


def _check_format(template: str, path: list, fields: dict, problems: list) -> None:
    try:
        template.format(**fields)
    except (KeyError, AttributeError, IndexError, ValueError) as e:
        problems.append(v.Invalid(f'cannot format {template!r}: {e!r}', path=path))


def _check_label(raw_label: dict, path: list, diskimages: dict, cloud_images: dict,
                 provider_name: str, problems: list) -> None:
    name = raw_label['name']
    diskimage, cloud_image = raw_label.get('diskimage'), raw_label.get('cloud-image')
    if diskimage is not None and cloud_image is not None:
        problems.append(v.Invalid(f'label {name!r} has both diskimage and cloud-image; '
                                  'give one', path=path + ['cloud-image']))
    elif diskimage is None and cloud_image is None:
        problems.append(v.Invalid(f'label {name!r} needs a diskimage or a cloud-image',
                                  path=path))
    elif diskimage is not None and diskimage not in diskimages:
        problems.append(v.Invalid(
            f'label {name!r} uses diskimage {diskimage!r}, which provider {provider_name!r} '
            'does not list under diskimages', path=path + ['diskimage']))
    elif cloud_image is not None and cloud_image not in cloud_images:
        problems.append(v.Invalid(
            f'label {name!r} uses cloud-image {cloud_image!r}, which provider '
            f'{provider_name!r} does not define under cloud-images',
            path=path + ['cloud-image']))
    if 'flavor-name' not in raw_label and 'min-ram' not in raw_label:
        problems.append(v.Invalid(f'label {name!r} needs flavor-name or min-ram', path=path))


class _AnyItem:
    """Stands for a request's list or dict in the load-time check of
    ``dynamic-instance-properties``: any index or key formats."""

    def __getitem__(self, key):
        return ''

    def __format__(self, spec):
        return ''


# The fields released Nodepool gives ``dynamic-instance-properties``.
SAMPLE_REQUEST = SimpleNamespace(id='100-0000000001', labels=_AnyItem(), requestor='zuul',
                                 requestor_data=_AnyItem(), relative_priority=0,
                                 event_id='e', created_time=0.0, tenant_name='t')


class OpenStackDriver(Driver):
    name = 'openstack'

    def provider_schema(self) -> v.Schema:
        return v.Schema(PROVIDER)

    def load_provider(self, raw: dict) -> ProviderConfig:
        unique_pools(raw)
        problems: list[v.Invalid] = []
        diskimages = unique_entries(raw, 'diskimages', problems)
        cloud_images = unique_entries(raw, 'cloud-images', problems)
        sample = SimpleNamespace(name='x')
        _check_format(raw.get('hostname-format', DEFAULT_HOSTNAME_FORMAT), ['hostname-format'],
                      {'label': sample, 'provider': sample, 'node': SimpleNamespace(id='1')},
                      problems)
        _check_format(raw.get('image-name-format', DEFAULT_IMAGE_NAME_FORMAT),
                      ['image-name-format'], {'image_name': 'x', 'timestamp': 1}, problems)
        for i, raw_pool in enumerate(raw.get('pools') or []):
            for j, raw_label in enumerate(raw_pool.get('labels') or []):
                _check_label(raw_label, ['pools', i, 'labels', j], diskimages, cloud_images,
                             raw['name'], problems)
                for key, template in (raw_label.get('dynamic-instance-properties') or
                                      {}).items():
                    _check_format(template, ['pools', i, 'labels', j,
                                             'dynamic-instance-properties', key],
                                  {'request': SAMPLE_REQUEST}, problems)
        if problems:
            raise v.MultipleInvalid(problems)
        return self._build(raw, diskimages, cloud_images)

    def _build(self, raw: dict, diskimages: dict, cloud_images: dict) -> ProviderConfig:
        provider = common_provider(raw)
        boot = raw.get('boot-timeout', DEFAULT_BOOT_TIMEOUT)
        launch = raw.get('launch-timeout', DEFAULT_LAUNCH_TIMEOUT)
        provider.boot_timeout = boot + launch
        provider.rate = raw.get('rate', DEFAULT_RATE)
        provider.settings = {
            'cloud': raw.get('cloud'),
            'region-name': raw.get('region-name'),
            'boot-timeout': boot,
            'launch-timeout': launch,
            'hostname-format': raw.get('hostname-format', DEFAULT_HOSTNAME_FORMAT),
            'image-name-format': raw.get('image-name-format'),
            'clean-floating-ips': raw.get('clean-floating-ips', True),
            'port-cleanup-interval': raw.get('port-cleanup-interval', 600),
            'post-upload-hook': raw.get('post-upload-hook'),
            'cloud-images': {name: _cloud_image(entry) for name, entry in cloud_images.items()},
        }
        for name, entry in diskimages.items():
            provider.diskimages[name] = ProviderDiskImage(
                name=name, pause=entry.get('pause', False), meta=dict(entry.get('meta') or {}),
                settings={'config-drive': entry.get('config-drive'),
                          # Unset: the top-level diskimage's (InstanceSpec).
                          'connection-type': entry.get('connection-type'),
                          'connection-port': entry.get('connection-port')})
        for raw_pool in raw.get('pools') or []:
            pool = _pool(provider, raw_pool)
            provider.pools[pool.name] = pool
        if 'nodepool-id' in raw:
            provider.warnings.append((['nodepool-id'], (
                f'provider {provider.name!r}: nodepool-id is deprecated in released Nodepool '
                'and has no effect; remove it')))
        return provider

    def get_adapter(self, provider: ProviderConfig):
        from nodepool.driver.openstack.adapter import OpenStackAdapter
        return OpenStackAdapter(provider)


def _port(entry: dict) -> int:
    default = 5986 if entry.get('connection-type') == 'winrm' else 22
    return entry.get('connection-port', default)


def _cloud_image(entry: dict) -> dict:
    return {'name': entry['name'], 'image-id': entry.get('image-id'),
            'image-name': entry.get('image-name'), 'config-drive': entry.get('config-drive'),
            'username': entry.get('username', DEFAULT_USERNAME),
            'python-path': entry.get('python-path', 'auto'),
            'shell-type': entry.get('shell-type'),
            'connection-type': entry.get('connection-type', 'ssh'),
            'connection-port': _port(entry)}


def _pool(provider: ProviderConfig, raw: dict) -> PoolConfig:
    pool = PoolConfig(name=raw['name'], provider=provider.name,
                      max_servers=raw.get('max-servers'), max_cores=raw.get('max-cores'),
                      max_ram=raw.get('max-ram'), priority=raw.get('priority', provider.priority),
                      node_attributes=dict(raw.get('node-attributes') or {}))
    pool.settings = {
        'availability-zones': list(raw.get('availability-zones') or []),
        'networks': list(raw.get('networks') or []),
        'security-groups': list(raw.get('security-groups') or []),
        'auto-floating-ip': raw.get('auto-floating-ip', True),
        'host-key-checking': raw.get('host-key-checking', True),
        'ignore-provider-quota': raw.get('ignore-provider-quota', False),
    }
    cloud_images = provider.settings['cloud-images']
    for raw_label in raw.get('labels') or []:
        image = cloud_images.get(raw_label.get('cloud-image'))
        label = image_label(raw_label, image or {}, None, pool.settings['host-key-checking'])
        label.diskimage = raw_label.get('diskimage')
        label.settings.setdefault('boot-from-volume', False)
        label.settings.setdefault('volume-size', DEFAULT_VOLUME_SIZE)
        label.settings.setdefault('console-log', False)
        pool.labels[label.name] = label
    return pool
