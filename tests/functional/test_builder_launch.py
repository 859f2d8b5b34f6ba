"""Build, upload, launch: nodes of a label with ``diskimage:`` boot from
the newest upload, for real (a netns node whose sshd runs chrooted in
the uploaded root filesystem), and requests wait for an upload."""

from __future__ import annotations

from nodepool.zk.images import DELETING, READY
from nodepool.zk.records import REQUESTED
from tests.functional import test_builder_support as bsupport
from tests.functional import test_nodepool_support as nsupport
from tests.functional.test_builder_support import (
    ROOTFS_IMAGE,
    build_states,
    builder_config,
    needs_netns,
    upload_states,
)
from tests.functional.test_nodepool_support import ssh_run, wait_until

builders = bsupport.builders
upload_provider = bsupport.upload_provider
launchers = nsupport.launchers
requestor = nsupport.requestor
zk = nsupport.zk


def image_of(node, keypair, tmp_path) -> list[str]:
    """/etc/nodepool-image as the node itself shows it over SSH."""
    out = ssh_run(node.interface_ip, node.connection_port, node.username,
                  keypair.private_key_path, node.host_keys, tmp_path,
                  'cat /etc/nodepool-image; echo scratch > /tmp/mine; cat /tmp/mine')
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def deferred(launcher, request_id: str) -> bool:
    return any(request_id in w.deferred for w in launcher.workers)


@needs_netns
def test_node_boots_from_the_newest_upload(builders, launchers, requestor, zk,
                                           upload_provider, ssh_keypair, tmp_path):
    text = builder_config(upload_provider, tmp_path, dib_cmd=ROOTFS_IMAGE,
                          key=ssh_keypair.public_key)
    launcher = launchers.make(text)
    provider = upload_provider['name']

    # No image yet: the request waits (neither declined nor failed).
    first = requestor.submit(['tiny-node'])
    wait_until(launcher, lambda: deferred(launcher, first.request.id), 'request deferred')
    request = zk.get_request(first.request.id)
    assert (request.state, request.declined_by) == (REQUESTED, [])

    builder = builders.make(text)
    assert first.wait(120) and first.fulfilled
    node1 = first.nodes[0]
    assert node1.image_id == 'tiny-0000000001-0000000001'
    assert node1.username == 'root'        # the diskimage's (the label sets none)
    assert image_of(node1, ssh_keypair, tmp_path) == [
        'image=tiny-0000000001', 'elements=', 'release=bookworm',
        'marker=built-for-tests', 'scratch']

    # A new build: new nodes boot from it; the old node keeps running.
    builder.images.request_build('tiny')
    builder.wait_for(lambda: ('0000000002', '0000000001', READY) in upload_states(builder),
                     timeout=60, what='second build uploaded')
    second = requestor.submit(['tiny-node'])
    assert second.wait(120) and second.fulfilled
    node2 = second.nodes[0]
    assert node2.image_id == 'tiny-0000000002-0000000001'
    lines = image_of(node2, ssh_keypair, tmp_path)
    assert lines[0] == 'image=tiny-0000000002'
    assert lines[-1] == 'scratch'          # each node writes to its own layer

    # A third build retires the first, whose upload a node still runs on:
    # the provider refuses to delete it until the node is gone.
    builder.images.request_build('tiny')
    builder.wait_for(lambda: ('0000000003', '0000000001', READY) in upload_states(builder),
                     timeout=60, what='third build uploaded')
    builder.run_cleanup()
    assert build_states(builder)[0] == ('0000000001', DELETING)
    assert ('0000000001', '0000000001', DELETING) in upload_states(builder)
    requestor.release(first)
    wait_until(launcher, lambda: zk.get_node(node1.id) is None, 'first node deleted',
               timeout=60)
    builder.run_cleanup()
    builder.wait_for(lambda: [b for b, _ in build_states(builder)] ==
                     ['0000000002', '0000000003'], what='first build gone')
    assert builder.images.get_most_recent_upload('tiny', provider).build_id == '0000000003'
    requestor.release(second)
    wait_until(launcher, lambda: not zk.get_nodes(), 'nodes deleted', timeout=60)


@needs_netns
def test_paused_provider_image_is_not_launched_from(builders, launchers, requestor, zk,
                                                    upload_provider, tmp_path):
    builder = builders.make(builder_config(upload_provider, tmp_path))
    builder.wait_for(lambda: upload_states(builder) == [('0000000001', '0000000001', READY)],
                     what='an upload')
    launcher = launchers.make(builder_config(upload_provider, tmp_path, upload_pause=True))
    handle = requestor.submit(['tiny-node'])
    wait_until(launcher, lambda: deferred(launcher, handle.request.id), 'request deferred')
    assert zk.get_request(handle.request.id).state == REQUESTED
    assert zk.get_nodes() == []
    requestor.cancel(handle)
