"""Image builds and uploads of ``type: zuul`` images (seed 001, Image
Management), and the queue of zuul-driver events launchers send to
schedulers.  This module is the one definition of these znodes; the
scheduler's ``zuul`` reporter writes build records, zuul-launcher
uploads and retires them, the CLI and web read them.

ZooKeeper layout (``<image>`` and ``<provider>`` are canonical names
quoted into one path component with ``quote_name``)::

    /zuul/images/<image>/<build id>          ImageBuildRecord (sequential ids:
                                             their order is the build order)
    /zuul/image-locks/<image>                lock of the whole image
    /zuul/image-uploads/<image>/<build id>/provider/<provider>
                                             ImageUploadRecord
    /zuul/image-uploads/<image>/<build id>/provider/<provider>/lock
                                             lock of one upload
    /zuul/events/image/<sequence>            ImageEvent (durable queue)
    /zuul/events/image-lock                  held by the scheduler consuming it

Build states: ``building`` (artifacts recorded, uploads in progress),
``ready`` (every upload ready and validated: in service), ``deleting``
(being retired).  Upload states: ``pending`` (no external id yet),
``ready``, ``failed`` (retried), ``deleting``.

Every body is JSON with ``schema_version``; a reader meeting another
version refuses the record (logged) instead of misreading it.  Unknown
keys are kept in ``extra`` and written back.
"""

from __future__ import annotations

import json
import logging
import time
import uuid as uuidlib
from dataclasses import asdict, dataclass, field, fields
from typing import ClassVar

from kazoo.exceptions import NodeExistsError, NoNodeError

from zuul.model.launcher import quote_name

log = logging.getLogger('zuul.zk.images')

SCHEMA_VERSION = 1

IMAGE_ROOT = '/zuul/images'
IMAGE_LOCK_ROOT = '/zuul/image-locks'
UPLOAD_ROOT = '/zuul/image-uploads'
EVENT_ROOT = '/zuul/events/image'

BUILDING = 'building'
READY = 'ready'
DELETING = 'deleting'
BUILD_STATES = (BUILDING, READY, DELETING)

PENDING = 'pending'
FAILED = 'failed'
UPLOAD_STATES = (PENDING, READY, FAILED, DELETING)

#: zuul-driver events that travel through ``/zuul/events/image``.
IMAGE_EVENT_TYPES = ('image-build', 'image-validate', 'image-delete')

#: Builds kept in service per image unless the image says otherwise.
DEFAULT_KEEP = 2


class SchemaError(ValueError):
    """A record written with another schema version or unreadable."""


def unquote_name(quoted: str) -> str:
    from urllib.parse import unquote
    return unquote(quoted)


def image_path(image: str) -> str:
    return f'{IMAGE_ROOT}/{quote_name(image)}'


def build_path(image: str, build_id: str) -> str:
    return f'{image_path(image)}/{build_id}'


def image_lock_path(image: str) -> str:
    return f'{IMAGE_LOCK_ROOT}/{quote_name(image)}'


def uploads_path(image: str, build_id: str) -> str:
    return f'{UPLOAD_ROOT}/{quote_name(image)}/{build_id}/provider'


def upload_path(image: str, build_id: str, provider: str) -> str:
    return f'{uploads_path(image, build_id)}/{quote_name(provider)}'


class _Record:
    _skip: ClassVar[tuple] = ()

    def to_dict(self) -> dict:
        data = {k: v for k, v in asdict(self).items() if k not in self._skip and k != 'extra'}
        data.update(self.extra)
        data['schema_version'] = SCHEMA_VERSION
        return data

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True).encode('utf8')

    @classmethod
    def from_dict(cls, data: dict, **path_fields):
        version = data.get('schema_version')
        if version != SCHEMA_VERSION:
            raise SchemaError(f'{cls.__name__} schema version {version!r} '
                              f'(this Zuul reads {SCHEMA_VERSION})')
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known and k != 'extra'}
        extra = {k: v for k, v in data.items() if k not in known and k != 'schema_version'}
        kwargs.update(path_fields)
        return cls(extra=extra, **kwargs)

    @classmethod
    def from_json(cls, raw: bytes, **path_fields):
        try:
            data = json.loads(raw.decode('utf8'))
        except ValueError as e:
            raise SchemaError(f'unreadable {cls.__name__}: {e}') from None
        return cls.from_dict(data, **path_fields)


