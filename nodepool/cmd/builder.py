"""nodepool-builder: build the diskimages in nodepool.yaml, upload them to
the providers that use them, and retire old ones.

    nodepool-builder -c /etc/nodepool/nodepool.yaml [-d] [-p PIDFILE] [-l LOGCONFIG]
                     [--build-workers N] [--upload-workers N]

SIGTERM (or SIGINT) stops it: running build commands are killed (their
builds recorded failed), uploads in flight finish, and the builder's
locks go with its ZooKeeper session.
"""

from __future__ import annotations

import argparse
import logging
import sys

from nodepool.builder.builder import BuilderError, NodepoolBuilder
from nodepool.builder.settings import BuilderSettings
from nodepool.cmd import PidFile, daemon_parser, daemonize, run_daemon, setup_logging
from nodepool.config import ConfigError, load_config

log = logging.getLogger('nodepool.cmd.builder')
DEFAULT_PIDFILE = '/var/run/nodepool/nodepool-builder.pid'


def parser() -> argparse.ArgumentParser:
    p = daemon_parser('nodepool-builder', __doc__.split('\n')[0], DEFAULT_PIDFILE)
    p.add_argument('--build-workers', type=int, default=1,
                   help='images built at the same time (default 1)')
    p.add_argument('--upload-workers', type=int, default=4,
                   help='uploads at the same time (default 4)')
    p.add_argument('--cleanup-interval', type=float, default=60.0,
                   help='seconds between cleanup passes (default 60)')
    p.add_argument('--prometheus-port', type=int, default=None,
                   help='serve /metrics and /health/* for Prometheus on this port')
    p.add_argument('--prometheus-address', default='0.0.0.0',
                   help='the address to serve them on (default 0.0.0.0)')
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.build_workers < 1 or args.upload_workers < 1:
        print('nodepool-builder: --build-workers and --upload-workers must be at least 1',
              file=sys.stderr)
        return 2
    try:
        config = load_config(args.config)
    except ConfigError as e:
        print(f'nodepool-builder: invalid configuration:\n{e}', file=sys.stderr)
        return 1
    for problem in (not config.zookeeper_servers and 'has no zookeeper-servers',
                    not config.images_dir and 'has no images-dir'):
        if problem:
            print(f'nodepool-builder: {args.config} {problem}', file=sys.stderr)
            return 1
    pidfile = args.pidfile or (None if args.foreground else DEFAULT_PIDFILE)
    if not args.foreground:
        daemonize()
    setup_logging(args.logconfig, args.foreground, args.debug)
    for warning in config.warnings:
        log.warning('%s', warning)
    settings = BuilderSettings(build_workers=args.build_workers,
                               upload_workers=args.upload_workers,
                               cleanup_interval=args.cleanup_interval)
    with PidFile(pidfile):
        return run(config, settings, args.prometheus_port, args.prometheus_address)


class BuilderService:
    """The builder, with statsd (STATSD_HOST, STATSD_PORT, STATSD_PREFIX, as
    released Nodepool) and, given a port, its Prometheus endpoint."""

    def __init__(self, config, zk, settings: BuilderSettings,
                 prometheus_port: int | None = None, prometheus_address: str = '0.0.0.0'):
        from nodepool.driver.metrics import from_environment
        self.builder = NodepoolBuilder(config, zk, settings, metrics=from_environment())
        self.prometheus_port = prometheus_port
        self.prometheus_address = prometheus_address
        self.prometheus = None

    def start(self) -> None:
        from nodepool.driver.metrics import MetricsServer
        self.builder.start()
        if self.prometheus_port is not None:
            try:
                self.prometheus = MetricsServer(self.builder.metrics, self.prometheus_port,
                                                self.prometheus_address).start()
            except OSError as e:
                log.error('Prometheus endpoint not started on %s:%s: %s',
                          self.prometheus_address, self.prometheus_port, e.strerror or e)

    def stop(self) -> None:
        if self.prometheus is not None:
            self.prometheus.stop()
        self.builder.stop()


def run(config, settings: BuilderSettings, prometheus_port: int | None = None,
        prometheus_address: str = '0.0.0.0') -> int:
    return run_daemon('nodepool-builder', config,
                      lambda zk: BuilderService(config, zk, settings, prometheus_port,
                                                prometheus_address), (BuilderError,))

if __name__ == '__main__':
    sys.exit(main())
