"""nodepool.yaml: the schema and the typed settings built from it.

One function, ``load_config``, validates and builds; the launcher, the
CLI and ``nodepool config-validate`` all call it.  Errors carry the file,
the line and where in the document they are.

The top level and the parts every provider shares (name, driver, pools
with labels) are defined here; each driver adds its own keys through the
driver registry (``nodepool.driver``), so this module knows no driver by
name.  A provider without ``driver`` uses ``openstack``, as released
Nodepool does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import voluptuous as v
import yaml

from nodepool.config_diskimages import DISKIMAGE, DiskImage, build_diskimages
from nodepool.driver.settings import (  # noqa: F401  (re-exported: drivers' settings)
    DEFAULT_DRIVER,
    POOL_COMMON,
    POOL_LABEL_COMMON,
    PROVIDER_COMMON,
    PoolConfig,
    PoolLabel,
    ProviderConfig,
    ProviderDiskImage,
    common_label,
    common_pool,
    common_provider,
    number,
    pool_schema,
    provider_schema,
)

DEFAULT_ZOOKEEPER_PORT = 2181


# -- errors ------------------------------------------------------------------


ERROR = 'error'
WARNING = 'warning'


@dataclass
class ConfigIssue:
    path: str
    line: int | None
    where: str
    message: str
    severity: str = ERROR

    def __str__(self) -> str:
        loc = f'{self.path}:{self.line}' if self.line else self.path
        where = f' {self.where}:' if self.where else ''
        level = ' warning:' if self.severity == WARNING else ''
        return f'{loc}:{level}{where} {self.message}'


class ConfigError(ValueError):
    def __init__(self, issues: list[ConfigIssue]):
        self.issues = issues
        super().__init__('\n'.join(str(i) for i in issues))


# -- YAML with line numbers ---------------------------------------------------


class _LineDict(dict):
    line: int | None = None
    key_lines: dict

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.key_lines = {}


class _LineList(list):
    line: int | None = None


_BaseLoader = getattr(yaml, 'CSafeLoader', yaml.SafeLoader)


class _LineLoader(_BaseLoader):
    pass


def _construct_map(loader, node):
    data = _LineDict()
    data.line = node.start_mark.line + 1
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode):
            data.key_lines[key_node.value] = key_node.start_mark.line + 1
    yield data
    data.update(loader.construct_mapping(node))


def _construct_seq(loader, node):
    data = _LineList()
    data.line = node.start_mark.line + 1
    yield data
    data.extend(loader.construct_sequence(node))


_LineLoader.add_constructor('tag:yaml.org,2002:map', _construct_map)
_LineLoader.add_constructor('tag:yaml.org,2002:seq', _construct_seq)


def load_yaml(text: str):
    return yaml.load(text, Loader=_LineLoader)  # noqa: S506 (a safe loader)


def line_of(data, path) -> int | None:
    """The line of the deepest element along ``path`` that has one."""
    line = getattr(data, 'line', None)
    node = data
    for key in path:
        if isinstance(node, dict) and key in getattr(node, 'key_lines', {}):
            line = node.key_lines[key]
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            break
        line = getattr(node, 'line', None) or line
    return line


def describe_path(path) -> str:
    out = ''
    for key in path:
        out += f'[{key}]' if isinstance(key, int) else (f'.{key}' if out else str(key))
    return out


# -- typed settings ------------------------------------------------------------


@dataclass
class ZooKeeperServer:
    host: str
    port: int = DEFAULT_ZOOKEEPER_PORT
    chroot: str | None = None


@dataclass
class Label:
    name: str
    min_ready: int = 0
    max_ready_age: int = 0


@dataclass
class NodepoolConfig:
    path: str
    zookeeper_servers: list[ZooKeeperServer] = field(default_factory=list)
    zookeeper_tls: dict | None = None
    zookeeper_timeout: float = 10.0
    labels: dict[str, Label] = field(default_factory=dict)
    providers: dict[str, ProviderConfig] = field(default_factory=dict)
    #: Top-level ``diskimages:`` by name (see nodepool.config_diskimages).
    diskimages: dict[str, DiskImage] = field(default_factory=dict)
    tenant_resource_limits: list[dict] = field(default_factory=list)
    max_hold_age: int = 0
    elements_dir: str | None = None
    images_dir: str | None = None
    build_log_dir: str | None = None
    build_log_retention: int = 7
    images_dir_required_free: int = 0
    webapp: dict = field(default_factory=dict)
    warnings: list[ConfigIssue] = field(default_factory=list)

    def zookeeper_hosts(self) -> str:
        hosts = ','.join(f'{s.host}:{s.port}' for s in self.zookeeper_servers)
        chroots = {s.chroot for s in self.zookeeper_servers if s.chroot}
        if chroots:
            hosts += '/' + sorted(chroots)[0].strip('/')
        return hosts

    def pools(self) -> list[PoolConfig]:
        return [pool for p in self.providers.values() for pool in p.pools.values()]


# -- schema --------------------------------------------------------------------


LABEL = {
    v.Required('name'): str,
    'min-ready': int,
    'max-ready-age': int,
}

TOP_LEVEL = {
    'zookeeper-servers': [{v.Required('host'): str, 'port': int, 'chroot': str}],
    'zookeeper-tls': {'cert': str, 'key': str, 'ca': str},
    'zookeeper-timeout': number,
    'labels': [LABEL],
    'providers': list,
    'diskimages': [DISKIMAGE],
    'elements-dir': str,
    'images-dir': str,
    'images-dir-required-free': int,
    'build-log-dir': str,
    'build-log-retention': int,
    'max-hold-age': int,
    'webapp': {'port': int, 'listen_address': str},
    'tenant-resource-limits': [{
        v.Required('tenant-name'): str,
        'max-cores': int, 'max-ram': int, 'max-servers': int,
        v.Extra: int,
    }],
}

# -- loading -------------------------------------------------------------------


class _Collector:
    def __init__(self, path: str, doc):
        self.path = path
        self.doc = doc
        self.issues: list[ConfigIssue] = []

    def add(self, where_path, message: str, line: int | None = None,
            severity: str = ERROR) -> None:
        self.issues.append(ConfigIssue(self.path, line or line_of(self.doc, where_path),
                                       describe_path(where_path), message, severity))

    def invalid(self, prefix, error: v.Invalid) -> None:
        errors = error.errors if isinstance(error, v.MultipleInvalid) else [error]
        for e in errors:
            path = list(prefix) + list(e.path)
            msg = e.msg
            if msg == 'extra keys not allowed' and path:
                msg = f'unknown key {path[-1]!r}' if len(path) > 1 else \
                    f'unknown section {path[-1]!r}'
            self.add(path, msg)

    @property
    def errors(self) -> list[ConfigIssue]:
        return [i for i in self.issues if i.severity == ERROR]


def _validate(collector: _Collector, prefix, schema, data):
    try:
        return (schema if isinstance(schema, v.Schema) else v.Schema(schema))(data)
    except v.Invalid as e:
        collector.invalid(prefix, e)
        return None


def load_config(path: str, registry=None) -> NodepoolConfig:
    """Read, validate and build; ConfigError lists every error found.
    Warnings are kept in ``config.warnings``."""
    config, issues = _load(path, registry)
    return _checked(config, issues)


def _checked(config, issues):
    errors = [i for i in issues if i.severity == ERROR]
    if errors:
        raise ConfigError(errors)
    config.warnings = [i for i in issues if i.severity == WARNING]
    return config


def validate_config(path: str, registry=None) -> list[ConfigIssue]:
    """Every problem in the file (empty: it is valid)."""
    return _load(path, registry)[1]


def load_config_text(text: str, path: str = '<string>', registry=None) -> NodepoolConfig:
    config, issues = _parse(text, path, registry)
    return _checked(config, issues)


def _load(path: str, registry):
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        return None, [ConfigIssue(path, None, '', f'cannot read: {e.strerror}')]
    return _parse(text, path, registry)


def _parse(text: str, path: str, registry):
    if registry is None:
        from nodepool.driver import default_registry
        registry = default_registry()
    try:
        doc = load_yaml(text)
    except yaml.YAMLError as e:
        mark = getattr(e, 'problem_mark', None)
        return None, [ConfigIssue(path, mark.line + 1 if mark else None, '',
                                  f'not valid YAML: {getattr(e, "problem", e)}')]
    if doc is None:
        doc = _LineDict()
    c = _Collector(path, doc)
    if isinstance(doc, list) and doc and all(isinstance(p, dict) and 'name' in p
                                             for p in doc):
        # A bare list of providers (a documentation fragment): say so,
        # and still check each provider so unsupported drivers are named.
        c.add([], 'the file holds a bare list; a list of providers belongs under '
                  "a 'providers:' section")
        for i, raw in enumerate(doc):
            _load_provider(c, registry, i, raw)
        return None, c.issues
    if not isinstance(doc, dict):
        kind = 'list' if isinstance(doc, list) else type(doc).__name__
        c.add([], 'the file must hold a mapping of sections (zookeeper-servers, '
                  f'labels, providers, ...), not a {kind}')
        return None, c.issues
    top = _validate(c, [], TOP_LEVEL, doc)
    config = _build_top(path, top) if top is not None else None
    if config is not None:
        config.diskimages = build_diskimages(
            top.get('diskimages') or [],
            lambda where, msg, severity=ERROR: c.add(['diskimages', *where], msg,
                                                     severity=severity))
    names = set()
    raw_providers = doc.get('providers')
    for i, raw in enumerate(raw_providers if isinstance(raw_providers, list) else []):
        # Providers are checked even when the rest is broken, so every
        # unsupported driver is named.
        provider = _load_provider(c, registry, i, raw)
        if provider is None:
            continue
        if provider.name in names:
            c.add(['providers', i, 'name'], f'provider {provider.name!r} is defined twice')
        names.add(provider.name)
        if config is not None:
            config.providers[provider.name] = provider
    if config is not None:
        _cross_check(c, doc, config)
    return config, c.issues


def _build_top(path: str, top: dict) -> NodepoolConfig:
    config = NodepoolConfig(path=os.path.abspath(path) if path != '<string>' else path)
    for s in top.get('zookeeper-servers') or []:
        config.zookeeper_servers.append(ZooKeeperServer(
            s['host'], s.get('port', DEFAULT_ZOOKEEPER_PORT), s.get('chroot')))
    config.zookeeper_tls = top.get('zookeeper-tls')
    config.zookeeper_timeout = top.get('zookeeper-timeout', 10.0)
    for raw in top.get('labels') or []:
        config.labels[raw['name']] = Label(raw['name'], raw.get('min-ready', 0),
                                           raw.get('max-ready-age', 0))
    config.tenant_resource_limits = list(top.get('tenant-resource-limits') or [])
    config.max_hold_age = top.get('max-hold-age', 0)
    config.elements_dir = top.get('elements-dir')
    config.images_dir = top.get('images-dir')
    config.build_log_dir = top.get('build-log-dir')
    config.build_log_retention = top.get('build-log-retention', 7)
    config.images_dir_required_free = top.get('images-dir-required-free', 0)
    config.webapp = dict(top.get('webapp') or {})
    return config


def _load_provider(c: _Collector, registry, i: int, raw: Any) -> ProviderConfig | None:
    where = ['providers', i] if isinstance(c.doc, dict) else [i]
    if not isinstance(raw, dict) or not isinstance(raw.get('name'), str):
        c.add(where, 'a provider must be a mapping with a name')
        return None
    driver_name = raw.get('driver', DEFAULT_DRIVER)
    problem = registry.unsupported_reason(driver_name)
    if problem:
        c.add(where + (['driver'] if 'driver' in raw else []),
              f'provider {raw["name"]!r}: {problem}')
        return None
    driver = registry.get(driver_name)
    data = _validate(c, where, driver.provider_schema(), raw)
    if data is None:
        return None
    try:
        provider = driver.load_provider(data)
    except v.Invalid as e:
        c.invalid(where, e)
        return None
    for path, message in provider.warnings:
        c.add(where + list(path), message, severity=WARNING)
    if driver_name == 'static' and 'launch-timeout' in raw:
        c.add(where + ['launch-timeout'], 'launch-timeout has no effect on a static provider '
              '(its nodes are never launched)', severity=WARNING)
    return provider


def _cross_check(c: _Collector, doc, config: NodepoolConfig) -> None:
    seen = set()
    for i, raw in enumerate(doc.get('labels') or []):
        if raw['name'] in seen:
            c.add(['labels', i, 'name'], f'label {raw["name"]!r} is defined twice')
        seen.add(raw['name'])
    tenants = set()
    for i, raw in enumerate(doc.get('tenant-resource-limits') or []):
        if raw['tenant-name'] in tenants:
            c.add(['tenant-resource-limits', i, 'tenant-name'],
                  f'tenant {raw["tenant-name"]!r} has resource limits twice')
        tenants.add(raw['tenant-name'])
    for provider in config.providers.values():
        index = _provider_index(doc, provider.name)
        raw_pools = doc['providers'][index].get('pools') or []
        for pool in provider.pools.values():
            where = ['providers', index, 'pools', _pool_index(raw_pools, pool.name)]
            for label in pool.labels:
                if label not in config.labels:
                    c.add(where, f'pool {provider.name}/{pool.name} offers label '
                                 f'{label!r}, which is not in the top-level labels',
                          severity=WARNING)
            _check_label_images(c, where, raw_pools, provider, pool)
        _check_provider_images(c, doc, index, provider, config)


def _check_provider_images(c: _Collector, doc, index: int, provider, config) -> None:
    """Every provider diskimage names a buildable top-level diskimage."""
    raw_images = doc['providers'][index].get('diskimages') or []
    for name in provider.diskimages:
        where = ['providers', index, 'diskimages', _pool_index(raw_images, name)]
        image = config.diskimages.get(name)
        if image is None:
            c.add(where, f'provider {provider.name!r} uses diskimage {name!r}, which is '
                         'not in the top-level diskimages')
        elif image.abstract:
            c.add(where, f'provider {provider.name!r} uses diskimage {name!r}, which is '
                         'abstract (a template for other diskimages, never built)')


def _check_label_images(c: _Collector, where, raw_pools, provider, pool) -> None:
    raw_pool = raw_pools[where[-1]] if where[-1] < len(raw_pools) else {}
    raw_labels = (raw_pool.get('labels') or []) if isinstance(raw_pool, dict) else []
    for label in pool.labels.values():
        if label.diskimage and label.diskimage not in provider.diskimages:
            at = [*where, 'labels', _pool_index(raw_labels, label.name), 'diskimage']
            c.add(at, f'pool {provider.name}/{pool.name}: label {label.name!r} boots '
                      f'diskimage {label.diskimage!r}, which provider '
                      f'{provider.name!r} does not list in its diskimages')


def _pool_index(raw_pools, name: str) -> int:
    for i, raw in enumerate(raw_pools):
        if isinstance(raw, dict) and raw.get('name') == name:
            return i
    return 0


def _provider_index(doc, name: str) -> int:
    for i, raw in enumerate(doc.get('providers') or []):
        if isinstance(raw, dict) and raw.get('name') == name:
            return i
    return 0
