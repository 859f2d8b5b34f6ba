"""Images built by Zuul jobs, end to end on real daemons (seed 001,
"Image Management"): the dev Gerrit, a real ZooKeeper, Gearman, merger,
executor and zuul-scheduler, and a real ``zuul-launcher`` process
serving netns nodes.

The config project defines a ``type: zuul`` image, a label, section and
provider using it (netns: an upload is a tarball of a root filesystem,
unpacked under the provider's state-dir; a node booted from it runs sshd
chrooted in it), and the ``image``, ``image-validate`` and
``image-delete`` pipelines.  The build job (on the executor) makes the
root filesystem with tools/netns-rootfs-image.sh, stamping it with its
own build uuid, and returns it as a ``zuul_image`` artifact.

In order: the scheduler asks for the missing image at startup; a build
job returning no artifact records nothing; ``zuul image-build`` builds
it; the build is recorded in /zuul/images; zuul-launcher uploads it
(external id = the unpacked directory); an image-validate event runs the
validation job on a node booted from that upload (node record and the
node's own /etc/nodepool-image say so); the upload is validated and the
build goes into service; a normal job gets a node from it; two more
builds later the oldest is retired: its upload leaves the provider, an
image-delete job removes its file, and its records are gone; the
commands list and delete builds.

Also: with ``image-validated: true`` and ``keep: 1`` a retired upload a
node still runs on stays (the provider refuses, the launcher says so
once) until the node is gone; a build whose validation fails never
serves and is deleted once a newer build is in service; image events
wait in ZooKeeper while no scheduler runs.
"""

from __future__ import annotations

import logging
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from nodepool.driver.netns.host import NetnsHostManager
from tests.functional.system_support import (
    BASE_PIPELINES,
    zuul_system,  # noqa: F401 - fixture
)
from tests.functional.test_builder_support import ROOTFS_IMAGE
from tests.functional.test_e2e_zuul_launcher import (
    ZL_BRIDGE,
    ZL_PROVIDER,
    ZL_SUBNET,
    needs_launcher,
    needs_netns,
    record_routes,
    wait,
)
from tests.harness.waiting import wait_for
from zuul.zk import images as zi

IMAGE_PIPELINES = """
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
"""

NODE_OBJECTS = f"""
- image:
    name: netns-root
    type: zuul
    username: root
- flavor:
    name: normal
- section:
    name: local
    connection: netns
    quota:
      instances: 4
    images:
      - name: netns-root
    flavors:
      - name: normal
- label:
    name: zl-image
    image: netns-root
    flavor: normal
- provider:
    name: {ZL_PROVIDER}
    section: local
    labels:
      - name: zl-image
"""

JOBS = """
- job:
    name: build-netns-root
    image-build-name: netns-root
    run: playbooks/build-image.yaml
    vars:
      image_dir: {image_dir}
      rootfs_script: {script}
- job:
    name: validate-netns-root
    image-build-name: netns-root
    run: playbooks/validate-image.yaml
    vars:
      image_dir: {image_dir}
    nodeset:
      nodes:
        - name: node
          label: zl-image
- job:
    name: delete-netns-root
    image-build-name: netns-root
    run: playbooks/delete-image.yaml
- job:
    name: use-image
    run: playbooks/on-image.yaml
    nodeset:
      nodes:
        - name: node
          label: zl-image
- project:
    image:
      jobs:
        - build-netns-root
    image-validate:
      jobs:
        - validate-netns-root
    image-delete:
      jobs:
        - delete-netns-root
"""

# On the executor: a root filesystem in which sshd runs, stamped with
# this build's uuid (IMAGE_MARKER -> /etc/nodepool-image), one file per
# format asked for.  While {image_dir}/no-artifact exists the job
# succeeds without returning anything.
BUILD_PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - stat:
        path: "{{ image_dir }}/no-artifact"
      register: no_artifact
    - name: Say that this build returns nothing
      copy:
        content: "{{ zuul.build }}\n"
        dest: "{{ image_dir }}/returned-nothing"
      when: no_artifact.stat.exists
    - name: Build the root filesystem
      command: >-
        {{ rootfs_script }} -t {{ zuul.image_formats | join(',') }}
        -o {{ image_dir }}/{{ zuul.build }}
      environment:
        IMAGE_MARKER: "{{ zuul.build }}"
      when: not no_artifact.stat.exists
    - name: Return the image
      zuul_return:
        data:
          zuul:
            artifacts:
              - name: tar image
                url: "file://{{ image_dir }}/{{ zuul.build }}.tar"
                metadata:
                  type: zuul_image
                  image_name: "{{ zuul.image_build_name }}"
                  format: tar
      when: not no_artifact.stat.exists
