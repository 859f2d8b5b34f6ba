"""The scheduler's part of the image lifecycle (seed 001, Image
Management): images as Zuul jobs.

- ``image-build`` events: after startup and every reconfiguration, one
  event per ``type: zuul`` image that some pipeline's zuul trigger wants
  and that has no build record yet (nor an item building it).  ``zuul
  image-build`` (RPC) and the web API emit one on demand.
- ``image-validate`` / ``image-delete`` events come from zuul-launcher
  through the durable queue ``/zuul/events/image``; a thread here turns
  each into a trigger event and removes it from ZooKeeper only after it
  is in the scheduler's trigger queue.
- An item for an image event is an ``ImageRef``: the tip of the default
  branch of the project that defines the image, naming the image (and,
  for image-validate, the upload under test).  Only jobs whose
  ``image-build-name`` is that image run for it (``filter_image_jobs``).
- Image build jobs get ``zuul.image_build_name`` and
  ``zuul.image_formats`` (``image_context``).
- The ``zuul`` reporter (``image-built``/``image-validated``) calls
  ``ImageService.report``: it records builds from the artifacts jobs
  returned, and marks a validated upload.

Wiring (zuul-scheduler): ``ImageService(scheduler, zk_client).start()``
after the scheduler is built, ``.stop()`` at shutdown.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from zuul.model.change import Branch
from zuul.model.errors import UnknownNameError
from zuul.model.events import TriggerEvent
from zuul.zk import images as zi

log = logging.getLogger('zuul.scheduler.images')

IMAGE_EVENTS = zi.IMAGE_EVENT_TYPES
DEFAULT_FORMATS = ['qcow2', 'raw']
#: The format a provider driver takes first (its adapter's
#: ``image_formats()`` runs only in zuul-launcher).
DRIVER_FORMATS = {'openstack': 'qcow2', 'netns': 'tar'}
ZUUL_IMAGE_TYPE = 'zuul_image'


@dataclass(eq=False)
class ImageRef(Branch):
    """The branch tip an image event's item tests, and the image."""

    image_event: str = ''
    image_name: str = ''                 # short name, as jobs write it
    image_canonical: str = ''
    build_id: str | None = None
    #: image-validate: ``ImageUploadRecord.upload_ref()`` of the upload
    #: under test; node requests of the item's jobs launch from it.
    image_upload: dict | None = None
    image_data: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        upload = (self.image_upload or {}).get('upload') or ''
        return (f'{self.connection}/{self.project}/{self.ref}/{self.image_event}/'
                f'{self.image_canonical}/{self.build_id or ""}/{upload}')

    def describe(self) -> str:
        what = self.image_name
        if self.build_id:
            what += f' build {self.build_id}'
        if self.image_upload:
            what += f' in {self.image_upload.get("provider")}'
        return f'{self.image_event} {what} ({self.project} {self.ref})'


def image_event_info(event) -> dict | None:
    """The image part of a zuul-driver image event (``event.data['image']``)."""
    if getattr(event, 'type', None) not in IMAGE_EVENTS:
        return None
    return (getattr(event, 'data', None) or {}).get('image')


def image_ref_for_event(event) -> ImageRef | None:
    info = image_event_info(event)
    if info is None:
        return None
    ref = event.ref or f'refs/heads/{event.branch or "master"}'
    return ImageRef(connection=event.connection, project=event.project, ref=ref,
                    image_event=event.type, image_name=info.get('name', ''),
                    image_canonical=info.get('canonical_name', ''),
                    build_id=info.get('build_id'), image_upload=info.get('upload'),
                    image_data=dict(info.get('data') or {}))


def image_upload_for(item) -> dict | None:
    """For node requests: the upload an image-validate item's nodes must
    come from (``NodeRequest.image_upload``), else None."""
    change = getattr(item, 'change', None)
    if isinstance(change, ImageRef) and change.image_event == 'image-validate':
        return change.image_upload
    return None


# -- layout lookups -------------------------------------------------------------


