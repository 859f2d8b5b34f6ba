"""A published provider (``ResolvedProvider``) as one of Nodepool's
provider drivers sees it.

zuul-launcher has no drivers of its own: it translates each resolved
provider into the raw provider dict of the nodepool driver named by its
zuul.conf connection (``[connection NAME] driver=openstack|static|netns|
simulated``; a provider without a connection is static), validates it
with that driver's schema, builds its ``ProviderConfig`` and asks the
driver for an adapter.  Everything is one pool (``main``) whose labels
are the provider's labels by *canonical* name, so node records, instance
specs and node requests all speak canonical names.

Where settings come from (first found wins): the label's resolved
settings (which already hold image, flavor, section and provider
values in seed 001's order), then the provider's settings, then the
connection's options (the zuul.conf section, ``-`` or ``_`` alike).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import voluptuous as v

from nodepool.driver import DriverRegistry, ProviderAdapter, default_registry
from nodepool.driver.settings import ProviderConfig
from zuul.launcher import cloud_providers
from zuul.model.launcher import ResolvedLabel, ResolvedProvider

POOL = 'main'
STATIC = 'static'
DEFAULT_LAUNCH_ATTEMPTS = 3


class ProviderTranslationError(ValueError):
    """The provider cannot be served (unknown connection or driver, or
    settings its driver refuses); the message says which and why."""


@dataclass
class ServedProvider:
    """One provider as this launcher drives it."""

    resolved: ResolvedProvider
    driver: str
    config: ProviderConfig
    adapter: ProviderAdapter
    launch_attempts: int = DEFAULT_LAUNCH_ATTEMPTS
    #: Short label name -> canonical (static hosts list short names).
    short_labels: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.resolved.canonical_name

    @property
    def pool(self):
        return self.config.pools[POOL]


def _opts(options: dict | None) -> dict:
    """Connection options with ``_`` spelled ``-`` (INI keys vary)."""
    return {k.replace('_', '-'): val for k, val in (options or {}).items()}


def driver_name(resolved: ResolvedProvider, connections: dict) -> str:
    """The nodepool driver for ``resolved``; ``connections`` maps
    connection name -> ``ConnectionConfig`` (or a dict with ``driver``)."""
    if resolved.connection is None:
        return STATIC
    conn = connections.get(resolved.connection)
    if conn is None:
        raise ProviderTranslationError(
            f'provider {resolved.canonical_name}: connection {resolved.connection!r} is '
            'not defined in zuul.conf')
    return conn['driver'] if isinstance(conn, dict) else conn.driver


def connection_options(resolved: ResolvedProvider, connections: dict) -> dict:
    conn = connections.get(resolved.connection) if resolved.connection else None
    if conn is None:
        return {}
    return _opts(conn.get('options', {}) if isinstance(conn, dict) else conn.options)


def is_static(resolved: ResolvedProvider, connections: dict) -> bool:
    try:
        return driver_name(resolved, connections) == STATIC
    except ProviderTranslationError:
        return False


class _Lookup:
    """Settings lookup for one label: label, provider, connection."""

    def __init__(self, resolved: ResolvedProvider, options: dict,
                 label: ResolvedLabel | None = None):
        self.layers = [label.settings if label else {}, resolved.settings, options]

    def get(self, *keys, default=None):
        for layer in self.layers:
            for key in keys:
                if layer.get(key) is not None:
                    return layer[key]
        return default


def _number(value, kind=float):
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ProviderTranslationError(f'{value!r} is not a number') from None


def quota_settings(resolved: ResolvedProvider) -> dict:
    quota = resolved.settings.get('quota') or {}
    return quota if isinstance(quota, dict) else {}


def max_instances(resolved: ResolvedProvider) -> int | None:
    quota = quota_settings(resolved)
    for key in ('instances', 'max-servers'):
        if quota.get(key) is not None:
            return int(quota[key])
    if resolved.settings.get('max-servers') is not None:
        return int(resolved.settings['max-servers'])
    return None


def _common(resolved: ResolvedProvider, options: dict, driver: str) -> dict:
    look = _Lookup(resolved, options)
    raw: dict = {'name': resolved.canonical_name, 'driver': driver}
    for key in ('boot-timeout', 'launch-timeout', 'rate'):
        value = look.get(key)
        if value is not None:
            raw[key] = _number(value)
    attempts = look.get('launch-attempts', 'launch-retries')
    if attempts is not None:
        raw['launch-retries'] = _number(attempts, int)
    priority = look.get('priority')
    if priority is not None:
        raw['priority'] = _number(priority, int)
    return raw


def _login(label_look: _Lookup) -> dict:
    out = {}
    for key in ('username', 'python-path', 'shell-type'):
        value = label_look.get(key)
        if value is not None:
            out[key] = str(value)
    return out


def _pool(resolved: ResolvedProvider, with_cores: bool) -> dict:
    pool: dict = {'name': POOL}
    limit = max_instances(resolved)
    if limit is not None:
        pool['max-servers'] = limit
    quota = quota_settings(resolved)
    if with_cores:
        for src, dst in (('cores', 'max-cores'), ('ram', 'max-ram')):
            if quota.get(src) is not None:
                pool[dst] = int(quota[src])
    return pool


# -- per driver -------------------------------------------------------------------


def _simulated(resolved: ResolvedProvider, options: dict) -> dict:
    raw = _common(resolved, options, 'simulated')
    look = _Lookup(resolved, options)
    if look.get('boot-delay') is not None:
        raw['boot-delay'] = _number(look.get('boot-delay'))
    if options.get('quota') is not None:
        raw['quota'] = _number(options['quota'], int)
    if look.get('state-dir') is not None:
        raw['state-dir'] = str(look.get('state-dir'))
    pool = _pool(resolved, with_cores=False)
    pool['labels'] = [{'name': label.canonical_name, **_login(_Lookup(resolved, options, label))}
                      for label in resolved.labels.values()]
    raw['pools'] = [pool]
    return raw


def _netns(resolved: ResolvedProvider, options: dict) -> dict:
    raw = _common(resolved, options, 'netns')
    look = _Lookup(resolved, options)
    for key in ('authorized-keys-file', 'subnet', 'bridge', 'state-dir'):
        if look.get(key) is not None:
            raw[key] = str(look.get(key))
    keys = look.get('authorized-keys')
    if keys:
        raw['authorized-keys'] = [keys] if isinstance(keys, str) else list(keys)
    pool = _pool(resolved, with_cores=False)
    labels = []
    diskimages: dict[str, dict] = {}
    for label in resolved.labels.values():
        label_look = _Lookup(resolved, options, label)
        entry = {'name': label.canonical_name, **_login(label_look)}
        image = resolved.images.get(label.image or '')
        if image is not None and image.type == 'zuul':
            # Boots the newest in-service upload of the Zuul image.
            diskimages.setdefault(image.canonical_name, {'name': image.canonical_name})
            entry['diskimage'] = image.canonical_name
        elif label_look.get('rootfs'):
            entry['rootfs'] = str(label_look.get('rootfs'))
        labels.append(entry)
    pool['labels'] = labels
    if diskimages:
        raw['diskimages'] = list(diskimages.values())
    raw['pools'] = [pool]
    return raw


_OPENSTACK_LABEL_KEYS = ('min-ram', 'key-name', 'console-log', 'boot-from-volume',
                         'volume-size', 'instance-properties', 'userdata', 'networks',
                         'host-key-checking')


def _openstack(resolved: ResolvedProvider, options: dict) -> dict:
    raw = _common(resolved, options, 'openstack')
    look = _Lookup(resolved, options)
    if look.get('cloud') is not None:
        raw['cloud'] = str(look.get('cloud'))
    region = look.get('region-name', 'region')
    if region is not None:
        raw['region-name'] = str(region)
    pool = _pool(resolved, with_cores=True)
    for key in ('availability-zones', 'networks', 'security-groups'):
        value = look.get(key)
        if value:
            pool[key] = [value] if isinstance(value, str) else list(value)
    cloud_images: dict[str, dict] = {}
    diskimages: dict[str, dict] = {}
    labels = []
    for label in resolved.labels.values():
        label_look = _Lookup(resolved, options, label)
        image = resolved.images.get(label.image or '')
        if image is not None:
            label_look.layers.insert(1, image.settings)
        entry = {'name': label.canonical_name, **_login(label_look)}
        image_key = (image.canonical_name if image else label.canonical_name)
        if image is not None and image.type == 'zuul':
            diskimages.setdefault(image_key, {'name': image_key})
            entry['diskimage'] = image_key
        else:
            cloud = {'name': image_key, **_login(label_look)}
            for key in ('image-id', 'image-name', 'config-drive'):
                if label_look.get(key) is not None:
                    cloud[key] = label_look.get(key)
            cloud.setdefault('image-name', image.name if image else label.name)
            cloud_images.setdefault(image_key, cloud)
            entry['cloud-image'] = image_key
        flavor = label_look.get('flavor-name', 'cloud-flavor')
        if flavor is not None:
            entry['flavor-name'] = str(flavor)
        for key in _OPENSTACK_LABEL_KEYS:
            if label_look.get(key) is not None:
                entry[key] = label_look.get(key)
        labels.append(entry)
    pool['labels'] = labels
    raw['cloud-images'] = list(cloud_images.values())
    raw['diskimages'] = list(diskimages.values())
    raw['pools'] = [pool]
    return raw


_STATIC_NODE_KEYS = ('username', 'timeout', 'host-key-checking', 'host-key',
                     'connection-port', 'connection-type', 'python-path', 'shell-type',
                     'max-parallel-jobs')


def static_label_map(resolved: ResolvedProvider) -> dict[str, str]:
    """Short (and canonical) label names -> canonical names."""
    out = {}
    for label in resolved.labels.values():
        out[label.name] = label.canonical_name
        out[label.canonical_name] = label.canonical_name
    return out


def _static(resolved: ResolvedProvider, options: dict) -> dict:
    raw = _common(resolved, options, 'static')
    names = static_label_map(resolved)
    nodes = []
    for node in resolved.settings.get('nodes') or []:
        labels = node.get('labels') or []
        labels = [labels] if isinstance(labels, str) else labels
        mapped = [names[label] for label in labels if label in names]
        if not mapped:
            continue   # none of its labels is offered by this provider
        entry = {'name': node['name'], 'labels': mapped}
        entry.update({k: node[k] for k in _STATIC_NODE_KEYS if node.get(k) is not None})
        nodes.append(entry)
    raw['pools'] = [{'name': POOL, 'nodes': nodes}]
    return raw


def _cloud(translate, **kwargs):
    def run(resolved: ResolvedProvider, options: dict) -> dict:
        return translate(resolved, options, _Lookup, _common, _login, **kwargs)
    return run


TRANSLATORS = {'simulated': _simulated, 'netns': _netns, 'openstack': _openstack,
               'static': _static, 'aws': _cloud(cloud_providers._aws),
               'kubernetes': _cloud(cloud_providers._kubernetes),
               'metastatic': _cloud(cloud_providers._metastatic),
               'gce': _cloud(cloud_providers._gce),
               'azure': _cloud(cloud_providers._azure)}


def raw_provider(resolved: ResolvedProvider, connections: dict) -> tuple[str, dict]:
    """(driver name, nodepool raw provider dict) for ``resolved``."""
    driver = driver_name(resolved, connections)
    translate = TRANSLATORS.get(driver)
    if translate is None:
        raise ProviderTranslationError(
            f'provider {resolved.canonical_name}: driver {driver!r} cannot serve '
            f'zuul-launcher providers (available: {", ".join(sorted(TRANSLATORS))})')
    return driver, translate(resolved, connection_options(resolved, connections))


def build_provider(resolved: ResolvedProvider, connections: dict,
                   registry: DriverRegistry | None = None) -> ServedProvider:
    """Validate and build the provider and its (not yet started) adapter."""
    registry = registry or default_registry()
    try:
        driver_key, raw = raw_provider(resolved, connections)
    except ProviderTranslationError:
        raise
    except (TypeError, ValueError) as e:
        raise ProviderTranslationError(f'provider {resolved.canonical_name}: {e}') from None
    try:
        driver = registry.get(driver_key)
    except KeyError as e:
        raise ProviderTranslationError(f'provider {resolved.canonical_name}: {e}') from None
    try:
        raw = driver.provider_schema()(raw)
        config = driver.load_provider(raw)
    except v.Invalid as e:
        raise ProviderTranslationError(
            f'provider {resolved.canonical_name} ({driver_key}): {e}') from None
    attempts = int(_Lookup(resolved, connection_options(resolved, connections))
                   .get('launch-attempts', 'launch-retries',
                        default=DEFAULT_LAUNCH_ATTEMPTS))
    # The connection's own options (credentials, endpoints) for the
    # adapter; never part of the provider's published settings.
    config.settings['connection'] = connection_options(resolved, connections)
    return ServedProvider(resolved=resolved, driver=driver_key, config=config,
                          adapter=driver.get_adapter(config),
                          launch_attempts=max(1, attempts),
                          short_labels=static_label_map(resolved))