"""

# The node has sshd and a shell but no Python: raw only.
ON_IMAGE_PLAYBOOK = """
- hosts: node
  gather_facts: false
  tasks:
    - name: Which image the node booted
      raw: cat /etc/nodepool-image
      register: booted
- hosts: localhost
  gather_facts: false
  tasks:
    - zuul_return:
        data:
          booted: "{{ hostvars['node'].booted.stdout_lines }}"
"""

# The validation job: the same, held while {image_dir}/hold-validation
# exists (so the test can look at an upload that is not validated yet).
VALIDATE_PLAYBOOK = ON_IMAGE_PLAYBOOK + """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Wait while the test holds validation
      wait_for:
        path: "{{ image_dir }}/hold-validation"
        state: absent
        timeout: 120
    - stat:
        path: "{{ image_dir }}/fail-validation"
      register: fail_validation
    - fail:
        msg: The test asked this validation to fail
      when: fail_validation.stat.exists
"""

DELETE_PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Remove the retired build's files
      file:
        path: "{{ item.url | regex_replace('^file://', '') }}"
        state: absent
      loop: "{{ zuul.artifacts | default([]) }}"
"""

APP = """
- project:
    check:
      jobs:
        - use-image
"""


@pytest.fixture
def system(zuul_system, ssh_keypair, tmp_path):  # noqa: F811
    state = str(tmp_path / 'zl-netns')
    zuul_system.add_provider_connection(
        'netns', 'netns', bridge=ZL_BRIDGE, subnet=ZL_SUBNET, **{
            'state-dir': state,
            'authorized-keys-file': ssh_keypair.private_key_path + '.pub'})
    zuul_system.netns_state = state
    try:
        yield zuul_system
    finally:
        zuul_system.stop_zuul_launchers()
        manager = NetnsHostManager(state, ZL_SUBNET, ZL_BRIDGE)
        for name in manager.list():
            if os.path.isdir(os.path.join(state, name)):
                manager.delete(name)
        subprocess.run(['ip', 'link', 'del', ZL_BRIDGE], capture_output=True)


