"""``zuul-launcher``: Nodepool inside Zuul (seed 001).

    zuul-launcher [-c /etc/zuul/zuul.conf] [-d] [--connections NAME[,NAME...]]

Serves the providers the scheduler publishes in ZooKeeper
(``/zuul/launcher/providers``): fulfils ``/zuul/node-requests`` with
nodes in ``/zuul/nodes``.  ``--connections`` (or ``[launcher]
connections``) limits the providers this launcher operates to those of
the named zuul.conf connections (``null``: static providers); any
number of launchers may run, each taking over the others' work if they
die.  SIGTERM/SIGINT stop it (nodes and requests stay in ZooKeeper for
the others or the next start).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import threading

from zuul.cmd import DEFAULT_CONFIG, PidFile, daemonize, install_signal_handlers, setup_logging

log = logging.getLogger('zuul.launcher.daemon')


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog='zuul-launcher', description=__doc__.split('\n')[0])
    parser.add_argument('-c', dest='config', default=DEFAULT_CONFIG)
    parser.add_argument('-d', dest='foreground', action='store_true',
                        help='do not detach; log to the console')
    parser.add_argument('--connections', default=None,
                        help='operate only on providers of these connections '
                             '(comma separated; "null" for static providers)')
    args = parser.parse_args(argv)
    from zuul.configloader.zuulconf import ZuulConfError, load_zuul_conf
    from zuul.driver.registry import default_registry
    try:
        conf = load_zuul_conf(args.config, default_registry())
    except ZuulConfError as e:
        print(f'zuul-launcher: {e}', file=sys.stderr)
        return 2
    settings = conf.launcher
    if args.connections is not None:
        settings = dataclasses.replace(settings, connections=args.connections)
        unknown = (settings.connection_names() or set()) - set(conf.connections) - {'null'}
        if unknown:
            print(f'zuul-launcher: --connections names unknown connections: '
                  f'{", ".join(sorted(unknown))}', file=sys.stderr)
            return 2
    if not args.foreground:
        daemonize()
    setup_logging(settings.log_config, args.foreground)
    from nodepool.zk.api import connect
    from zuul.launcher.server import ZuulLauncher
    stopped = threading.Event()
    # In the foreground (systemd, tests) several launchers may share a
    # zuul.conf: no pid file then, as for zuul-executor.
    with PidFile(None if args.foreground else settings.pidfile):
        client = connect(conf.zookeeper.hosts, timeout=conf.zookeeper.session_timeout,
                         tls=conf.zookeeper.tls())
        launcher = ZuulLauncher(client, conf.connections, settings)
        launcher.start()
        from nodepool.driver.metrics import Metrics
        from zuul.lib.stats import metrics_server
        prometheus = metrics_server(Metrics(None), settings.prometheus_port,
                                    settings.prometheus_addr)
        install_signal_handlers(on_term=stopped.set)
        stopped.wait()
        if prometheus is not None:
            prometheus.stop()
        launcher.stop()
        client.stop()
        client.close()
    return 0


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
