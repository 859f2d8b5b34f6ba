"""What every zuul daemon and command shares: ``-c CONFIG`` (default
/etc/zuul/zuul.conf), ``-d`` (stay in the foreground), logging set-up,
a pid file, and SIGTERM/SIGHUP hooks."""

from __future__ import annotations

import argparse
import logging
import logging.config
import os
import signal
import sys

DEFAULT_CONFIG = '/etc/zuul/zuul.conf'
LOG_FORMAT = '%(asctime)s %(levelname)s %(name)s: %(message)s'


def base_parser(description: str, config_default: str = DEFAULT_CONFIG):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument('-c', dest='config', default=config_default,
                        help=f'configuration file (default {config_default})')
    parser.add_argument('-d', dest='foreground', action='store_true',
                        help='do not detach; log to the console')
    return parser


def setup_logging(log_config: str | None, foreground: bool, debug: bool = False) -> None:
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


class PidFile:
    """Write our pid; refuse to start if a live process holds the file."""

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
    """Detach (double fork) unless -d was given."""
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)


def install_signal_handlers(on_term, on_hup=None) -> None:
    signal.signal(signal.SIGTERM, lambda *_: on_term())
    signal.signal(signal.SIGINT, lambda *_: on_term())
    if on_hup is not None:
        signal.signal(signal.SIGHUP, lambda *_: on_hup())