def find_image(layout, name: str):
    """An image object by short or canonical name, or None."""
    images = getattr(layout, 'images', None) or {}
    if name in images:
        return images[name]
    for image in images.values():
        if getattr(image, 'canonical_name', None) == name:
            return image
    return None


def providers_using(layouts, canonical: str) -> list[str]:
    """Canonical names of the providers (in any of ``layouts``) using an image."""
    out = set()
    for layout in layouts:
        for name, provider in (getattr(layout, 'resolved_providers', None) or {}).items():
            if canonical in (provider.images or {}):
                out.add(name)
    return sorted(out)


def image_formats(layouts, canonical: str, connection_drivers: dict | None = None
                  ) -> list[str]:
    """The formats an image build job should produce: an image's own
    ``formats`` setting in each provider using it, else the format that
    provider's driver takes first; ``DEFAULT_FORMATS`` when none says."""
    out: list[str] = []
    for layout in layouts:
        for provider in (getattr(layout, 'resolved_providers', None) or {}).values():
            resolved = (provider.images or {}).get(canonical)
            if resolved is None:
                continue
            wanted = resolved.settings.get('formats')
            if not wanted:
                driver = (connection_drivers or {}).get(provider.connection,
                                                        provider.connection)
                wanted = [DRIVER_FORMATS[driver]] if driver in DRIVER_FORMATS else []
            out.extend(f for f in wanted if f not in out)
    return out or list(DEFAULT_FORMATS)


def image_context(item, job, connection_drivers=None, layouts=None) -> dict:
    """``zuul`` variables of an image build job: ``image_build_name`` and
    ``image_formats`` (empty for other jobs)."""
    get = getattr(getattr(job, 'frozen', None), 'get', None)
    name = get('image_build_name') if callable(get) else None
    if not name:
        return {}
    layout = getattr(item.current_build_set, 'layout', None)
    image = find_image(layout, name)
    canonical = getattr(image, 'canonical_name', None) or name
    return {'image_build_name': name,
            'image_formats': image_formats(layouts or [layout], canonical,
                                           connection_drivers)}


def filter_image_jobs(item, jobs: list) -> list:
    """For an image event's item, only the jobs building (validating,
    deleting) that image; dependencies on the others are dropped."""
    change = getattr(item, 'change', None)
    if not isinstance(change, ImageRef):
        return jobs
    keep = [j for j in jobs if j.frozen is not None and
            j.frozen.get('image_build_name') == change.image_name]
    names = {j.name for j in keep}
    out = []
    for job in keep:
        hard = tuple(d for d in job.hard_dependencies if d in names)
        soft = tuple(d for d in job.soft_dependencies if d in names)
        if (hard, soft) != (job.hard_dependencies, job.soft_dependencies):
            from dataclasses import replace
            job = replace(job, hard_dependencies=hard, soft_dependencies=soft)
        out.append(job)
    return out


def image_artifacts(item) -> dict[str, dict]:
    """{image short name: {'artifacts': {format: url}, 'build': Build}}
    from the zuul_return artifacts of the item's successful builds."""
    out: dict[str, dict] = {}
    for build in item.current_build_set.builds.values():
        if build.result != 'SUCCESS':
            continue
        returned = ((build.result_data or {}).get('zuul') or {}).get('artifacts') or []
        for art in returned:
            if not isinstance(art, dict):
                continue
            meta = art.get('metadata') or {}
            if meta.get('type') != ZUUL_IMAGE_TYPE or not art.get('url'):
                continue
            name = meta.get('image_name') or getattr(build.job.frozen, 'get',
                                                     lambda *a: None)('image_build_name')
            fmt = meta.get('format') or 'raw'
            if not name:
                continue
            entry = out.setdefault(name, {'artifacts': {}, 'build': build})
            entry['artifacts'].setdefault(fmt, art['url'])
    return out


# -- the service --------------------------------------------------------------------


