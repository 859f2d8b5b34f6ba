"""What nodepool's commands share: logging set-up, a pid file, detaching.

(Nodepool never imports zuul, so this is its own small copy of the idea.)
"""

from __future__ import annotations

import logging
import logging.config
import os
import sys

DEFAULT_CONFIG = '/etc/nodepool/nodepool.yaml'
LOG_FORMAT = '%(asctime)s %(levelname)s %(name)s: %(message)s'


def daemon_parser(prog: str, description: str, default_pidfile: str):
    """The options every nodepool daemon takes, as released: ``-c``,
    ``-d`` (foreground), ``-p`` (pid file), ``-l`` (logging config),
    ``--debug``."""
    import argparse
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument('-c', dest='config', default=DEFAULT_CONFIG,
                   help=f'nodepool.yaml (default {DEFAULT_CONFIG})')
    p.add_argument('-d', dest='foreground', action='store_true',
                   help='stay in the foreground and log to the console')
    p.add_argument('-p', dest='pidfile', default=None,
                   help=f'pid file (default {default_pidfile} when detached)')
    p.add_argument('-l', dest='logconfig', default=None, help='logging config file')
    p.add_argument('--debug', action='store_true', help='debug logging')
    return p


def run_daemon(name: str, config, make_service, start_errors=()) -> int:
    """Connect to ZooKeeper, start ``make_service(zk)``, run until
    SIGTERM/SIGINT, stop it gracefully.  ``start_errors``: exceptions of
    ``start()`` that are a clear refusal (logged, exit 1)."""
    import signal
    import threading

    from kazoo.handlers.threading import KazooTimeoutError

    from nodepool.zk.api import NodepoolZooKeeper
    log = logging.getLogger(f'nodepool.cmd.{name}')
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        zk = NodepoolZooKeeper.from_hosts(config.zookeeper_hosts(),
                                          timeout=config.zookeeper_timeout,
                                          tls=config.zookeeper_tls)
    except KazooTimeoutError:
        log.error('Cannot connect to ZooKeeper at %s', config.zookeeper_hosts())
        return 1
    service = make_service(zk)
    try:
        try:
            service.start()
        except tuple(start_errors) as e:
            log.error('%s', e)
            return 1
        log.info('%s running (%s)', name, config.path)
        while not stop.wait(3600):
            pass
        log.info('Stopping')
    finally:
        service.stop()
        zk.close()
    return 0


def setup_logging(log_config: str | None, foreground: bool, debug: bool = False) -> None:
    """A logging config file (YAML dictConfig or INI fileConfig), or
    the console (foreground) / stderr."""
    if log_config:
        if log_config.endswith(('.yaml', '.yml')):
            import yaml
            with open(log_config) as f:
                logging.config.dictConfig(yaml.safe_load(f))
        else:
            logging.config.fileConfig(log_config, disable_existing_loggers=False)
        return
    logging.basicConfig(level=logging.DEBUG if debug else logging.INFO, format=LOG_FORMAT,
                        stream=sys.stdout if foreground else sys.stderr)
    logging.getLogger('kazoo').setLevel(logging.WARNING)


class PidFile:
    """Write our pid; refuse to start while a live process holds the file."""

    def __init__(self, path: str | None):
        self.path = path

    def __enter__(self):
        if not self.path:
            return self
        if os.path.exists(self.path):
            try:
                with open(self.path) as f:
                    pid = int(f.read().strip())
                os.kill(pid, 0)
            except (OSError, ValueError):
                pass  # stale
            else:
                raise SystemExit(f'{self.path}: already running as pid {pid}')
        os.makedirs(os.path.dirname(self.path) or '.', exist_ok=True)
        with open(self.path, 'w') as f:
            f.write(f'{os.getpid()}\n')
        return self

    def __exit__(self, *exc):
        if self.path and os.path.exists(self.path):
            os.unlink(self.path)


def daemonize() -> None:
    """Detach (double fork)."""
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
