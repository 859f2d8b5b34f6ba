"""The zuul-launcher daemon's work, wired together (seed 001).

``ZuulLauncher`` runs, over one ZooKeeper session:

- the global request loop (``zuul.launcher.assign``) in one thread;
- one provider loop (``zuul.launcher.provider_loop``) per provider this
  launcher serves, each in its own thread, so a slow provider does not
  hold up the others or the request loop;
- the image lifecycle hook (``zuul.launcher.images.ImageLifecycle``,
  when that module exists) in a thread of its own.

Loops sleep until something wakes them: watches on the request and
node trees (through ``zuul.launcher.cache.FencedCache`` mirrors) and on the published
providers, or a short poll while launches are in flight.  Every
decision is made under the loop's ZooKeeper lock from the caches fenced
after taking it (``zuul.launcher.cache``: as fresh as reading every
record, for one round trip and the reads of what changed), so any
launcher can take over another's work at any step.

Providers come from ``/zuul/launcher/providers`` (the scheduler
publishes them); which ones this launcher serves is limited by
``[launcher] connections`` / ``--connections`` (seed 001: "an optional
command-line argument to indicate on which connections it should
operate"); ``null`` names the static providers (no connection).
"""

from __future__ import annotations

import copy
import logging
import os
import socket
import threading
import time
import uuid

from kazoo.exceptions import KazooException

from nodepool.driver import DriverRegistry, ImageRef, ProviderAdapter
from nodepool.zk.api import NodepoolZooKeeper
from nodepool.zk.broker import RequestBroker
from nodepool.zk.paths import ZUUL_LAUNCHER
from nodepool.zk.priority import request_order
from nodepool.zk.records import (
    BUILDING,
    DELETING,
    READY,
    USED,
    LauncherRecord,
    Node,
    NodeRequest,
    ProviderState,
)
from zuul.configloader.zuulconf import LauncherSettingsConf
from zuul.launcher.assign import RequestAssigner
from zuul.launcher.cache import FencedCache, fence
from zuul.launcher.provider_loop import (
    PROVIDER_STATE_ROOT,
    ProviderLoop,
    UnservableProviderLoop,
)
from zuul.launcher.providers import ProviderTranslationError, ServedProvider, build_provider
from zuul.launcher.providers import is_static as provider_is_static
from zuul.launcher.quota import QUEUED
from zuul.model.launcher import ResolvedProvider, quote_name
from zuul.zk import launcher_config
from zuul.zk.launcher_config import PROVIDER_ROOT

log = logging.getLogger('zuul.launcher')

#: Seconds a loop sleeps when nothing wakes it and nothing is in flight.
IDLE_WAIT = 5.0
NULL_CONNECTION = 'null'
#: Seconds between two provider loops this launcher hands over to a
#: launcher that holds fewer (see ``_should_hand_over``).
HANDOVER_INTERVAL = 2.0


def _launch_view(resolved: ResolvedProvider) -> dict:
    """What launching depends on (not which tenants use the provider)."""
    view = resolved.to_dict()
    view.pop('tenants', None)
    view.pop('source', None)
    return view


class _LoopThread:
    """A thread that calls ``body()`` whenever woken (or after its
    timeout); ``body`` returns how long to wait at most before the next
    call."""

    def __init__(self, name: str, body):
        self.body = body
        self.event = threading.Event()
        self.running = True
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def wake(self) -> None:
        self.event.set()

    def stop(self, timeout: float = 10.0) -> None:
        self.running = False
        self.event.set()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout)

    def _run(self) -> None:
        wait = 0.0
        while self.running:
            self.event.wait(wait)
            self.event.clear()
            if not self.running:
                break
            try:
                wait = self.body()
            except Exception:
                log.exception('%s failed', self.thread.name)
                wait = 1.0


