"""Image builds and uploads in ZooKeeper (seed 002): the records and the
API the builder, the launcher and the ``nodepool`` CLI share.

Layout::

    /nodepool/image/<image>/builds/<build id>            ImageBuild
    /nodepool/image/<image>/builds/lock                  build lock
    /nodepool/image/<image>/builds/<build id>/provider/<provider>/images/<upload id>
                                                         ImageUpload
    /nodepool/image/<image>/builds/<build id>/provider/<provider>/images/lock
                                                         upload lock
    /nodepool/image/<image>/request-build                on-demand flag
    /nodepool/image/<image>/pause                        pause flag

Build and upload ids are ZooKeeper sequence numbers (``"0000000042"``):
the highest-numbered record is the newest.  The build lock is held for
the whole of a build by the one builder building the image; an upload
lock for the whole of one upload (or deletion) of one build in one
provider.  Locks are kazoo Lock recipes whose contenders are ephemeral,
so a builder that dies releases them with its session.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    LockTimeout,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from kazoo.recipe.lock import Lock

from nodepool.zk import paths
from nodepool.zk.records import _Record, read_many

log = logging.getLogger('nodepool.zk.images')

# Build states.
BUILDING = 'building'
READY = 'ready'
FAILED = 'failed'
DELETING = 'deleting'
BUILD_STATES = (BUILDING, READY, FAILED, DELETING)

# Upload states.
UPLOADING = 'uploading'
UPLOAD_STATES = (UPLOADING, READY, FAILED, DELETING)


class ImageRecordGoneError(RuntimeError):
    """The record was deleted under us."""


class ImageRecordChangedError(RuntimeError):
    """The record changed since it was read (a versioned write failed)."""


@dataclass
class ImageBuild(_Record):
    """``/nodepool/image/<image>/builds/<id>``: one build of a diskimage.

    ``builder`` is the building host's name, ``builder_id`` the builder's
    persistent id (``<images-dir>/builder_id.txt``): only that builder
    holds the files, so only it deletes them and the record.
    ``filename`` is the path of the files without the format extension
    (``<images-dir>/<image>-<id>``); ``formats`` the formats built.
    """

    _kind: ClassVar[str] = 'image build'
    _local: ClassVar[tuple[str, ...]] = ('id', 'image_name', 'stat', 'extra', 'lock')

    builder: str = ''
    builder_id: str = ''
    filename: str | None = None
    formats: list[str] = field(default_factory=list)
    state: str = BUILDING
    state_time: float = 0.0
    # Process-local.
    id: str | None = None
    image_name: str | None = None
    stat: Any = None
    extra: dict = field(default_factory=dict)
    lock: Any = None

    def set_state(self, state: str, now: float | None = None) -> None:
        if state not in BUILD_STATES:
            raise ValueError(f'unknown build state {state!r}')
        self.state = state
        self.state_time = time.time() if now is None else now

    @property
    def display_id(self) -> str:
        """``<image>-<build id>``: how the CLI names a build."""
        return f'{self.image_name}-{self.id}'


@dataclass
class ImageUpload(_Record):
    """``.../builds/<build>/provider/<provider>/images/<id>``: one upload
    of a build to a provider.  ``external_id`` is the provider's id of
    the image (set once ``ready``), ``external_name`` the name it was
    given there, ``format`` the file format uploaded."""

    _kind: ClassVar[str] = 'image upload'
    _local: ClassVar[tuple[str, ...]] = ('id', 'image_name', 'build_id', 'provider_name',
                                         'stat', 'extra', 'lock')

    external_id: str | None = None
    external_name: str | None = None
    format: str | None = None
    state: str = UPLOADING
    state_time: float = 0.0
    # Process-local.
    id: str | None = None
    image_name: str | None = None
    build_id: str | None = None
    provider_name: str | None = None
    stat: Any = None
    extra: dict = field(default_factory=dict)
    lock: Any = None

    def set_state(self, state: str, now: float | None = None) -> None:
        if state not in UPLOAD_STATES:
            raise ValueError(f'unknown upload state {state!r}')
        self.state = state
        self.state_time = time.time() if now is None else now

    @property
    def image_id(self) -> str:
        """What a node launched from it records: ``<image>-<build>-<upload>``."""
        return f'{self.image_name}-{self.build_id}-{self.id}'


def _is_seq(name: str) -> bool:
    return name.isdigit()


def parse_build_display_id(text: str) -> tuple[str, str] | None:
    """``<image>-<build id>`` -> (image, build id), or None."""
    image, sep, build_id = text.rpartition('-')
    if not sep or not image or not build_id.isdigit():
        return None
    return image, build_id


class ImageZooKeeper:
    """Typed access to image builds, uploads, their locks and flags."""

    def __init__(self, client: KazooClient):
        self.client = client
        client.ensure_path(paths.IMAGE_ROOT)

    # -- images ------------------------------------------------------------------

    def get_image_names(self) -> list[str]:
        try:
            return sorted(self.client.get_children(paths.IMAGE_ROOT))
        except NoNodeError:
            return []

    def remove_image(self, image: str) -> bool:
        """Remove an image's znode once it has no builds left (its flags
        and empty lock directory go with it); False if builds remain."""
        if self.get_build_ids(image):
            return False
        try:
            self.client.delete(paths.image_path(image), recursive=True)
        except NoNodeError:
            pass
        except NotEmptyError:
            return False   # a builder is taking the build lock right now
        return True

    # -- flags -------------------------------------------------------------------

    def request_build(self, image: str) -> bool:
        """Set the on-demand flag; False if it was already set."""
        try:
            self.client.create(paths.request_build_path(image), makepath=True)
        except NodeExistsError:
            return False
        return True

    def is_build_requested(self, image: str) -> bool:
        return self.client.exists(paths.request_build_path(image)) is not None

    def clear_build_request(self, image: str) -> None:
        try:
            self.client.delete(paths.request_build_path(image))
        except NoNodeError:
            pass

    def pause_image(self, image: str) -> None:
        try:
            self.client.create(paths.image_pause_path(image), makepath=True)
        except NodeExistsError:
            pass

    def unpause_image(self, image: str) -> None:
        try:
            self.client.delete(paths.image_pause_path(image))
        except NoNodeError:
            pass

    def is_image_paused(self, image: str) -> bool:
        return self.client.exists(paths.image_pause_path(image)) is not None

    # -- builds ------------------------------------------------------------------

    def store_build(self, image: str, build: ImageBuild, expected_version: int = -1) -> str:
        """Create (no ``id`` yet: a new sequence number) or update a build
        record; returns the id.  Updates raise ImageRecordGoneError or,
        with ``expected_version``, ImageRecordChangedError."""
        build.image_name = image
        if build.id is None:
            path = self.client.create(paths.builds_path(image) + '/', build.serialize(),
                                      sequence=True, makepath=True)
            build.id = path.rsplit('/', 1)[1]
            return build.id
        try:
            build.stat = self.client.set(paths.build_path(image, build.id),
                                         build.serialize(), version=expected_version)
        except NoNodeError:
            raise ImageRecordGoneError(f'build {image}-{build.id} no longer exists') from None
        except BadVersionError:
            raise ImageRecordChangedError(f'build {image}-{build.id} changed') from None
        return build.id

    def get_build(self, image: str, build_id: str) -> ImageBuild | None:
        try:
            raw, stat = self.client.get(paths.build_path(image, build_id))
        except NoNodeError:
            return None
        if not raw:
            return None
        return ImageBuild.deserialize(raw, id=build_id, image_name=image, stat=stat)

    def get_build_ids(self, image: str) -> list[str]:
        try:
            names = self.client.get_children(paths.builds_path(image))
        except NoNodeError:
            return []
        return sorted(n for n in names if _is_seq(n))

    def get_builds(self, image: str, states: tuple[str, ...] | None = None) -> list[ImageBuild]:
        """The image's builds, oldest first (fetched in one batch)."""
        builds = read_many(self.client, [
            (paths.build_path(image, i),
             lambda raw, stat, i=i: ImageBuild.deserialize(raw, id=i, image_name=image,
                                                           stat=stat))
            for i in self.get_build_ids(image)])
        return [b for b in builds if states is None or b.state in states]

    def get_most_recent_build(self, image: str, state: str | None = READY) -> ImageBuild | None:
        builds = self.get_builds(image, (state,) if state else None)
        return builds[-1] if builds else None

    def delete_build(self, image: str, build_id: str) -> bool:
        """Remove a build record; False (nothing removed) while it still
        has upload records.  Empty provider directories and upload locks
        that nobody holds go with it."""
        for provider in self.get_build_provider_names(image, build_id):
            if self.get_upload_ids(image, build_id, provider):
                return False
        try:
            self.client.delete(paths.build_path(image, build_id), recursive=True)
        except NoNodeError:
            pass
        except NotEmptyError:
            return False
        return True

    # -- uploads -----------------------------------------------------------------

    def get_build_provider_names(self, image: str, build_id: str) -> list[str]:
        try:
            return sorted(self.client.get_children(paths.build_providers_path(image, build_id)))
        except NoNodeError:
            return []

    def store_upload(self, image: str, build_id: str, provider: str, upload: ImageUpload,
                     expected_version: int = -1) -> str:
        """Create (no ``id`` yet) or update an upload record; returns the id."""
        upload.image_name, upload.build_id, upload.provider_name = image, build_id, provider
        if upload.id is None:
            if self.client.exists(paths.build_path(image, build_id)) is None:
                raise ImageRecordGoneError(f'build {image}-{build_id} no longer exists')
            path = self.client.create(paths.uploads_path(image, build_id, provider) + '/',
                                      upload.serialize(), sequence=True, makepath=True)
            upload.id = path.rsplit('/', 1)[1]
            return upload.id
        try:
            upload.stat = self.client.set(
                paths.upload_path(image, build_id, provider, upload.id),
                upload.serialize(), version=expected_version)
        except NoNodeError:
            raise ImageRecordGoneError(f'upload {upload.image_id} no longer exists') from None
        except BadVersionError:
            raise ImageRecordChangedError(f'upload {upload.image_id} changed') from None
        return upload.id

    def get_upload(self, image: str, build_id: str, provider: str,
                   upload_id: str) -> ImageUpload | None:
        try:
            raw, stat = self.client.get(paths.upload_path(image, build_id, provider, upload_id))
        except NoNodeError:
            return None
        if not raw:
            return None
        return ImageUpload.deserialize(raw, id=upload_id, image_name=image, build_id=build_id,
                                       provider_name=provider, stat=stat)

    def get_upload_ids(self, image: str, build_id: str, provider: str) -> list[str]:
        try:
            names = self.client.get_children(paths.uploads_path(image, build_id, provider))
        except NoNodeError:
            return []
        return sorted(n for n in names if _is_seq(n))

    def get_uploads(self, image: str, build_id: str | None = None,
                    provider: str | None = None,
                    states: tuple[str, ...] | None = None) -> list[ImageUpload]:
        """Uploads of one build (or every build) to one provider (or every
        provider), ordered by build then upload id."""
        build_ids = [build_id] if build_id is not None else self.get_build_ids(image)
        keys = []
        for b in build_ids:
            providers = [provider] if provider is not None else \
                self.get_build_provider_names(image, b)
            for p in providers:
                keys += [(b, p, u) for u in self.get_upload_ids(image, b, p)]
        uploads = read_many(self.client, [
            (paths.upload_path(image, b, p, u),
             lambda raw, stat, b=b, p=p, u=u: ImageUpload.deserialize(
                 raw, id=u, image_name=image, build_id=b, provider_name=p, stat=stat))
            for b, p, u in keys])
        return [u for u in uploads if states is None or u.state in states]

    def delete_upload(self, upload: ImageUpload) -> None:
        try:
            self.client.delete(paths.upload_path(upload.image_name, upload.build_id,
                                                 upload.provider_name, upload.id))
        except NoNodeError:
            pass

    def get_most_recent_upload(self, image: str, provider: str) -> ImageUpload | None:
        """What a launch uses: the highest-numbered ready upload to
        ``provider`` of the newest ready build that has one (a build
        still uploading does not hide the previous build's upload)."""
        for build in reversed(self.get_builds(image, (READY,))):
            uploads = self.get_uploads(image, build.id, provider, (READY,))
            if uploads:
                return uploads[-1]
        return None

    # -- locks -------------------------------------------------------------------

    def lock_build(self, image: str, identifier: str = '', blocking: bool = False,
                   timeout: float | None = None) -> Lock | None:
        """The image's build lock (None if someone else holds it)."""
        return self._lock(paths.build_lock_path(image), identifier, blocking, timeout)

    def lock_upload(self, image: str, build_id: str, provider: str, identifier: str = '',
                    blocking: bool = False, timeout: float | None = None) -> Lock | None:
        """The lock on uploading (or deleting) ``build_id`` in ``provider``;
        None if someone else holds it or the build is gone (locking never
        recreates a deleted build's znode)."""
        path = paths.upload_lock_path(image, build_id, provider)
        if self.client.exists(path) is None:
            if self.client.exists(paths.build_path(image, build_id)) is None:
                return None
            try:
                self.client.create(path, makepath=True)
            except NodeExistsError:
                pass
        return self._lock(path, identifier, blocking, timeout, assured=True)

    def build_lock_holder(self, image: str) -> str | None:
        """The identifier of whoever holds the build lock, or None."""
        return self._holder(paths.build_lock_path(image))

    def upload_lock_holder(self, image: str, build_id: str, provider: str) -> str | None:
        return self._holder(paths.upload_lock_path(image, build_id, provider))

    @staticmethod
    def unlock(lock: Lock | None) -> None:
        if lock is None or not lock.is_acquired:
            return
        try:
            lock.release()
        except NoNodeError:
            pass
        except Exception:
            log.exception('Could not release lock %s', lock.path)

    def _lock(self, path: str, identifier: str, blocking: bool,
              timeout: float | None, assured: bool = False) -> Lock | None:
        lock = Lock(self.client, path, identifier)
        lock.assured_path = assured
        try:
            if lock.acquire(blocking=blocking, timeout=timeout):
                return lock
        except LockTimeout:
            pass
        except NoNodeError:
            # The directory went away under us (a deleted build).
            pass
        return None

    def _holder(self, path: str) -> str | None:
        try:
            contenders = Lock(self.client, path).contenders()
        except NoNodeError:
            return None
        return contenders[0] if contenders else None


