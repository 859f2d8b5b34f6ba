"""Two jobs at once on one backing node, end to end: the dev Gerrit, a
real ZooKeeper, Gearman, merger, executor and scheduler, and
nodepool-launcher serving a metastatic label (``max-parallel-jobs: 2``)
backed by netns nodes.  Each job waits on its node for the other to
have started, so both succeed only if they run at the same time; both
nodes are slots of the same backing node."""

from __future__ import annotations

import textwrap

import pytest

from nodepool.config import load_config_text
from nodepool.driver.netns.host import NetnsHostManager, available
from nodepool.launcher.launcher import Launcher
from nodepool.launcher.settings import LauncherSettings
from nodepool.zk.api import NodepoolZooKeeper
from tests.functional.system_support import zuul_system  # noqa: F401 - fixture
from tests.functional.test_e2e_zuul_launcher import record_routes
from tests.functional.test_nodepool_support import netns_settings, remove_bridge
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.skipif(available() is not None,
                                reason=f'netns nodes unavailable: {available()}')

PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: I have started
      file:
        path: "/tmp/{{ zuul.buildset }}-{{ zuul.job }}"
        state: touch
    - name: The other job runs at the same time
      wait_for:
        path: "/tmp/{{ zuul.buildset }}-{{ other }}"
        timeout: 120
"""

APP = """
- job:
    name: meta-a
    nodeset: {nodes: [{name: node, label: meta}]}
    vars: {other: meta-b}
    run: playbooks/meta.yaml
- job:
    name: meta-b
    nodeset: {nodes: [{name: node, label: meta}]}
    vars: {other: meta-a}
    run: playbooks/meta.yaml
- project:
    check:
      jobs:
        - meta-a
        - meta-b
"""


@pytest.fixture
def launcher(zuul_system, zk_chroot, ssh_keypair, tmp_path):  # noqa: F811
    net = netns_settings(tmp_path)
    config = load_config_text(textwrap.dedent(f"""
        labels:
          - name: big
          - name: meta
        providers:
          - name: backing
            driver: netns
            bridge: {net['bridge']}
            subnet: {net['subnet']}
            state-dir: {net['state-dir']}
            authorized-keys: ['{ssh_keypair.public_key.strip()}']
            pools:
              - name: main
                max-servers: 2
                labels:
                  - name: big
                    username: root
                    python-path: /usr/bin/python3
          - name: meta
            driver: metastatic
            pools:
              - name: main
                max-servers: 4
                labels:
                  - name: meta
                    backing-label: big
                    max-parallel-jobs: 2
                    grace-time: 1
        """))
    zk = NodepoolZooKeeper.from_hosts(zk_chroot.hosts)
    launcher = Launcher(config, zk, LauncherSettings(
        hostname='launcher.test', cleanup_interval=1.0, poll_interval=0.5,
        min_ready_interval=1.0))
    launcher.start()
    try:
        yield zk
    finally:
        launcher.stop()
        zk.close()
        NetnsHostManager(net['state-dir'], net['subnet'], net['bridge']).cleanup_all('backing-')
        remove_bridge(net['bridge'])


def test_two_jobs_share_one_backing_node_at_once(zuul_system, launcher):  # noqa: F811
    system = zuul_system
    system.create_projects(app_config=APP)
    system.store.push_branch('org/app', 'master',
                             {'playbooks/meta.yaml': textwrap.dedent(PLAYBOOK)}, 'Playbook')
    system.start()
    routes = record_routes(system)
    change = system.store.create_change('org/app', 'master', 'Two at once', {'x.txt': '1\n'})
    wait_for(lambda: system.verified(change) != 0, timeout=300, what='check vote')
    message = system.messages(change)[-1]
    assert system.verified(change) == 1, message
    assert 'meta-a' in message and 'meta-b' in message
    nodes = [n for r in routes for n in r['routed'].nodes]
    assert len(nodes) == 2 and nodes[0].id != nodes[1].id
    assert nodes[0].host_id == nodes[1].host_id       # the same backing node
    assert nodes[0].interface_ip == nodes[1].interface_ip
    backing_ids = {n.host_id for n in nodes}
    wait_for(lambda: not [n for n in launcher.get_nodes()
                          if n.id in backing_ids or n.state in ('in-use', 'used')],
             timeout=60, what='slots and backing node returned')
