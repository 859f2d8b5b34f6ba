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
        return run(config, settings)


def run(config, settings: BuilderSettings) -> int:
    return run_daemon('nodepool-builder', config,
                      lambda zk: NodepoolBuilder(config, zk, settings), (BuilderError,))

if __name__ == '__main__':
    sys.exit(main())
