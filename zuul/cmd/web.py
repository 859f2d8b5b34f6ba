"""zuul-web: argv, config, logging, signals and wiring.

    zuul-web -c /etc/zuul/zuul.conf [-d] [--debug]

    zuul-web -c /etc/zuul/zuul.conf stop

Reads [gearman] (where the scheduler's RPC is), [web] listen_address,
port, log_root (finished builds' logs, served at /logs/),
static_cache_expiry (Cache-Control max-age of /static/ files) and
command_socket, [auth <name>] sections (the authenticators that check
bearer tokens, zuul/lib/auth.py), and [database] dburi (build history; none means the
history endpoints answer 404). With GitHub connections in zuul.conf it
takes their webhook deliveries at /api/connection/<name>/payload and
stores them in ZooKeeper ([zookeeper]) for the scheduler. SIGTERM/SIGINT, or ``zuul-web stop``
through the command socket, stop the server.
"""

from __future__ import annotations

import argparse
import configparser
import logging
import os
import signal
import threading

from zuul.web.service import (  # noqa: F401 - what tests and tools import from here
    WEBHOOK_DRIVERS,
    WebSettings,
    build_web,
    published_status,
    webhook_receiver,
)


def main(argv=None) -> int:
    from zuul.cmd import PidFile, daemonize, setup_logging
    from zuul.lib.commandsocket import CommandSocket
    parser = argparse.ArgumentParser(prog='zuul-web', description=__doc__)
    parser.add_argument('-c', dest='config', default='/etc/zuul/zuul.conf')
    parser.add_argument('-d', dest='foreground', action='store_true',
                        help='do not detach; log to the console')
    parser.add_argument('--debug', action='store_true', help='debug logging')
    parser.add_argument('command', nargs='?', choices=('stop',),
                        help='send a command to the running zuul-web')
    args = parser.parse_args(argv)
    config = configparser.ConfigParser()
    if not config.read(args.config):
        parser.error(f'cannot read {args.config}')
    try:
        settings = WebSettings.from_config(config, os.path.dirname(os.path.abspath(args.config)))
    except ValueError as e:
        parser.error(str(e))
    if args.command:
        return _send(settings.command_socket, args.command)
    if not args.foreground:
        daemonize()
    setup_logging(config.get('web', 'log_config', fallback=None), args.foreground,
                  debug=args.debug)
    pidfile = None if args.foreground else config.get('web', 'pidfile',
                                                      fallback='/var/run/zuul/web.pid')
    with PidFile(pidfile):
        webhooks, zk = webhook_receiver(args.config)
        published, status_zk = published_status(args.config, zk)
        web, rpc = build_web(settings, webhooks, published)
        done = threading.Event()

        def on_signal(signum, frame):
            done.set()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)
        web.start()
        from nodepool.driver.metrics import Metrics
        from zuul.lib.stats import metrics_server
        prometheus = metrics_server(Metrics(None),
                                    config.get('web', 'prometheus_port', fallback=None),
                                    config.get('web', 'prometheus_addr', fallback=None))
        commands = CommandSocket(settings.command_socket, {'stop': done.set})
        try:
            commands.start()
        except OSError as e:
            # Serving matters more than the socket (signals still stop it).
            logging.getLogger('zuul.web').error(
                'Cannot open the command socket %s: %s', settings.command_socket, e)
            commands = None
        done.wait()
        if commands is not None:
            commands.stop()
        if prometheus is not None:
            prometheus.stop()
        web.stop()
        rpc.shutdown()
        for session in (zk, status_zk):
            if session is not None:
                session.close()
    return 0


def _send(path: str, command: str) -> int:
    """``zuul-web stop``: one command to the running zuul-web."""
    from zuul.lib.commandsocket import run_command
    return run_command('zuul-web', path, command)


if __name__ == '__main__':
    raise SystemExit(main())
