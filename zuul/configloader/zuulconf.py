"""zuul.conf: parsed once into typed settings per daemon.

Sections and keys are those released Zuul v3 documents, so an existing
deployment's file works: [gearman], [gearman_server], [zookeeper],
[keystore], [scheduler], [merger], [executor], [web], [database],
[statsd], [launcher], and [connection NAME] with ``driver=``. Unknown keys are
ignored (with a warning) so newer files still load; wrong types and
unknown drivers are errors naming the file, section and key.
Relative paths are resolved against the directory of zuul.conf.
"""

from __future__ import annotations

import configparser
import dataclasses
import logging
import os
from dataclasses import dataclass, field

log = logging.getLogger('zuul.configloader.zuulconf')


class ZuulConfError(ValueError):
    """An invalid zuul.conf; the message names file, section and key."""


@dataclass(frozen=True)
class GearmanSettings:
    server: str = '127.0.0.1'
    port: int = 4730
    ssl_ca: str | None = None
    ssl_cert: str | None = None
    ssl_key: str | None = None


@dataclass(frozen=True)
class GearmanServerSettings:
    start: bool = False
    listen_address: str | None = None
    port: int = 4730
    log_config: str | None = None
    ssl_ca: str | None = None
    ssl_cert: str | None = None
    ssl_key: str | None = None


@dataclass(frozen=True)
class ZooKeeperSettings:
    hosts: str = '127.0.0.1:2181'
    session_timeout: float = 10.0
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None

    def tls(self) -> dict | None:
        """kazoo TLS settings (as nodepool.zk.api.connect takes them)."""
        if not self.tls_cert:
            return None
        return {'cert': self.tls_cert, 'key': self.tls_key, 'ca': self.tls_ca}


@dataclass(frozen=True)
class KeystoreSettings:
    password: str | None = None


@dataclass(frozen=True)
class SchedulerSettings:
    tenant_config: str | None = None
    state_dir: str = '/var/lib/zuul'
    log_config: str | None = None
    pidfile: str = '/var/run/zuul/scheduler.pid'
    command_socket: str | None = None
    relative_priority: bool = False
    default_ansible_version: str | None = None
    jobdir: str | None = None
    #: Released Zuul's Prometheus endpoint (``/metrics``, ``/health/*``).
    prometheus_port: int | None = None
    prometheus_addr: str = '0.0.0.0'
    #: true: one scheduler leads, the others stand by; false: every
    #: scheduler is active, each processing the tenants it locks.
    standby: bool = True


@dataclass(frozen=True)
class MergerSettings:
    git_dir: str = '/var/lib/zuul/merger-git'
    git_user_email: str | None = None
    git_user_name: str | None = None
    log_config: str | None = None
    pidfile: str = '/var/run/zuul/merger.pid'
    command_socket: str | None = None
    hostname: str | None = None
    #: Released Zuul's Prometheus endpoint (``/metrics``, ``/health/*``).
    prometheus_port: int | None = None
    prometheus_addr: str = '0.0.0.0'


@dataclass(frozen=True)
class ExecutorSettingsConf:
    hostname: str | None = None
    git_dir: str = '/var/lib/zuul/executor-git'
    job_dir: str = '/var/lib/zuul/builds'
    state_dir: str | None = None
    log_config: str | None = None
    pidfile: str = '/var/run/zuul/executor.pid'
    command_socket: str | None = None
    finger_port: int = 7900
    private_key_file: str = '~/.ssh/id_rsa'
    default_username: str = 'zuul'
    disk_limit_per_job: int = 250
    load_multiplier: float = 2.5
    min_avail_mem: float = 5.0
    max_starting_builds: int | None = None
    trusted_ro_paths: str | None = None
    trusted_rw_paths: str | None = None
    untrusted_ro_paths: str | None = None
    untrusted_rw_paths: str | None = None
    keep_jobdir: bool = False
    variables: str | None = None
    log_root: str | None = None
    log_url: str | None = None
    max_log_bytes: int = 1 << 30
    log_retention_days: float = 0
    #: Released Zuul's Prometheus endpoint (``/metrics``, ``/health/*``).
    prometheus_port: int | None = None
    prometheus_addr: str = '0.0.0.0'


