"""A top-level diskimage's ``connection-type`` and ``connection-port``:
nodes launched from the image carry them in their ZooKeeper record (the
executor's inventory reads ``ansible_connection``/``ansible_port`` from
there).  Built by nodepool-builder, uploaded to and booted in the fake
OpenStack cloud."""

from __future__ import annotations

from nodepool.config import load_config_text
from tests.fakes import openstack_cloud as fake_cloud
from tests.functional import test_builder_support as bsupport
from tests.functional import test_nodepool_support as nsupport
from tests.functional.test_builder_support import TINY_IMAGE
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
    connection-type: network_cli
    connection-port: 2022
labels:
  - name: tiny-node
providers:
  - name: cloud1
    cloud: fake
    region-name: RegionOne
    rate: 0
    diskimages:
      - name: tiny
    pools:
      - name: main
        max-servers: 4
        labels:
          - name: tiny-node
            diskimage: tiny
            min-ram: 512
"""


def test_nodes_from_a_built_image_carry_its_connection(builders, launchers, requestor, zk,
                                                       openstack_cloud, tmp_path):
    text = CONFIG.format(tmp=tmp_path, dib_cmd=TINY_IMAGE)
    launcher = launchers.make(text)
    builders.make(text)
    handle = requestor.submit(['tiny-node'])
    assert handle.wait(60) and handle.fulfilled
    node = zk.get_node(handle.nodes[0].id)
    assert (node.connection_type, node.connection_port) == ('network_cli', 2022)
    assert (handle.nodes[0].connection_type, handle.nodes[0].connection_port) == \
        ('network_cli', 2022)
    requestor.release(handle)
    wait_until(launcher, lambda: not zk.get_nodes(), 'node deleted')


def test_winrm_image_defaults_to_port_5986_and_children_inherit():
    config = load_config_text("""
diskimages:
  - name: base
    abstract: true
    connection-type: winrm
    elements: [vm]
  - name: windows
    parent: base
  - name: windows-custom
    parent: base
    connection-port: 5999
""")
    windows = config.diskimages['windows']
    assert (windows.connection_type, windows.connection_port) == ('winrm', 5986)
    assert config.diskimages['windows-custom'].connection_port == 5999
