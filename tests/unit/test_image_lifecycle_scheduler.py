"""Images as Zuul jobs, the scheduler's side (seed 001): image-build events
for images without builds, image events from launchers, the job matcher
(``image-build-name``), the image job variables and the ``zuul``
reporter creating build and upload records.  Layouts are loaded from
YAML by the real loader; records live in a real ZooKeeper."""

from __future__ import annotations

import textwrap
from types import SimpleNamespace

import pytest

from zuul.configloader.layout import ConfigFile, LayoutLoader
from zuul.driver.registry import default_registry
from zuul.model import item as m
from zuul.model.change import Branch
from zuul.model.freeze import FrozenJob
from zuul.model.tenant import Tenant, TenantProject
from zuul.scheduler.connections import ConnectionRegistry
from zuul.scheduler.context import SchedulerContext
from zuul.scheduler.images import (
    ImageRef,
    ImageService,
    filter_image_jobs,
    image_context,
    image_upload_for,
)
from zuul.scheduler.layouts import Layouts
from zuul.scheduler.scheduler import TenantState, UnknownNameError
from zuul.zk import images as zi

HOST = 'review.example.org'
IMAGES = TenantProject('gerrit', 'org/images', trusted=True)
APP = TenantProject('gerrit', 'org/app', trusted=False)
DEBIAN = f'{HOST}/org/images/debian'
PROVIDER = f'{HOST}/org/images/cloud-main'
CONNECTIONS = {'gerrit': 'gerrit', 'cloud': 'openstack'}

CONFIG = """
- pipeline:
    name: image
    manager: independent
    trigger:
      zuul:
        - event: image-build
      timer:
        - time: '0 0 * * *'
    success:
      zuul:
        image-built: true
        image-validated: false

- pipeline:
    name: image-validate
    manager: independent
    trigger:
      zuul:
        - event: image-validate
    success:
      zuul:
        image-validated: true

- pipeline:
    name: check
    manager: independent

- image:
    name: debian
    type: zuul

- image:
    name: ubuntu
    type: cloud

- label:
    name: debian-small
    image: debian

- section:
    name: cloud
    connection: cloud
    images:
      - name: debian
      - name: ubuntu

- provider:
    name: cloud-main
    section: cloud
    labels:
      - name: debian-small

- job:
    name: base
    parent: null

- job:
    name: build-debian-image
    image-build-name: debian

- job:
    name: build-fedora-image
    image-build-name: fedora

- job:
    name: validate-debian-image
    image-build-name: debian

- job:
    name: unrelated

- project:
    name: org/images
    image:
      jobs:
        - build-debian-image
        - build-fedora-image
        - unrelated
    image-validate:
      jobs:
        - validate-debian-image
"""


def load_layout(text=CONFIG):
    loader = LayoutLoader(default_registry(), connections=CONNECTIONS,
                          canonical_hostnames={'gerrit': HOST})
    tenant = Tenant(name='t1', projects=[IMAGES, APP])
    layout = loader.load(tenant, [ConfigFile(path='zuul.yaml', text=textwrap.dedent(text),
                                             project=IMAGES, branch='master')])
    assert [e.reason for e in layout.errors if e.severity == 'error'] == []
    return layout


class FakeManager:
    def __init__(self, pipeline):
        self.pipeline = pipeline
        self.queues = [object()]
        self.items = []

    def all_items(self):
        return list(self.items)


class FakeScheduler:
    """The scheduler as the image service sees it: tenants, layouts
    (the real Layouts, for trigger filters and reporters), a trigger
    event sink."""

    def __init__(self, layout):
        registry = default_registry()
        self.layouts = Layouts('', ConnectionRegistry(), registry, None, CONNECTIONS,
                               {'gerrit': HOST})
        self.connections = ConnectionRegistry()
        state = TenantState('t1', layout)
        for pipeline in layout.pipelines.values():
            state.managers[pipeline.name] = FakeManager(pipeline)
        self.tenants = {'t1': state}
        self.events = []

    def add_trigger_event(self, event):
        self.events.append(event)

    def get_tenant(self, name):
        if name not in self.tenants:
            raise UnknownNameError(f'Unknown tenant "{name}"')
        return self.tenants[name]


