"""zuul-launcher end to end over a real ZooKeeper: requests submitted as
Zuul's scheduler submits them (canonical label names, /zuul/node-requests)
are fulfilled by the global request loop and the provider loops."""

from __future__ import annotations

from tests.functional import test_zuul_launcher_support as support
from tests.functional.test_zuul_launcher_support import (
    canonical,
    provider,
    publish_providers,
    zuul_zk,
)
from tests.harness.waiting import wait_for

launchers = support.launchers
requestor = support.requestor

UBUNTU = canonical('ubuntu')


def test_one_node_request_is_fulfilled(zk_client, launchers, requestor):
    publish_providers(zk_client, provider('sim-a', ['ubuntu']))
    launchers()
    handle = requestor.submit([UBUNTU], event_id='ev-1')
    assert handle.wait(20)
    assert handle.fulfilled
    [node] = handle.nodes
    assert node.type == UBUNTU
    assert node.provider == canonical('sim-a')
    assert node.interface_ip
    requestor.release(handle)
    zk = zuul_zk(zk_client)
    wait_for(lambda: zk.get_nodes() == [], timeout=20, what='used node deleted')
