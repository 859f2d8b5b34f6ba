"""zuul-web: argv, config, logging, signals and wiring.

    zuul-web -c /etc/zuul/zuul.conf [-d] [--debug]

Reads [gearman] (where the scheduler's RPC is), [web] listen_address,
port and log_root (finished builds' logs, served at /logs/), and
[database] dburi (build history; none means the history
endpoints answer 404). SIGTERM/SIGINT stop the server.
"""

from __future__ import annotations

import argparse
import configparser
import signal
import threading
from dataclasses import dataclass


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

    @classmethod
    def from_config(cls, config: configparser.ConfigParser) -> WebSettings:
        from zuul.lib.gearlib import GearTLS
        return cls(
            gearman_server=config.get('gearman', 'server', fallback='127.0.0.1'),
            gearman_port=config.getint('gearman', 'port', fallback=4730),
            listen_address=config.get('web', 'listen_address', fallback='127.0.0.1'),
            port=config.getint('web', 'port', fallback=9000),
            dburi=config.get('database', 'dburi', fallback=None),
            table_prefix=config.get('database', 'table_prefix', fallback=''),
            gearman_tls=GearTLS.from_config(config),
            log_root=config.get('web', 'log_root', fallback=None) or None)


def build_web(settings: WebSettings):
    """The ZuulWeb for ``settings`` (not started); migrates the history
    schema first so the web never reads an old one."""
    from zuul.scheduler.rpc import RPCClient
    from zuul.web.server import ZuulWeb
    history = None
    if settings.dburi:
        from zuul.driver.sql.history import BuildHistory
        history = BuildHistory(settings.dburi, settings.table_prefix)
        history.migrate()
    rpc = RPCClient(settings.gearman_server, settings.gearman_port, timeout=60,
                    name='zuul-web', tls=settings.gearman_tls)
    return ZuulWeb(settings.listen_address, settings.port, rpc, history,
                   log_root=settings.log_root), rpc


def main(argv=None) -> int:
    from zuul.cmd import PidFile, daemonize, setup_logging
    parser = argparse.ArgumentParser(prog='zuul-web', description=__doc__)
    parser.add_argument('-c', dest='config', default='/etc/zuul/zuul.conf')
    parser.add_argument('-d', dest='foreground', action='store_true',
                        help='do not detach; log to the console')
    parser.add_argument('--debug', action='store_true', help='debug logging')
    args = parser.parse_args(argv)
    config = configparser.ConfigParser()
    if not config.read(args.config):
        parser.error(f'cannot read {args.config}')
    if not args.foreground:
        daemonize()
    setup_logging(config.get('web', 'log_config', fallback=None), args.foreground,
                  debug=args.debug)
    pidfile = None if args.foreground else config.get('web', 'pidfile',
                                                      fallback='/var/run/zuul/web.pid')
    with PidFile(pidfile):
        web, rpc = build_web(WebSettings.from_config(config))
        done = threading.Event()

        def on_signal(signum, frame):
            done.set()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)
        web.start()
        done.wait()
        web.stop()
        rpc.shutdown()
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
