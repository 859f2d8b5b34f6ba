"""nodepool-builder's ``delete-after-upload`` and ``keep-formats``: on a
real ZooKeeper, with a real build command, uploading to the fake
OpenStack cloud through openstacksdk (Glance over HTTP)."""

from __future__ import annotations

import glob
import os

from nodepool.zk.images import FAILED, READY
from tests.fakes import openstack_cloud as fake_cloud
from tests.functional import test_builder_support as support
from tests.functional.test_builder_support import (
    TINY_IMAGE,
    FakeClock,
    fast_builder_settings,
    upload_states,
)

builders = support.builders
openstack_cloud = fake_cloud.openstack_cloud

CONFIG = """
images-dir: {tmp}/images
build-log-dir: {tmp}/logs
diskimages:
  - name: tiny
    dib-cmd: {dib_cmd}
    formats: [tar]         # not taken by the cloud: qcow2 is built too
    {extra}
providers:
  - name: cloud1
    cloud: fake
    rate: 0
    diskimages:
      - name: tiny
"""


def config(tmp_path, extra=''):
    return CONFIG.format(tmp=tmp_path, dib_cmd=TINY_IMAGE, extra=extra)


def files(builder, build_id='0000000001') -> list[str]:
    return sorted(os.path.basename(p) for p in
                  glob.glob(os.path.join(builder.images_dir, f'tiny-{build_id}.*')))


def uploaded(builder, state=READY):
    builder.wait_for(lambda: ('0000000001', '0000000001', state) in upload_states(builder),
                     timeout=30, what=f'the first upload {state}')
    return builder.images.get_most_recent_upload('tiny', 'cloud1')


def test_files_are_deleted_after_upload_but_the_kept_formats(builders, openstack_cloud,
                                                             tmp_path):
    builder = builders.make(config(tmp_path, 'delete-after-upload: true\n'
                                             '    keep-formats: [tar]'))
    upload = uploaded(builder)
    assert upload.format == 'qcow2'
    builder.run_cleanup()
    assert files(builder) == ['tiny-0000000001.tar']
    build = builder.images.get_build('tiny', '0000000001')
    # Still in service: the build and its upload stay ready.
    assert build.state == READY and build.formats == ['tar']
    assert openstack_cloud.images[upload.external_id].status == 'active'
    builder.run_cleanup()                     # nothing more to do
    assert files(builder) == ['tiny-0000000001.tar']


def test_without_keep_formats_every_file_goes(builders, openstack_cloud, tmp_path):
    builder = builders.make(config(tmp_path, 'delete-after-upload: true'))
    uploaded(builder)
    builder.run_cleanup()
    assert files(builder) == []
    assert builder.images.get_build('tiny', '0000000001').state == READY


def test_files_stay_without_delete_after_upload(builders, openstack_cloud, tmp_path):
    builder = builders.make(config(tmp_path, 'keep-formats: [tar]'))
    uploaded(builder)
    builder.run_cleanup()
    assert files(builder) == ['tiny-0000000001.qcow2', 'tiny-0000000001.tar']


def test_files_stay_until_the_upload_succeeds(builders, openstack_cloud, tmp_path):
    openstack_cloud.fail_next_uploads(1)
    clock = FakeClock()
    builder = builders.make(config(tmp_path, 'delete-after-upload: true'),
                            settings=fast_builder_settings(upload_retry_delay=300),
                            clock=clock)
    uploaded(builder, FAILED)
    builder.run_cleanup()
    assert files(builder) == ['tiny-0000000001.qcow2', 'tiny-0000000001.tar']
    clock.advance(300)
    builder.run_upload_pass()
    builder.wait_for(lambda: any(s == READY for _, _, s in upload_states(builder)),
                     timeout=30, what='the retried upload ready')
    builder.run_cleanup()
    assert files(builder) == []
