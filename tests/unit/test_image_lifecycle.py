"""Image builds and uploads (seed 001, Image Management) on a real
ZooKeeper: the records, the launcher's locking sequence, validation,
keep and delete, with an in-memory provider adapter that implements the
real ProviderAdapter interface."""

from __future__ import annotations

import http.server
import threading
from types import SimpleNamespace

import pytest

from nodepool.driver import ProviderAdapter, ProviderError
from zuul.launcher.images import ImageLifecycle
from zuul.model.launcher import ResolvedImage, ResolvedProvider
from zuul.zk import images as zi

IMAGE = 'review.example.org/org/images/debian'
P1 = 'review.example.org/org/images/cloud-a'
P2 = 'review.example.org/org/images/cloud-b'


class MemoryAdapter(ProviderAdapter):
    def __init__(self, name, formats=('qcow2', 'raw'), fail=False):
        super().__init__(SimpleNamespace(name=name))
        self.formats = list(formats)
        self.fail = fail
        self.images: dict[str, dict] = {}
        self.deleted: list[str] = []
        self.specs = []

    def image_formats(self):
        return list(self.formats)

    def upload_image(self, spec):
        if self.fail:
            raise ProviderError('cloud says no')
        with open(next(iter(spec.files.values()))) as f:
            content = f.read()
        external = f'{self.provider.name}-{spec.upload_name}'
        self.images[external] = {'content': content, 'files': dict(spec.files)}
        self.specs.append(spec)
        return external

    def delete_image(self, external_id):
        self.images.pop(external_id, None)
        self.deleted.append(external_id)


def _providers(keep=None):
    settings = {} if keep is None else {'keep': keep}
    out = {}
    for name in (P1, P2):
        out[name] = ResolvedProvider(
            canonical_name=name, name=name.rsplit('/', 1)[1], section='s', connection='c',
            images={IMAGE: ResolvedImage(canonical_name=IMAGE, name='debian', type='zuul',
                                         settings=dict(settings))})
    return out


def _p1_only():
    return {P1: _providers()[P1]}


def _artifacts(tmp_path, n):
    out = {}
    for fmt in ('raw', 'qcow2'):
        path = tmp_path / f'debian-{n}.{fmt}'
        path.write_text(f'{fmt} build {n}')
        out[fmt] = f'file://{path}'
    return out


def _build(store, tmp_path, n, validated=True, providers=(P1, P2)):
    return store.create_build(zi.ImageBuildRecord(
        image=IMAGE, artifacts=_artifacts(tmp_path, n), validated=validated,
        tenant='t', job='build-debian'), providers=list(providers))


def test_records_round_trip_and_schema_version(zk_client):
    store = zi.ImageStore(zk_client)
    build = store.create_build(zi.ImageBuildRecord(image=IMAGE, artifacts={'raw': 'x'}),
                               providers=[P1])
    assert build.build_id == '0000000000'
    raw, _ = zk_client.get(f'/zuul/images/{IMAGE.replace("/", "%2F")}/0000000000')
    assert b'"schema_version": 1' in raw
    upload = store.get_upload(IMAGE, build.build_id, P1)
    assert upload.external_id is None and upload.state == zi.PENDING
    assert zk_client.exists(
        f'/zuul/image-uploads/{IMAGE.replace("/", "%2F")}/0000000000/provider/'
        f'{P1.replace("/", "%2F")}')
    data = build.to_dict()
    data['schema_version'] = 2
    with pytest.raises(zi.SchemaError):
        zi.ImageBuildRecord.from_dict(data)
    data['schema_version'] = 1
    data['future_key'] = 'kept'
    assert zi.ImageBuildRecord.from_dict(data).to_dict()['future_key'] == 'kept'
    assert store.find_build(build.uuid).build_id == build.build_id


