"""The zuul-web daemon's parts, built from zuul.conf: its settings
(``[web]``, ``[gearman]``, ``[database]``, ``[auth <name>]``), the
webhook receiver of the GitHub and GitLab connections, the tenants'
status as the scheduler publishes it in ZooKeeper, and the ZuulWeb
server.  zuul/cmd/web.py does argv, logging and signals around them;
tests and the quickstart use them directly."""

from __future__ import annotations

import configparser
from dataclasses import dataclass, field

DEFAULT_COMMAND_SOCKET = '/var/lib/zuul/web.socket'


@dataclass
class WebSettings:
    gearman_server: str = '127.0.0.1'
    gearman_port: int = 4730
    listen_address: str = '127.0.0.1'
    port: int = 9000
    dburi: str | None = None
    table_prefix: str = ''
    gearman_tls: object = None   # zuul.lib.gearlib.GearTLS
    log_root: str | None = None
    static_cache_expiry: int = 3600
    command_socket: str = DEFAULT_COMMAND_SOCKET
    auth: dict = field(default_factory=dict)   # name -> zuul.lib.auth.AuthenticatorConfig

    @classmethod
    def from_config(cls, config: configparser.ConfigParser,
                    base_dir: str | None = None) -> WebSettings:
        """``base_dir``: the directory of zuul.conf (relative key paths)."""
        from zuul.lib.auth import parse_auth_sections
        from zuul.lib.gearlib import GearTLS
        return cls(
            auth=parse_auth_sections(config, base_dir),
            gearman_server=config.get('gearman', 'server', fallback='127.0.0.1'),
            gearman_port=config.getint('gearman', 'port', fallback=4730),
            listen_address=config.get('web', 'listen_address', fallback='127.0.0.1'),
            port=config.getint('web', 'port', fallback=9000),
            dburi=config.get('database', 'dburi', fallback=None),
            table_prefix=config.get('database', 'table_prefix', fallback=''),
            gearman_tls=GearTLS.from_config(config),
            log_root=config.get('web', 'log_root', fallback=None) or None,
            static_cache_expiry=_non_negative(config, 'static_cache_expiry', 3600),
            command_socket=config.get('web', 'command_socket', fallback=None) or
            DEFAULT_COMMAND_SOCKET)


def _non_negative(config, key: str, default: int) -> int:
    try:
        value = config.getint('web', key, fallback=default)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f'[web] {key} must be a whole number of seconds (0 or more), '
                         f'not "{config.get("web", key)}"')
    return value


# Drivers whose connections take webhook deliveries through zuul-web.
WEBHOOK_DRIVERS = ('github', 'gitlab')


def webhook_receiver(config_path: str):
    """A WebhookReceiver for the zuul.conf connections that take webhook
    deliveries (GitHub, GitLab), storing them in ZooKeeper (``[zookeeper]``);
    None when there is no such connection. Returns (receiver, zk)."""
    from zuul.configloader.zuulconf import load_zuul_conf
    from zuul.driver.registry import default_registry
    registry = default_registry()
    conf = load_zuul_conf(config_path, registry)
    takers = {name: cc for name, cc in conf.connections.items()
              if cc.driver in WEBHOOK_DRIVERS}
    if not takers:
        return None, None
    from nodepool.zk.api import NodepoolZooKeeper
    from zuul.web.webhooks import WebhookReceiver
    zk = NodepoolZooKeeper.from_hosts(conf.zookeeper.hosts,
                                      timeout=conf.zookeeper.session_timeout,
                                      tls=conf.zookeeper.tls())
    connections = {}
    for name, cc in takers.items():
        connection = registry.get(cc.driver).get_connection(name, cc.options)
        connection.attach_zookeeper(zk.client)
        if hasattr(connection, 'register_receiver'):
            connection.register_receiver()   # GitLab: outages are caught up
        connections[name] = connection
    return WebhookReceiver(connections), zk


def published_status(config_path: str, zk=None):
    """The tenants' status as the scheduler publishes it in ZooKeeper
    (``[zookeeper] hosts``), over ``zk`` or a session of its own; (None,
    None) without ZooKeeper. Returns (StatusStore, the session opened)."""
    from zuul.configloader.zuulconf import load_zuul_conf
    from zuul.driver.registry import default_registry
    from zuul.zk.status import StatusStore
    if zk is not None:
        return StatusStore(zk.client), None
    raw = configparser.ConfigParser()
    raw.read(config_path)
    if not raw.get('zookeeper', 'hosts', fallback=None):
        return None, None
    conf = load_zuul_conf(config_path, default_registry())
    from nodepool.zk.api import NodepoolZooKeeper
    zk = NodepoolZooKeeper.from_hosts(conf.zookeeper.hosts,
                                      timeout=conf.zookeeper.session_timeout,
                                      tls=conf.zookeeper.tls())
    return StatusStore(zk.client), zk


def build_web(settings: WebSettings, webhooks=None, published=None):
    """The ZuulWeb for ``settings`` (not started); migrates the history
    schema first so the web never reads an old one."""
    from zuul.lib.auth import Authenticators
    from zuul.lib.rpc import RPCClient
    from zuul.web.server import ZuulWeb
    history = None
    if settings.dburi:
        from zuul.driver.sql.history import BuildHistory
        history = BuildHistory(settings.dburi, settings.table_prefix)
        history.migrate()
    rpc = RPCClient(settings.gearman_server, settings.gearman_port, timeout=60,
                    name='zuul-web', tls=settings.gearman_tls)
    return ZuulWeb(settings.listen_address, settings.port, rpc, history,
                   log_root=settings.log_root,
                   static_cache_expiry=settings.static_cache_expiry,
                   # Pollers of one tenant share one scheduler call a second.
                   status_cache_ttl=1.0,
                   webhooks=webhooks, authenticators=Authenticators(settings.auth),
                   enforce_access=True, published_status=published), rpc
