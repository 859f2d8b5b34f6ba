"""A two-node job end to end: the scheduler requests nodes from
nodepool-launcher over ZooKeeper, the launcher boots them in network
namespaces (real sshd), the executor runs an untrusted playbook on both
over SSH, and the nodes are returned and deleted afterwards."""

from __future__ import annotations

import io
import os
import textwrap

import pytest

from nodepool.config import load_config_text
from nodepool.driver.netns.host import NetnsHostManager
from nodepool.launcher.launcher import Launcher
from nodepool.launcher.settings import LauncherSettings
from nodepool.zk.api import NodepoolZooKeeper
from tests.functional.system_support import zuul_system  # noqa: F401 - fixture
from tests.harness.waiting import wait_for

APP = """
- nodeset:
    name: two-nodes
    nodes:
      - name: controller
        label: ubuntu-jammy
      - name: compute
        label: ubuntu-jammy
    groups:
      - name: peers
        nodes: [controller, compute]
- job:
    name: multinode
    nodeset: two-nodes
    run: playbooks/multinode.yaml
- project:
    check:
      jobs:
        - multinode
"""

PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Each node answers
      command: "true"
- hosts: controller
  gather_facts: false
  tasks:
    - name: The controller reaches the compute node's sshd
      wait_for:
        host: "{{ hostvars['compute']['nodepool']['private_ipv4'] or
                  hostvars['compute']['ansible_host'] }}"
        port: 22
        timeout: 20
    - name: Groups from the nodeset are in the inventory
      assert:
        that: "groups['peers'] | length == 2"
"""


@pytest.fixture
def launcher(zuul_system, zk_chroot, ssh_keypair, tmp_path):  # noqa: F811
    state = str(tmp_path / 'netns')
    config = load_config_text(textwrap.dedent(f"""
        labels:
          - name: ubuntu-jammy
        providers:
          - name: e2e-netns
            driver: netns
            bridge: zqbr0
            subnet: 10.233.0.0/16
            state-dir: {state}
            authorized-keys: ['{ssh_keypair.public_key.strip()}']
            pools:
              - name: main
                max-servers: 4
                labels:
                  - name: ubuntu-jammy
                    username: root
                    python-path: /usr/bin/python3
        """))
    zk = NodepoolZooKeeper.from_hosts(zk_chroot.hosts)
    settings = LauncherSettings(hostname='launcher.test', cleanup_interval=1.0,
                                poll_interval=0.5, min_ready_interval=1.0)
    launcher = Launcher(config, zk, settings)
    launcher.start()
    try:
        yield launcher, zk
    finally:
        launcher.stop()
        zk.close()
        NetnsHostManager(state, '10.233.0.0/16', 'zqbr0').cleanup_all('e2e-netns-')
        os.system('ip link del zqbr0 2>/dev/null')


def test_two_node_job_runs_on_launched_nodes(zuul_system, launcher):  # noqa: F811
    system = zuul_system
    _, zk = launcher
    system.create_projects(app_config=APP)
    system.store.push_branch('org/app', 'master',
                             {'playbooks/multinode.yaml': textwrap.dedent(PLAYBOOK)},
                             'Add the multinode playbook')
    system.start()
    change = system.store.create_change('org/app', 'master', 'Use two nodes',
                                        {'x.txt': '1\n'})
    wait_for(lambda: system.verified(change) != 0, timeout=300, what='check vote')
    message = system.messages(change)[-1]
    assert system.verified(change) == 1, message
    assert 'multinode' in message and 'SUCCESS' in message
    # Nodes were returned: used, then deleted by the launcher's cleanup.
    wait_for(lambda: not [n for n in zk.get_nodes() if n.state in ('in-use', 'used')],
             timeout=60, what='nodes returned and cleaned up')


FAILING_APP = """
- job:
    name: always-fails
    nodeset:
      nodes:
        - name: node
          label: ubuntu-jammy
    run: playbooks/fails.yaml
- project:
    check:
      jobs:
        - always-fails