@pytest.fixture
def setup(zk_client):
    layout = load_layout()
    scheduler = FakeScheduler(layout)
    service = ImageService(scheduler, zk_client)
    try:
        yield scheduler, service, layout
    finally:
        scheduler.layouts.drivers.get('zuul').image_service = None


def _item_for(scheduler, pipeline_name, change, builds=()):
    manager = scheduler.tenants['t1'].managers[pipeline_name]
    item = m.QueueItem(change=change)
    item.queue = manager.queues[0]
    manager.items.append(item)
    bs = item.current_build_set
    for name, result, data in builds:
        frozen = FrozenJob(name)
        bs.builds[name] = m.Build(m.JobRef(name, frozen=frozen), bs, result=result,
                                  result_data=data, log_url=f'https://logs/{name}/')
    return item


def _artifacts(*formats, image='debian'):
    return {'zuul': {'artifacts': [
        {'name': f'{fmt} image', 'url': f'file:///images/{image}.{fmt}',
         'metadata': {'type': 'zuul_image', 'image_name': image, 'format': fmt}}
        for fmt in formats] + [{'name': 'docs', 'url': 'https://docs/'}]}}


# -- image-build events ---------------------------------------------------------------


def test_missing_zuul_image_gets_one_image_build_event(setup):
    scheduler, service, _ = setup
    assert service.emit_missing_builds() == [DEBIAN]   # not the cloud image
    [event] = scheduler.events
    assert (event.type, event.connection, event.project, event.branch, event.ref) == \
        ('image-build', 'gerrit', 'org/images', 'master', 'refs/heads/master')
    assert event.data['image']['name'] == 'debian'
    assert event.data['image']['canonical_name'] == DEBIAN
    # Once a build is recorded, no more image-build events for it.
    service.store.create_build(zi.ImageBuildRecord(image=DEBIAN, artifacts={'raw': 'x'}))
    assert service.emit_missing_builds() == []


def test_run_once_emits_after_each_reconfiguration_only(setup):
    scheduler, service, layout = setup
    service.run_once()
    service.run_once()
    assert [e.type for e in scheduler.events] == ['image-build']
    # A new layout (reconfiguration) checks again.
    scheduler.tenants['t1'].layout = load_layout()
    service.run_once()
    assert [e.type for e in scheduler.events] == ['image-build', 'image-build']


def test_no_event_while_an_item_builds_the_image(setup):
    scheduler, service, _ = setup
    service.emit_missing_builds()
    ctx = SchedulerContext(scheduler, scheduler.tenants['t1'])
    change = ctx.get_change_for_event(scheduler.events[0])
    _item_for(scheduler, 'image', change)
    assert service.emit_missing_builds() == []


def test_image_key_of_the_trigger_limits_images(setup):
    scheduler, service, _ = setup
    [zuul_filter] = [f for f in scheduler.layouts.trigger_filters(
        scheduler.tenants['t1'].layout.pipelines['image']) if hasattr(f, 'images')]
    from zuul.driver.zuul import ZuulEventFilter
    only_other = ZuulEventFilter({'event': 'image-build', 'image': 'ubuntu.*'})
    event = service.trigger_event('image-build', scheduler.tenants['t1'].layout.images['debian'])
    assert zuul_filter.matches(event) and not only_other.matches(event)


def test_on_demand_build_and_unknown_image(setup):
    scheduler, service, _ = setup
    service.build_image('t1', 'debian')
    assert scheduler.events[-1].data['image']['canonical_name'] == DEBIAN
    with pytest.raises(UnknownNameError):
        service.build_image('t1', 'ubuntu')     # a cloud image is not built
    with pytest.raises(UnknownNameError):
        service.build_image('t1', 'nope')


# -- items and the job matcher ----------------------------------------------------------


