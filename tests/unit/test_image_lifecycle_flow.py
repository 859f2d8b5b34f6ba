"""The whole image lifecycle in one process (seed 001): the real
Scheduler, pipeline managers, Layouts, ExecutorAdapter, image service
and ImageLifecycle, on a real ZooKeeper; the merger, the executor's
Gearman client, the node client and the provider are stand-ins that
answer at once.

image-build event -> only the image's build job runs, with
zuul.image_build_name/image_formats -> it returns zuul_image artifacts ->
the zuul reporter records the build -> the launcher uploads it and emits
image-validate -> the validation job's nodes are asked from the upload
under test -> its report validates the upload -> the build is in service
-> beyond ``keep`` the oldest is deleted, and the image-delete job gets
its artifact URLs."""

from __future__ import annotations

import textwrap
import time
from types import SimpleNamespace

import pytest

from tests.unit.test_image_lifecycle import MemoryAdapter
from zuul.driver.registry import default_registry
from zuul.launcher.images import ImageLifecycle
from zuul.scheduler.builds import ExecutorAdapter
from zuul.scheduler.connections import ConnectionRegistry
from zuul.scheduler.images import ImageService, image_upload_for
from zuul.scheduler.layouts import Layouts
from zuul.scheduler.scheduler import Scheduler
from zuul.zk import images as zi

HOST = 'review.example.org'
DEBIAN = f'{HOST}/org/images/debian'
PROVIDER = f'{HOST}/org/images/cloud-main'

MAIN = """
- tenant:
    name: t1
    source:
      gerrit:
        config-projects:
          - org/images
"""

CONFIG = """
- pipeline:
    name: image
    manager: independent
    trigger:
      zuul:
        - event: image-build
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
    name: image-delete
    manager: independent
    trigger:
      zuul:
        - event: image-delete

- image:
    name: debian
    type: zuul

- label:
    name: debian-small
    image: debian

- section:
    name: cloud
    connection: cloud
    images:
      - name: debian

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
    name: build-other-image
    image-build-name: other

- job:
    name: validate-debian-image
    image-build-name: debian
    nodeset:
      nodes:
        - name: node
          label: debian-small

- job:
    name: delete-debian-image
    image-build-name: debian

- project:
    name: org/images
    image:
      jobs:
        - build-debian-image
        - build-other-image
    image-validate:
      jobs:
        - validate-debian-image
    image-delete:
      jobs:
        - delete-debian-image
"""


class Fetcher:
    def branches(self, connection, project):
        return ['master']

    def files(self, connection, project, branch, paths):
        return {'zuul.yaml': textwrap.dedent(CONFIG)}


class Merger:
    def merge_items(self, items, done, event_id=None, read_files=None):
        done(SimpleNamespace(merged=True, repo_state={}, commit='a' * 40, files=[],
                             read_files=None, error=None))


class GearmanExecutor:
    """executor:execute answered at once; image build jobs write their
    image file and return it as a zuul_image artifact."""

    def __init__(self, image_dir):
        self.image_dir = image_dir
        self.requests = []

    def execute(self, request, on_progress=None, on_complete=None):
        self.requests.append(request)
        data = {}
        if request.job.name == 'build-debian-image':
            arts = []
            for fmt in request.zuul.image_formats:
                path = self.image_dir / f'debian-{len(self.requests)}.{fmt}'
                path.write_text(f'debian {fmt} #{len(self.requests)}')
                arts.append({'name': f'{fmt} image', 'url': f'file://{path}',
                             'metadata': {'type': 'zuul_image', 'image_name': 'debian',
                                          'format': fmt}})
            data = {'zuul': {'artifacts': arts}}
        handle = SimpleNamespace(url=None)
        result = SimpleNamespace(result='SUCCESS', data=data, error_detail=None,
                                 start_time=time.time(), end_time=time.time(),
                                 returned_log_url=None, log_url='https://logs/x/')
        on_complete(handle, result)
        return handle

    def cancel(self, handle):
        pass

    def jobs(self, name):
        return [r for r in self.requests if r.job.name == name]