def test_upload_downloads_once_and_records_external_ids(zk_client, tmp_path):
    store = zi.ImageStore(zk_client)
    _build(store, tmp_path, 1)
    a, b = MemoryAdapter(P1), MemoryAdapter(P2, formats=('raw',))
    life = ImageLifecycle(zk_client, providers=_providers)
    life.run_once({P1: a, P2: b})
    u1 = store.get_upload(IMAGE, '0000000000', P1)
    u2 = store.get_upload(IMAGE, '0000000000', P2)
    assert (u1.state, u1.external_id, u1.format) == (zi.READY, f'{P1}-debian-0000000000',
                                                     'qcow2')
    assert a.images[u1.external_id]['content'] == 'qcow2 build 1'
    assert b.images[u2.external_id]['content'] == 'raw build 1'
    # Validated by the reporter: in service at once, no image-validate.
    assert store.builds(IMAGE)[0].state == zi.READY
    assert store.events() == []
    assert [u.provider for u in store.in_service('x', P1)] == []
    assert [u.uuid for u in store.in_service(IMAGE, P1)] == [u1.uuid]


def test_unvalidated_upload_emits_image_validate_and_waits(zk_client, tmp_path):
    store = zi.ImageStore(zk_client)
    _build(store, tmp_path, 1, validated=False, providers=[P1])
    life = ImageLifecycle(zk_client, providers=_p1_only)
    life.run_once({P1: MemoryAdapter(P1)})
    events = store.events()
    assert [(e.type, e.image, e.build_id) for e in events] == \
        [('image-validate', IMAGE, '0000000000')]
    upload = store.get_upload(IMAGE, '0000000000', P1)
    assert events[0].data['upload'] == upload.upload_ref()
    assert store.builds(IMAGE)[0].state == zi.BUILDING
    assert store.in_service(IMAGE, P1) == []
    upload.validated = True
    store.update_upload(upload)
    life.run_once({P1: MemoryAdapter(P1)})
    assert store.builds(IMAGE)[0].state == zi.READY
    store.ack_event(events[0].id)
    assert store.events() == []


def test_upload_held_by_another_launcher_is_left_alone(zk_client, zk_chroot, tmp_path):
    store = zi.ImageStore(zk_client)
    _build(store, tmp_path, 1, providers=[P1, P2])
    other = zk_chroot.client()
    other_store = zi.ImageStore(other)
    held = other_store.upload_lock(other_store.get_upload(IMAGE, '0000000000', P1), 'other')
    assert held.acquire(blocking=False)
    a, b = MemoryAdapter(P1), MemoryAdapter(P2)
    ImageLifecycle(zk_client, providers=_providers).run_once({P1: a, P2: b})
    assert a.specs == [] and len(b.specs) == 1
    assert store.get_upload(IMAGE, '0000000000', P1).state == zi.PENDING
    held.release()
    ImageLifecycle(zk_client, providers=_providers).run_once({P1: a, P2: b})
    assert len(a.specs) == 1 and len(b.specs) == 1
    other.stop()


def test_image_lock_held_means_no_upload_this_cycle(zk_client, zk_chroot, tmp_path):
    store = zi.ImageStore(zk_client)
    _build(store, tmp_path, 1, providers=[P1])
    other = zk_chroot.client()
    lock = zi.ImageStore(other).image_lock(IMAGE, 'other')
    assert lock.acquire(blocking=False)
    a = MemoryAdapter(P1)
    ImageLifecycle(zk_client, providers=_p1_only).run_once({P1: a})
    assert a.specs == []
    lock.release()
    other.stop()


def test_failed_upload_is_retried_then_left(zk_client, tmp_path):
    store = zi.ImageStore(zk_client)
    _build(store, tmp_path, 1, providers=[P1])
    bad = MemoryAdapter(P1, fail=True)
    life = ImageLifecycle(zk_client, providers=_p1_only)
    for _ in range(5):
        life.run_once({P1: bad})
    upload = store.get_upload(IMAGE, '0000000000', P1)
    assert (upload.state, upload.attempts) == (zi.FAILED, 3)
    assert 'cloud says no' in upload.error


