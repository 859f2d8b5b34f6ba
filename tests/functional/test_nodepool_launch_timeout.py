"""A provider's ``launch-timeout`` for drivers whose adapter does not time
its own launches (simulated, netns): an instance not ready that long
after its create fails the launch attempt; the node is deleted and the
request is retried up to ``launch-retries`` times, then declined."""

from __future__ import annotations

from nodepool.zk.records import FAILED
from tests.functional import test_nodepool_nodes as nodes
from tests.functional import test_nodepool_support as support
from tests.functional.test_nodepool_support import request_state, wait_until

launchers = support.launchers
requestor = support.requestor
zk = support.zk
netns_provider = nodes.netns_provider

CONFIG = """
labels:
  - name: small
providers:
  - name: sim
    driver: simulated
    boot-delay: {boot_delay}
    launch-timeout: {launch_timeout}
    launch-retries: 1
    pools:
      - name: main
        max-servers: 2
        labels:
          - name: small
"""


def test_instance_not_ready_within_launch_timeout_fails_the_attempt(launchers, requestor,
                                                                     zk):
    # Ready only after an hour: without launch-timeout the launch would
    # wait (boot-timeout is not a bound on the time to ready any more).
    launcher = launchers.make(CONFIG.format(boot_delay=3600, launch_timeout=0.3))
    adapter = launcher.adapters['sim']
    handle = requestor.submit(['small'])
    assert handle.wait(30)
    assert not handle.fulfilled
    # One attempt and one retry, each instance deleted with its node.
    assert len(adapter.created) == 2
    wait_until(launcher, lambda: sorted(adapter.deleted) == sorted(adapter.created),
               'timed-out instances deleted')
    wait_until(launcher, lambda: not zk.get_nodes(), 'failed nodes removed')
    assert request_state(zk, handle.id) in (None, FAILED)


def test_instance_ready_within_launch_timeout_is_used(launchers, requestor, zk):
    launcher = launchers.make(CONFIG.format(boot_delay=0.3, launch_timeout=30))
    handle = requestor.submit(['small'])
    assert handle.wait(30) and handle.fulfilled
    assert len(launcher.adapters['sim'].created) == 1
    requestor.release(handle)
    wait_until(launcher, lambda: not zk.get_nodes(), 'used node deleted')


@nodes.needs_netns
def test_netns_host_not_up_within_launch_timeout_fails(netns_provider, launchers, requestor,
                                                       zk, ssh_keypair):
    # Starting a namespace and its sshd takes far longer than 1 ms.
    text = nodes.netns_config(netns_provider, ssh_keypair.public_key).replace(
        '    boot-timeout: 60\n', '    boot-timeout: 60\n    launch-timeout: 0.001\n'
        '    launch-retries: 0\n')
    launcher = launchers.make(text)
    handle = requestor.submit(['netns-node'])
    assert handle.wait(120)
    assert not handle.fulfilled
    manager = launcher.adapters[netns_provider['name']].manager
    wait_until(launcher, lambda: not zk.get_nodes(), 'failed node removed', timeout=60)
    assert manager.list(netns_provider['name'] + '-') == []