class ImageService:
    def __init__(self, scheduler, zk_client, poll_interval: float = 2.0):
        self.scheduler = scheduler
        self.store = zi.ImageStore(zk_client)
        self.client = zk_client
        self.poll_interval = poll_interval
        self._wake = threading.Event()
        self._running = False
        self._thread: threading.Thread | None = None
        self._seen_layouts: tuple = ()
        scheduler.images = self
        drivers = getattr(getattr(scheduler, 'layouts', None), 'drivers', None)
        if drivers is not None and 'zuul' in drivers:
            drivers.get('zuul').image_service = self

    # -- thread ----------------------------------------------------------------

    def start(self) -> None:
        self.store.ensure_tree()
        self._running = True
        self.client.ChildrenWatch(zi.EVENT_ROOT, self._on_children)
        self._thread = threading.Thread(target=self._run, name='zuul-images', daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._running = False
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)

    def _on_children(self, children):
        self._wake.set()
        return self._running or self._thread is None

    def _run(self) -> None:
        while self._running:
            self._wake.wait(self.poll_interval)
            self._wake.clear()
            if not self._running:
                break
            try:
                self.run_once()
            except Exception:
                log.exception('Image service cycle failed')

    def run_once(self) -> None:
        self.consume_events()
        stamp = tuple(sorted((name, id(state.layout))
                             for name, state in list(self.scheduler.tenants.items())))
        if stamp != self._seen_layouts:
            # Remembered only once done: a failed check runs again.
            self.emit_missing_builds()
            self._seen_layouts = stamp

    # -- events ------------------------------------------------------------------

    def _tenant_layouts(self) -> list:
        return [state.layout for _, state in sorted(list(self.scheduler.tenants.items()))]

    def trigger_event(self, type_: str, image, build_id=None, upload=None, data=None
                      ) -> TriggerEvent:
        """A zuul-driver trigger event about ``image`` (an image object):
        the default branch of the project that defines it."""
        sc = image.source_context
        branch = self._default_branch(sc)
        info = {'name': image.name, 'canonical_name': image.canonical_name,
                'build_id': build_id, 'upload': upload, 'data': data or {}}
        return TriggerEvent(type=type_, connection=sc.connection, project=sc.project,
                            branch=branch, ref=f'refs/heads/{branch}', data={'image': info})

    def _default_branch(self, sc) -> str:
        for layout in self._tenant_layouts():
            try:
                meta = layout.get_project_metadata(sc.project)
            except Exception:
                continue
            if meta.get('default_branch'):
                return meta['default_branch']
        return sc.branch or 'master'

    def _image_by_canonical(self, canonical: str):
        for layout in self._tenant_layouts():
            image = find_image(layout, canonical)
            if image is not None:
                return image
        return None

    def consume_events(self) -> int:
        """Launcher events into the trigger queue; each is removed from
        ZooKeeper once queued.  One scheduler at a time takes them."""
        lock = self.client.Lock(zi.EVENT_ROOT + '-lock', 'scheduler')
        if not lock.acquire(blocking=False):
            return 0
        try:
            return self._consume_events()
        finally:
            lock.release()

    def _consume_events(self) -> int:
        count = 0
        for event in self.store.events():
            image = self._image_by_canonical(event.image)
            if image is None:
                log.warning('Image event %s %s: no tenant defines image %s; dropped',
                            event.id, event.type, event.image)
            else:
                upload = event.data.get('upload')
                self.scheduler.add_trigger_event(self.trigger_event(
                    event.type, image, build_id=event.build_id, upload=upload,
                    data=event.data))
                count += 1
            self.store.ack_event(event.id)
        return count

    def _wanted_images(self) -> dict:
        """{canonical: image object} of zuul images some pipeline's zuul
        trigger wants an image-build event for."""
        wanted = {}
        layouts = self.scheduler.layouts
        for _, state in sorted(list(self.scheduler.tenants.items())):
            images = [i for i in (getattr(state.layout, 'images', None) or {}).values()
                      if getattr(i, 'type', None) == 'zuul']
            if not images:
                continue
            for manager in list(state.managers.values()):
                for event_filter in layouts.trigger_filters(manager.pipeline):
                    wants = getattr(event_filter, 'wants_image_event', None)
                    if wants is None:
                        continue
                    for image in images:
                        if wants('image-build', image.name):
                            wanted.setdefault(image.canonical_name, image)
        return wanted

    def _building(self) -> set[str]:
        """Images an image-build item is in a pipeline for."""
        out = set()
        for state in list(self.scheduler.tenants.values()):
            for manager in list(state.managers.values()):
                for item in list(manager.all_items()):
                    change = item.change
                    if isinstance(change, ImageRef) and change.image_event == 'image-build':
                        out.add(change.image_canonical)
        return out

    def emit_missing_builds(self) -> list[str]:
        """An image-build event for every wanted image without a build."""
        emitted = []
        building = self._building()
        for canonical, image in sorted(self._wanted_images().items()):
            if canonical in building:
                continue
            if any(b.state != zi.DELETING for b in self.store.builds(canonical)):
                continue
            log.info('Image %s has no build: emitting image-build', canonical)
            self.scheduler.add_trigger_event(self.trigger_event('image-build', image))
            emitted.append(canonical)
        return emitted

    # -- the zuul reporter ---------------------------------------------------------

    def report(self, item, pipeline, action: str, config: dict) -> None:
        tenant = self._tenant_of(item)
        layout = tenant.layout if tenant is not None else \
            getattr(item.current_build_set, 'layout', None)
        validated = bool(config.get('image-validated', False))
        change = item.change
        if isinstance(change, ImageRef) and change.image_event == 'image-validate' and \
                validated and action == 'success':
            self._mark_validated(change)
        if config.get('image-built'):
            found_images = image_artifacts(item)
            for name, found in found_images.items():
                self._record_build(tenant, layout, pipeline, item, name, found, validated)
            if isinstance(change, ImageRef) and change.image_event == 'image-build' and \
                    change.image_name not in found_images:
                log.warning('[e: %s] %s: no job returned a zuul_image artifact for image '
                            '%s; nothing recorded', item.event_id, action,
                            change.image_name)

    def _tenant_of(self, item):
        for state in list(self.scheduler.tenants.values()):
            for manager in state.managers.values():
                if item.queue in getattr(manager, 'queues', ()):
                    return state
        return None

    def _record_build(self, tenant, layout, pipeline, item, name, found, validated):
        image = find_image(layout, name)
        if image is None or getattr(image, 'type', None) != 'zuul':
            log.warning('[e: %s] Artifacts name image %s, which is not a zuul image of '
                        'this tenant; not recorded', item.event_id, name)
            return None
        build = found['build']
        providers = providers_using(self._tenant_layouts() or [layout], image.canonical_name)
        record = zi.ImageBuildRecord(
            image=image.canonical_name, artifacts=found['artifacts'], validated=validated,
            tenant=getattr(tenant, 'name', ''), pipeline=getattr(pipeline, 'name', ''),
            project=item.change.project, job=build.job.name, build_uuid=build.uuid,
            buildset_uuid=item.current_build_set.uuid, log_url=build.log_url)
        self.store.create_build(record, providers)
        log.info('[e: %s] Image %s build %s recorded from %s', item.event_id,
                 image.canonical_name, record.build_id, build.job.name)
        return record

    def _mark_validated(self, change: ImageRef) -> None:
        upload = change.image_upload or {}
        record = self.store.get_upload(upload.get('image', change.image_canonical),
                                       upload.get('build') or change.build_id or '',
                                       upload.get('provider', ''))
        if record is None:
            log.warning('Validated upload %s is gone', upload)
            return
        record.validated = True
        self.store.update_upload(record)
        log.info('Image %s build %s in %s validated', record.image, record.build_id,
                 record.provider)

    # -- management (RPC / web) -----------------------------------------------------

    def _tenant_image(self, tenant: str, name: str):
        state = self.scheduler.get_tenant(tenant)
        image = find_image(state.layout, name)
        if image is None or getattr(image, 'type', None) != 'zuul':
            raise UnknownNameError(f'Unknown zuul image "{name}" in tenant "{tenant}"')
        return image

    def build_image(self, tenant: str, image: str) -> str:
        """Emit an image-build event for ``image`` (on demand)."""
        obj = self._tenant_image(tenant, image)
        event = self.trigger_event('image-build', obj)
        self.scheduler.add_trigger_event(event)
        return event.event_id

    def _tenant_images(self, tenant: str) -> list:
        state = self.scheduler.get_tenant(tenant)
        return sorted((i for i in (getattr(state.layout, 'images', None) or {}).values()
                       if getattr(i, 'type', None) == 'zuul'), key=lambda i: i.name)

    def list_builds(self, tenant: str, image: str | None = None) -> list[dict]:
        out = []
        for obj in self._tenant_images(tenant):
            if image and image not in (obj.name, obj.canonical_name):
                continue
            for build in self.store.builds(obj.canonical_name):
                data = build.to_dict()
                data.pop('schema_version', None)
                data.update(build_id=build.build_id, image_name=obj.name,
                            uploads=[self._upload_dict(u) for u in
                                     self.store.uploads(obj.canonical_name, build.build_id)])
                out.append(data)
        return out

    @staticmethod
    def _upload_dict(upload) -> dict:
        data = upload.to_dict()
        data.pop('schema_version', None)
        return data

    def list_uploads(self, tenant: str, image: str | None = None) -> list[dict]:
        out = []
        for build in self.list_builds(tenant, image):
            for upload in build['uploads']:
                out.append({**upload, 'image_name': build['image_name'],
                            'build_uuid': build['uuid']})
        return out

    def delete_build(self, tenant: str, uuid: str) -> bool:
        """Mark a build ``deleting`` (zuul-launcher removes its uploads)."""
        names = {i.canonical_name for i in self._tenant_images(tenant)}
        record = self.store.find_build(uuid)
        if record is None or record.image not in names:
            raise UnknownNameError(f'Unknown image build "{uuid}" in tenant "{tenant}"')
        record.state = zi.DELETING
        self.store.update_build(record)
        log.info('Image %s build %s marked for deletion', record.image, record.build_id)
        return True