def test_image_event_becomes_an_image_ref_item_of_the_image_project(setup):
    scheduler, service, _ = setup
    ctx = SchedulerContext(scheduler, scheduler.tenants['t1'])
    event = service.trigger_event('image-build', scheduler.tenants['t1'].layout.images['debian'])
    change = ctx.get_change_for_event(event)
    assert isinstance(change, ImageRef)
    assert (change.project, change.branch, change.image_name, change.image_canonical) == \
        ('org/images', 'master', 'debian', DEBIAN)
    # Two images of one project are two items; two uploads under
    # validation are two items.
    other = ImageRef('gerrit', 'org/images', 'refs/heads/master', image_event='image-build',
                     image_name='fedora', image_canonical=f'{HOST}/org/images/fedora')
    assert other.key != change.key
    pipeline = scheduler.tenants['t1'].layout.pipelines['image']
    assert ctx.event_matches_pipeline(pipeline, event, change)
    assert not ctx.event_matches_pipeline(
        scheduler.tenants['t1'].layout.pipelines['image-validate'], event, change)


def _job(name, image=None, deps=()):
    frozen = FrozenJob(name)
    if image:
        frozen.attributes['image_build_name'] = image
    return m.JobRef(name, hard_dependencies=tuple(deps), frozen=frozen)


def test_only_the_image_jobs_run_for_an_image_item():
    jobs = [_job('build-debian-image', 'debian', deps=('unrelated',)),
            _job('build-fedora-image', 'fedora'), _job('unrelated')]
    item = m.QueueItem(change=ImageRef('gerrit', 'org/images', 'refs/heads/master',
                                       image_event='image-build', image_name='debian'))
    kept = filter_image_jobs(item, jobs)
    assert [(j.name, j.hard_dependencies) for j in kept] == [('build-debian-image', ())]
    # A timer item (the nightly rebuild) runs every job of the pipeline.
    timer_item = m.QueueItem(change=Branch('gerrit', 'org/images', 'refs/heads/master'))
    assert filter_image_jobs(timer_item, jobs) == jobs


def test_image_job_variables_name_and_formats(setup):
    scheduler, _, layout = setup
    item = m.QueueItem(change=ImageRef('gerrit', 'org/images', 'refs/heads/master'))
    item.current_build_set.layout = layout
    assert image_context(item, _job('build-debian-image', 'debian'),
                         scheduler.layouts.connection_drivers) == \
        {'image_build_name': 'debian', 'image_formats': ['qcow2']}   # openstack
    assert image_context(item, _job('unrelated')) == {}
    # No provider says: the defaults.
    assert image_context(item, _job('build-fedora-image', 'fedora'))['image_formats'] == \
        ['qcow2', 'raw']


def test_image_variables_reach_the_zuul_dictionary():
    from zuul.executor.protocol import ExecuteRequest, JobSpec, ZuulContext
    from zuul.executor.vars import zuul_vars
    ctx = ZuulContext(tenant='t1', pipeline='image', buildset='bs',
                      image_build_name='debian', image_formats=['qcow2'])
    request = ExecuteRequest(uuid='u', job=JobSpec(name='build-debian-image'), zuul=ctx)
    wire = ExecuteRequest.from_dict(request.to_dict())
    jobdir = SimpleNamespace(src_root='/s', log_root='/l', work_root='/w',
                             inventory_file='/i', result_data_file='/r')
    data = zuul_vars(wire, jobdir, 'host', {}, ansible_playbook='/bin/true')
    assert (data['image_build_name'], data['image_formats']) == ('debian', ['qcow2'])


# -- the zuul reporter --------------------------------------------------------------------


def _report(scheduler, pipeline_name, item, action='success'):
    pipeline = scheduler.tenants['t1'].layout.pipelines[pipeline_name]
    reporters = scheduler.layouts.reporters(pipeline, action)
    for reporter in reporters:
        reporter.report(item, pipeline, action, 'message')
    return reporters


def test_image_built_report_records_build_and_uploads(setup):
    scheduler, service, _ = setup
    change = ImageRef('gerrit', 'org/images', 'refs/heads/master', image_event='image-build',
                      image_name='debian', image_canonical=DEBIAN)
    item = _item_for(scheduler, 'image', change, builds=[
        ('build-debian-image', m.SUCCESS, _artifacts('qcow2', 'raw')),
        ('failed-one', m.FAILURE, _artifacts('vhd'))])
    assert len(_report(scheduler, 'image', item)) == 1
    [build] = service.store.builds(DEBIAN)
    assert build.artifacts == {'qcow2': 'file:///images/debian.qcow2',
                               'raw': 'file:///images/debian.raw'}
    assert (build.state, build.validated, build.job, build.tenant, build.pipeline) == \
        (zi.BUILDING, False, 'build-debian-image', 't1', 'image')
    assert build.buildset_uuid == item.current_build_set.uuid
    [upload] = service.store.uploads(DEBIAN, build.build_id)
    assert (upload.provider, upload.external_id, upload.validated) == (PROVIDER, None, False)
    # No more image-build events for it.
    assert service.emit_missing_builds() == []