class Nodes:
    """Node requests, fulfilled at once; records the upload each asked for."""

    def __init__(self):
        self.scheduler = None
        self.uploads = []

    def request(self, item, job, pipeline):
        self.uploads.append(image_upload_for(item))
        request = object()
        nodeset = SimpleNamespace(nodes=[(('node',), {'id': '1', 'type': 'debian-small',
                                                      'interface_ip': '192.0.2.1'})],
                                  node_ids=['1'])
        self.scheduler.add_result_event('nodes-provisioned', item=item, job_name=job.name,
                                        request=request, nodeset=nodeset, failed=False)
        return request

    def cancel(self, request):
        pass

    def release(self, nodeset):
        pass


@pytest.fixture
def system(tmp_path, zk_client):
    main = tmp_path / 'main.yaml'
    main.write_text(textwrap.dedent(MAIN))
    connection_drivers = {'gerrit': 'gerrit', 'cloud': 'openstack'}
    layouts = Layouts(str(main), ConnectionRegistry(), default_registry(), Fetcher(),
                      connection_drivers, {'gerrit': HOST})
    images_dir = tmp_path / 'images'
    images_dir.mkdir()
    gearman = GearmanExecutor(images_dir)
    nodes = Nodes()
    scheduler = Scheduler(layouts, ConnectionRegistry(), Merger(), None, nodes)
    nodes.scheduler = scheduler
    scheduler.executor = ExecutorAdapter(gearman, scheduler, {'gerrit': HOST},
                                         layouts.job_spec_for)
    service = ImageService(scheduler, zk_client)
    scheduler.start()
    try:
        yield SimpleNamespace(scheduler=scheduler, service=service, gearman=gearman,
                              nodes=nodes, store=service.store, zk=zk_client)
    finally:
        scheduler.stop()


def settle(system):
    system.service.run_once()
    assert system.scheduler.wait_until_settled(60)


def test_image_build_validate_serve_and_retire(system):
    scheduler, store = system.scheduler, system.store
    adapter = MemoryAdapter(PROVIDER)
    providers = scheduler.tenants['t1'].layout.resolved_providers
    launcher = ImageLifecycle(system.zk, providers=lambda: providers)

    # Startup: debian has no build, so an image-build event runs its job
    # (and only it) with the formats the provider takes.
    settle(system)
    [request] = system.gearman.requests
    assert request.job.name == 'build-debian-image'
    assert (request.zuul.image_build_name, request.zuul.image_formats) == \
        ('debian', ['qcow2'])
    [build] = store.builds(DEBIAN)
    assert build.state == zi.BUILDING and set(build.artifacts) == {'qcow2'}
    # No second event: the image has a build now.
    scheduler.tenants['t1'].layout = scheduler.tenants['t1'].layout  # same layout
    system.service.emit_missing_builds()
    assert scheduler.wait_until_settled(60)
    assert len(system.gearman.requests) == 1

    # zuul-launcher uploads; the build was not validated, so it asks.
    launcher.run_once({PROVIDER: adapter})
    upload = store.get_upload(DEBIAN, build.build_id, PROVIDER)
    assert upload.state == zi.READY and not upload.validated
    assert store.in_service(DEBIAN, PROVIDER) == []
    settle(system)
    assert [r.job.name for r in system.gearman.requests][-1] == 'validate-debian-image'
    assert system.nodes.uploads == [upload.upload_ref()]
    assert store.get_upload(DEBIAN, build.build_id, PROVIDER).validated
    launcher.run_once({PROVIDER: adapter})
    assert store.builds(DEBIAN)[0].state == zi.READY
    assert [u.external_id for u in store.in_service(DEBIAN, PROVIDER)] == \
        [upload.external_id]

    # Two more builds on demand; beyond keep (2) the first is retired.
    for _ in range(2):
        system.service.build_image('t1', 'debian')
        settle(system)
        launcher.run_once({PROVIDER: adapter})
        settle(system)
        launcher.run_once({PROVIDER: adapter})
    assert len(system.gearman.jobs('build-debian-image')) == 3
    builds = store.builds(DEBIAN)
    assert [b.build_id for b in builds] == ['0000000001', '0000000002']
    assert all(b.state == zi.READY for b in builds)
    assert adapter.deleted == [upload.external_id]
    # The image-delete job ran with the retired build's artifacts.
    settle(system)
    [delete] = system.gearman.jobs('delete-debian-image')
    assert [a['url'] for a in delete.zuul.artifacts] == [build.artifacts['qcow2']]
    assert delete.zuul.artifacts[0]['metadata'] == {
        'type': 'zuul_image', 'image_name': 'debian', 'format': 'qcow2'}
