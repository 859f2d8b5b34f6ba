"""``zuul-scheduler``: the scheduler daemon.

    zuul-scheduler [-c /etc/zuul/zuul.conf] [-d]
    zuul-scheduler [-c ...] tenant-conf-check | full-reconfigure

Starts the embedded Gearman server when ``[gearman_server] start=true``,
connects the sources of zuul.conf, loads every tenant through the mergers
and serves the ``zuul:*`` RPC functions. SIGHUP (or ``full-reconfigure``)
reloads all tenants; SIGTERM stops gracefully.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading

from zuul.cmd import DEFAULT_CONFIG, PidFile, daemonize, install_signal_handlers, setup_logging
from zuul.scheduler.service import SchedulerService

log = logging.getLogger('zuul.scheduler.daemon')


def _socket_path(conf) -> str:
    return conf.scheduler.command_socket or os.path.join(conf.scheduler.state_dir,
                                                         'scheduler.socket')


def _check_gearman_log_config(conf) -> str | None:
    """What is wrong with ``[gearman_server] log_config``, before the
    scheduler detaches (None when it is unset or readable)."""
    path = conf.gearman_server.log_config
    if not (conf.gearman_server.start and path):
        return None
    from zuul.lib.scoped_logging import LoggingConfigError, check
    try:
        check(path)
    except LoggingConfigError as e:
        return f'[gearman_server] log_config: {e}'
    return None


def _check_keystore(conf) -> str | None:
    """Refuse to start without ``[keystore] password``, before detaching."""
    from zuul.zk.keys import MISSING_PASSWORD
    return None if conf.keystore.password else f'{MISSING_PASSWORD}'


def _rpc_reconfigure(conf) -> int:
    from zuul.lib import rpc_protocol as p
    from zuul.lib.gearlib import GearTLS
    from zuul.lib.rpc import RPCClient
    client = RPCClient(conf.gearman.server, conf.gearman.port, timeout=600,
                       tls=GearTLS.of(conf.gearman))
    try:
        result = client.call(p.RECONFIGURE, p.RPCRequest())
    except (p.RPCError, TimeoutError) as e:
        print(f'zuul-scheduler: {e}', file=sys.stderr)
        return 1
    finally:
        client.shutdown()
    print('reconfigured: ' + ', '.join(result['reconfigured']))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog='zuul-scheduler', description=__doc__.split('\n')[0])
    parser.add_argument('-c', dest='config', default=DEFAULT_CONFIG)
    parser.add_argument('-d', dest='foreground', action='store_true',
                        help='do not detach; log to the console')
    parser.add_argument('command', nargs='?',
                        choices=('tenant-conf-check', 'full-reconfigure', 'stop'))
    args = parser.parse_args(argv)
    from zuul.configloader.zuulconf import ZuulConfError, load_zuul_conf
    from zuul.driver.registry import default_registry
    if args.command == 'tenant-conf-check':
        from zuul.configloader.tenant import tenant_conf_check
        return tenant_conf_check(args.config)
    try:
        conf = load_zuul_conf(args.config, default_registry())
    except ZuulConfError as e:
        print(f'zuul-scheduler: {e}', file=sys.stderr)
        return 2
    if args.command == 'full-reconfigure':
        return _rpc_reconfigure(conf)
    if args.command == 'stop':
        from zuul.lib.commandsocket import run_command
        return run_command('zuul-scheduler', _socket_path(conf), 'stop')
    if not conf.scheduler.tenant_config:
        print(f'zuul-scheduler: {args.config}: [scheduler] tenant_config is not set',
              file=sys.stderr)
        return 2
    error = _check_gearman_log_config(conf) or _check_keystore(conf)
    if error:
        print(f'zuul-scheduler: {error}', file=sys.stderr)
        return 2
    if not args.foreground:
        daemonize()
    setup_logging(conf.scheduler.log_config, args.foreground)
    stopped = threading.Event()
    exit_code = [0]
    with PidFile(conf.scheduler.pidfile):
        service = SchedulerService(conf)

        def lost():
            exit_code[0] = 1
            stopped.set()
        service.on_leadership_lost = lost

        def on_term():
            service.stopping.set()
            if service.leader_lock is not None and not service.is_leader:
                service.leader_lock.cancel()
            stopped.set()
        install_signal_handlers(on_term=on_term,
                                on_hup=lambda: threading.Thread(
                                    target=service.reconfigure, daemon=True).start())
        # Listening already while standing by: `zuul-scheduler stop` stops
        # a standby too.
        from zuul.lib.commandsocket import CommandSocket
        commands = CommandSocket(_socket_path(conf), {
            'stop': on_term, 'full-reconfigure': service.reconfigure})
        commands.start()
        try:
            if service.start():
                stopped.wait()
        finally:
            commands.stop()
            service.stop()
    return exit_code[0]


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
