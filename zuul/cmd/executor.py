"""zuul-executor: argv, config, logging, signals and wiring.

    zuul-executor -c /etc/zuul/zuul.conf [-d]

SIGTERM/SIGINT abort running builds and exit; SIGUSR1 is a graceful stop
(no new builds, exit once the running ones have finished).
"""

from __future__ import annotations

import argparse
import configparser
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
    return Merger(executor_git_dir(config, settings), RepoUrlResolver(connections),
                  git_user_email=config.get('merger', 'git_user_email', fallback='zuul@localhost'),
                  git_user_name=config.get('merger', 'git_user_name', fallback='Zuul'))


def executor_git_dir(config: configparser.ConfigParser, settings: ExecutorSettings) -> str:
    """The executor's own cache ([executor] git_dir, as released): a
    merger on the same host must not share it (zuul.merger.gitdir)."""
    return (config.get('executor', 'git_dir', fallback=None)
            or os.path.join(settings.state_dir, 'executor-git'))


def socket_path(config: configparser.ConfigParser, settings: ExecutorSettings) -> str:
    return config.get('executor', 'command_socket', fallback=None) or \
        os.path.join(settings.state_dir, 'executor.socket')


def main(argv=None) -> int:
    from zuul.cmd import PidFile, daemonize, setup_logging
    from zuul.lib.commandsocket import CommandSocket, run_command
    parser = argparse.ArgumentParser(prog='zuul-executor', description=__doc__)
    parser.add_argument('-c', dest='config', default='/etc/zuul/zuul.conf')
    parser.add_argument('-d', dest='foreground', action='store_true',
                        help='do not detach; log to the console')
    parser.add_argument('command', nargs='?',
                        choices=('stop', 'graceful', 'pause', 'resume'),
                        help='send a command to the running executor')
    args = parser.parse_args(argv)
    config = configparser.ConfigParser()
    if not config.read(args.config):
        parser.error(f'cannot read {args.config}')
    try:
        settings = ExecutorSettings.from_config(config)
    except ValueError as e:  # a bad [executor] value: say which, no traceback
        parser.error(f'{args.config}: {e}')
    if args.command:
        return run_command('zuul-executor', socket_path(config, settings), args.command)
    from zuul.merger.gitdir import GitDirClaim, GitDirInUseError
    try:
        claim = GitDirClaim(executor_git_dir(config, settings), 'zuul-executor')
    except GitDirInUseError as exc:
        parser.exit(2, f'zuul-executor: {exc}\n')
    if not args.foreground:
        daemonize()
        claim.refresh()
    setup_logging(config.get('executor', 'log_config', fallback=None), args.foreground)
    from zuul.lib.gearlib import GearTLS
    from zuul.lib.stats import metrics_server
    zk, records = _build_records(config)
    server = ExecutorServer(settings, config.get('gearman', 'server', fallback='127.0.0.1'),
                            config.getint('gearman', 'port', fallback=4730),
                            build_merger(config, settings),
                            serve_merger=not config.getboolean('executor', 'disable_merger',
                                                               fallback=False),
                            tls=GearTLS.from_config(config), build_records=records,
                            metrics=_metrics(config))
    done = threading.Event()

    def graceful():
        server.graceful_stop()
        done.set()

    def stop():
        server.stop()
        done.set()

    def on_signal(signum, frame):
        threading.Thread(target=graceful if signum == signal.SIGUSR1 else stop,
                         daemon=True).start()

    pidfile = None if args.foreground else config.get('executor', 'pidfile',
                                                      fallback='/var/run/zuul/executor.pid')
    with PidFile(pidfile):
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
            signal.signal(sig, on_signal)
        server.start()
        prometheus = metrics_server(
            server.metrics, config.get('executor', 'prometheus_port', fallback=None),
            config.get('executor', 'prometheus_addr', fallback=None),
            lambda: 'paused' if server.paused else 'running')
        commands = CommandSocket(socket_path(config, settings), {
            'stop': stop, 'graceful': graceful, 'pause': server.pause,
            'resume': server.resume})
        commands.start()
        done.wait()
        commands.stop()
        if prometheus is not None:
            prometheus.stop()
    if zk is not None:
        zk.stop()
        zk.close()
    return 0


def _metrics(config):
    """[statsd] server, port, prefix (as every Zuul daemon reads them)."""
    from nodepool.driver.metrics import Metrics
    host = config.get('statsd', 'server', fallback=None)
    return Metrics(host or None, config.getint('statsd', 'port', fallback=8125),
                   config.get('statsd', 'prefix', fallback=None))


def _build_records(config):
    """With ``[zookeeper] hosts``, build state and results also go to
    ZooKeeper (zuul.zk.builds), so a restarted scheduler adopts running
    builds instead of running them again."""
    hosts = config.get('zookeeper', 'hosts', fallback=None)
    if not hosts:
        return None, None
    from nodepool.zk.api import connect
    from zuul.zk.builds import BuildRecords
    client = connect(hosts, timeout=config.getfloat('zookeeper', 'session_timeout',
                                                           fallback=10.0),
                            tls=_zk_tls(config))
    return client, BuildRecords(client)


def _zk_tls(config):
    keys = ('tls_cert', 'tls_key', 'tls_ca')
    values = [config.get('zookeeper', k, fallback=None) for k in keys]
    return dict(zip(('cert', 'key', 'ca'), values)) if all(values) else None


if __name__ == '__main__':
    raise SystemExit(main())