@dataclass(frozen=True)
class WebSettings:
    listen_address: str = '127.0.0.1'
    port: int = 9000
    root: str | None = None
    log_config: str | None = None
    pidfile: str = '/var/run/zuul/web.pid'
    static_cache_expiry: int = 3600
    command_socket: str | None = None
    log_root: str | None = None
    #: Released Zuul's Prometheus endpoint (``/metrics``, ``/health/*``).
    prometheus_port: int | None = None
    prometheus_addr: str = '0.0.0.0'


@dataclass(frozen=True)
class LauncherSettingsConf:
    """``[launcher]``: zuul-launcher (seed 001)."""

    state_dir: str = '/var/lib/zuul/launcher'
    log_config: str | None = None
    pidfile: str = '/var/run/zuul/launcher.pid'
    hostname: str | None = None
    #: Released Zuul's Prometheus endpoint (``/metrics``, ``/health/*``).
    prometheus_port: int | None = None
    prometheus_addr: str = '0.0.0.0'
    #: Operate only on providers of these connections (space or comma
    #: separated; ``null`` names static providers).  Empty: all.
    connections: str = ''
    #: Seconds a loop sleeps when nothing wakes it.
    poll_interval: float = 0.5
    #: Seconds between passes that look for leaked instances.
    cleanup_interval: float = 60.0
    #: Seconds an instance without a node record is left alone.
    leak_grace: float = 60.0
    #: Seconds a launcher keeps a loop's lock (global or provider) before
    #: giving other launchers a turn.
    lock_hold: float = 30.0
    #: Seconds a held node (autohold) is kept at most; 0: until released.
    max_hold_age: float = 0.0

    def connection_names(self) -> set[str] | None:
        names = {n for n in self.connections.replace(',', ' ').split() if n}
        return names or None


@dataclass(frozen=True)
class DatabaseSettings:
    dburi: str | None = None
    table_prefix: str = ''


@dataclass(frozen=True)
class StatsdSettings:
    server: str | None = None
    port: int = 8125
    prefix: str | None = None


@dataclass(frozen=True)
class ConnectionConfig:
    name: str
    driver: str
    options: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ZuulConf:
    path: str
    gearman: GearmanSettings
    gearman_server: GearmanServerSettings
    zookeeper: ZooKeeperSettings
    keystore: KeystoreSettings
    scheduler: SchedulerSettings
    merger: MergerSettings
    executor: ExecutorSettingsConf
    web: WebSettings
    database: DatabaseSettings
    statsd: StatsdSettings
    connections: dict
    launcher: LauncherSettingsConf = field(default_factory=LauncherSettingsConf)
    # ``[auth <name>]`` sections: name -> zuul.lib.auth.AuthenticatorConfig.
    auth: dict = field(default_factory=dict)

    @property
    def base_dir(self) -> str:
        return os.path.dirname(os.path.abspath(self.path))


SECTIONS = {
    'gearman': GearmanSettings, 'gearman_server': GearmanServerSettings,
    'zookeeper': ZooKeeperSettings, 'keystore': KeystoreSettings,
    'scheduler': SchedulerSettings, 'merger': MergerSettings,
    'executor': ExecutorSettingsConf, 'web': WebSettings,
    'database': DatabaseSettings, 'statsd': StatsdSettings,
    'launcher': LauncherSettingsConf,
}

PATH_KEYS = {'tenant_config', 'state_dir', 'log_config', 'pidfile', 'command_socket',
             'git_dir', 'job_dir', 'private_key_file', 'ssl_ca', 'ssl_cert', 'ssl_key',
             'tls_cert', 'tls_key', 'tls_ca', 'variables', 'log_root'}

_TRUE = {'1', 'true', 'yes', 'on'}
_FALSE = {'0', 'false', 'no', 'off'}