def zuul_cli(system, *args: str) -> str:
    """The ``zuul`` client (zuul.cmd.client) against this system."""
    proc = subprocess.run([sys.executable, '-m', 'zuul.cmd.client', '-c', system.conf_path,
                           *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def finished(system, pipeline: str, job: str) -> list:
    """Builds of ``job`` in ``pipeline`` that have a result, in launch order."""
    return [b for b, launch in zip(system.builds, system.launches)
            if launch['pipeline'] == pipeline and b.job.name == job and b.result]


def validations(system) -> int:
    """Validation jobs launched so far."""
    return len([launch for launch in system.launches
                if launch['pipeline'] == 'image-validate'])


@pytest.mark.slow
@needs_netns
@needs_launcher
def test_image_build_pipeline_end_to_end(system, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger='zuul.scheduler.images')
    # Under the system's root: the trusted build job's sandbox shows it.
    image_dir = pathlib.Path(system.root) / 'images'
    image_dir.mkdir()
    (image_dir / 'no-artifact').write_text('first build returns nothing\n')
    system.create_projects(app_config=APP, pipelines=BASE_PIPELINES + IMAGE_PIPELINES)
    system.store.push_branch('org/project-config', 'master', {
        'zuul.d/nodes.yaml': textwrap.dedent(NODE_OBJECTS),
        'zuul.d/images.yaml': textwrap.dedent(JOBS).format(image_dir=image_dir,
                                                           script=ROOTFS_IMAGE),
        'playbooks/build-image.yaml': textwrap.dedent(BUILD_PLAYBOOK),
        'playbooks/on-image.yaml': textwrap.dedent(ON_IMAGE_PLAYBOOK),
        'playbooks/validate-image.yaml': textwrap.dedent(VALIDATE_PLAYBOOK),
        'playbooks/delete-image.yaml': textwrap.dedent(DELETE_PLAYBOOK)},
        'An image built by Zuul, and its pipelines')
    system.start()
    routes = record_routes(system)
    store = zi.ImageStore(system.service.zk.client)
    layout = system.scheduler.tenants['example'].layout
    image = layout.images['netns-root'].canonical_name
    provider = next(name for name in layout.resolved_providers
                    if name.endswith('/' + ZL_PROVIDER))
    images_dir = os.path.join(system.netns_state, 'images')

    # 1. Startup: the image has no build, so the scheduler emitted
    #    image-build; only the build job ran.  It returned no artifact:
    #    nothing is recorded and the image is not built.
    wait(system, lambda: (image_dir / 'returned-nothing').exists(), timeout=90,
         what='the startup image build job')
    first = (image_dir / 'returned-nothing').read_text().strip()
    wait(system, lambda: 'no job returned a zuul_image artifact for image netns-root'
         in caplog.text, timeout=60, what='the report of the startup build')
    system.settle()
    assert store.builds(image) == []
    assert {launch['job'] for launch in system.launches} <= {'build-netns-root'}

    # 2. A normal job asks for a node of the label: none can be served
    #    (no build in service), so the request waits.  zuul image-build:
    #    the build job returns the tarball; the zuul reporter records the
    #    build and an upload for the provider.
    (image_dir / 'no-artifact').unlink()
    hold = image_dir / 'hold-validation'
    hold.write_text('hold\n')
    system.start_zuul_launcher()
    early = system.store.create_change('org/app', 'master', 'Use the image', {'a': '1\n'})
    wait(system, lambda: [r for r in routes if r['job'] == 'use-image'], timeout=60,
         what='the normal node request')
    zuul_cli(system, 'image-build', '--tenant', 'example', '--image', 'netns-root')
    # The reporter records the build, then its uploads: wait for both.
    wait(system, lambda: store.builds(image) and
         store.uploads(image, store.builds(image)[0].build_id), timeout=90,
         what='the first build and its upload recorded')
    (b1,) = store.builds(image)
    (job1,) = [b for b in finished(system, 'image', 'build-netns-root') if b.uuid != first]
    assert b1.build_uuid == job1.uuid and b1.job == 'build-netns-root'
    assert b1.artifacts == {'tar': f'file://{image_dir}/{job1.uuid}.tar'}
    assert b1.validated is False and b1.state == zi.BUILDING
    assert [u.provider for u in store.uploads(image, b1.build_id)] == [provider]

    # 3. zuul-launcher uploads it: the provider's image id is the
    #    directory it unpacked the tarball into.
    wait(system, lambda: store.get_upload(image, b1.build_id, provider).external_id,
         timeout=60, what='the upload of the first build')
    u1 = store.get_upload(image, b1.build_id, provider)
    assert u1.state == zi.READY and u1.format == 'tar'
    assert os.path.dirname(u1.external_id) == images_dir
    assert os.path.isfile(os.path.join(u1.external_id, 'etc', 'nodepool-image'))

    # 4. image-validate: the validation job runs on a node booted from
    #    that very upload (the node record says so, and so does the node:
    #    the marker is the build job's uuid).  While it runs the upload is
    #    not in service: the normal request still waits.
    wait(system, lambda: validations(system) == 1, timeout=120,
         what='the validation job running')
    (route,) = [r for r in routes if r['job'] == 'validate-netns-root']
    (node,) = route['routed'].nodes
    assert node.image_id == f'{image}-{b1.build_id}-{u1.uuid}'
    assert store.get_build(image, b1.build_id).state == zi.BUILDING
    assert store.in_service(image, provider) == []
    assert 'use-image' not in [launch['job'] for launch in system.launches]
    hold.unlink()
    wait(system, lambda: finished(system, 'image-validate', 'validate-netns-root'),
         timeout=120, what='the validation job')
    (v1,) = finished(system, 'image-validate', 'validate-netns-root')
    assert v1.result == 'SUCCESS', v1.result
    assert f'marker={job1.uuid}' in v1.result_data['booted'], v1.result_data
    wait(system, lambda: store.get_build(image, b1.build_id).state == zi.READY, timeout=60,
         what='the first build in service')
    assert store.get_upload(image, b1.build_id, provider).validated is True

    # 5. The waiting normal job gets a node from the new upload.
    wait(system, lambda: system.verified(early) != 0, timeout=120, what='check vote')
    assert system.verified(early) == 1, system.messages(early)[-1]
    (use,) = finished(system, 'check', 'use-image')
    assert f'marker={job1.uuid}' in use.result_data['booted']
    (route,) = [r for r in routes if r['job'] == 'use-image']
    assert [n.image_id for n in route['routed'].nodes] == [node.image_id]

    # 6. A second build: while its upload awaits validation, new nodes
    #    still boot from the first.
    hold.write_text('hold\n')
    zuul_cli(system, 'image-build', '--tenant', 'example', '--image', 'netns-root')
    wait(system, lambda: validations(system) == 2, timeout=150,
         what='the second validation job running')
    b2 = store.builds(image)[-1]
    assert b2.build_id > b1.build_id and b2.state == zi.BUILDING
    middle = system.store.create_change('org/app', 'master', 'Still the first',
                                        {'m': '1\n'})
    wait(system, lambda: system.verified(middle) != 0, timeout=120, what='check vote')
    assert system.verified(middle) == 1, system.messages(middle)[-1]
    assert [n.image_id for r in routes if r['job'] == 'use-image'
            for n in r['routed'].nodes][-1] == node.image_id
    assert store.get_build(image, b2.build_id).state == zi.BUILDING
    hold.unlink()
    wait(system, lambda: store.get_build(image, b2.build_id).state == zi.READY,
         timeout=60, what='the second build in service')

    # A third: once three are in service (keep: 2) the oldest is retired.
    zuul_cli(system, 'image-build', '--tenant', 'example', '--image', 'netns-root')
    wait(system, lambda: [b for b in store.builds(image)
                          if b.build_id > b2.build_id and b.state == zi.READY],
         timeout=150, what='the third build in service')
    wait(system, lambda: b1.build_id not in [b.build_id for b in store.builds(image)],
         timeout=60, what='the oldest build deleted')
    assert [b.state for b in store.builds(image)] == [zi.READY, zi.READY]
    assert store.uploads(image, b1.build_id) == []
    # Gone from the provider; the image-delete job removed its file.
    assert not os.path.exists(u1.external_id)
    assert sorted(os.listdir(images_dir)) == sorted(
        os.path.basename(store.get_upload(image, b.build_id, provider).external_id)
        for b in store.builds(image))
    wait(system, lambda: finished(system, 'image-delete', 'delete-netns-root'), timeout=60,
         what='the image-delete job')
    (d1,) = finished(system, 'image-delete', 'delete-netns-root')
    assert d1.result == 'SUCCESS'
    assert not (image_dir / f'{job1.uuid}.tar').exists()
    assert os.path.exists(store.builds(image)[0].artifacts['tar'][len('file://'):])

    # 7. New nodes boot from the newest build in service.
    b2, b3 = store.builds(image)
    u3 = store.get_upload(image, b3.build_id, provider)
    change = system.store.create_change('org/app', 'master', 'Newest image', {'b': '1\n'})
    wait(system, lambda: system.verified(change) != 0, timeout=120, what='second check vote')
    assert system.verified(change) == 1, system.messages(change)[-1]
    assert [n.image_id for r in routes if r['job'] == 'use-image'
            for n in r['routed'].nodes][-1] == f'{image}-{b3.build_id}-{u3.uuid}'
    assert f'marker={b3.build_uuid}' in finished(system, 'check', 'use-image')[-1] \
        .result_data['booted']

    # 8. The commands: the builds and uploads as the client lists them;
    #    zuul image-delete retires a build by hand.
    listed = zuul_cli(system, 'image-list', '--tenant', 'example', '--image', 'netns-root')
    assert b2.uuid in listed and b3.uuid in listed and b1.uuid not in listed
    listed = zuul_cli(system, 'image-upload-list', '--tenant', 'example')
    assert u3.external_id in listed
    zuul_cli(system, 'image-delete', '--tenant', 'example', '--build', b2.uuid)
    wait(system, lambda: [b.build_id for b in store.builds(image)] == [b3.build_id],
         timeout=60, what='the second build deleted by hand')
    wait(system, lambda: len(finished(system, 'image-delete', 'delete-netns-root')) == 2,
         timeout=60, what='the second image-delete job')
    assert not os.path.exists(b2.artifacts['tar'][len('file://'):])
    assert os.listdir(images_dir) == [os.path.basename(u3.external_id)]


# Uploads in service at once (``image-validated: true``), one build kept.
DIRECT_PIPELINES = """
- pipeline:
    name: image
    manager: independent
    trigger:
      zuul:
        - event: image-build
    success:
      zuul:
        image-built: true
        image-validated: true
- pipeline:
    name: image-delete
    manager: independent
    trigger:
      zuul:
        - event: image-delete
"""

HELD_JOBS = """
- job:
    name: build-netns-root
    image-build-name: netns-root
    run: playbooks/build-image.yaml
    vars:
      image_dir: {image_dir}
      rootfs_script: {script}
- job:
    name: delete-netns-root
    image-build-name: netns-root
    run: playbooks/delete-image.yaml
- job:
    name: use-image
    run: playbooks/held.yaml
    vars:
      image_dir: {image_dir}
    nodeset:
      nodes:
        - name: node
          label: zl-image
- project:
    image:
      jobs:
        - build-netns-root
    image-delete:
      jobs:
        - delete-netns-root
"""

HELD_PLAYBOOK = ON_IMAGE_PLAYBOOK + """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Keep the node while the test holds it
      wait_for:
        path: "{{ image_dir }}/hold-node"
        state: absent
        timeout: 120
"""


@needs_netns
@needs_launcher
def test_retired_upload_stays_while_a_node_runs_on_it(system, tmp_path):
    """``image-validated: true``: a build is in service once uploaded (no
    image-validate event).  With ``keep: 1`` (the section's image entry)
    the second build in service retires the first, but the provider keeps
    its upload while a node still runs on it; new nodes boot from the
    second; once the node is gone the upload and the records go."""
    # Under the system's root: the trusted build job's sandbox shows it.
    image_dir = pathlib.Path(system.root) / 'images'
    image_dir.mkdir()
    hold = image_dir / 'hold-node'
    hold.write_text('hold\n')
    system.create_projects(app_config=APP, pipelines=BASE_PIPELINES + DIRECT_PIPELINES)
    system.store.push_branch('org/project-config', 'master', {
        'zuul.d/nodes.yaml': textwrap.dedent(NODE_OBJECTS).replace(
            '    images:\n      - name: netns-root\n',
            '    images:\n      - name: netns-root\n        keep: 1\n'),
        'zuul.d/images.yaml': textwrap.dedent(HELD_JOBS).format(image_dir=image_dir,
                                                                script=ROOTFS_IMAGE),
        'playbooks/build-image.yaml': textwrap.dedent(BUILD_PLAYBOOK),
        'playbooks/held.yaml': textwrap.dedent(HELD_PLAYBOOK),
        'playbooks/delete-image.yaml': textwrap.dedent(DELETE_PLAYBOOK)},
        'An image built by Zuul, in service once uploaded')
    system.start()
    layout = system.scheduler.tenants['example'].layout
    assert [e.reason for e in getattr(layout, 'errors', []) if
            getattr(e, 'severity', 'error') == 'error'] == []
    routes = record_routes(system)
    store = zi.ImageStore(system.service.zk.client)
    image = layout.images['netns-root'].canonical_name
    provider = next(name for name in layout.resolved_providers
                    if name.endswith('/' + ZL_PROVIDER))
    system.start_zuul_launcher()

    # The startup build goes into service as soon as it is uploaded.
    wait(system, lambda: [b for b in store.builds(image) if b.state == zi.READY],
         timeout=120, what='the first build in service')
    (b1,) = store.builds(image)
    u1 = store.get_upload(image, b1.build_id, provider)
    assert b1.validated and u1.validated and u1.external_id
    assert [launch['pipeline'] for launch in system.launches] == ['image']

    # A node runs on it...
    change = system.store.create_change('org/app', 'master', 'Hold a node', {'a': '1\n'})
    wait(system, lambda: 'use-image' in [launch['job'] for launch in system.launches],
         timeout=120, what='the job holding a node')
    (route,) = [r for r in routes if r['job'] == 'use-image']
    (node,) = route['routed'].nodes
    assert node.image_id == f'{image}-{b1.build_id}-{u1.uuid}'

    # ... when a second build retires the first (keep: 1).
    zuul_cli(system, 'image-build', '--tenant', 'example', '--image', 'netns-root')
    wait(system, lambda: [b for b in store.builds(image)
                          if b.build_id > b1.build_id and b.state == zi.READY],
         timeout=120, what='the second build in service')
    b2 = store.builds(image)[-1]
    u2 = store.get_upload(image, b2.build_id, provider)
    wait(system, lambda: store.get_build(image, b1.build_id).state == zi.DELETING,
         timeout=60, what='the first build retired')
    assert [u.external_id for u in store.in_service(image, provider)] == [u2.external_id]
    # The provider refuses to delete an image a node runs on: the upload
    # and the build record stay until the node is gone.
    wait(system, lambda: 'in use by' in (
        store.get_upload(image, b1.build_id, provider).error or ''), timeout=60,
        what='the launcher trying to delete the first upload')
    assert os.path.isdir(u1.external_id)
    assert store.get_upload(image, b1.build_id, provider).state == zi.DELETING
    assert system.launcher_log().count('refused (image') == 1
    assert not finished(system, 'image-delete', 'delete-netns-root')

    hold.unlink()
    wait(system, lambda: system.verified(change) != 0, timeout=120, what='check vote')
    assert system.verified(change) == 1, system.messages(change)[-1]
    wait(system, lambda: [b.build_id for b in store.builds(image)] == [b2.build_id],
         timeout=60, what='the first build deleted')
    assert not os.path.exists(u1.external_id) and os.path.isdir(u2.external_id)
    wait(system, lambda: finished(system, 'image-delete', 'delete-netns-root'), timeout=60,
         what='the image-delete job')
    assert not os.path.exists(b1.artifacts['tar'][len('file://'):])


@needs_netns
@needs_launcher
def test_a_build_that_fails_validation_never_serves_and_is_superseded(system, tmp_path):
    """The validation job fails: the upload stays unvalidated, the build
    never goes into service and serves no node; once a newer build is in
    service the failed one is deleted (upload, records, image-delete)."""
    # Under the system's root: the trusted build job's sandbox shows it.
    image_dir = pathlib.Path(system.root) / 'images'
    image_dir.mkdir()
    (image_dir / 'fail-validation').write_text('fail\n')
    system.create_projects(app_config=APP, pipelines=BASE_PIPELINES + IMAGE_PIPELINES)
    system.store.push_branch('org/project-config', 'master', {
        'zuul.d/nodes.yaml': textwrap.dedent(NODE_OBJECTS),
        'zuul.d/images.yaml': textwrap.dedent(JOBS).format(image_dir=image_dir,
                                                           script=ROOTFS_IMAGE),
        'playbooks/build-image.yaml': textwrap.dedent(BUILD_PLAYBOOK),
        'playbooks/on-image.yaml': textwrap.dedent(ON_IMAGE_PLAYBOOK),
        'playbooks/validate-image.yaml': textwrap.dedent(VALIDATE_PLAYBOOK),
        'playbooks/delete-image.yaml': textwrap.dedent(DELETE_PLAYBOOK)},
        'An image built by Zuul, and its pipelines')
    system.start()
    store = zi.ImageStore(system.service.zk.client)
    layout = system.scheduler.tenants['example'].layout
    image = layout.images['netns-root'].canonical_name
    provider = next(name for name in layout.resolved_providers
                    if name.endswith('/' + ZL_PROVIDER))
    system.start_zuul_launcher()

    # The startup build is uploaded; its validation fails.
    wait(system, lambda: finished(system, 'image-validate', 'validate-netns-root'),
         timeout=150, what='the first validation job')
    (v1,) = finished(system, 'image-validate', 'validate-netns-root')
    assert v1.result == 'FAILURE'
    system.settle()
    (b1,) = store.builds(image)
    u1 = store.get_upload(image, b1.build_id, provider)
    assert b1.state == zi.BUILDING and u1.external_id and not u1.validated
    assert store.in_service(image, provider) == []

    # A newer build passes: it goes into service and the failed one goes.
    (image_dir / 'fail-validation').unlink()
    zuul_cli(system, 'image-build', '--tenant', 'example', '--image', 'netns-root')
    wait(system, lambda: [b for b in store.builds(image)
                          if b.build_id > b1.build_id and b.state == zi.READY],
         timeout=150, what='the second build in service')
    wait(system, lambda: b1.build_id not in [b.build_id for b in store.builds(image)],
         timeout=60, what='the failed build deleted')
    assert not os.path.exists(u1.external_id)
    wait(system, lambda: finished(system, 'image-delete', 'delete-netns-root'), timeout=60,
         what='the image-delete job')
    assert not os.path.exists(b1.artifacts['tar'][len('file://'):])
    (b2,) = store.builds(image)
    assert [u.build_id for u in store.in_service(image, provider)] == [b2.build_id]


@needs_netns
@needs_launcher
def test_image_events_wait_in_zookeeper_while_no_scheduler_runs(system, tmp_path):
    """The startup build is recorded; the scheduler stops; zuul-launcher
    uploads it and queues image-validate in /zuul/events/image, where it
    waits; a new scheduler emits no image-build (the image has a build),
    takes the event and the validation puts the build into service."""
    from kazoo.client import KazooClient
    # Under the system's root: the trusted build job's sandbox shows it.
    image_dir = pathlib.Path(system.root) / 'images'
    image_dir.mkdir()
    system.create_projects(app_config=APP, pipelines=BASE_PIPELINES + IMAGE_PIPELINES)
    system.store.push_branch('org/project-config', 'master', {
        'zuul.d/nodes.yaml': textwrap.dedent(NODE_OBJECTS),
        'zuul.d/images.yaml': textwrap.dedent(JOBS).format(image_dir=image_dir,
                                                           script=ROOTFS_IMAGE),
        'playbooks/build-image.yaml': textwrap.dedent(BUILD_PLAYBOOK),
        'playbooks/on-image.yaml': textwrap.dedent(ON_IMAGE_PLAYBOOK),
        'playbooks/validate-image.yaml': textwrap.dedent(VALIDATE_PLAYBOOK),
        'playbooks/delete-image.yaml': textwrap.dedent(DELETE_PLAYBOOK)},
        'An image built by Zuul, and its pipelines')
    system.start()
    layout = system.scheduler.tenants['example'].layout
    image = layout.images['netns-root'].canonical_name
    provider = next(name for name in layout.resolved_providers
                    if name.endswith('/' + ZL_PROVIDER))
    client = KazooClient(hosts=system.conf.zookeeper.hosts)
    client.start()
    try:
        store = zi.ImageStore(client)
        wait(system, lambda: store.builds(image), timeout=120, what='the startup build')
        system.settle()
        (b1,) = store.builds(image)

        def while_down():
            system.start_zuul_launcher()
            wait_for(lambda: [e for e in store.events() if e.type == 'image-validate'],
                     timeout=60, what='image-validate queued in ZooKeeper')
            (event,) = store.events()
            assert (event.image, event.build_id) == (image, b1.build_id)
            upload = store.get_upload(image, b1.build_id, provider)
            assert upload.external_id and not upload.validated

        system.restart_scheduler(down=while_down)
        wait(system, lambda: store.get_build(image, b1.build_id).state == zi.READY,
             timeout=120, what='the build in service after the restart')
        assert store.events() == []
        assert [(launch['pipeline'], launch['job']) for launch in system.launches] == [
            ('image-validate', 'validate-netns-root')]
        assert [b.build_id for b in store.builds(image)] == [b1.build_id]
    finally:
        client.stop()
        client.close()
