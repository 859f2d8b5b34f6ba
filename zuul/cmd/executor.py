"""zuul-executor: argv, config, logging, signals and wiring.

    zuul-executor -c /etc/zuul/zuul.conf [-d]

SIGTERM/SIGINT abort running builds and exit; SIGUSR1 is a graceful stop
(no new builds, exit once the running ones have finished).
"""

from __future__ import annotations

import argparse
import configparser
import logging
import os
import signal
import threading

from zuul.executor.server import ExecutorServer
from zuul.executor.settings import ExecutorSettings


def build_merger(config: configparser.ConfigParser, settings: ExecutorSettings):
    """The repo cache the executor prepares workspaces from."""
    from zuul.merger.merger import Merger
    from zuul.merger.repos import RepoUrlResolver
    connections = {}
    for section in config.sections():
        if section.startswith('connection '):
            connections[section.split(' ', 1)[1].strip().strip('"\'')] = {
                'driver': config[section].get('driver'), 'options': dict(config[section])}
    git_dir = (config.get('merger', 'git_dir', fallback=None)
               or os.path.join(settings.state_dir, 'executor-git'))
    return Merger(git_dir, RepoUrlResolver(connections),
                  git_user_email=config.get('merger', 'git_user_email', fallback='zuul@localhost'),
                  git_user_name=config.get('merger', 'git_user_name', fallback='Zuul'))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog='zuul-executor', description=__doc__)
    parser.add_argument('-c', dest='config', default='/etc/zuul/zuul.conf')
    parser.add_argument('-d', dest='debug', action='store_true')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO,
                        format='%(asctime)s %(levelname)s %(name)s: %(message)s')
    config = configparser.ConfigParser()
    if not config.read(args.config):
        parser.error(f'cannot read {args.config}')
    settings = ExecutorSettings.from_config(config)
    server = ExecutorServer(settings, config.get('gearman', 'server', fallback='127.0.0.1'),
                            config.getint('gearman', 'port', fallback=4730),
                            build_merger(config, settings),
                            serve_merger=not config.getboolean('executor', 'disable_merger',
                                                               fallback=False))
    done = threading.Event()

    def on_signal(signum, frame):
        if signum == signal.SIGUSR1:
            threading.Thread(target=lambda: (server.graceful_stop(), done.set()),
                             daemon=True).start()
        else:
            server.stop()
            done.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, on_signal)
    server.start()
    done.wait()
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