@dataclass
class ImageBuildRecord(_Record):
    """One build of an image, as the ``zuul`` reporter found it in the
    results of an image build job."""

    image: str                              # canonical image name
    artifacts: dict[str, str] = field(default_factory=dict)   # format -> URL
    state: str = BUILDING
    uuid: str = field(default_factory=lambda: uuidlib.uuid4().hex)
    #: Whether the reporter said ``image-validated: true`` (uploads then
    #: go into service without an ``image-validate`` run).
    validated: bool = False
    tenant: str = ''
    pipeline: str = ''
    project: str = ''
    job: str = ''
    build_uuid: str = ''
    buildset_uuid: str = ''
    log_url: str | None = None
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    extra: dict = field(default_factory=dict)
    #: The sequence number (from the path; not in the body).
    build_id: str = ''
    _skip: ClassVar[tuple] = ('build_id',)


@dataclass
class ImageUploadRecord(_Record):
    """One build of an image in one provider."""

    image: str
    build_id: str
    provider: str                           # canonical provider name
    external_id: str | None = None
    state: str = PENDING
    validated: bool = False
    uuid: str = field(default_factory=lambda: uuidlib.uuid4().hex)
    format: str | None = None
    launcher: str | None = None
    error: str | None = None
    attempts: int = 0
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    extra: dict = field(default_factory=dict)

    @property
    def in_service(self) -> bool:
        return self.state == READY and self.validated and bool(self.external_id)

    def upload_ref(self) -> dict:
        """What a node request's ``image_upload`` carries."""
        return {'image': self.image, 'build': self.build_id, 'upload': self.uuid,
                'provider': self.provider, 'external_id': self.external_id}


@dataclass
class ImageEvent(_Record):
    """A zuul-driver trigger event waiting for a scheduler.

    ``type`` is one of ``IMAGE_EVENT_TYPES``; ``image`` the canonical
    image name; ``data`` what the item needs (``upload`` for
    image-validate: ``ImageUploadRecord.upload_ref()``; ``artifacts`` for
    image-delete)."""

    type: str
    image: str
    build_id: str | None = None
    data: dict = field(default_factory=dict)
    created: float = field(default_factory=time.time)
    extra: dict = field(default_factory=dict)
    #: The znode name (from the path).
    id: str = ''
    _skip: ClassVar[tuple] = ('id',)


