"""The cleanup worker: retire old builds and tidy up after failures.

Each pass, for every image in ZooKeeper or in nodepool.yaml:

1. ``building`` builds nobody builds any more: this builder's own that
   it is not running (left by an earlier run that died) lose their
   files and record; another builder's, whose build lock that builder
   does not hold, are marked ``failed`` (their files are on its disk;
   it removes them when it comes back).
2. Only the newest ``keep_builds`` (2) ready builds are kept: older
   ones, and every build of an image no longer in nodepool.yaml, are
   marked ``deleting``.
3. Uploads: ``uploading`` ones whose upload lock nobody holds are marked
   ``failed``; those of deleting builds, of providers that no longer
   list the image, failed ones that a newer attempt replaced, and those
   marked ``deleting`` (``nodepool image-delete``) are deleted from the
   provider and then from ZooKeeper.
4. A deleting build without uploads, and a failed build that is not the
   image's newest (which is kept to pace retries), lose their files and
   record, by the builder that built them (the files are on its disk).
5. An image no longer in nodepool.yaml and without builds is removed.
6. ``delete-after-upload``: a ready build of this builder uploaded to
   every (unpaused) provider of its image loses its files but for the
   ``keep-formats``.
"""

from __future__ import annotations

import logging

from nodepool.builder import dib
from nodepool.builder.worker import Worker
from nodepool.zk.images import (
    BUILDING,
    DELETING,
    FAILED,
    READY,
    UPLOADING,
    ImageBuild,
    ImageRecordChangedError,
    ImageRecordGoneError,
    ImageUpload,
)

log = logging.getLogger('nodepool.builder.cleanup')