def _convert(path, section, key, raw: str, typ, base_dir):
    typ_name = str(typ)
    where = f'{path}: [{section}] {key}'
    if 'bool' in typ_name:
        value = raw.strip().lower()
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise ZuulConfError(f'{where}: "{raw}" is not a boolean (true/false)')
    if typ_name.startswith('int'):
        try:
            return int(raw)
        except ValueError:
            raise ZuulConfError(f'{where}: "{raw}" is not an integer') from None
    if typ_name.startswith('float'):
        try:
            return float(raw)
        except ValueError:
            raise ZuulConfError(f'{where}: "{raw}" is not a number') from None
    if key in PATH_KEYS and raw:
        raw = os.path.expanduser(raw)
        if not os.path.isabs(raw):
            raw = os.path.join(base_dir, raw)
    return raw


def _section(cp, path, name, cls, base_dir):
    if not cp.has_section(name):
        return cls()
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, raw in cp.items(name):
        if key not in fields:
            log.warning('%s: [%s] %s is not a known key; ignored', path, name, key)
            continue
        kwargs[key] = _convert(path, name, key, raw, fields[key].type, base_dir)
    return cls(**kwargs)


def _connections(cp, path, registry) -> dict:
    out = {}
    for section in cp.sections():
        if not section.startswith('connection '):
            continue
        # The released docs write [connection "name"]; both forms work.
        name = section[len('connection '):].strip().strip('"\'')
        options = dict(cp.items(section))
        driver = options.pop('driver', None)
        if not driver:
            raise ZuulConfError(f'{path}: [{section}] has no "driver"')
        if registry is not None:
            if driver not in registry:
                raise ZuulConfError(f'{path}: [{section}] uses unknown driver "{driver}" '
                                    f'(available: {", ".join(registry.names())})')
            schema = registry.get(driver).connection_schema()
            if schema is not None:
                try:
                    options = schema(options)
                except Exception as e:
                    raise ZuulConfError(f'{path}: [{section}]: {e}') from None
        out[name] = ConnectionConfig(name, driver, options)
    return out


def load_zuul_conf(path: str, registry=None) -> ZuulConf:
    """Parse zuul.conf. ``registry`` (a DriverRegistry) validates the
    connection sections when given."""
    if not os.path.exists(path):
        raise ZuulConfError(f'{path}: no such file')
    cp = configparser.ConfigParser(interpolation=None)
    try:
        cp.read(path)
    except configparser.Error as e:
        raise ZuulConfError(f'{path}: {e}') from None
    base_dir = os.path.dirname(os.path.abspath(path))
    sections = {name: _section(cp, path, name, cls, base_dir)
                for name, cls in SECTIONS.items()}
    for name in ('gearman', 'gearman_server'):
        _check_tls(path, name, sections[name])
    _check_tls(path, 'zookeeper', sections['zookeeper'], ('tls_ca', 'tls_cert', 'tls_key'))
    return ZuulConf(path=path, connections=_connections(cp, path, registry),
                    auth=_auth(cp, path, base_dir), **sections)


def _auth(cp, path: str, base_dir: str) -> dict:
    from zuul.lib.auth import AuthConfigError, parse_auth_sections
    try:
        return parse_auth_sections(cp, base_dir)
    except AuthConfigError as e:
        raise ZuulConfError(f'{path}: {e}') from None


def _check_tls(path: str, section: str, settings,
               keys=('ssl_ca', 'ssl_cert', 'ssl_key')) -> None:
    """TLS needs its three files together, and they must exist."""
    given = [k for k in keys if getattr(settings, k)]
    if not given:
        return
    missing = [k for k in keys if k not in given]
    if missing:
        raise ZuulConfError(f'{path}: [{section}] TLS needs {", ".join(keys[:-1])} and '
                            f'{keys[-1]} together; missing {", ".join(missing)}')
    for key in keys:
        if not os.path.exists(getattr(settings, key)):
            raise ZuulConfError(f'{path}: [{section}] {key}: {getattr(settings, key)} '
                                'does not exist')


def load_config_parser(path: str) -> configparser.ConfigParser:
    """The raw parser, for components that read keys of their own."""
    cp = configparser.ConfigParser(interpolation=None)
    cp.read(path)
    return cp
