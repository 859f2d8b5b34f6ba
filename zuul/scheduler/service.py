"""The scheduler daemon's service: everything ``zuul-scheduler`` runs,
built from zuul.conf (the embedded Gearman server, connections, the
leader lock, the Scheduler and its collaborators, RPC, timer and image
services). zuul/cmd/scheduler.py does argv, logging and signals around
it; tests, benchmarks and the quickstart use it directly."""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger('zuul.scheduler.daemon')

LEADER_LOCK = '/zuul/scheduler/leader'
# Catch-up starts this long before the last save (events in flight then).
CATCH_UP_SLACK = 5.0
# Services started in this process (their identifiers differ).
_INSTANCES = [0]
_INSTANCES_LOCK = threading.Lock()


class SchedulerService:
    """Everything the scheduler daemon runs, built from zuul.conf; tests
    and the quickstart use it directly."""

    def __init__(self, conf, registry=None, zk_hosts: str | None = None):
        from zuul.driver.registry import default_registry
        self.conf = conf
        self.registry = registry or default_registry()
        self.zk_hosts = zk_hosts or conf.zookeeper.hosts
        self.gear_server = None
        self.parts: list = []
        self.leader_lock = None
        self._identifier = None
        self.is_leader = False
        # Set to stop waiting for leadership (a standby told to stop).
        self.stopping = threading.Event()
        # Called (from kazoo's thread) if this leader's ZooKeeper session
        # is lost: another scheduler may be taking over, so this one must
        # stop acting at once. The daemon exits (systemd restarts it).
        self.on_leadership_lost = None

    def start_gearman(self) -> None:
        """Start the embedded Gearman server (``[gearman_server]
        start=true``) ahead of the rest, so mergers and executors can
        connect before the scheduler loads its tenants through them."""
        from zuul.lib.gearlib import GearServer, GearTLS, configure_server_logging
        conf = self.conf
        if conf.gearman_server.start and self.gear_server is None:
            if conf.gearman_server.log_config:
                configure_server_logging(conf.gearman_server.log_config)
            self.gear_server = GearServer(port=conf.gearman_server.port,
                                          host=conf.gearman_server.listen_address,
                                          tls=GearTLS.of(conf.gearman_server))
            log.info('Embedded Gearman server on port %s', conf.gearman_server.port)

    def start(self) -> bool:
        """Start everything; as a standby, first wait to lead. False if
        told to stop while standing by."""
        from nodepool.zk.api import NodepoolZooKeeper
        from zuul.merger.client import MergeClient
        from zuul.zk.keys import ZooKeeperKeyStore, require_password
        from zuul.zk.pipeline_state import last_saved

        conf = self.conf
        require_password(conf.keystore.password)
        self.start_gearman()
        drivers, hostnames = self._make_connections()
        os.makedirs(conf.scheduler.state_dir, exist_ok=True)
        self.zk = NodepoolZooKeeper.from_hosts(self.zk_hosts,
                                               timeout=conf.zookeeper.session_timeout,
                                               tls=conf.zookeeper.tls())
        host, port, tls = self._gearman()
        self.merge_client = MergeClient(host, port, merge_mode_for=self._merge_mode, **tls)
        if not conf.scheduler.standby:
            return self._start_active(drivers, hostnames)
        if not self._become_leader():
            return False
        # Project keys live in ZooKeeper, so every scheduler has the same;
        # key files of earlier releases are carried over at start.
        self.keystore = ZooKeeperKeyStore(self.zk.client, conf.keystore.password,
                                          state_dir=conf.scheduler.state_dir)
        self.keystore.migrate_state_dir()
        self._make_scheduler(drivers, hostnames)
        self._start_services()
        since = last_saved(self.zk.client)
        if since is not None:
            self.scheduler.latest_events.update(since['connections'])
            self.scheduler.recent_events.update(since['recent'])
        self.scheduler.start()
        self.status_publisher.start()
        self.images.start()
        self._start_connections(since)
        self._start_metrics()
        log.info('Scheduler started with tenants %s (%d items restored)',
                 sorted(self.scheduler.tenants), self.scheduler.restored_items)
        return True

    def _start_active(self, drivers: dict, hostnames: dict) -> bool:
        """``[scheduler] standby = false``: process the tenants this
        scheduler locks (zuul/scheduler/ownership.py) at once; the
        connections' events, timers, images and RPC are one scheduler's,
        the one holding the leader lock (the others wait for it in a
        thread)."""
        from zuul.scheduler.ownership import TenantOwnership
        from zuul.zk.keys import ZooKeeperKeyStore
        self.keystore = ZooKeeperKeyStore(self.zk.client, self.conf.keystore.password,
                                          state_dir=self.conf.scheduler.state_dir)
        self.keystore.migrate_state_dir()
        self._make_scheduler(drivers, hostnames)
        self.ownership = TenantOwnership(self.scheduler, self.zk.client, self.identifier)
        self.scheduler.ownership = self.ownership
        self.scheduler.marks_saved = False
        self._watch_session()
        self.ownership.register()
        for connection in self.connections.all():
            # Reports made from here link the same pages.
            if hasattr(connection, 'attach_zookeeper'):
                connection.web_root = self.conf.web.root
                connection.merge_mode_for = self._merge_mode
        self.scheduler.start()
        self.ownership.start()
        self.status_publisher.start()
        log.info('Scheduler started with tenants %s (active as %s, sharing them)',
                 sorted(self.scheduler.tenants), self.identifier)
        threading.Thread(target=self._lead_events, name='event-leader', daemon=True).start()
        return True

    def _stop_zookeeper_if_gone(self) -> None:
        """Stopping while ZooKeeper is unreachable: its client stops
        first, so the final save and the lock releases fail at once
        rather than wait for a server that may never come back (what
        ZooKeeper holds is the last state saved; events not acknowledged
        there are processed again by the next scheduler)."""
        client = getattr(getattr(self, 'zk', None), 'client', None)
        if client is None or client.connected:
            return
        log.warning('Stopping while ZooKeeper is unreachable: the state it holds is the '
                    'last one saved; events not yet acknowledged will be processed again')
        try:
            client.stop()
        except Exception:
            log.exception('Error while stopping the ZooKeeper client')

    def _lead_events(self) -> None:
        """Once this scheduler holds the leader lock: it receives the
        connections' events (into the tenants' queues), runs the timers,
        image builds and RPC."""
        from zuul.zk.pipeline_state import last_saved
        try:
            if not self._become_leader(listen=False):
                return
            self._start_services()
            since = last_saved(self.zk.client)
            if since is not None:
                self.scheduler.latest_events.update(since['connections'])
                self.scheduler.recent_events.update(since['recent'])
            self.scheduler.marks_saved = True
            self.timer.reconfigure(self.scheduler.tenants)
            self.images.start()
            self._start_connections(since)
            self._start_metrics()
            log.info('Scheduler %s receives the events', self.identifier)
        except Exception:
            log.exception('Unable to take the events')

    @property
    def identifier(self) -> str:
        """``host:pid`` (``host:pid-N`` for the Nth service of a process,
        as benchmarks run them)."""
        if self._identifier is None:
            import socket
            with _INSTANCES_LOCK:
                _INSTANCES[0] += 1
                suffix = f'-{_INSTANCES[0]}' if _INSTANCES[0] > 1 else ''
            self._identifier = f'{socket.gethostname()}:{os.getpid()}{suffix}'
        return self._identifier

    def _gearman(self) -> tuple:
        """(host, port) of the Gearman server and its tls= keyword."""
        from zuul.lib.gearlib import GearTLS
        conf = self.conf.gearman
        return conf.server, conf.port, {'tls': GearTLS.of(conf)}

    def _make_scheduler(self, drivers: dict, hostnames: dict) -> None:
        """The Scheduler and its collaborators: tenant layouts (read
        through the mergers), executor and node clients (nodepool's tree
        and zuul-launcher's, seed 001, over the same session), and the
        state it keeps in ZooKeeper."""
        from nodepool.zk.paths import ZUUL_LAUNCHER
        from nodepool.zk.requestor import NodeRequestClient
        from zuul.executor.client import ExecutorClient
        from zuul.scheduler.autohold import AutoholdStore
        from zuul.scheduler.builds import ExecutorAdapter
        from zuul.scheduler.layouts import Layouts, MergerConfigFetcher
        from zuul.scheduler.nodes import NodesAdapter, ProviderPublisher
        from zuul.scheduler.scheduler import Scheduler
        from zuul.zk.builds import BuildRecords
        from zuul.zk.pipeline_state import PipelineStateStore, TriggerEventQueue

        conf = self.conf
        host, port, tls = self._gearman()
        self.layouts = Layouts(conf.scheduler.tenant_config, self.connections, self.registry,
                               MergerConfigFetcher(self.merge_client), drivers, hostnames,
                               keystore=self.keystore)
        self.layouts.default_ansible_version = conf.scheduler.default_ansible_version
        # The unparsed configuration shared through ZooKeeper: a scheduler
        # that starts (or takes over) re-reads only what is not there.
        from zuul.zk.config_cache import ConfigCacheStore
        self.layouts.shared_cache = ConfigCacheStore(self.zk.client)
        self.node_client = NodeRequestClient(self.zk, requestor='zuul-scheduler')
        self.node_client.start()
        self.launcher_node_client = NodeRequestClient(self.zk.sibling(ZUUL_LAUNCHER),
                                                      requestor='zuul-scheduler')
        self.launcher_node_client.start()
        self.executor_client = ExecutorClient(host, port, **tls)
        stats, history = self._stats_and_history()
        scheduler = self.scheduler = Scheduler(self.layouts, self.connections,
                                               self.merge_client, None, None,
                                               stats=stats, history=history)
        scheduler.executor = ExecutorAdapter(self.executor_client, scheduler, hostnames,
                                             self.layouts.job_spec_for, self._merge_mode)
        from zuul.zk.ssh_keys import ProjectSshKeys
        scheduler.executor.project_ssh_keys = ProjectSshKeys(self.keystore)
        from zuul.executor.reproduction import anonymous_sources
        from zuul.merger.repos import RepoUrlResolver
        scheduler.executor.repo_urls = RepoUrlResolver(anonymous_sources(
            {name.strip('"\''): {'driver': c.driver, 'options': dict(c.options)}
             for name, c in conf.connections.items()}))
        scheduler.nodes = NodesAdapter(self.node_client, scheduler,
                                       launcher_client=self.launcher_node_client,
                                       relative_priority=conf.scheduler.relative_priority)
        scheduler.state_store = PipelineStateStore(self.zk.client)
        scheduler.event_queue = TriggerEventQueue(self.zk.client)
        scheduler.executor.records = BuildRecords(self.zk.client)
        scheduler.provider_publisher = ProviderPublisher(self.zk.client)
        scheduler.autoholds = AutoholdStore(self.zk.client)
        from zuul.scheduler.status_publisher import StatusPublisher
        from zuul.zk.status import StatusStore
        self.status_publisher = scheduler.status_publisher = StatusPublisher(
            scheduler, StatusStore(self.zk.client))
        scheduler.web_root = conf.web.root

    def _start_services(self) -> None:
        """Image builds, the timer and the ``zuul:*`` RPC functions."""
        from zuul.lib.rpc import RPCListener
        from zuul.scheduler.images import ImageService
        from zuul.scheduler.rpc_handlers import handlers
        from zuul.scheduler.timer import TimerService
        host, port, tls = self._gearman()
        self.images = ImageService(self.scheduler, self.zk.client)
        self.timer = TimerService(self.scheduler, self.layouts)
        self.scheduler.timer = self.timer
        self.timer.start()
        self.rpc = RPCListener(host, port, handlers(self.scheduler, self.layouts,
                                                    self.keystore),
                               name='zuul-scheduler', **tls)
        self.rpc.start()

    def _make_connections(self) -> tuple[dict, dict]:
        """The connections of zuul.conf; returns (connection -> driver
        name, connection -> canonical hostname)."""
        from zuul.scheduler.connections import ConnectionRegistry
        self.connections = ConnectionRegistry()
        drivers, hostnames = {}, {}
        for name, cc in self.conf.connections.items():
            driver = self.registry.get(cc.driver)
            drivers[name] = cc.driver
            hostnames[name] = cc.options.get('canonical_hostname') or \
                cc.options.get('server') or name
            if hasattr(driver, 'get_connection'):
                self.connections.add(driver.get_connection(name, cc.options))
        return drivers, hostnames

    def _start_metrics(self) -> None:
        """The Gearman component gauges (zuul.mergers.*, zuul.executors.*)
        and the Prometheus endpoint (``[scheduler] prometheus_port``)."""
        from zuul.lib.stats import metrics_server
        from zuul.scheduler.gearman_stats import GearmanStatsReporter
        stats = self.scheduler.stats
        if stats is None or stats.client is None:
            return
        host, port, tls = self._gearman()
        self.gearman_stats = GearmanStatsReporter(stats.client, host, port,
                                                  tls.get('tls')).start()
        self.prometheus = metrics_server(stats.client, self.conf.scheduler.prometheus_port,
                                         self.conf.scheduler.prometheus_addr,
                                         lambda: 'running' if self.is_leader else 'stopping')

    def _stats_and_history(self):
        """The statsd client ([statsd]) and build history ([database]),
        each None when not configured; the history schema migrated."""
        conf = self.conf
        stats = history = None
        if conf.statsd.server or conf.scheduler.prometheus_port is not None:
            from zuul.lib.stats import SchedulerStats, daemon_metrics
            stats = SchedulerStats(daemon_metrics(conf.statsd, background=True))
        if conf.database.dburi:
            from zuul.driver.sql.history import BuildHistory
            from zuul.driver.sql.writer import HistoryWriter
            history = BuildHistory(conf.database.dburi, conf.database.table_prefix)
            history.migrate()
            # Its writes leave the loop (an insert waits on the database).
            history = HistoryWriter(history)
        return stats, history

    def _start_connections(self, since: dict | None) -> None:
        """Connections start feeding events (webhook deliveries wait in
        ZooKeeper for the leader); events missed while no scheduler
        listened are caught up."""
        for connection in self.connections.all():
            if hasattr(connection, 'attach_zookeeper'):
                connection.attach_zookeeper(self.zk.client)
                connection.web_root = self.conf.web.root   # links of statuses, check runs
                connection.merge_mode_for = self._merge_mode
            if hasattr(connection, 'wants_event'):
                # Events no tenant may act on are not read ahead.
                connection.wants_event = self.scheduler.may_want_event
        self.connections.start(self.scheduler.add_trigger_event)
        if since is not None:
            self._catch_up(since)

    def _catch_up(self, since: dict) -> None:
        """Events that happened while no scheduler listened (a restart,
        a takeover): each connection that can synthesizes those created
        after the newest event the previous scheduler held durably (or,
        if it held none of that connection, since its last save, less a
        margin for events in flight then)."""
        for connection in self.connections.all():
            catch_up = getattr(connection, 'catch_up_since', None)
            if catch_up is None:
                continue
            after = since['connections'].get(connection.name)
            seen = since['recent'].get(connection.name) or []
            if after is None:
                after, seen = since['time'] - CATCH_UP_SLACK, []

            def run(connection=connection, catch_up=catch_up, after=after, seen=seen):
                count = catch_up(after, seen)
                log.info('Connection %s: %d events caught up from while no scheduler ran',
                         connection.name, count)
            threading.Thread(target=run, name=f'catch-up-{connection.name}',
                             daemon=True).start()

    def _become_leader(self, listen: bool = True) -> bool:
        """Several schedulers may run; one leads (processes events, owns
        the pipelines), the others wait as hot standbys on this lock and
        take over from the saved state when the leader's session ends."""
        identifier = self.identifier
        self.leader_lock = self.zk.client.Lock(LEADER_LOCK, identifier=identifier)
        from kazoo.exceptions import CancelledError
        holders = self.leader_lock.contenders()
        if holders:
            log.info('Standing by: scheduler %s leads', holders[0])
        try:
            if self.stopping.is_set() or not self.leader_lock.acquire():
                return False
        except CancelledError:
            return False
        if self.stopping.is_set():
            self.leader_lock.release()
            return False
        self.is_leader = True
        log.info('This scheduler (%s) leads', identifier)
        if listen:
            self._watch_session()
        return True

    def _watch_session(self) -> None:
        """A lost ZooKeeper session loses the locks (leader, tenants):
        another scheduler may be taking over, so this one stops at once."""
        from kazoo.protocol.states import KazooState

        def on_state(state):
            ownership = getattr(self, 'ownership', None)
            if state == KazooState.LOST and not self.stopping.is_set() and (
                    self.is_leader or ownership is not None):
                self.is_leader = False
                log.error('ZooKeeper session lost: this scheduler no longer holds '
                          'its locks')
                if self.on_leadership_lost is not None:
                    self.on_leadership_lost()
        self.zk.client.add_listener(on_state)

    def _merge_mode(self, item) -> str:
        change = getattr(item, 'change', item)
        for state in self.scheduler.tenants.values():
            if self.layouts.has_project(state.layout, change.connection, change.project):
                return self.layouts.merge_mode(state.layout, change.project)
        return 'merge-resolve'

    def reconfigure(self) -> None:
        if not self.is_leader and getattr(self, 'ownership', None) is None:
            log.info('Full reconfiguration requested of a standby scheduler: nothing to do')
            return
        log.info('Full reconfiguration requested')
        self.scheduler.management('reconfigure', timeout=600)

    def stop(self) -> None:
        self.stopping.set()
        if self.leader_lock is not None and not self.is_leader:
            self.leader_lock.cancel()
        if not self.is_leader and getattr(self, 'scheduler', None) is None:
            for stop in (lambda: self.zk.close(), lambda: self.merge_client.stop(),
                         lambda: self.gear_server and self.gear_server.shutdown()):
                try:
                    stop()
                except Exception:
                    log.exception('Error while stopping')
            return
        self.is_leader = False
        self._stop_zookeeper_if_gone()
        for part in ('gearman_stats', 'prometheus'):
            if getattr(self, part, None) is not None:
                getattr(self, part).stop()
        ownership = getattr(self, 'ownership', None)
        for stop in (lambda: ownership and ownership.stop(),
                     lambda: getattr(self, 'timer', None) and self.timer.stop(),
                     lambda: self.status_publisher.stop(),
                     lambda: self.connections.stop(), lambda: self.scheduler.stop(),
                     lambda: ownership and ownership.release_all(),
                     lambda: getattr(self, 'rpc', None) and self.rpc.stop(),
                     lambda: self.node_client.stop(),
                     lambda: self.launcher_node_client.stop(),
                     lambda: getattr(self, 'images', None) and self.images.stop(),
                     lambda: self.zk.close(), lambda: self.merge_client.stop(),
                     lambda: self.executor_client.stop(),
                     lambda: self.gear_server and self.gear_server.shutdown()):
            try:
                stop()
            except Exception:
                log.exception('Error while stopping')