class ImageStore:
    """Reads and writes the records above through a kazoo client."""

    def __init__(self, client):
        self.client = client

    # -- builds -------------------------------------------------------------

    def create_build(self, record: ImageBuildRecord,
                     providers: list[str] = ()) -> ImageBuildRecord:
        """Write a new build (next sequence number) and one pending upload
        per provider, in one transaction after the build id is known."""
        parent = image_path(record.image)
        self.client.ensure_path(parent)
        path = self.client.create(parent + '/', record.to_json(), sequence=True,
                                  makepath=True)
        record.build_id = path.rsplit('/', 1)[1]
        for provider in providers:
            upload = ImageUploadRecord(image=record.image, build_id=record.build_id,
                                       provider=provider, validated=record.validated)
            self.client.create(upload_path(record.image, record.build_id, provider),
                               upload.to_json(), makepath=True)
        log.info('Image %s build %s recorded (%s) with uploads to %s', record.image,
                 record.build_id, ', '.join(sorted(record.artifacts)) or 'no artifacts',
                 ', '.join(providers) or 'no provider')
        return record

    def image_names(self) -> list[str]:
        try:
            return sorted(unquote_name(c) for c in self.client.get_children(IMAGE_ROOT))
        except NoNodeError:
            return []

    def builds(self, image: str) -> list[ImageBuildRecord]:
        """Builds of ``image``, oldest first."""
        try:
            children = self.client.get_children(image_path(image))
        except NoNodeError:
            return []
        out = []
        for child in sorted(c for c in children if c.isdigit()):
            record = self.get_build(image, child)
            if record is not None:
                out.append(record)
        return out

    def get_build(self, image: str, build_id: str) -> ImageBuildRecord | None:
        try:
            raw, _ = self.client.get(build_path(image, build_id))
        except NoNodeError:
            return None
        try:
            return ImageBuildRecord.from_json(raw, build_id=build_id)
        except SchemaError as e:
            log.error('Image %s build %s: %s', image, build_id, e)
            return None

    def find_build(self, uuid: str) -> ImageBuildRecord | None:
        for image in self.image_names():
            for build in self.builds(image):
                if build.uuid == uuid or f'{image}/{build.build_id}' == uuid:
                    return build
        return None

    def update_build(self, record: ImageBuildRecord) -> None:
        record.updated = time.time()
        self.client.set(build_path(record.image, record.build_id), record.to_json())

    def delete_build(self, image: str, build_id: str) -> None:
        """Remove a build and its upload records (the uploads themselves
        must be gone from their providers already)."""
        for path in (f'{UPLOAD_ROOT}/{quote_name(image)}/{build_id}',
                     build_path(image, build_id)):
            try:
                self.client.delete(path, recursive=True)
            except NoNodeError:
                pass
        # The image's own znode stays, so build ids are never reused.

    # -- uploads -----------------------------------------------------------

    def uploads(self, image: str, build_id: str) -> list[ImageUploadRecord]:
        try:
            children = self.client.get_children(uploads_path(image, build_id))
        except NoNodeError:
            return []
        out = []
        for child in sorted(children):
            record = self.get_upload(image, build_id, unquote_name(child))
            if record is not None:
                out.append(record)
        return out

    def get_upload(self, image: str, build_id: str, provider: str
                   ) -> ImageUploadRecord | None:
        try:
            raw, _ = self.client.get(upload_path(image, build_id, provider))
        except NoNodeError:
            return None
        try:
            return ImageUploadRecord.from_json(raw)
        except SchemaError as e:
            log.error('Image %s build %s upload to %s: %s', image, build_id, provider, e)
            return None

    def create_upload(self, record: ImageUploadRecord) -> bool:
        """Add an upload to an existing build; False if it exists."""
        try:
            self.client.create(upload_path(record.image, record.build_id, record.provider),
                               record.to_json(), makepath=True)
        except NodeExistsError:
            return False
        return True

    def find_upload(self, uuid: str) -> ImageUploadRecord | None:
        for image in self.image_names():
            for build in self.builds(image):
                for upload in self.uploads(image, build.build_id):
                    if upload.uuid == uuid:
                        return upload
        return None

    def update_upload(self, record: ImageUploadRecord) -> None:
        record.updated = time.time()
        self.client.set(upload_path(record.image, record.build_id, record.provider),
                        record.to_json())

    def delete_upload(self, record: ImageUploadRecord) -> None:
        try:
            self.client.delete(upload_path(record.image, record.build_id, record.provider),
                               recursive=True)
        except NoNodeError:
            pass

    # -- locks ---------------------------------------------------------------

    def image_lock(self, image: str, identifier: str = ''):
        """A kazoo Lock over the whole image (taken briefly to choose
        uploads, and to retire builds)."""
        return self.client.Lock(image_lock_path(image), identifier)

    def upload_lock(self, record: ImageUploadRecord, identifier: str = ''):
        return self.client.Lock(
            upload_path(record.image, record.build_id, record.provider) + '/lock', identifier)

    def upload_locked(self, record: ImageUploadRecord) -> bool:
        try:
            return bool(self.client.get_children(
                upload_path(record.image, record.build_id, record.provider) + '/lock'))
        except NoNodeError:
            return False

    # -- in service ------------------------------------------------------------

    def in_service(self, image: str, provider: str) -> list[ImageUploadRecord]:
        """The uploads of ``image`` in ``provider`` that regular node
        requests may use, newest first (builds being retired excluded)."""
        out = []
        for build in reversed(self.builds(image)):
            if build.state == DELETING:
                continue
            upload = self.get_upload(image, build.build_id, provider)
            if upload is not None and upload.in_service:
                out.append(upload)
        return out

    # -- events ------------------------------------------------------------------

    def put_event(self, event: ImageEvent) -> str:
        self.client.ensure_path(EVENT_ROOT)
        path = self.client.create(EVENT_ROOT + '/', event.to_json(), sequence=True)
        event.id = path.rsplit('/', 1)[1]
        log.info('Image event %s for %s queued as %s', event.type, event.image, event.id)
        return event.id

    def events(self) -> list[ImageEvent]:
        """Queued events, oldest first (unreadable ones are logged and
        removed: nothing else could ever consume them)."""
        try:
            children = sorted(self.client.get_children(EVENT_ROOT))
        except NoNodeError:
            return []
        out = []
        for child in children:
            try:
                raw, _ = self.client.get(f'{EVENT_ROOT}/{child}')
            except NoNodeError:
                continue
            try:
                out.append(ImageEvent.from_json(raw, id=child))
            except SchemaError as e:
                log.error('Dropping image event %s: %s', child, e)
                self.ack_event(child)
        return out

    def ack_event(self, event_id: str) -> None:
        try:
            self.client.delete(f'{EVENT_ROOT}/{event_id}')
        except NoNodeError:
            pass

    def ensure_tree(self) -> None:
        for path in (IMAGE_ROOT, UPLOAD_ROOT, EVENT_ROOT, IMAGE_LOCK_ROOT):
            try:
                self.client.ensure_path(path)
            except NodeExistsError:
                pass