def test_artifacts_of_unknown_or_cloud_images_are_not_recorded(setup):
    scheduler, service, _ = setup
    item = _item_for(scheduler, 'image', ImageRef('gerrit', 'org/images', 'refs/heads/master'),
                     builds=[('b', m.SUCCESS, _artifacts('raw', image='ubuntu')),
                             ('c', m.SUCCESS, _artifacts('raw', image='nope'))])
    _report(scheduler, 'image', item)
    assert service.store.image_names() == []


def test_validate_event_from_launcher_to_validated_upload(setup):
    scheduler, service, _ = setup
    build = service.store.create_build(
        zi.ImageBuildRecord(image=DEBIAN, artifacts={'qcow2': 'file:///x'}),
        providers=[PROVIDER])
    upload = service.store.get_upload(DEBIAN, build.build_id, PROVIDER)
    upload.external_id, upload.state = 'ext-1', zi.READY
    service.store.update_upload(upload)
    # What zuul-launcher queues after the upload:
    service.store.put_event(zi.ImageEvent(type='image-validate', image=DEBIAN,
                                          build_id=build.build_id,
                                          data={'upload': upload.upload_ref()}))
    assert service.consume_events() == 1
    assert service.store.events() == []     # removed once queued
    [event] = scheduler.events
    assert event.type == 'image-validate'
    ctx = SchedulerContext(scheduler, scheduler.tenants['t1'])
    change = ctx.get_change_for_event(event)
    assert ctx.event_matches_pipeline(
        scheduler.tenants['t1'].layout.pipelines['image-validate'], event, change)
    item = _item_for(scheduler, 'image-validate', change,
                     builds=[('validate-debian-image', m.SUCCESS, {})])
    assert image_upload_for(item) == upload.upload_ref()
    assert image_upload_for(item)['external_id'] == 'ext-1'
    _report(scheduler, 'image-validate', item)
    assert service.store.get_upload(DEBIAN, build.build_id, PROVIDER).validated
    # A failed validation reports through no zuul reporter: not validated.


def test_image_delete_event_item_carries_the_artifacts(setup):
    scheduler, service, _ = setup
    service.store.put_event(zi.ImageEvent(type='image-delete', image=DEBIAN, build_id='0',
                                          data={'artifacts': {'raw': 'file:///x.raw'}}))
    service.store.put_event(zi.ImageEvent(type='image-delete', image=f'{HOST}/gone/x'))
    assert service.consume_events() == 1 and service.store.events() == []
    change = SchedulerContext(scheduler, scheduler.tenants['t1']).get_change_for_event(
        scheduler.events[0])
    assert change.image_data['artifacts'] == {'raw': 'file:///x.raw'}


def test_list_and_delete_builds(setup):
    scheduler, service, _ = setup
    build = service.store.create_build(
        zi.ImageBuildRecord(image=DEBIAN, artifacts={'raw': 'u'}), providers=[PROVIDER])
    [listed] = service.list_builds('t1')
    assert (listed['image_name'], listed['build_id'], listed['state']) == \
        ('debian', build.build_id, 'building')
    assert [u['provider'] for u in service.list_uploads('t1', 'debian')] == [PROVIDER]
    assert service.delete_build('t1', build.uuid)
    assert service.store.builds(DEBIAN)[0].state == zi.DELETING
    with pytest.raises(UnknownNameError):
        service.delete_build('t1', 'nope')


# -- RPC, CLI and web -------------------------------------------------------------------------


class DirectRPC:
    """zuul-web's RPC client, answered by the scheduler's handlers in
    process (JSON round trip like the wire)."""

    def __init__(self, handlers):
        self.handlers = handlers

    def call(self, function, request):
        import json

        from zuul.lib import rpc_protocol as p
        request = p.RPCRequest.from_json(request.to_json())
        try:
            return json.loads(json.dumps(self.handlers[function](request)))
        except (UnknownNameError, p.RPCError) as e:
            raise p.RPCError(str(e)) from None