class ImageCache:
    """A watched mirror of ``/nodepool/image`` (kazoo's TreeCache): the
    launcher finds uploads to launch from without a ZooKeeper round trip,
    and both launcher and builder learn of every change at once.

    ``on_change()`` is called from a kazoo thread after each change;
    keep it cheap (set an event).
    """

    def __init__(self, client: KazooClient, on_change=None):
        from kazoo.recipe.cache import TreeCache
        self.client = client
        self.on_change = on_change
        client.ensure_path(paths.IMAGE_ROOT)
        self._tree = TreeCache(client, paths.IMAGE_ROOT)
        self._tree.listen(self._event)
        self._tree.listen_fault(lambda e: log.warning('Image cache fault: %s', e))

    def start(self) -> None:
        self._tree.start()

    def stop(self) -> None:
        self._tree.close()

    def _event(self, event) -> None:
        if self.on_change is not None:
            try:
                self.on_change()
            except Exception:
                log.exception('Image cache listener failed')

    def _seq_children(self, path: str) -> list[str]:
        return sorted(n for n in (self._tree.get_children(path) or ()) if _is_seq(n))

    def _record(self, path: str, cls, **local):
        node = self._tree.get_data(path)
        if node is None or not node.data:
            return None
        try:
            return cls.deserialize(node.data, stat=node.stat, **local)
        except ValueError:
            return None

    def get_builds(self, image: str) -> list[ImageBuild]:
        builds = []
        for build_id in self._seq_children(paths.builds_path(image)):
            build = self._record(paths.build_path(image, build_id), ImageBuild, id=build_id,
                                 image_name=image)
            if build is not None:
                builds.append(build)
        return builds

    def get_most_recent_upload(self, image: str, provider: str) -> ImageUpload | None:
        """As ``ImageZooKeeper.get_most_recent_upload``, from the mirror."""
        for build in reversed(self.get_builds(image)):
            if build.state != READY:
                continue
            base = paths.uploads_path(image, build.id, provider)
            for upload_id in reversed(self._seq_children(base)):
                upload = self._record(f'{base}/{upload_id}', ImageUpload, id=upload_id,
                                      image_name=image, build_id=build.id,
                                      provider_name=provider)
                if upload is not None and upload.state == READY:
                    return upload
        return None