"""


def test_autohold_keeps_the_nodes_of_a_failing_build(zuul_system, launcher,  # noqa: F811
                                                     capsys):
    from zuul.lib import rpc_protocol as p
    from zuul.lib.rpc import RPCClient
    system = zuul_system
    _, zk = launcher
    system.create_projects(app_config=FAILING_APP)
    system.store.push_branch('org/app', 'master', {
        'playbooks/fails.yaml': '- hosts: all\n  gather_facts: false\n  tasks:\n'
                                '    - command: "false"\n'})
    system.start()
    client = RPCClient('127.0.0.1', system.conf.gearman.port, timeout=120)
    try:
        hold = client.call(p.AUTOHOLD, p.RPCRequest(
            tenant='example', project='org/app', job='always-fails', reason='debug it',
            count=1, node_hold_expiration=7200))
        assert hold['ref_filter'] == '.*' and hold['count'] == 1
        first = system.store.create_change('org/app', 'master', 'Fails', {'a': '1\n'})
        wait_for(lambda: system.verified(first) == -1, timeout=300, what='failure')
        wait_for(lambda: [n for n in zk.get_nodes() if n.state == 'hold'], timeout=60,
                 what='held node')
        (held,) = [n for n in zk.get_nodes() if n.state == 'hold']
        assert held.hold_job == 'always-fails' and 'debug it' in held.comment
        assert held.hold_expiration == 7200
        listed = client.call(p.AUTOHOLD_LIST, p.RPCRequest(tenant='example'))
        assert listed[0]['current_count'] == 1
        assert listed[0]['nodes'][0]['nodes'] == [held.id]
        # The count is used up: the next failure's nodes are returned.
        second = system.store.create_change('org/app', 'master', 'Fails too', {'b': '1\n'})
        wait_for(lambda: system.verified(second) == -1, timeout=300, what='second failure')
        wait_for(lambda: not [n for n in zk.get_nodes() if n.state in ('in-use', 'used')],
                 timeout=60, what='second build nodes returned')
        assert [n.id for n in zk.get_nodes() if n.state == 'hold'] == [held.id]
    finally:
        client.shutdown()
    # nodepool list shows the held node.
    import argparse

    from nodepool.cmd.client import cmd_list
    cmd_list(argparse.Namespace(detail=True, json=False), zk)
    assert 'hold' in capsys.readouterr().out


SECRET_JOB = """
- job:
    name: use-secret
    nodeset:
      nodes:
        - name: node
          label: ubuntu-jammy
    secrets:
      - name: creds
        secret: app-creds
    run: playbooks/secret.yaml
- project:
    post:
      jobs:
        - use-secret
"""

SECRET_PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: The decrypted secret reached the job
      assert:
        that:
          - creds.password == 'hunter2 with spaces'
"""


# It passes in seconds. It used to hang in the full suite: a Gearman job
# was never handed to the idle merger (a lost wake-up, issue 29; the
# embedded server now wakes idle workers). A hang costs this timeout.
@pytest.mark.timeout(120)
def test_zuul_encrypt_output_decrypts_in_a_job(zuul_system, launcher, tmp_path):  # noqa: F811
    from zuul.cmd.client import main as zuul_main
    from zuul.lib import rpc_protocol as p
    from zuul.lib.rpc import RPCClient
    system = zuul_system
    system.create_projects(app_config='[]\n')
    system.start()
    client = RPCClient('127.0.0.1', system.conf.gearman.port, timeout=120)
    try:
        pem = client.call(p.KEY_GET, p.RPCRequest(tenant='example', project='org/app'))
    finally:
        client.shutdown()
    (tmp_path / 'app.pem').write_text(pem)
    (tmp_path / 'value').write_text('hunter2 with spaces')
    out = io.StringIO()
    rc = zuul_main(['encrypt', '--tenant', 'example', '--project', 'org/app',
                    '--public-key', str(tmp_path / 'app.pem'), '--infile',
                    str(tmp_path / 'value'), '--secret-name', 'app-creds',
                    '--field-name', 'password'], out=out)
    assert rc == 0
    stanza = out.getvalue()
    assert '!encrypted/pkcs1-oaep' in stanza and 'hunter2' not in stanza
    system.store.push_branch('org/app', 'master', {
        '.zuul.yaml': stanza + textwrap.dedent(SECRET_JOB),
        'playbooks/secret.yaml': textwrap.dedent(SECRET_PLAYBOOK)}, 'Add a secret job')
    wait_for(lambda: [b for b in system.builds if b.job.name == 'use-secret' and b.result],
             timeout=100, what='the post build')
    (build,) = [b for b in system.builds if b.job.name == 'use-secret']
    assert build.result == 'SUCCESS'
