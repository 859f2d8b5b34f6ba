"""NodepoolBuilder: one nodepool-builder process's worth of work.

It owns the workers (build, upload, cleanup threads) and what they
share: the ZooKeeper API, the provider adapters of providers that take
uploads, the builder id, and a watched mirror of ``/nodepool/image``
that wakes the workers whenever something changes there (a build
request, a finished build, a deleted upload).
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
import uuid

from nodepool.builder.build_worker import BuildWorker
from nodepool.builder.cleanup import CleanupWorker
from nodepool.builder.settings import BuilderSettings
from nodepool.builder.stats import BuilderStats
from nodepool.builder.upload_worker import UploadWorker
from nodepool.builder.worker import PassTicker
from nodepool.config import NodepoolConfig, ProviderConfig
from nodepool.config_diskimages import DiskImage
from nodepool.driver import DriverRegistry, ProviderAdapter, ProviderError, default_registry
from nodepool.zk.api import NodepoolZooKeeper
from nodepool.zk.images import ImageCache

log = logging.getLogger('nodepool.builder')

DEFAULT_BUILD_LOG_DIR = '/var/log/nodepool/builds'


class BuilderError(RuntimeError):
    """The builder cannot start (missing images-dir, unwritable dirs)."""


def read_builder_id(images_dir: str) -> str:
    """The builder's persistent id, ``<images-dir>/builder_id.txt``
    (created on first start): it marks the builds whose files live here."""
    path = os.path.join(images_dir, 'builder_id.txt')
    try:
        with open(path) as f:
            value = f.read().strip()
        if value:
            return value
    except FileNotFoundError:
        pass
    value = str(uuid.uuid4())
    with open(path + '.tmp', 'w') as f:
        f.write(value + '\n')
    os.replace(path + '.tmp', path)
    return value


class NodepoolBuilder:
    def __init__(self, config: NodepoolConfig, zk: NodepoolZooKeeper,
                 settings: BuilderSettings | None = None,
                 registry: DriverRegistry | None = None, clock=time.time, metrics=None):
        if not config.images_dir:
            raise BuilderError('nodepool.yaml has no images-dir: the builder needs a '
                               'directory to write images to')
        self.config = config
        self.zk = zk
        self.images = zk.images
        self.settings = settings or BuilderSettings()
        self.registry = registry or default_registry()
        self.clock = clock
        self.images_dir = os.path.abspath(config.images_dir)
        self.log_dir = os.path.abspath(config.build_log_dir or DEFAULT_BUILD_LOG_DIR)
        self.builder_id = ''
        self.adapters: dict[str, ProviderAdapter] = {}
        self.broken_providers: dict[str, str] = {}
        self.counters: collections.Counter = collections.Counter()
        # nodepool.dib_image_build.* and nodepool.image_update.* (stats.py)
        self.stats = BuilderStats(metrics)
        self.metrics = self.stats.metrics
        self.changed = threading.Condition()
        self.stopping = threading.Event()
        self.build_workers: list[BuildWorker] = []
        self.upload_workers: list[UploadWorker] = []
        self.cleanup: CleanupWorker | None = None
        self.cache: ImageCache | None = None
        # (image, build id) of the builds this process runs right now; the
        # lock is held from creating a build record until it is listed.
        self.active_lock = threading.Lock()
        self.active_builds: set[tuple[str, str]] = set()
        self.build_ticker = PassTicker()
        self.upload_ticker = PassTicker()
        self.cleanup_ticker = PassTicker()
        self._running = False

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        for path in (self.images_dir, self.log_dir):
            try:
                os.makedirs(path, exist_ok=True)
            except OSError as e:
                raise BuilderError(f'cannot create {path}: {e.strerror}') from None
        self.builder_id = read_builder_id(self.images_dir)
        self._running = True
        self._start_adapters()
        self.cache = ImageCache(self.zk.client, on_change=self._images_changed)
        self.cache.start()
        self.cleanup = CleanupWorker(self)
        self.build_workers = [BuildWorker(self, i) for i in range(self.settings.build_workers)]
        self.upload_workers = [UploadWorker(self, i)
                               for i in range(self.settings.upload_workers)]
        for worker in [self.cleanup, *self.build_workers, *self.upload_workers]:
            worker.start()
        log.info('Builder %s (%s) started: %d build and %d upload workers; images %s; '
                 'images in %s, logs in %s', self.builder_id, self.settings.hostname,
                 len(self.build_workers), len(self.upload_workers),
                 ', '.join(self.buildable_images()) or 'none', self.images_dir, self.log_dir)

    def _start_adapters(self) -> None:
        for provider in self.config.providers.values():
            if not provider.diskimages:
                continue
            adapter = self.registry.get(provider.driver).get_adapter(provider)
            self.adapters[provider.name] = adapter
            self.start_adapter(provider.name)

    def adapter_for(self, name: str) -> ProviderAdapter:
        """The adapter of a configured provider (made and started on first
        use for providers that list no diskimage now, to delete old
        uploads); raises if the provider is unavailable."""
        if name not in self.adapters:
            provider = self.config.providers[name]
            self.adapters[name] = self.registry.get(provider.driver).get_adapter(provider)
            self.start_adapter(name)
        if name in self.broken_providers and not self.start_adapter(name):
            raise ProviderError(f'provider {name} is unavailable: '
                                f'{self.broken_providers[name]}')
        return self.adapters[name]

    def start_adapter(self, name: str) -> bool:
        """(Re)start a provider's adapter; False (and logged) if it fails."""
        try:
            self.adapters[name].start()
        except Exception as e:
            if self.broken_providers.get(name) != str(e):
                log.error('Provider %s unavailable for uploads: %s', name, e)
            self.broken_providers[name] = str(e)
            return False
        self.broken_providers.pop(name, None)
        return True

    def stop(self, timeout: float = 60.0) -> None:
        """Stop: running build commands are killed (their builds recorded
        failed), uploads in flight get ``timeout`` to finish."""
        if not self._running:
            return
        self._running = False
        self.stopping.set()
        workers = [*self.build_workers, *self.upload_workers, self.cleanup]
        for worker in workers:
            worker.wake()
        deadline = time.monotonic() + timeout
        for worker in workers:
            worker.join(max(0.1, deadline - time.monotonic()))
        if self.cache is not None:
            self.cache.stop()
        for adapter in self.adapters.values():
            try:
                adapter.stop()
            except Exception:
                log.exception('Stopping adapter %s failed', adapter.provider.name)
        log.info('Builder stopped')

    @property
    def running(self) -> bool:
        return self._running

    # -- what to build and where it goes ---------------------------------------------

    def buildable_images(self) -> list[str]:
        return sorted(name for name, image in self.config.diskimages.items()
                      if not image.abstract)

    def providers_for(self, image: str) -> list[ProviderConfig]:
        """Providers that list ``image`` in their diskimages."""
        return [p for p in self.config.providers.values() if image in p.diskimages]

    def formats_for(self, image: DiskImage) -> list[str]:
        """The formats to build: the diskimage's ``formats``, plus, for each
        provider that uses it and accepts none of those, the format it
        prefers."""
        formats = list(image.formats)
        for provider in self.providers_for(image.name):
            adapter = self.adapters.get(provider.name)
            accepted = adapter.image_formats() if adapter is not None else []
            if accepted and not any(f in formats for f in accepted):
                formats.append(accepted[0])
        return formats

    def output_path(self, image: str, build_id: str) -> str:
        return os.path.join(self.images_dir, f'{image}-{build_id}')

    def log_path(self, image: str, build_id: str) -> str:
        return os.path.join(self.log_dir, f'{image}-{build_id}.log')

    def is_active(self, image: str, build_id: str) -> bool:
        with self.active_lock:
            return (image, build_id) in self.active_builds

    # -- signals --------------------------------------------------------------------

    def _images_changed(self) -> None:
        self.wake_all()

    def wake_all(self) -> None:
        for worker in [*self.build_workers, *self.upload_workers]:
            worker.wake()
        if self.cleanup is not None:
            self.cleanup.wake()
        self.notify_changed()

    def notify_changed(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def wait_for(self, predicate, timeout: float = 30.0, what: str = 'condition') -> None:
        """Until ``predicate()`` holds, re-checked whenever the builder
        reports a change (ZooKeeper changes and the end of every pass)."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f'timed out waiting for {what}')
                self.changed.wait(min(left, 1.0))

    def _run_pass(self, ticker: PassTicker, workers, timeout: float, what: str) -> None:
        ticket = ticker.request()
        for worker in workers:
            worker.wake()
        self.wait_for(lambda: ticker.completed >= ticket, timeout, what)

    def run_build_pass(self, timeout: float = 60.0) -> None:
        """Wait until a build worker has checked every image (and built
        what needed building) in a pass begun after this call."""
        self._run_pass(self.build_ticker, self.build_workers, timeout, 'a build pass')

    def run_upload_pass(self, timeout: float = 60.0) -> None:
        self._run_pass(self.upload_ticker, self.upload_workers, timeout, 'an upload pass')

    def run_cleanup(self, timeout: float = 60.0) -> None:
        self._run_pass(self.cleanup_ticker, [self.cleanup], timeout, 'a cleanup pass')