# -- RPC ------------------------------------------------------------------------------


def image_handlers(scheduler) -> dict:
    """The ``zuul:image_*`` RPC functions (zuul/lib/rpc_protocol.py
    documents them), answered by ``scheduler.images`` (an ImageService)."""
    from zuul.lib import rpc_protocol as p

    def service(request):
        if not request.tenant:
            raise p.RPCError('a tenant is required')
        scheduler.get_tenant(request.tenant)
        svc = getattr(scheduler, 'images', None)
        if svc is None:
            raise p.RPCError('this scheduler manages no images (no ZooKeeper image service)')
        return svc

    def build(r):
        svc = service(r)
        if not r.image:
            raise p.RPCError('an image is required')
        return {'tenant': r.tenant, 'image': r.image,
                'event_id': svc.build_image(r.tenant, r.image)}

    def delete(r):
        svc = service(r)
        if not r.build:
            raise p.RPCError('a build (uuid) is required')
        svc.delete_build(r.tenant, r.build)
        return {'tenant': r.tenant, 'build': r.build, 'state': zi.DELETING}

    return {
        p.IMAGE_BUILD: build,
        p.IMAGE_BUILD_LIST: lambda r: service(r).list_builds(r.tenant, r.image),
        p.IMAGE_UPLOAD_LIST: lambda r: service(r).list_uploads(r.tenant, r.image),
        p.IMAGE_DELETE: delete,
    }


def image_item_artifacts(item) -> list[dict]:
    """For an image-delete (or image-validate) item: the build's artifacts
    in ``zuul.artifacts`` form, so its jobs know which files they concern."""
    change = getattr(item, 'change', None)
    if not isinstance(change, ImageRef):
        return []
    artifacts = change.image_data.get('artifacts') or {}
    return [{'project': change.project, 'change': None, 'patchset': None, 'job': None,
             'name': f'{fmt} image', 'url': url,
             'metadata': {'type': ZUUL_IMAGE_TYPE, 'image_name': change.image_name,
                          'format': fmt}}
            for fmt, url in sorted(artifacts.items())]
