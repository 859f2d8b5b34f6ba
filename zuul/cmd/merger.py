"""zuul-merger: argv, config, logging, signals and wiring.

    zuul-merger -c /etc/zuul/zuul.conf [-d]
    zuul-merger -c /etc/zuul/zuul.conf stop|pause|resume

Reads [gearman] (where to take jobs), [merger] (git_dir, git_user_name,
git_user_email, log_config, pidfile, hostname) and every
[connection NAME] (where projects are fetched from).  SIGTERM/SIGINT stop
gracefully: no new jobs, the running one finishes, then exit. The command
socket ([merger] command_socket, default <git_dir>/../merger.socket) takes
``stop``, ``pause`` and ``resume``.
"""

from __future__ import annotations

import logging
import threading

from zuul.cmd import PidFile, base_parser, daemonize, install_signal_handlers, setup_logging
from zuul.configloader.zuulconf import ZuulConf, ZuulConfError, load_zuul_conf
from zuul.lib.commandsocket import CommandSocket, run_command

log = logging.getLogger('zuul.cmd.merger')


def connection_sources(conf: ZuulConf) -> dict:
    """What RepoUrlResolver needs from the [connection NAME] sections
    (``[connection "NAME"]``, as released docs write it, is NAME too)."""
    return {name.strip('"\''): {'driver': c.driver, 'options': dict(c.options)}
            for name, c in conf.connections.items()}


def build_server(conf: ZuulConf):
    """The MergeServer for ``conf`` (not started)."""
    from zuul.merger.merger import Merger
    from zuul.merger.repos import RepoUrlResolver
    from zuul.merger.server import MergeServer
    settings = conf.merger
    merger = Merger(settings.git_dir, RepoUrlResolver(connection_sources(conf)),
                    git_user_email=settings.git_user_email,
                    git_user_name=settings.git_user_name)
    from zuul.lib.gearlib import GearTLS
    from zuul.lib.stats import daemon_metrics
    return MergeServer([(conf.gearman.server, conf.gearman.port)], merger,
                       hostname=settings.hostname, tls=GearTLS.of(conf.gearman),
                       metrics=daemon_metrics(conf.statsd))


def socket_path(conf: ZuulConf) -> str:
    import os
    return conf.merger.command_socket or os.path.join(
        os.path.dirname(conf.merger.git_dir.rstrip('/')), 'merger.socket')


def main(argv=None) -> int:
    parser = base_parser('zuul-merger: speculative merges and config reads over Gearman')
    parser.add_argument('command', nargs='?', choices=('stop', 'pause', 'resume'),
                        help='send a command to the running merger')
    args = parser.parse_args(argv)
    try:
        conf = load_zuul_conf(args.config)
    except ZuulConfError as exc:
        parser.error(str(exc))
    if args.command:
        return send(socket_path(conf), args.command)
    from zuul.merger.gitdir import GitDirClaim, GitDirInUseError
    try:
        claim = GitDirClaim(conf.merger.git_dir, 'zuul-merger')
    except GitDirInUseError as exc:
        parser.exit(2, f'zuul-merger: {exc}\n')
    if not args.foreground:
        daemonize()
        claim.refresh()
    setup_logging(conf.merger.log_config, args.foreground)
    done = threading.Event()
    with PidFile(None if args.foreground else conf.merger.pidfile):
        server = build_server(conf)
        install_signal_handlers(done.set)
        server.start()
        from zuul.lib.stats import metrics_server
        prometheus = metrics_server(server.metrics, conf.merger.prometheus_port,
                                    conf.merger.prometheus_addr)
        commands = CommandSocket(socket_path(conf), {
            'stop': done.set, 'pause': server.pause, 'resume': server.resume})
        commands.start()
        done.wait()
        commands.stop()
        log.info('Stopping: waiting for the running merge jobs')
        server.stop()
        if prometheus is not None:
            prometheus.stop()
    return 0


def send(path: str, command: str) -> int:
    """``zuul-merger stop`` etc.: one command to the running daemon."""
    return run_command('zuul-merger', path, command)


if __name__ == '__main__':
    raise SystemExit(main())