def test_keep_retires_oldest_deletes_uploads_and_emits_image_delete(zk_client, tmp_path):
    store = zi.ImageStore(zk_client)
    a, b = MemoryAdapter(P1), MemoryAdapter(P2)
    life = ImageLifecycle(zk_client, providers=_providers)
    for n in (1, 2):
        _build(store, tmp_path, n)
        life.run_once({P1: a, P2: b})
    assert [x.state for x in store.builds(IMAGE)] == [zi.READY, zi.READY]
    first_ids = sorted(a.images)[:1]
    _build(store, tmp_path, 3)
    life.run_once({P1: a, P2: b})
    builds = store.builds(IMAGE)
    assert [x.build_id for x in builds] == ['0000000001', '0000000002']
    assert a.deleted == first_ids and len(b.deleted) == 1
    events = store.events()
    assert [(e.type, e.build_id) for e in events] == [('image-delete', '0000000000')]
    assert events[0].data['artifacts']['raw'].endswith('debian-1.raw')
    assert store.get_upload(IMAGE, '0000000000', P1) is None


def test_keep_setting_and_deleting_waits_for_other_launchers_provider(zk_client, tmp_path):
    store = zi.ImageStore(zk_client)
    a, b = MemoryAdapter(P1), MemoryAdapter(P2)
    life = ImageLifecycle(zk_client, providers=lambda: _providers(keep=1))
    _build(store, tmp_path, 1)
    life.run_once({P1: a, P2: b})
    _build(store, tmp_path, 2)
    # This launcher serves only P1 now: build 0's P2 upload stays.
    life.run_once({P1: a})
    life.run_once({P1: a})
    assert [x.state for x in store.builds(IMAGE)][0] in (zi.READY, zi.DELETING)
    life.run_once({P1: a, P2: b})
    life.run_once({P1: a, P2: b})
    assert [x.build_id for x in store.builds(IMAGE)] == ['0000000001']
    assert len(b.deleted) == 1


def test_a_refused_delete_is_retried_and_said_once(zk_client, tmp_path, caplog):
    """A provider refusing to delete an upload (a node runs on it) keeps
    the upload and the build; the refusal is logged once (no traceback)
    and recorded on the upload; once it is allowed, both go."""
    store = zi.ImageStore(zk_client)

    class Refusing(MemoryAdapter):
        refuse = True

        def delete_image(self, external_id):
            if self.refuse:
                raise ProviderError(f'image {external_id} is in use by node-1')
            super().delete_image(external_id)

    a = Refusing(P1)
    life = ImageLifecycle(zk_client, providers=_p1_only)
    build = _build(store, tmp_path, 1, providers=[P1])
    life.run_once({P1: a})
    build = store.find_build(build.uuid)
    build.state = zi.DELETING
    store.update_build(build)
    caplog.set_level('DEBUG', logger='zuul.launcher.images')
    for _ in range(3):
        life.run_once({P1: a})
    upload = store.get_upload(IMAGE, build.build_id, P1)
    assert upload.state == zi.DELETING and 'in use by node-1' in upload.error
    # (only this logger's: a leaked ZooKeeper client elsewhere logs 'Connection refused')
    refusals = [r for r in caplog.records
                if r.name == 'zuul.launcher.images' and 'refused' in r.getMessage()]
    assert len(refusals) == 1 and refusals[0].exc_info is None
    assert store.get_build(IMAGE, build.build_id) is not None and store.events() == []
    a.refuse = False
    life.run_once({P1: a})
    assert store.builds(IMAGE) == [] and a.images == {}
    assert [e.type for e in store.events()] == ['image-delete']


def test_operator_delete_of_a_build(zk_client, tmp_path):
    store = zi.ImageStore(zk_client)
    a = MemoryAdapter(P1)
    life = ImageLifecycle(zk_client, providers=_p1_only)
    build = _build(store, tmp_path, 1, providers=[P1])
    life.run_once({P1: a})
    build = store.find_build(build.uuid)
    build.state = zi.DELETING
    store.update_build(build)
    life.run_once({P1: a})
    assert store.builds(IMAGE) == [] and a.images == {}
    # Build ids are never reused.
    assert _build(store, tmp_path, 2, providers=[P1]).build_id == '0000000001'


