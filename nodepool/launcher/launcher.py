"""The launcher: one pool worker per provider pool, one cleanup worker,
and what they share (ZooKeeper caches, provider adapters, the node
threads).

Only this package touches ZooKeeper on behalf of providers; adapters
just create, poll, delete and list instances.
"""

from __future__ import annotations

import logging
import threading
import time

from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch

from nodepool.config import NodepoolConfig, PoolLabel, ProviderConfig
from nodepool.driver import DriverRegistry, ImageRef, ProviderAdapter, default_registry
from nodepool.launcher.cleanup import CleanupWorker
from nodepool.launcher.pool_worker import PoolWorker
from nodepool.launcher.ratelimit import rate_limited
from nodepool.launcher.settings import LauncherSettings
from nodepool.launcher.state_machine import NodeDeleteStateMachine
from nodepool.launcher.stats import LauncherStats, StatsReporter, TimedAdapter
from nodepool.zk import paths
from nodepool.zk.api import NodepoolZooKeeper
from nodepool.zk.broker import RequestBroker
from nodepool.zk.cache import RecordCache
from nodepool.zk.images import ImageCache
from nodepool.zk.records import DELETING, IN_USE, USED, Node, NodeRequest

log = logging.getLogger('nodepool.launcher')


class Launcher:
    """A nodepool-launcher process's worth of work."""

    def __init__(self, config: NodepoolConfig, zk: NodepoolZooKeeper,
                 settings: LauncherSettings | None = None,
                 registry: DriverRegistry | None = None, clock=time.time,
                 metrics=None):
        self.config = config
        # nodepool.* metrics (nodepool/launcher/stats.py): statsd, Prometheus.
        self.stats = LauncherStats(metrics, config)
        self.metrics = self.stats.metrics
        self.stats_reporter: StatsReporter | None = None
        self.zk = zk
        self.settings = settings or LauncherSettings()
        self.registry = registry or default_registry()
        self.clock = clock
        self.adapters: dict[str, ProviderAdapter] = {}
        self.broken_providers: dict[str, str] = {}
        self.workers: list[PoolWorker] = []
        self.cleanup: CleanupWorker | None = None
        self.node_cache: RecordCache | None = None
        self.request_cache: RecordCache | None = None
        self.image_cache: ImageCache | None = None
        self.launcher_ids: set[str] = set()
        self._records: dict = {}
        self._records_time = 0.0
        self.changed = threading.Condition()
        self._semaphores: dict[str, threading.Semaphore | None] = {}
        self._machines: set = set()
        self._deleting: set[str] = set()
        self._machines_lock = threading.Lock()
        self._running = False

    # -- lifecycle ----------------------------------------------------------------

    def start(self) -> None:
        self._running = True
        self._start_adapters()
        self.node_cache = RecordCache(self.zk.client, paths.NODE_ROOT, Node,
                                      on_change=self._node_changed)
        self.request_cache = RecordCache(self.zk.client, paths.REQUEST_ROOT, NodeRequest,
                                         on_change=self._request_changed)
        self.node_cache.start()
        self.request_cache.start()
        self.stats_reporter = StatsReporter(self.stats, self.node_cache.values).start()
        if any(label.diskimage for pool in self.config.pools()
               for label in pool.labels.values()):
            # Labels that boot built images launch from the newest ready
            # upload; the mirror also wakes the pools when one appears.
            self.image_cache = ImageCache(self.zk.client, on_change=self._images_changed)
            self.image_cache.start()
        ChildrenWatch(self.zk.client, paths.LAUNCHER_ROOT, self._launchers_changed)
        self.zk.client.add_listener(self._session_listener)
        for provider in self.config.providers.values():
            for pool in provider.pools.values():
                self.workers.append(PoolWorker(self, provider, pool,
                                               self.adapters[provider.name]))
        self.cleanup = CleanupWorker(self)
        self.cleanup.start()
        for worker in self.workers:
            worker.start()
        log.info('Launcher started: %d pool workers (%s)', len(self.workers),
                 ', '.join(f'{w.provider.name}/{w.pool.name}' for w in self.workers))

    def _start_adapters(self) -> None:
        for provider in self.config.providers.values():
            adapter = self.registry.get(provider.driver).get_adapter(provider)
            # Every API call of the framework to this provider honours its
            # ``rate`` (the adapter itself never sees the limit).
            self.adapters[provider.name] = rate_limited(
                TimedAdapter(adapter, provider.name, self.stats), provider.rate)
            limit = provider.max_concurrency
            self._semaphores[provider.name] = threading.Semaphore(limit) if limit > 0 else None
            # Adapters whose nodes are slots of other nodes (metastatic)
            # ask this launcher's node system for them.
            if hasattr(adapter, 'set_node_broker'):
                adapter.set_node_broker(RequestBroker(self.zk))
            try:
                adapter.start()
            except Exception as e:
                # The pools of a broken provider decline everything (so
                # requests can fail instead of waiting forever).
                self.broken_providers[provider.name] = str(e)
                log.error('Provider %s unavailable: %s', provider.name, e)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop taking work; abandon requests in flight (their locks go
        with our session), let node threads finish or clean up."""
        if not self._running:
            return
        self._running = False
        self.zk.client.remove_listener(self._session_listener)
        for worker in self.workers:
            worker.stop()
        if self.cleanup is not None:
            self.cleanup.stop()
        deadline = time.monotonic() + timeout
        for thread in [*self.workers, self.cleanup]:
            if thread is not None and thread.is_alive():
                thread.join(max(0.1, deadline - time.monotonic()))
        for worker in self.workers:
            worker.abandon_all()
        with self._machines_lock:
            machines = list(self._machines)
        for machine in machines:
            if machine.thread is not None:
                machine.thread.join(max(0.1, deadline - time.monotonic()))
        for cache in (self.node_cache, self.request_cache, self.image_cache):
            if cache is not None:
                cache.stop()
        if self.stats_reporter is not None:
            self.stats_reporter.stop()
        for adapter in self.adapters.values():
            try:
                adapter.stop()
            except Exception:
                log.exception('Stopping adapter %s failed', adapter.provider.name)
        log.info('Launcher stopped')

    # -- signals ------------------------------------------------------------------

    def notify_changed(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def wake_workers(self) -> None:
        for worker in self.workers:
            worker.wake()

    def _node_changed(self, name, node) -> None:
        if self.stats_reporter is not None:
            self.stats_reporter.changed()
        self.wake_workers()
        if self.cleanup is not None and (node is None or node.state in (USED, IN_USE, DELETING)
                                         or node.allocated_to is None):
            self.cleanup.wake()
        self.notify_changed()

    def _request_changed(self, name, request) -> None:
        self.wake_workers()
        self.notify_changed()

    def _images_changed(self) -> None:
        self.wake_workers()
        self.notify_changed()

    def launcher_records(self, max_age: float = 1.0) -> dict:
        """Every registered pool's launcher record by id, read again when
        older than ``max_age`` seconds or when launchers came or went."""
        now = time.monotonic()
        if now - self._records_time > max_age:
            self._records = {r.id: r for r in self.zk.get_launchers()}
            self._records_time = now
        return self._records

    def _launchers_changed(self, children) -> None:
        self._records_time = 0.0
        if not self._running:
            return False
        gone = self.launcher_ids - set(children)
        self.launcher_ids = set(children)
        if gone and self.cleanup is not None:
            # A launcher's session ended (it stopped, or died): its locks
            # went in the same moment, so what it was doing (pending
            # requests, building nodes) can be recovered now rather than
            # at the next periodic pass.
            log.info('Launchers gone: %s; recovering their work', ', '.join(sorted(gone)))
            self.cleanup.wake(full=True)
        self.wake_workers()
        self.notify_changed()

    def _session_listener(self, state) -> None:
        if state == KazooState.CONNECTED:
            self.wake_workers()
            if self.cleanup is not None:
                self.cleanup.wake(full=True)

    # -- shared services for the workers -------------------------------------------

    def image_for(self, provider: ProviderConfig, label: PoolLabel) -> ImageRef | None:
        """The upload a node of ``label`` boots from (None: no ready upload
        yet, or the provider's diskimage is paused)."""
        image = provider.diskimages.get(label.diskimage)
        if image is None or image.pause or self.image_cache is None:
            return None
        upload = self.image_cache.get_most_recent_upload(image.name, provider.name)
        if upload is None or not upload.external_id:
            return None
        return ImageRef(image_name=image.name, build_id=upload.build_id,
                        upload_id=upload.id, external_id=upload.external_id,
                        image_id=upload.image_id)

    def launch_semaphore(self, provider_name: str):
        return self._semaphores.get(provider_name)

    def track(self, machine) -> None:
        with self._machines_lock:
            self._machines.add(machine)

    def untrack(self, machine) -> None:
        with self._machines_lock:
            self._machines.discard(machine)

    def is_deleting(self, node_id: str) -> bool:
        with self._machines_lock:
            return node_id in self._deleting

    def delete_node(self, node: Node, adapter: ProviderAdapter, on_done=None):
        """Delete a node we hold the lock of, in its own thread."""
        def done(machine):
            self.untrack(machine)
            with self._machines_lock:
                self._deleting.discard(machine.node.id)
            if on_done is not None:
                on_done(machine)
            self.notify_changed()
        machine = NodeDeleteStateMachine(self.zk, adapter, node, on_done=done)
        self.track(machine)
        with self._machines_lock:
            self._deleting.add(node.id)
        machine.start()
        return machine

    def delete_instance(self, adapter: ProviderAdapter, external_id: str) -> None:
        """Delete an instance that has no node record, in its own thread."""
        def run():
            try:
                adapter.delete(external_id)
                log.info('Provider %s: leaked instance %s deleted', adapter.provider.name,
                         external_id)
            except Exception as e:
                log.warning('Provider %s: deleting leaked instance %s failed: %s',
                            adapter.provider.name, external_id, e)
            self.notify_changed()
        threading.Thread(target=run, daemon=True, name=f'delete-{external_id}').start()

    def worker_by_id(self, launcher_id: str | None):
        for worker in self.workers:
            if worker.id == launcher_id:
                return worker
        return None

    def active_request_ids(self) -> set[str]:
        ids = set()
        for worker in self.workers:
            ids.update(worker.handlers)
        return ids

    # -- for tests and the CLI ------------------------------------------------------

    def wait_for(self, predicate, timeout: float = 30.0, what: str = 'condition') -> None:
        """Wait until ``predicate()`` holds, re-checking whenever the
        launcher reports a change (no polling)."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f'timed out waiting for {what}')
                self.changed.wait(left)

    def registered(self) -> bool:
        return all(w.registered.is_set() for w in self.workers)

    def run_cleanup(self, timeout: float = 30.0) -> None:
        """Ask for a full cleanup pass and wait until one that started
        after this call has completed."""
        ticket = self.cleanup.request_full_pass()
        self.wait_for(lambda: self.cleanup.completed_ticket >= ticket, timeout,
                      'a cleanup pass')

    @property
    def paused_pools(self) -> list[str]:
        return [f'{w.provider.name}/{w.pool.name}' for w in self.workers if w.paused]
