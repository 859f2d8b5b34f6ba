"""What a provider driver is configured with: the typed provider, pool and
label settings, and the schema pieces every driver shares.

Both configuration loaders build these: nodepool.config from nodepool.yaml
and zuul-launcher (zuul/launcher/providers.py) from the providers Zuul's
configuration defines.  Drivers import them from here, never from a
loader, so no loader and no driver import each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import voluptuous as v

DEFAULT_DRIVER = 'openstack'

number = v.Any(int, float)


@dataclass
class PoolLabel:
    """A label a pool offers, with the per-label settings of its driver."""

    name: str
    username: str | None = None
    python_path: str = 'auto'
    shell_type: str | None = None
    settings: dict = field(default_factory=dict)
    #: The provider diskimage (``diskimage:``) this label boots, if any;
    #: the launcher then launches from that image's newest ready upload.
    diskimage: str | None = None


@dataclass
class ProviderDiskImage:
    """A provider's ``diskimages:`` entry: a built image it uses."""

    name: str
    pause: bool = False
    meta: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)


@dataclass
class PoolConfig:
    name: str
    provider: str
    labels: dict[str, PoolLabel] = field(default_factory=dict)
    max_servers: int | None = None
    #: The most cores and RAM (MiB) the pool's nodes may use together
    #: (``max-cores``/``max-ram`` of drivers whose nodes have flavors).
    max_cores: int | None = None
    max_ram: int | None = None
    priority: int = 100
    node_attributes: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)


@dataclass
class ProviderConfig:
    name: str
    driver: str
    pools: dict[str, PoolConfig] = field(default_factory=dict)
    max_concurrency: int = -1
    launch_retries: int = 3
    boot_timeout: float = 60.0
    launch_timeout: float = 3600.0
    rate: float = 0.0
    #: Default for its pools' ``priority`` (lower numbers are preferred).
    priority: int = 100
    settings: dict = field(default_factory=dict)
    #: Built images (top-level ``diskimages:``) this provider uploads and
    #: launches from, by name.  Drivers that take uploads fill this in.
    diskimages: dict[str, ProviderDiskImage] = field(default_factory=dict)
    #: (path under the provider, message): what the driver warns about
    #: (deprecated keys); reported as configuration warnings.
    warnings: list[tuple[list, str]] = field(default_factory=list)


# Keys every provider may have, whatever its driver.
PROVIDER_COMMON = {
    v.Required('name'): str,
    'driver': str,
    'max-concurrency': int,
    'launch-retries': int,
    'boot-timeout': number,
    'launch-timeout': number,
    'rate': number,
    'priority': int,
}

# Keys every pool may have.
POOL_COMMON = {
    v.Required('name'): str,
    'priority': int,
    'node-attributes': dict,
}

# Keys every pool label may have.
POOL_LABEL_COMMON = {
    v.Required('name'): str,
    'username': str,
    'python-path': str,
    'shell-type': str,
}


def provider_schema(pool: dict, **provider_keys) -> v.Schema:
    """A provider's schema: the common keys, the driver's provider keys,
    and a list of pools shaped by ``pool``."""
    return v.Schema({**PROVIDER_COMMON, **provider_keys, v.Required('pools'): [pool]})


def pool_schema(label: dict | None = None, **pool_keys) -> dict:
    """A pool with common keys, the driver's pool keys and (unless the
    driver describes its nodes otherwise) a list of labels."""
    keys = {**POOL_COMMON, **pool_keys}
    if label is not None:
        keys['labels'] = [{**POOL_LABEL_COMMON, **label}]
    return keys


def common_provider(raw: dict) -> ProviderConfig:
    return ProviderConfig(
        name=raw['name'], driver=raw.get('driver', DEFAULT_DRIVER),
        max_concurrency=raw.get('max-concurrency', -1),
        launch_retries=raw.get('launch-retries', 3),
        boot_timeout=raw.get('boot-timeout', 60), launch_timeout=raw.get('launch-timeout', 3600),
        rate=raw.get('rate', 0.0), priority=raw.get('priority', 100))


def common_pool(provider: ProviderConfig, raw: dict,
                default_priority: int | None = None) -> PoolConfig:
    if default_priority is None:
        default_priority = provider.priority
    pool = PoolConfig(name=raw['name'], provider=provider.name,
                      max_servers=raw.get('max-servers'),
                      priority=raw.get('priority', default_priority),
                      node_attributes=dict(raw.get('node-attributes') or {}))
    for label in raw.get('labels') or []:
        pool.labels[label['name']] = common_label(label)
    return pool


def common_label(raw: dict, username: str | None = None) -> PoolLabel:
    settings = {k: val for k, val in raw.items()
                if k not in ('name', 'username', 'python-path', 'shell-type')}
    return PoolLabel(name=raw['name'], username=raw.get('username', username),
                     python_path=raw.get('python-path', 'auto'),
                     shell_type=raw.get('shell-type'), settings=settings)


def image_label(raw: dict, image: dict, username: str | None,
                host_key_checking: bool | None = None) -> PoolLabel:
    """A pool label booted from a cloud image: the label's own keys, else
    the image's ``username``, ``python-path`` and ``shell-type``; with
    ``host_key_checking`` (the pool's), also that default."""
    label = common_label(raw, username=image.get('username', username))
    if 'python-path' not in raw:
        label.python_path = image.get('python-path', 'auto')
    if 'shell-type' not in raw:
        label.shell_type = image.get('shell-type')
    if host_key_checking is not None:
        label.settings.setdefault('host-key-checking', host_key_checking)
    return label


def unique_entries(raw: dict, key: str, problems: list) -> dict[str, dict]:
    """``raw[key]``'s entries by name; a name given twice is a problem."""
    seen: dict[str, dict] = {}
    for i, entry in enumerate(raw.get(key) or []):
        if entry['name'] in seen:
            problems.append(v.Invalid(f'{key} entry {entry["name"]!r} is defined twice',
                                      path=[key, i, 'name']))
        seen[entry['name']] = entry
    return seen
