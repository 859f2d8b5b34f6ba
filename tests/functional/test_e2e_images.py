"""An image build job on the real executor path (real ansible-playbook over
SSH to a real node, real git repos) feeding the image lifecycle on a real
ZooKeeper: the playbook sees ``zuul.image_build_name`` and
``zuul.image_formats``, writes one file per format and returns them as
``zuul_image`` artifacts with file:// URLs; the ``zuul`` reporter records
the build; zuul-launcher's ImageLifecycle uploads the very files."""

from __future__ import annotations

import os

from tests.functional.test_executor_builds import explain, run_build
from tests.functional.test_executor_support import (  # noqa: F401 - fixtures
    exec_env,
    exec_keypair,
    exec_nodes,
    execute_request,
    item,
    node_spec,
    playbook,
)
from tests.unit.test_image_lifecycle import MemoryAdapter
from tests.unit.test_image_lifecycle_scheduler import (
    DEBIAN,
    PROVIDER,
    FakeScheduler,
    load_layout,
)
from zuul.executor.protocol import JobSpec
from zuul.launcher.images import ImageLifecycle
from zuul.model import item as m
from zuul.model.freeze import FrozenJob
from zuul.scheduler.images import ImageRef, ImageService
from zuul.zk import images as zi

BUILD = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Build one file per format
      copy:
        content: "{{ zuul.image_build_name }} image as {{ item }}\\n"
        dest: "{{ image_dir }}/{{ zuul.image_build_name }}-{{ zuul.build }}.{{ item }}"
      loop: "{{ zuul.image_formats }}"
    - name: Describe them
      set_fact:
        image_artifacts: >-
          {{ image_artifacts | default([]) + [{
               'name': item ~ ' image',
               'url': 'file://' ~ image_dir ~ '/' ~ zuul.image_build_name ~ '-' ~
                      zuul.build ~ '.' ~ item,
               'metadata': {'type': 'zuul_image', 'image_name': zuul.image_build_name,
                            'format': item}}] }}
      loop: "{{ zuul.image_formats }}"
    - zuul_return:
        data:
          zuul:
            artifacts: "{{ image_artifacts }}"
"""


def test_image_build_job_to_upload(exec_env, zk_client):  # noqa: F811
    env = exec_env
    image_dir = os.path.join(env.root, 'images')
    os.makedirs(image_dir)
    os.chmod(image_dir, 0o777)
    env.upstream.create('org/images', {'playbooks/build.yaml': BUILD})
    node = env.factory.make()
    job = JobSpec(name='build-debian-image', run=[playbook('org/images', 'playbooks/build')],
                  timeout=600, vars={'image_dir': image_dir})
    request = execute_request('d' * 32, job, [node_spec(node, 'node')],
                              [item('org/images', ref='refs/heads/master')])
    request.zuul.image_build_name = 'debian'
    request.zuul.image_formats = ['qcow2', 'raw']
    result, build = run_build(env, request)
    assert result.result == 'SUCCESS', explain(build)
    artifacts = result.data['zuul']['artifacts']
    assert [a['metadata']['format'] for a in artifacts] == ['qcow2', 'raw']

    # The zuul reporter of the image pipeline records it.
    scheduler = FakeScheduler(load_layout())
    service = ImageService(scheduler, zk_client)
    try:
        manager = scheduler.tenants['t1'].managers['image']
        queue_item = m.QueueItem(change=ImageRef(
            'gerrit', 'org/images', 'refs/heads/master', image_event='image-build',
            image_name='debian', image_canonical=DEBIAN))
        queue_item.queue = manager.queues[0]
        manager.items.append(queue_item)
        bs = queue_item.current_build_set
        bs.builds[job.name] = m.Build(m.JobRef(job.name, frozen=FrozenJob(job.name)), bs,
                                      result=m.SUCCESS, result_data=result.data)
        pipeline = scheduler.tenants['t1'].layout.pipelines['image']
        for reporter in scheduler.layouts.reporters(pipeline, 'success'):
            reporter.report(queue_item, pipeline, 'success', '')
    finally:
        scheduler.layouts.drivers.get('zuul').image_service = None
    [record] = service.store.builds(DEBIAN)
    assert sorted(record.artifacts) == ['qcow2', 'raw']

    # zuul-launcher uploads the file the job wrote (the provider takes qcow2).
    adapter = MemoryAdapter(PROVIDER, formats=('qcow2',))
    providers = scheduler.tenants['t1'].layout.resolved_providers
    ImageLifecycle(zk_client, providers=lambda: providers).run_once({PROVIDER: adapter})
    upload = service.store.get_upload(DEBIAN, record.build_id, PROVIDER)
    assert upload.state == zi.READY, upload.error
    assert adapter.images[upload.external_id]['content'] == 'debian image as qcow2\n'
    # Not validated by that pipeline: the launcher asks for validation.
    assert [e.type for e in service.store.events()] == ['image-validate']