class CleanupWorker(Worker):
    interval_name = 'cleanup_interval'
    ticker_name = 'cleanup_ticker'

    def __init__(self, builder):
        super().__init__(builder, 'cleanup-worker')
        self.images = builder.images

    def run_pass(self) -> None:
        names = set(self.images.get_image_names()) | set(self.builder.buildable_images())
        for name in sorted(names):
            if not self.builder.running:
                return
            try:
                self.cleanup_image(name)
            except Exception:
                log.exception('Cleaning up image %s failed', name)

    def _wanted(self, name: str) -> bool:
        image = self.builder.config.diskimages.get(name)
        return image is not None and not image.abstract

    def cleanup_image(self, name: str) -> None:
        wanted = self._wanted(name)
        for build in self.images.get_builds(name, (BUILDING,)):
            self._stale_build(name, build)
        self._retire(name, self.images.get_builds(name), wanted)
        builds = self.images.get_builds(name)
        for build in builds:
            self._cleanup_uploads(name, build, wanted)
            self._delete_after_upload(name, build)
        newest = builds[-1].id if builds else None
        for build in builds:
            if build.state == DELETING or (build.state == FAILED and
                                           (build.id != newest or not wanted)):
                self._remove_build(name, build)
        if not wanted and self.images.remove_image(name):
            log.info('Image %s is no longer in nodepool.yaml and has no builds: removed',
                     name)

    # -- builds -----------------------------------------------------------------

    def _mine(self, build: ImageBuild) -> bool:
        return build.builder_id == self.builder.builder_id

    def _stale_build(self, name: str, build: ImageBuild) -> None:
        if self._mine(build):
            if self.builder.is_active(name, build.id):
                return
            fresh = self.images.get_build(name, build.id)
            if fresh is None or fresh.state != BUILDING or \
                    self.builder.is_active(name, build.id):
                return
            removed = dib.remove_outputs(self.builder.output_path(name, build.id))
            self.images.delete_build(name, build.id)
            log.warning('Build %s-%s was left incomplete by an earlier run of this builder: '
                        'removed its record and %d file(s)', name, build.id, len(removed))
            return
        if self.images.build_lock_holder(name) == build.builder_id:
            return   # its builder holds the lock: it may well be building it
        fresh = self.images.get_build(name, build.id)
        if fresh is None or fresh.state != BUILDING:
            return
        fresh.set_state(FAILED, self.builder.clock())
        try:
            self.images.store_build(name, fresh, expected_version=fresh.stat.version)
        except (ImageRecordChangedError, ImageRecordGoneError):
            return
        log.warning('Build %s-%s of builder %s (%s) is not being built (its builder holds '
                    'no build lock): marked failed', name, build.id, build.builder,
                    build.builder_id)

    def _retire(self, name: str, builds: list[ImageBuild], wanted: bool) -> None:
        if wanted:
            ready = [b for b in builds if b.state == READY]
            keep = self.builder.settings.keep_builds
            retire = ready[:-keep] if keep > 0 else ready
            why = f'{keep} newer ready builds'
        else:
            retire = [b for b in builds if b.state in (READY, FAILED)]
            why = 'the image is no longer in nodepool.yaml'
        for build in retire:
            build.set_state(DELETING, self.builder.clock())
            try:
                self.images.store_build(name, build, expected_version=build.stat.version)
            except (ImageRecordChangedError, ImageRecordGoneError):
                continue
            log.info('Retiring build %s-%s (%s)', name, build.id, why)

    def _remove_build(self, name: str, build: ImageBuild) -> None:
        if not self._mine(build):
            return
        if self.images.get_build_provider_names(name, build.id) and any(
                self.images.get_upload_ids(name, build.id, p)
                for p in self.images.get_build_provider_names(name, build.id)):
            return   # uploads are still being deleted
        removed = dib.remove_outputs(self.builder.output_path(name, build.id))
        if self.images.delete_build(name, build.id):
            log.info('Removed %s build %s-%s (record and %d file(s))', build.state, name,
                     build.id, len(removed))
            self.builder.notify_changed()

    def _delete_after_upload(self, name: str, build: ImageBuild) -> None:
        """``delete-after-upload``: once every provider that takes the
        image (and is not paused) has a ready upload of this build, its
        files go but for ``keep-formats``.  The build stays ready (its
        uploads are in service); its ``formats`` say what is left."""
        image = self.builder.config.diskimages.get(name)
        if image is None or not image.delete_after_upload or build.state != READY or \
                not self._mine(build):
            return
        doomed = [f for f in build.formats if f not in image.keep_formats]
        providers = [p.name for p in self.builder.providers_for(name)
                     if not p.diskimages[name].pause]
        if not doomed or not providers:
            return
        for provider in providers:
            if not any(u.state == READY for u in self.images.get_uploads(name, build.id,
                                                                         provider)):
                return
        removed = dib.remove_formats(self.builder.output_path(name, build.id), doomed)
        build.formats = [f for f in build.formats if f in image.keep_formats]
        try:
            self.images.store_build(name, build, expected_version=build.stat.version)
        except (ImageRecordChangedError, ImageRecordGoneError):
            return     # the next pass looks again (the files are gone already)
        log.info('Build %s-%s is uploaded to %s: deleted %d file(s) (delete-after-upload), '
                 'kept %s', name, build.id, ', '.join(providers), len(removed),
                 ', '.join(build.formats) or 'none')

    # -- uploads ----------------------------------------------------------------

    def _cleanup_uploads(self, name: str, build: ImageBuild, wanted: bool) -> None:
        for provider in self.images.get_build_provider_names(name, build.id):
            uploads = self.images.get_uploads(name, build.id, provider)
            if not uploads:
                continue
            config = self.builder.config.providers.get(provider)
            listed = wanted and config is not None and name in config.diskimages
            retire_all = build.state == DELETING or not listed
            newest = uploads[-1].id
            for upload in uploads:
                if upload.state == UPLOADING:
                    self._stale_upload(upload)
                elif upload.state == DELETING or retire_all or \
                        (upload.state == FAILED and upload.id != newest):
                    self._delete_upload(upload)

    def _stale_upload(self, upload: ImageUpload) -> None:
        if self.images.upload_lock_holder(upload.image_name, upload.build_id,
                                          upload.provider_name) is not None:
            return
        fresh = self.images.get_upload(upload.image_name, upload.build_id,
                                       upload.provider_name, upload.id)
        if fresh is None or fresh.state != UPLOADING:
            return
        fresh.set_state(FAILED, self.builder.clock())
        try:
            self.images.store_upload(upload.image_name, upload.build_id, upload.provider_name,
                                     fresh, expected_version=fresh.stat.version)
        except (ImageRecordChangedError, ImageRecordGoneError):
            return
        log.warning('Upload %s to %s was abandoned by its uploader: marked failed',
                    upload.image_id, upload.provider_name)

    def _delete_upload(self, upload: ImageUpload) -> None:
        image, build_id, provider = upload.image_name, upload.build_id, upload.provider_name
        lock = self.images.lock_upload(image, build_id, provider,
                                       identifier=self.builder.builder_id)
        if lock is None:
            return   # being uploaded or deleted right now
        try:
            fresh = self.images.get_upload(image, build_id, provider, upload.id)
            if fresh is None:
                return
            if fresh.state != DELETING:
                fresh.set_state(DELETING, self.builder.clock())
                self.images.store_upload(image, build_id, provider, fresh)
            if fresh.external_id and not self._delete_external(fresh):
                return
            self.images.delete_upload(fresh)
            self.builder.counters['uploads_deleted'] += 1
            log.info('Deleted upload %s from %s%s', fresh.image_id, provider,
                     f' ({fresh.external_id})' if fresh.external_id else '')
            self.builder.notify_changed()
        except ImageRecordGoneError:
            return
        finally:
            self.images.unlock(lock)

    def _delete_external(self, upload: ImageUpload) -> bool:
        """Remove the image from its provider; False to try again later."""
        provider = upload.provider_name
        if provider not in self.builder.config.providers:
            log.warning('Upload %s: provider %s is not in nodepool.yaml any more, so its '
                        'image %s cannot be deleted there; forgetting it', upload.image_id,
                        provider, upload.external_id)
            return True
        try:
            self.builder.adapter_for(provider).delete_image(upload.external_id)
        except Exception as e:
            log.warning('Deleting upload %s (%s) from %s failed (will retry): %s',
                        upload.image_id, upload.external_id, provider, e)
            return False
        return True