def test_rpc_build_list_and_delete(setup):
    from zuul.lib import rpc_protocol as p
    from zuul.scheduler.images import image_handlers
    scheduler, service, _ = setup
    rpc = DirectRPC(image_handlers(scheduler))
    result = rpc.call(p.IMAGE_BUILD, p.RPCRequest(tenant='t1', image='debian'))
    assert result['event_id'] == scheduler.events[-1].event_id
    build = service.store.create_build(
        zi.ImageBuildRecord(image=DEBIAN, artifacts={'raw': 'u'}), providers=[PROVIDER])
    [listed] = rpc.call(p.IMAGE_BUILD_LIST, p.RPCRequest(tenant='t1'))
    assert listed['uuid'] == build.uuid
    assert rpc.call(p.IMAGE_BUILD_LIST, p.RPCRequest(tenant='t1', image='other')) == []
    assert rpc.call(p.IMAGE_DELETE, p.RPCRequest(tenant='t1', build=build.uuid))['state'] == \
        'deleting'
    with pytest.raises(p.RPCError, match='Unknown'):
        rpc.call(p.IMAGE_BUILD, p.RPCRequest(tenant='nope', image='debian'))
    assert p.IMAGE_BUILD in p.ALL_FUNCTIONS


def test_web_image_builds_and_uploads_match_the_openapi_document(setup):
    from zuul.scheduler.images import image_handlers
    from zuul.web import openapi
    from zuul.web.api import HTTPError, ZuulWebAPI
    scheduler, service, _ = setup
    api = ZuulWebAPI(DirectRPC(image_handlers(scheduler)))
    build = service.store.create_build(
        zi.ImageBuildRecord(image=DEBIAN, artifacts={'raw': 'u'}), providers=[PROVIDER])
    spec = openapi.load_spec()
    for what in ('image-builds', 'image-uploads'):
        value = api.dispatch(['tenant', 't1', what], {})
        schema = openapi.response_schema(spec, 'get', f'/api/tenant/t1/{what}', 200)
        assert openapi.validate(spec, schema, value) == [], value
        assert len(value) == 1
    assert api.dispatch(['tenant', 't1', 'image-builds'], {'image': 'debian'})[0]['uuid'] == \
        build.uuid
    with pytest.raises(HTTPError) as e:
        api.dispatch(['tenant', 't1', 'image-builds'], {'bogus': '1'})
    assert e.value.status == 400
    with pytest.raises(HTTPError) as e:
        api.dispatch(['tenant', 'nope', 'image-builds'], {})
    assert e.value.status == 404


def test_cli_image_commands_parse_and_print(setup, monkeypatch):
    import io

    from zuul.client import commands
    from zuul.cmd import client
    from zuul.scheduler.images import image_handlers
    scheduler, service, _ = setup
    rpc = DirectRPC(image_handlers(scheduler))
    monkeypatch.setattr(commands, 'rpc_call', lambda args, config, function, **fields:
                        rpc.call(function, commands.p.RPCRequest(**fields)))
    monkeypatch.setattr(client, 'read_config', lambda path: None)
    out = io.StringIO()
    assert client.main(['image-build', '--tenant', 't1', '--image', 'debian'], out=out) == 0
    assert 'Image build of debian requested' in out.getvalue()
    assert client.main(['build-image', '--tenant', 't1', '--image', 'debian'], out=out) == 0
    build = service.store.create_build(
        zi.ImageBuildRecord(image=DEBIAN, artifacts={'raw': 'u'}), providers=[PROVIDER])
    out = io.StringIO()
    client.main(['image-list', '--tenant', 't1'], out=out)
    assert build.uuid in out.getvalue() and 'building' in out.getvalue()
    out = io.StringIO()
    client.main(['image-upload-list', '--tenant', 't1', '--image', 'debian'], out=out)
    assert PROVIDER in out.getvalue() and 'pending' in out.getvalue()
    out = io.StringIO()
    client.main(['image-delete', '--tenant', 't1', '--build', build.uuid], out=out)
    assert service.store.builds(DEBIAN)[0].state == zi.DELETING
