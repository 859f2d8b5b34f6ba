"""nodepool-launcher: fulfil node requests from the providers in
nodepool.yaml.

    nodepool-launcher -c /etc/nodepool/nodepool.yaml [-d] [-p PIDFILE] [-l LOGCONFIG]

SIGTERM (or SIGINT) stops it gracefully: no new requests are taken,
launches in flight finish or clean up, and the launcher's registrations
and locks go with its ZooKeeper session.
"""

from __future__ import annotations

import argparse
import logging
import sys

from nodepool.cmd import PidFile, daemon_parser, daemonize, run_daemon, setup_logging
from nodepool.config import ConfigError, load_config
from nodepool.launcher.launcher import Launcher
from nodepool.launcher.settings import LauncherSettings
from nodepool.launcher.webapp import WebApp

log = logging.getLogger('nodepool.cmd.launcher')
DEFAULT_PIDFILE = '/var/run/nodepool/launcher.pid'


def parser() -> argparse.ArgumentParser:
    p = daemon_parser('nodepool-launcher', __doc__.split('\n')[0], DEFAULT_PIDFILE)
    p.add_argument('--cleanup-interval', type=float, default=60.0,
                   help='seconds between full cleanup passes (default 60)')
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as e:
        print(f'nodepool-launcher: invalid configuration:\n{e}', file=sys.stderr)
        return 1
    if not config.zookeeper_servers:
        print(f'nodepool-launcher: {args.config} has no zookeeper-servers', file=sys.stderr)
        return 1
    pidfile = args.pidfile or (None if args.foreground else DEFAULT_PIDFILE)
    if not args.foreground:
        daemonize()
    setup_logging(args.logconfig, args.foreground, args.debug)
    for warning in config.warnings:
        log.warning('%s', warning)
    with PidFile(pidfile):
        return run(config, LauncherSettings(cleanup_interval=args.cleanup_interval))


class LauncherService:
    """The launcher and its status web app (``webapp`` in nodepool.yaml)."""

    def __init__(self, config, zk, settings: LauncherSettings, metrics=None):
        from nodepool.driver.metrics import from_environment
        # statsd as released Nodepool: STATSD_HOST, STATSD_PORT, STATSD_PREFIX.
        self.launcher = Launcher(config, zk, settings,
                                 metrics=metrics if metrics is not None else from_environment())
        self.webapp = WebApp(config, zk, self.launcher)

    def start(self) -> None:
        self.launcher.start()
        try:
            self.webapp.start()
        except OSError as e:
            # The launcher is useful without its status pages.
            log.error('Web app not started on %s:%s: %s', self.webapp.listen_address,
                      self.webapp.port, e.strerror or e)

    def stop(self) -> None:
        self.webapp.stop()
        self.launcher.stop()


def run(config, settings: LauncherSettings) -> int:
    return run_daemon('nodepool-launcher', config,
                      lambda zk: LauncherService(config, zk, settings))

if __name__ == '__main__':
    sys.exit(main())