class ZuulLauncher:
    """One zuul-launcher process's worth of work."""

    def __init__(self, client, connections: dict, settings: LauncherSettingsConf | None = None,
                 registry: DriverRegistry | None = None, hostname: str | None = None):
        self.client = client
        self.connections = connections
        self.settings = settings or LauncherSettingsConf()
        self.registry = registry
        self.hostname = hostname or self.settings.hostname or socket.gethostname()
        self.id = f'{self.hostname}-{os.getpid()}-{uuid.uuid4().hex[:8]}'
        self.zk = NodepoolZooKeeper(client, tree=ZUUL_LAUNCHER)
        self.only_connections = self.settings.connection_names()
        #: Seconds between tries for a loop lock another launcher holds
        #: (besides the watch on its holder).
        self.lock_retry = max(self.settings.poll_interval * 10, 0.5)
        self.node_cache: FencedCache | None = None
        self.request_cache: FencedCache | None = None
        self.state_cache: FencedCache | None = None
        self.launcher_cache: FencedCache | None = None
        self._held_reported: list[str] = []
        self._handed_over = 0.0
        self.assigner = RequestAssigner(self)
        self.loops: dict[str, ProviderLoop] = {}
        self.broken: dict[str, str] = {}
        self.unservable: dict[str, UnservableProviderLoop] = {}
        self._threads: dict[str, _LoopThread] = {}
        self._published: dict[str, ResolvedProvider] = {}
        self._providers_dirty = True
        self._providers_read = 0.0
        self._registered = 0.0
        self._lock = threading.RLock()
        self.image_lifecycle = None
        self._request_thread = _LoopThread('zuul-launcher-requests', self._request_cycle)
        self._image_thread: _LoopThread | None = None
        self.running = False

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        self.running = True
        self.node_cache = FencedCache(self.client, ZUUL_LAUNCHER.node_root, Node,
                                      on_change=self._node_changed)
        self.request_cache = FencedCache(self.client, ZUUL_LAUNCHER.request_root,
                                         NodeRequest,
                                         on_change=lambda name, rec: self.wake_requests())
        self.state_cache = FencedCache(self.client, PROVIDER_STATE_ROOT, ProviderState)
        self.node_cache.start()
        self.request_cache.start()
        self.state_cache.start()
        self.launcher_cache = FencedCache(self.client, ZUUL_LAUNCHER.launcher_root,
                                          LauncherRecord)
        self.launcher_cache.start()
        self._refresh_providers()
        self._register()
        self.image_lifecycle = self._make_image_lifecycle()
        if self.image_lifecycle is not None:
            self._image_thread = _LoopThread('zuul-launcher-images', self._image_cycle)
            self._image_thread.start()
        self._request_thread.start()
        log.info('zuul-launcher %s started (providers: %s)', self.id,
                 ', '.join(sorted(self.loops)) or 'none yet')

    def stop(self) -> None:
        if not self.running:
            return
        self.running = False
        self._request_thread.stop()
        if self._image_thread is not None:
            self._image_thread.stop()
        self.assigner.lock.release()
        with self._lock:
            names = list(self.loops) + [n for n in self._threads if n not in self.loops]
        for name in names:
            self._stop_loop(name)
        for cache in (self.node_cache, self.request_cache, self.state_cache,
                      self.launcher_cache):
            if cache is not None:
                cache.stop()
        try:
            self.zk.unregister_launcher(self.id)
        except KazooException:
            pass
        log.info('zuul-launcher %s stopped', self.id)

    # -- what other parts ask -----------------------------------------------------------

    def published_providers(self) -> dict[str, ResolvedProvider]:
        with self._lock:
            return dict(self._published)

    def served(self, name: str) -> ServedProvider | None:
        loop = self.loops.get(name)
        return loop.served if loop is not None else None

    def adapter_for(self, name: str) -> ProviderAdapter | None:
        """The adapter of a provider this launcher serves, by canonical name."""
        served = self.served(name)
        return served.adapter if served is not None else None

    def adapters(self) -> dict[str, ProviderAdapter]:
        with self._lock:
            return {name: loop.adapter for name, loop in self.loops.items()}

    def snapshot(self, provider: str | None = None, round_trip_done: bool = False
                 ) -> tuple[list[Node], list[NodeRequest]] | None:
        """Copies of the cached nodes (of ``provider``, or all) and open
        requests, at least as fresh as a read made now (see
        zuul.launcher.cache); None if the caches cannot say (read
        ZooKeeper instead).  Nodes are taken before requests, so a node
        seen gone never hides a decline written before it went."""
        nodes_cache, requests_cache = self.node_cache, self.request_cache
        if not fence(self.client, [nodes_cache, requests_cache, self.state_cache],
                     round_trip_done=round_trip_done):
            return None
        nodes = [copy.copy(n) for n in nodes_cache.values()
                 if provider is None or n.provider == provider]
        # Whatever the request cache started reading before the node
        # snapshot (a request created or declined before a node it sees).
        if not requests_cache.wait_applied(requests_cache.watermark(),
                                           time.monotonic() + 10):
            return None
        requests = []
        for cached in requests_cache.values():
            request = copy.copy(cached)
            request.extra = dict(cached.extra)
            request.node_declines = {k: list(v) for k, v in cached.node_declines.items()}
            request.node_temp_failures = {k: list(v)
                                          for k, v in cached.node_temp_failures.items()}
            request.node_temp_cleared = dict(cached.node_temp_cleared)
            requests.append(request)
        # Precedence, then relative priority, then first come first served.
        requests.sort(key=request_order)
        return nodes, requests

    def _should_hand_over(self, name: str) -> bool:
        """Whether another live launcher that serves ``name`` holds at
        least two provider loops fewer than this one (it then takes
        this loop: its watch on the lock fires)."""
        cache = self.launcher_cache
        if cache is None or time.time() - self._handed_over < HANDOVER_INTERVAL:
            return False
        mine = sum(1 for lp in list(self.loops.values()) if lp.lock.held)
        for record in cache.values():
            # Only by a registration written since the last handover (so
            # it counts the loop handed over then): no cascade.
            if record.id != self.id and name in record.providers and \
                    record.stat is not None and \
                    record.stat.mtime / 1000 > self._handed_over and \
                    len(record.held) + 1 < mine:
                self._handed_over = time.time()
                return True
        return False

    def provider_paused(self, name: str) -> bool:
        """Whether the provider's loop (in whichever launcher holds it)
        said it is paused (see zuul.launcher.provider_loop)."""
        loop = self.loops.get(name)
        if loop is not None and loop.lock.held:
            return loop.paused is not None
        cache = self.state_cache
        state = cache.get(quote_name(name)) if cache is not None else None
        return bool(state is not None and state.paused)

    def is_static(self, resolved: ResolvedProvider) -> bool:
        served = self.served(resolved.canonical_name)
        if served is not None:
            return served.adapter.reuses_nodes
        return provider_is_static(resolved, self.connections)

    def image_for(self, provider: str, image: str) -> ImageRef | None:
        """The newest in-service upload of the Zuul image ``image`` to
        ``provider`` (both canonical names), or None."""
        try:
            from zuul.zk.images import ImageStore
            uploads = ImageStore(self.client).in_service(image, provider)
        except Exception:
            log.exception('Finding an upload of %s for %s failed', image, provider)
            return None
        if not uploads:
            return None
        ref = uploads[0].upload_ref()
        return ImageRef(image_name=image, build_id=str(ref['build']),
                        upload_id=str(ref['upload']), external_id=str(ref['external_id']),
                        image_id=f'{image}-{ref["build"]}-{ref["upload"]}')

    def wake_requests(self) -> None:
        self._request_thread.wake()

    def wake_provider(self, name: str) -> None:
        thread = self._threads.get(name)
        if thread is not None:
            thread.wake()

    def wake_all(self) -> None:
        self.wake_requests()
        for thread in list(self._threads.values()):
            thread.wake()

    def _node_changed(self, name: str, record) -> None:
        if record is None:
            self.wake_all()               # a node gone: quota freed, a decline maybe
            return
        if record.state == READY:
            self.wake_requests()
        # What a provider loop acts on (its own launch steps do not wake it:
        # it polls while launches are in flight).
        if record.state in (USED, DELETING) or \
                (record.state == BUILDING and record.launch_state == QUEUED):
            self.wake_provider(record.provider)

    # -- the request thread ---------------------------------------------------------------

    def _request_cycle(self) -> float:
        now = time.monotonic()
        if self._providers_dirty or now - self._providers_read > 30:
            self._refresh_providers()
        if now - self._registered > 10:
            self._register()
        if not self.assigner.run_once():
            return self.lock_retry       # another launcher's turn (its lock is watched)
        return IDLE_WAIT

    def _register(self) -> None:
        self._registered = time.monotonic()
        labels = sorted({label for loop in list(self.loops.values())
                         for label in loop.served.resolved.labels})
        with self._lock:
            loops = dict(self.loops)
        held = sorted(name for name, loop in loops.items() if loop.lock.held)
        self._held_reported = held
        record = LauncherRecord(id=self.id, hostname=self.hostname, pid=os.getpid(),
                                supported_labels=labels, providers=sorted(loops),
                                held=held)
        try:
            self.zk.register_launcher(record)
        except KazooException as e:
            log.warning('Registering launcher %s failed: %s', self.id, e)

    # -- providers -----------------------------------------------------------------------

    def _provider_watch(self, event) -> None:
        self._providers_dirty = True
        self.wake_requests()

    def _read_providers(self) -> dict[str, ResolvedProvider]:
        self.client.ensure_path(PROVIDER_ROOT)
        return launcher_config.read_all(self.client, watch=self._provider_watch)

    def _serves(self, resolved: ResolvedProvider) -> bool:
        if self.only_connections is None:
            return True
        return (resolved.connection or NULL_CONNECTION) in self.only_connections

    def refresh_providers(self) -> None:
        """Read the published providers now (and start or stop loops)."""
        self._refresh_providers()

    def _refresh_providers(self) -> None:
        self._providers_dirty = False
        self._providers_read = time.monotonic()
        published = self._read_providers()
        with self._lock:
            self._published = published
            wanted = {name: p for name, p in published.items() if self._serves(p)}
            for name in list(self.loops):
                loop = self.loops[name]
                if name not in wanted or _launch_view(loop.served.resolved) != \
                        _launch_view(wanted[name]):
                    self._stop_loop(name)
                else:
                    loop.served.resolved = wanted[name]
            for name in list(self.unservable):
                if name not in wanted:
                    self._stop_loop(name)
            for name, resolved in wanted.items():
                if name not in self.loops:
                    self._start_loop(resolved)

    def _start_loop(self, resolved: ResolvedProvider) -> None:
        name = resolved.canonical_name
        try:
            served = build_provider(resolved, self.connections, self.registry)
            if hasattr(served.adapter, 'set_node_broker'):
                served.adapter.set_node_broker(RequestBroker(self.zk))
            served.adapter.start()
        except (ProviderTranslationError, Exception) as e:
            if self.broken.get(name) != str(e):
                log.error('Provider %s cannot be served here: %s', name, e)
            self.broken[name] = str(e)
            if name not in self._threads:
                loop = UnservableProviderLoop(self, name, str(e))
                self.unservable[name] = loop
                thread = _LoopThread(f'zuul-launcher-unservable-{resolved.name}',
                                     lambda loop=loop: self._provider_cycle(loop))
                self._threads[name] = thread
                thread.start()
            return
        self.broken.pop(name, None)
        self._stop_loop(name)                   # an unservable loop, if any
        loop = ProviderLoop(self, served)
        self.loops[name] = loop
        thread = _LoopThread(f'zuul-launcher-provider-{resolved.name}',
                             lambda loop=loop: self._provider_cycle(loop))
        self._threads[name] = thread
        thread.start()
        log.info('Serving provider %s (%s, labels %s)', name, served.driver,
                 ', '.join(sorted(resolved.labels)))

    def _stop_loop(self, name: str) -> None:
        thread = self._threads.pop(name, None)
        loop = self.loops.pop(name, None)
        if thread is not None:
            thread.stop()
        unservable = self.unservable.pop(name, None)
        if unservable is not None:
            unservable.lock.release()
        if loop is not None:
            loop.lock.release()
            loop.pool.shutdown(wait=False)
            try:
                loop.adapter.stop()
            except Exception:
                log.exception('Stopping the adapter of %s failed', name)
            log.info('No longer serving provider %s', name)

    def _provider_cycle(self, loop: ProviderLoop) -> float:
        if not self.running:
            return IDLE_WAIT
        ran = loop.run_once()
        if isinstance(loop, ProviderLoop):
            if ran and self._should_hand_over(loop.name):
                log.info('Provider %s: handing its loop to a less busy launcher', loop.name)
                loop.lock.release()
                loop.lock.back_off()
            held = sorted(name for name, lp in list(self.loops.items()) if lp.lock.held)
            if held != self._held_reported:
                self._register()
        if not ran:
            return self.lock_retry
        if loop.active:
            return self.settings.poll_interval
        return min(IDLE_WAIT, self.settings.cleanup_interval)

    # -- images --------------------------------------------------------------------------

    def _make_image_lifecycle(self):
        """zuul.launcher.images.ImageLifecycle (uploads, validation,
        retirement), called once per cycle with the adapters of the
        providers this launcher serves."""
        try:
            from zuul.launcher.images import ImageLifecycle
        except ImportError:
            return None
        try:
            return ImageLifecycle(self.client, providers=self.published_providers,
                                  download_dir=os.path.join(self.settings.state_dir,
                                                            'images'),
                                  identifier=self.id)
        except TypeError:
            return ImageLifecycle(self.client)

    def _image_cycle(self) -> float:
        self.image_lifecycle.run_once(self.adapters())
        return max(self.settings.poll_interval, 1.0)
