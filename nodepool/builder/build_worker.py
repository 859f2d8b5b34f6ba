"""Build workers: decide which images need a build and build them.

An image is built when (seed 002):

- a build was requested (``/nodepool/image/<name>/request-build``),
- it has no ready build, or
- its newest ready build is older than ``rebuild-age`` (less a small
  random amount per builder and build, so builders don't stampede),

unless the diskimage is paused (``pause: true`` or ``nodepool
image-pause``), no format is wanted (no provider uses it and it lists no
``formats``), or the last attempt failed less than the retry delay ago.

Building takes the image's build lock without waiting: the builder that
gets it checks again, then records a ``building`` build, clears the
request flag, runs the command, and records the build ``ready`` or
``failed``, all before letting go of the lock.  So each image is built
by one builder at a time, and a request is served once.
"""

from __future__ import annotations

import glob
import logging
import os
import random
import shutil

from nodepool.builder import dib
from nodepool.builder.worker import Worker
from nodepool.config_diskimages import DiskImage
from nodepool.zk.images import (
    BUILDING,
    FAILED,
    READY,
    ImageBuild,
    ImageRecordGoneError,
)

log = logging.getLogger('nodepool.builder.build')


class BuildWorker(Worker):
    interval_name = 'build_interval'
    ticker_name = 'build_ticker'

    def __init__(self, builder, index: int):
        super().__init__(builder, f'build-worker-{index}')
        self.index = index
        self._quiet: dict[str, str] = {}

    def run_pass(self) -> None:
        names = self.builder.buildable_images()
        # Several workers start at different images so they spread out.
        shift = self.index % len(names) if names else 0
        for name in names[shift:] + names[:shift]:
            if not self.builder.running:
                return
            image = self.builder.config.diskimages[name]
            if self.build_reason(image) is None:
                continue
            lock = self.builder.images.lock_build(name, identifier=self.builder.builder_id)
            if lock is None:
                self.builder.counters['build_lock_busy'] += 1
                log.debug('Image %s: another builder is building it', name)
                continue
            try:
                reason = self.build_reason(image)
                if reason is not None:
                    self.build(image, reason)
            finally:
                self.builder.images.unlock(lock)

    # -- deciding ---------------------------------------------------------------

    def build_reason(self, image: DiskImage) -> str | None:
        """Why ``image`` should be built now, or None."""
        b = self.builder
        why_not = self._why_not(image)
        if why_not:
            if self._quiet.get(image.name) != why_not:
                log.info('Image %s: not building (%s)', image.name, why_not)
                self._quiet[image.name] = why_not
            return None
        self._quiet.pop(image.name, None)
        now = b.clock()
        builds = b.images.get_builds(image.name)
        if builds and builds[-1].state == FAILED and \
                now - builds[-1].state_time < b.settings.build_retry_delay:
            return None
        if b.images.is_build_requested(image.name):
            return 'requested'
        ready = [x for x in builds if x.state == READY]
        if not ready:
            if any(x.state == BUILDING for x in builds) and \
                    b.images.build_lock_holder(image.name) is not None:
                return None   # someone is building it
            return 'no ready build'
        newest = ready[-1]
        age = now - newest.state_time
        if age >= image.rebuild_age - self._jitter(image, newest.id):
            return f'build {newest.id} is {int(age)}s old (rebuild-age {image.rebuild_age}s)'
        return None

    def _why_not(self, image: DiskImage) -> str | None:
        b = self.builder
        if image.pause:
            return 'paused in nodepool.yaml'
        if b.images.is_image_paused(image.name):
            return 'paused by nodepool image-pause'
        if not b.formats_for(image):
            return 'no provider uses it and it lists no formats'
        required = b.config.images_dir_required_free
        if required:
            free = shutil.disk_usage(b.images_dir).free // (1024 * 1024)
            if free < required:
                return f'{free} MiB free in {b.images_dir}, images-dir-required-free ' \
                       f'is {required} MiB'
        return None

    def _jitter(self, image: DiskImage, build_id: str) -> float:
        s = self.builder.settings
        spread = min(image.rebuild_age * s.rebuild_jitter, s.max_jitter)
        seed = f'{self.builder.builder_id}/{image.name}/{build_id}'
        return random.Random(seed).uniform(0, spread)

    # -- building ---------------------------------------------------------------

    def build(self, image: DiskImage, reason: str) -> ImageBuild:
        b = self.builder
        formats = b.formats_for(image)
        build = ImageBuild(builder=b.settings.hostname, builder_id=b.builder_id,
                           formats=formats)
        build.set_state(BUILDING, b.clock())
        with b.active_lock:
            b.images.store_build(image.name, build)
            b.active_builds.add((image.name, build.id))
        try:
            return self._run(image, build, formats, reason)
        finally:
            with b.active_lock:
                b.active_builds.discard((image.name, build.id))
            b.notify_changed()

    def _run(self, image: DiskImage, build: ImageBuild, formats: list[str],
             reason: str) -> ImageBuild:
        b = self.builder
        if reason == 'requested':
            b.images.clear_build_request(image.name)
        output = b.output_path(image.name, build.id)
        build.filename = output
        b.images.store_build(image.name, build)
        log_path = b.log_path(image.name, build.id)
        b.counters['builds_started'] += 1
        log.info('Building image %s (build %s, %s) because %s; log: %s', image.name,
                 build.id, ','.join(formats), reason, log_path)
        result = dib.run_build(image, formats, output, log_path, b.config.elements_dir,
                               b.stopping, b.settings.kill_grace)
        if result.ok:
            build.formats = result.formats
            build.set_state(READY, b.clock())
            b.counters['builds_ready'] += 1
            log.info('Build %s-%s ready in %.1fs (%s)', image.name, build.id,
                     result.duration, ','.join(result.formats))
        else:
            dib.remove_outputs(output)
            build.set_state(FAILED, b.clock())
            b.counters['builds_failed'] += 1
            log.warning('Build %s-%s failed after %.1fs: %s (log: %s)', image.name,
                        build.id, result.duration, result.reason, log_path)
        b.stats.build_done(image.name, result, dib.output_files(output, result.formats))
        try:
            b.images.store_build(image.name, build)
        except ImageRecordGoneError:
            # Deleted while building (nodepool dib-image-delete): keep nothing.
            dib.remove_outputs(output)
            log.warning('Build %s-%s was deleted while it was building; its files '
                        'are removed', image.name, build.id)
        self._prune_logs(image.name)
        return build

    def _prune_logs(self, image: str) -> None:
        """Keep the newest ``build-log-retention`` logs of the image."""
        keep = self.builder.config.build_log_retention
        pattern = os.path.join(glob.escape(self.builder.log_dir), f'{glob.escape(image)}-*.log')
        logs = sorted(p for p in glob.glob(pattern)
                      if os.path.basename(p)[len(image) + 1:-4].isdigit())
        for path in logs[:-keep] if keep > 0 else []:
            try:
                os.unlink(path)
            except OSError:
                pass
