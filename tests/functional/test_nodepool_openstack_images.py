"""Build, upload to Glance, boot: nodepool-builder uploads its builds to
the fake cloud through the openstack provider, the launcher boots servers
from the newest upload, and retired builds leave Glance."""

from __future__ import annotations

from nodepool.zk.images import READY
from tests.fakes import openstack_cloud as fake_cloud
from tests.functional import test_builder_support as bsupport
from tests.functional import test_nodepool_support as nsupport
from tests.functional.test_builder_support import TINY_IMAGE, upload_states
from tests.functional.test_nodepool_support import wait_until

builders = bsupport.builders
launchers = nsupport.launchers
requestor = nsupport.requestor
zk = nsupport.zk
openstack_cloud = fake_cloud.openstack_cloud

CONFIG = """
images-dir: {tmp}/images
build-log-dir: {tmp}/logs
diskimages:
  - name: tiny
    dib-cmd: {dib_cmd}
    username: root
labels:
  - name: tiny-node
providers:
  - name: cloud1
    cloud: fake
    region-name: RegionOne
    rate: 0
    diskimages:
      - name: tiny
        meta:
          purpose: ci
    pools:
      - name: main
        max-servers: 4
        host-key-checking: false
        labels:
          - name: tiny-node
            diskimage: tiny
            min-ram: 512
"""


def glance_image(cloud, image_id):
    with cloud.lock:
        return cloud.images.get(image_id)


def test_nodes_boot_from_the_newest_glance_upload(builders, launchers, requestor, zk,
                                                  openstack_cloud, tmp_path):
    cloud = openstack_cloud
    text = CONFIG.format(tmp=tmp_path, dib_cmd=TINY_IMAGE)
    launcher = launchers.make(text)
    first = requestor.submit(['tiny-node'])
    builder = builders.make(text)
    assert first.wait(60) and first.fulfilled
    node1 = first.nodes[0]
    assert node1.image_id == 'tiny-0000000001-0000000001'
    assert node1.username == 'root'
    upload1 = builder.images.get_most_recent_upload('tiny', 'cloud1')
    image1 = glance_image(cloud, upload1.external_id)
    assert image1.status == 'active' and image1.disk_format == 'qcow2'
    assert image1.name == 'tiny-0000000001'
    assert image1.properties['purpose'] == 'ci'
    assert image1.properties['nodepool_build_id'] == '0000000001'
    assert image1.properties['nodepool_provider_name'] == 'cloud1'
    server1 = cloud.servers[node1.external_id]
    assert server1.image_id == upload1.external_id
    assert server1.metadata['nodepool_image_name'] == 'tiny'

    # A new build: new nodes boot from its upload.
    builder.images.request_build('tiny')
    builder.wait_for(lambda: ('0000000002', '0000000001', READY) in upload_states(builder),
                     timeout=30, what='second build uploaded')
    second = requestor.submit(['tiny-node'])
    assert second.wait(30) and second.fulfilled
    upload2 = builder.images.get_most_recent_upload('tiny', 'cloud1')
    assert second.nodes[0].image_id == 'tiny-0000000002-0000000001'
    assert cloud.servers[second.nodes[0].external_id].image_id == upload2.external_id

    # A third build retires the first: its upload leaves Glance.
    builder.images.request_build('tiny')
    builder.wait_for(lambda: ('0000000003', '0000000001', READY) in upload_states(builder),
                     timeout=30, what='third build uploaded')
    builder.run_cleanup()
    cloud.wait_for(lambda: glance_image(cloud, upload1.external_id) is None,
                   what='the first upload deleted from Glance')
    assert glance_image(cloud, upload2.external_id).status == 'active'
    for handle in (first, second):
        requestor.release(handle)
    wait_until(launcher, lambda: not zk.get_nodes(), 'nodes deleted')
