"""zuul-launcher's part of the image lifecycle (seed 001, Image
Management): upload new builds to providers, put them into service,
retire the oldest, and tell the schedulers through zuul-driver events.

The launcher daemon calls ``ImageLifecycle(zk_client).run_once(adapters)``
once per cycle, with ``adapters`` = {canonical provider name:
nodepool.driver.ProviderAdapter} for the providers this launcher serves.
Several launchers may run it at once; the locks decide who does what:

1. Lock the whole image (``/zuul/image-locks/<image>``).
2. Lock each pending upload of it this launcher can handle.
3. Unlock the image, keeping the upload locks.
4. Download each build's artifacts once and upload them to every
   provider whose upload it holds (file:// artifacts are used in place).
5. For an upload whose build was not reported ``image-validated``, queue
   an ``image-validate`` event (the scheduler enqueues it).
6. Unlock the uploads.

A build goes ``ready`` (in service) once all its uploads are ready and
validated.  Once more than ``keep`` builds (the image's ``keep`` setting
in any provider, default 2) are ready, the oldest go ``deleting``: their
uploads are deleted from the providers, an ``image-delete`` event with
the artifact URLs is queued (an image-delete job can remove them from
storage) and the records are removed.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
import urllib.parse
import urllib.request

from nodepool.driver import ProviderError, UploadSpec
from zuul.zk import images as zi
from zuul.zk.launcher_config import read_all

log = logging.getLogger('zuul.launcher.images')

#: Upload attempts before a failed upload is left alone (an operator can
#: delete the build: ``zuul image-delete``).
MAX_UPLOAD_ATTEMPTS = 3


def short_name(canonical: str) -> str:
    return canonical.rsplit('/', 1)[-1]


class ArtifactCache:
    """Artifacts of the builds being uploaded in one cycle, fetched once."""

    def __init__(self, root: str | None = None):
        self.root = root
        self._dir: str | None = None
        self._files: dict[str, str] = {}

    def path(self, url: str) -> str:
        if url in self._files:
            return self._files[url]
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme in ('', 'file'):
            path = urllib.parse.unquote(parsed.path)
            if not os.path.isfile(path):
                raise FileNotFoundError(f'artifact {url} does not exist')
            self._files[url] = path
            return path
        if parsed.scheme not in ('http', 'https'):
            raise ValueError(f'artifact {url}: unsupported URL scheme {parsed.scheme!r}')
        if self._dir is None:
            if self.root:
                os.makedirs(self.root, exist_ok=True)
            self._dir = tempfile.mkdtemp(prefix='zuul-image-', dir=self.root)
        target = os.path.join(self._dir, f'{len(self._files)}-'
                              f'{os.path.basename(parsed.path) or "image"}')
        log.info('Downloading %s', url)
        with urllib.request.urlopen(url, timeout=60) as response, open(target, 'wb') as out:
            shutil.copyfileobj(response, out, 1024 * 1024)
        self._files[url] = target
        return target

    def cleanup(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        self._files.clear()


class ImageLifecycle:
    def __init__(self, zk_client, providers=None, download_dir: str | None = None,
                 identifier: str | None = None, lock_timeout: float = 0.0):
        """``providers``: a callable returning {canonical: ResolvedProvider}
        (default: what the schedulers published in ZooKeeper)."""
        self.store = zi.ImageStore(zk_client)
        self.providers = providers or (lambda: read_all(zk_client))
        self.download_dir = download_dir
        self.identifier = identifier or f'{socket.gethostname()}-{os.getpid()}'
        self.lock_timeout = lock_timeout
        #: (image, build id, provider) -> why the provider last refused
        #: to delete that upload (logged once per reason).
        self._delete_refused: dict[tuple, str] = {}

    # -- the cycle ----------------------------------------------------------

    def run_once(self, adapters: dict) -> None:
        providers = self.providers()
        for image in self.store.image_names():
            try:
                self._add_missing_uploads(image, providers)
                self._upload_image(image, adapters)
                self._promote(image)
                self._retire(image, providers)
                self._delete(image, adapters, providers)
            except Exception:
                log.exception('Image %s: lifecycle step failed', image)

    def keep(self, image: str, providers: dict) -> int:
        values = []
        for provider in providers.values():
            resolved = provider.images.get(image)
            if resolved is not None and resolved.settings.get('keep') is not None:
                values.append(int(resolved.settings['keep']))
        return max(values) if values else zi.DEFAULT_KEEP

    # -- uploads ------------------------------------------------------------

    def _add_missing_uploads(self, image: str, providers: dict) -> None:
        """A provider that started using the image after a build was
        recorded gets an upload of the builds still in use."""
        users = sorted(name for name, p in providers.items() if image in (p.images or {}))
        for build in self.store.builds(image):
            if build.state == zi.DELETING:
                continue
            have = {u.provider for u in self.store.uploads(image, build.build_id)}
            for provider in users:
                if provider in have:
                    continue
                upload = zi.ImageUploadRecord(image=image, build_id=build.build_id,
                                              provider=provider, validated=build.validated)
                if self.store.create_upload(upload):
                    log.info('Image %s build %s: provider %s uses it now; upload added',
                             image, build.build_id, provider)

    def _claim_uploads_of(self, build) -> bool:
        return build.state in (zi.BUILDING, zi.READY)

    def _claim_uploads(self, image: str, adapters: dict) -> list:
        """Steps 1-3: the pending uploads of ``image`` this launcher now
        holds, with their locks."""
        wanted = []
        for build in self.store.builds(image):
            if not self._claim_uploads_of(build):
                continue
            for upload in self.store.uploads(image, build.build_id):
                if upload.provider in adapters and upload.external_id is None and (
                        upload.state == zi.PENDING or (
                            upload.state == zi.FAILED and
                            upload.attempts < MAX_UPLOAD_ATTEMPTS)):
                    wanted.append((build, upload))
        if not wanted:
            return []
        image_lock = self.store.image_lock(image, self.identifier)
        if not image_lock.acquire(blocking=bool(self.lock_timeout),
                                  timeout=self.lock_timeout or None):
            return []
        held = []
        try:
            for build, upload in wanted:
                lock = self.store.upload_lock(upload, self.identifier)
                if not lock.acquire(blocking=False):
                    continue
                fresh = self.store.get_upload(image, build.build_id, upload.provider)
                if fresh is None or fresh.external_id is not None or \
                        fresh.state not in (zi.PENDING, zi.FAILED):
                    lock.release()
                    continue
                held.append((build, fresh, lock))
        finally:
            image_lock.release()
        return held

    def _upload_image(self, image: str, adapters: dict) -> None:
        held = self._claim_uploads(image, adapters)
        if not held:
            return
        cache = ArtifactCache(self.download_dir)
        try:
            for build, upload, lock in held:
                try:
                    self._upload_one(build, upload, adapters[upload.provider], cache)
                finally:
                    lock.release()
        finally:
            cache.cleanup()

    def _upload_one(self, build, upload, adapter, cache: ArtifactCache) -> None:
        formats = list(adapter.image_formats() or ()) or sorted(build.artifacts)
        usable = [f for f in formats if f in build.artifacts]
        try:
            if not usable:
                raise ValueError(f'provider takes {", ".join(formats) or "nothing"}; the '
                                 f'build has {", ".join(sorted(build.artifacts)) or "none"}')
            files = {f: cache.path(build.artifacts[f]) for f in usable[:1]}
            name = short_name(build.image)
            spec = UploadSpec(image_name=name, build_id=build.build_id,
                              upload_id=upload.uuid,
                              upload_name=f'{name}-{build.build_id}', files=files,
                              meta={'zuul_image': build.image,
                                    'zuul_image_build': build.build_id,
                                    'zuul_image_upload': upload.uuid})
            log.info('Uploading image %s build %s to %s (%s)', build.image,
                     build.build_id, upload.provider, usable[0])
            external_id = adapter.upload_image(spec)
        except Exception as e:
            log.exception('Upload of image %s build %s to %s failed', build.image,
                          build.build_id, upload.provider)
            upload.state = zi.FAILED
            upload.error = str(e)[:500]
            upload.attempts += 1
            upload.launcher = self.identifier
            self.store.update_upload(upload)
            return
        upload.external_id = str(external_id)
        upload.state = zi.READY
        upload.format = usable[0]
        upload.error = None
        upload.launcher = self.identifier
        self.store.update_upload(upload)
        log.info('Image %s build %s is in %s as %s', build.image, build.build_id,
                 upload.provider, external_id)
        if not upload.validated:
            self.store.put_event(zi.ImageEvent(
                type='image-validate', image=build.image, build_id=build.build_id,
                data={'upload': upload.upload_ref(), 'artifacts': dict(build.artifacts)}))

    # -- into and out of service ----------------------------------------------

    def _promote(self, image: str) -> None:
        for build in self.store.builds(image):
            if build.state != zi.BUILDING:
                continue
            uploads = self.store.uploads(image, build.build_id)
            if uploads and all(u.in_service for u in uploads):
                build.state = zi.READY
                self.store.update_build(build)
                log.info('Image %s build %s is in service', image, build.build_id)

    def _superseded(self, image: str, builds: list) -> list:
        """Builds that never went into service (an upload failed for good,
        or validation never passed) while a newer build did."""
        ready = [b.build_id for b in builds if b.state == zi.READY]
        if not ready:
            return []
        out = []
        for build in builds:
            if build.state != zi.BUILDING or build.build_id > ready[-1]:
                continue
            uploads = self.store.uploads(image, build.build_id)
            if all(u.external_id or (u.state == zi.FAILED and
                                     u.attempts >= MAX_UPLOAD_ATTEMPTS) for u in uploads):
                out.append(build)
        return out

    def _retire(self, image: str, providers: dict) -> None:
        builds = self.store.builds(image)
        ready = [b for b in builds if b.state == zi.READY]
        keep = self.keep(image, providers)
        if len(ready) <= keep and not self._superseded(image, builds):
            return
        lock = self.store.image_lock(image, self.identifier)
        if not lock.acquire(blocking=False):
            return
        try:
            builds = self.store.builds(image)
            ready = [b for b in builds if b.state == zi.READY]
            old = ready[:max(0, len(ready) - keep)]
            for build in old + self._superseded(image, builds):
                build.state = zi.DELETING
                self.store.update_build(build)
                log.info('Image %s build %s retired (keeping %d ready builds)', image,
                         build.build_id, keep)
        finally:
            lock.release()

    def _delete(self, image: str, adapters: dict, providers: dict) -> None:
        for build in self.store.builds(image):
            if build.state != zi.DELETING:
                continue
            for upload in self.store.uploads(image, build.build_id):
                self._delete_upload(upload, adapters, providers)
            if self.store.uploads(image, build.build_id):
                continue  # another launcher's providers still have some
            lock = self.store.image_lock(image, self.identifier)
            if not lock.acquire(blocking=False):
                continue
            try:
                if self.store.get_build(image, build.build_id) is None:
                    continue
                self.store.put_event(zi.ImageEvent(
                    type='image-delete', image=image, build_id=build.build_id,
                    data={'artifacts': dict(build.artifacts), 'build_uuid': build.uuid}))
                self.store.delete_build(image, build.build_id)
                log.info('Image %s build %s deleted', image, build.build_id)
            finally:
                lock.release()

    def _delete_upload(self, upload, adapters: dict, providers: dict) -> None:
        adapter = adapters.get(upload.provider)
        if adapter is None:
            if providers and upload.provider not in providers:
                # No scheduler publishes that provider any more: nothing
                # can delete the upload, so only its record goes.
                log.warning('Image %s build %s: provider %s is gone; dropping its upload '
                            'record (external id %s)', upload.image, upload.build_id,
                            upload.provider, upload.external_id)
                self.store.delete_upload(upload)
            return
        lock = self.store.upload_lock(upload, self.identifier)
        if not lock.acquire(blocking=False):
            return
        try:
            fresh = self.store.get_upload(upload.image, upload.build_id, upload.provider)
            if fresh is None:
                return
            if fresh.external_id:
                key = (fresh.image, fresh.build_id, fresh.provider)
                if fresh.state != zi.DELETING:
                    fresh.state = zi.DELETING
                    self.store.update_upload(fresh)
                try:
                    adapter.delete_image(fresh.external_id)
                except ProviderError as e:
                    # Refused (e.g. a node still runs on it): expected, and
                    # retried every cycle, so said once per reason.
                    if self._delete_refused.get(key) != str(e):
                        self._delete_refused[key] = str(e)
                        log.warning('Deleting image %s from %s refused (%s); retrying '
                                    'until it succeeds', fresh.external_id,
                                    fresh.provider, e)
                        fresh.error = str(e)[:500]
                        self.store.update_upload(fresh)
                    return
                except Exception:
                    log.exception('Deleting image %s from %s failed; retrying later',
                                  fresh.external_id, fresh.provider)
                    return
                self._delete_refused.pop(key, None)
            log.info('Image %s build %s removed from %s', fresh.image, fresh.build_id,
                     fresh.provider)
        finally:
            lock.release()
        self.store.delete_upload(upload)