def test_http_artifacts_are_downloaded(zk_client, tmp_path):
    (tmp_path / 'img.qcow2').write_text('served over http')

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(tmp_path), **kw)

        def log_message(self, *a):
            pass
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        store = zi.ImageStore(zk_client)
        url = f'http://127.0.0.1:{server.server_address[1]}/img.qcow2'
        store.create_build(zi.ImageBuildRecord(image=IMAGE, artifacts={'qcow2': url},
                                               validated=True), providers=[P1])
        a = MemoryAdapter(P1)
        ImageLifecycle(zk_client, providers=_p1_only,
                       download_dir=str(tmp_path / 'dl')).run_once({P1: a})
        assert [i['content'] for i in a.images.values()] == ['served over http']
        assert list((tmp_path / 'dl').iterdir()) == []   # cleaned after the cycle
    finally:
        server.shutdown()


def test_build_never_in_service_is_retired_once_a_newer_one_is(zk_client, tmp_path):
    store = zi.ImageStore(zk_client)
    a = MemoryAdapter(P1)
    life = ImageLifecycle(zk_client, providers=_p1_only)
    # Uploaded but its validation never passed.
    _build(store, tmp_path, 1, validated=False, providers=[P1])
    life.run_once({P1: a})
    life.run_once({P1: a})
    assert store.builds(IMAGE)[0].state == zi.BUILDING
    _build(store, tmp_path, 2, validated=True, providers=[P1])
    life.run_once({P1: a})
    life.run_once({P1: a})
    assert [(b.build_id, b.state) for b in store.builds(IMAGE)] == \
        [('0000000001', zi.READY)]
    assert len(a.deleted) == 1


def test_a_provider_that_starts_using_the_image_gets_the_builds_in_use(zk_client, tmp_path):
    store = zi.ImageStore(zk_client)
    a, b = MemoryAdapter(P1), MemoryAdapter(P2)
    only_p1 = {P1: _providers()[P1]}
    _build(store, tmp_path, 1, providers=[P1])
    ImageLifecycle(zk_client, providers=lambda: only_p1).run_once({P1: a, P2: b})
    assert store.builds(IMAGE)[0].state == zi.READY and b.specs == []
    ImageLifecycle(zk_client, providers=_providers).run_once({P1: a, P2: b})
    upload = store.get_upload(IMAGE, '0000000000', P2)
    assert upload.state == zi.READY and upload.validated and len(b.specs) == 1
    assert [u.provider for u in store.in_service(IMAGE, P2)] == [P2]


def test_keep_and_formats_are_image_attributes_of_the_config():
    """``keep`` and ``formats`` (read by ImageLifecycle.keep and the build
    job's zuul.image_formats) load from an image, a section's images entry
    or image-defaults, and reach the resolved provider."""
    import textwrap

    from zuul.configloader.layout import ConfigFile, LayoutLoader
    from zuul.driver.registry import default_registry
    from zuul.model.tenant import Tenant, TenantProject
    from zuul.scheduler.images import image_formats

    project = TenantProject('gerrit', 'org/images', trusted=True)
    text = textwrap.dedent("""
        - image:
            name: debian
            type: zuul
            keep: 2
        - flavor:
            name: normal
        - label:
            name: debian-small
            image: debian
            flavor: normal
        - section:
            name: cloud
            connection: cloud
            images:
              - name: debian
                keep: 3
                formats: [raw]
            flavors:
              - name: normal
        - provider:
            name: cloud-a
            section: cloud
            labels:
              - name: debian-small
        - image:
            name: broken
            type: zuul
            keep: 0
        """)
    loader = LayoutLoader(default_registry(), connections={'gerrit': 'gerrit',
                                                           'cloud': 'openstack'},
                          canonical_hostnames={'gerrit': 'review.example.org'})
    layout = loader.load(Tenant(name='t1', projects=[project]),
                         [ConfigFile('zuul.yaml', text, project, 'master')])
    reasons = [e.reason for e in layout.errors if e.severity == 'error']
    assert len(reasons) == 1 and 'keep' in reasons[0], reasons
    providers = layout.resolved_providers
    assert ImageLifecycle(None, providers=lambda: providers).keep(IMAGE, providers) == 3
    assert image_formats([layout], IMAGE, {'cloud': 'openstack'}) == ['raw']
