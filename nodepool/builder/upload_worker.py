"""Upload workers: put the newest ready build of every image into every
provider that lists it.

For each (image, provider) pair whose newest ready build (built here:
the files are on this builder's disk) has no ``ready`` or ``uploading``
upload there, a worker takes that build's upload lock for the provider
without waiting, checks again, records an ``uploading`` upload, calls
the provider adapter's ``upload_image`` and records the upload ``ready``
(with the provider's id of the image) or ``failed``; a failed upload is
tried again after the retry delay.  Several workers (and builders) thus
upload in parallel, each pair by one of them.
"""

from __future__ import annotations

import logging
import time

from nodepool.builder import dib
from nodepool.builder.worker import Worker
from nodepool.driver import UploadSpec
from nodepool.zk.images import (
    FAILED,
    READY,
    UPLOADING,
    ImageBuild,
    ImageRecordGoneError,
    ImageUpload,
)

log = logging.getLogger('nodepool.builder.upload')


class UploadWorker(Worker):
    interval_name = 'upload_interval'
    ticker_name = 'upload_ticker'

    def __init__(self, builder, index: int):
        super().__init__(builder, f'upload-worker-{index}')
        self.index = index

    def run_pass(self) -> None:
        pairs = []
        for name in self.builder.buildable_images():
            for provider in self.builder.providers_for(name):
                if not provider.diskimages[name].pause:
                    pairs.append((name, provider.name))
        shift = self.index % len(pairs) if pairs else 0
        for name, provider in pairs[shift:] + pairs[:shift]:
            if not self.builder.running:
                return
            build = self.builder.images.get_most_recent_build(name, READY)
            if build is None or build.builder_id != self.builder.builder_id:
                continue
            if not self._needs_upload(name, build, provider):
                continue
            lock = self.builder.images.lock_upload(name, build.id, provider,
                                                   identifier=self.builder.builder_id)
            if lock is None:
                continue
            try:
                build = self.builder.images.get_build(name, build.id)
                if build is not None and build.state == READY and \
                        self._needs_upload(name, build, provider):
                    self.upload(name, build, provider)
            finally:
                self.builder.images.unlock(lock)

    def _needs_upload(self, image: str, build: ImageBuild, provider: str) -> bool:
        uploads = self.builder.images.get_uploads(image, build.id, provider)
        if any(u.state in (READY, UPLOADING) for u in uploads):
            return False
        failed = [u for u in uploads if u.state == FAILED]
        if failed and self.builder.clock() - failed[-1].state_time < \
                self.builder.settings.upload_retry_delay:
            return False
        if provider in self.builder.broken_providers and \
                not self.builder.start_adapter(provider):
            return False
        return True

    def upload(self, image: str, build: ImageBuild, provider_name: str) -> ImageUpload:
        b = self.builder
        adapter = b.adapters[provider_name]
        provider = b.config.providers[provider_name]
        files = dib.output_files(b.output_path(image, build.id), build.formats)
        accepted = adapter.image_formats()
        fmt = next((f for f in accepted if f in files), None)
        upload = ImageUpload(external_name=f'{image}-{build.id}', format=fmt)
        upload.set_state(UPLOADING, b.clock())
        b.images.store_upload(image, build.id, provider_name, upload)
        meta = {**provider.diskimages[image].meta, 'nodepool_build_id': build.id,
                'nodepool_upload_id': upload.id, 'nodepool_provider_name': provider_name}
        spec = UploadSpec(image_name=image, build_id=build.id, upload_id=upload.id,
                          upload_name=upload.external_name, files=files, meta=meta)
        log.info('Uploading %s-%s to %s (upload %s, %s)', image, build.id, provider_name,
                 upload.id, fmt or 'no usable format')
        start = time.monotonic()
        try:
            if fmt is None:
                raise RuntimeError(f'provider {provider_name} takes {", ".join(accepted)}; '
                                   f'the build has {", ".join(sorted(files)) or "no files"}')
            upload.external_id = adapter.upload_image(spec)
        except Exception as e:
            upload.set_state(FAILED, b.clock())
            b.counters['uploads_failed'] += 1
            log.warning('Upload %s-%s-%s to %s failed after %.1fs: %s', image, build.id,
                        upload.id, provider_name, time.monotonic() - start, e)
        else:
            upload.set_state(READY, b.clock())
            b.counters['uploads_ready'] += 1
            b.stats.upload_done(image, provider_name, time.monotonic() - start)
            log.info('Upload %s-%s-%s to %s ready in %.1fs: %s', image, build.id, upload.id,
                     provider_name, time.monotonic() - start, upload.external_id)
        try:
            b.images.store_upload(image, build.id, provider_name, upload)
        except ImageRecordGoneError:
            self._orphaned(adapter, upload)
        b.notify_changed()
        return upload

    def _orphaned(self, adapter, upload: ImageUpload) -> None:
        """The record was deleted while we uploaded: take the image back."""
        log.warning('Upload %s to %s was deleted while uploading; deleting %s',
                    upload.image_id, upload.provider_name, upload.external_id)
        if upload.external_id:
            try:
                adapter.delete_image(upload.external_id)
            except Exception as e:
                log.warning('Deleting orphaned image %s from %s failed: %s',
                            upload.external_id, upload.provider_name, e)
