"""AWS nodes end to end: the dev Gerrit, a real ZooKeeper, Gearman,
merger, executor and scheduler; nodepool-launcher (in this process) and
a real ``zuul-launcher`` process, each serving an AWS label through the
same aws driver, from nodepool.yaml and from the seed 001 objects of the
tenant's config project; the EC2 stand-in (moto's server) whose
instances are netns hosts.  A job runs on an instance of each."""

from __future__ import annotations

import ipaddress
import textwrap

import pytest

from nodepool.config import load_config_text
from nodepool.driver.netns.host import available
from nodepool.launcher.launcher import Launcher
from nodepool.launcher.settings import LauncherSettings
from nodepool.zk.api import NodepoolZooKeeper
from nodepool.zk.paths import ZUUL_LAUNCHER
from tests.functional import aws_support
from tests.functional.system_support import zuul_system  # noqa: F401 - fixture
from tests.harness.waiting import wait_for

ec2 = aws_support.ec2

pytestmark = pytest.mark.skipif(available() is not None,
                                reason=f'netns nodes unavailable: {available()}')

PLAYBOOK = """
- hosts: all
  tasks:
    - name: The job runs on the instance EC2 gave it
      command: hostname -I
      register: addresses
    - assert:
        that:
          - "nodepool.interface_ip in addresses.stdout"
          - "nodepool.provider is match('(np-ec2|.*/org/project-config/zl-ec2)$')"
"""

JOBS = """
- job:
    name: on-nodepool-aws
    nodeset:
      nodes:
        - name: node
          label: np-aws
    run: playbooks/aws.yaml
- job:
    name: on-zuul-launcher-aws
    nodeset:
      nodes:
        - name: node
          label: zl-aws
    run: playbooks/aws.yaml
"""

APP = """
- project:
    check:
      jobs:
        - on-nodepool-aws
        - on-zuul-launcher-aws
"""


def node_objects(account: dict) -> str:
    return textwrap.dedent(f"""
        - image:
            name: debian-aws
            type: cloud
            image-id: {account['image']}
            username: root
            python-path: /usr/bin/python3
        - flavor:
            name: medium
            instance-type: t3.medium
        - label:
            name: zl-aws
            image: debian-aws
            flavor: medium
            key-name: zuul
        - section:
            name: aws-east
            connection: ec2
            region: us-east-1
            subnet-id: {account['subnet']}
            security-group-id: {account['group']}
            quota:
              instances: 2
            images:
              - name: debian-aws
            flavors:
              - name: medium
        - provider:
            name: zl-ec2
            section: aws-east
            labels:
              - name: zl-aws
        """)


@pytest.fixture
def nodepool_launcher(zk_chroot, ec2):
    config = load_config_text(textwrap.dedent(f"""
        labels:
          - name: np-aws
        providers:
          - name: np-ec2
            driver: aws
            region-name: us-east-1
            cloud-images:
              - name: debian
                image-id: {ec2.account['image']}
                username: root
                python-path: /usr/bin/python3
            pools:
              - name: main
                max-servers: 2
                subnet-id: {ec2.account['subnet']}
                security-group-id: {ec2.account['group']}
                labels:
                  - name: np-aws
                    cloud-image: debian
                    instance-type: t3.medium
                    key-name: zuul
        """))
    zk = NodepoolZooKeeper.from_hosts(zk_chroot.hosts)
    launcher = Launcher(config, zk, LauncherSettings(
        hostname='nodepool-launcher.test', cleanup_interval=1.0, poll_interval=0.5,
        min_ready_interval=1.0))
    launcher.start()
    try:
        yield zk
    finally:
        launcher.stop()
        zk.close()


def test_aws_label_served_by_both_launchers(zuul_system, nodepool_launcher, ec2):  # noqa: F811
    system = zuul_system
    system.add_provider_connection('ec2', 'aws', endpoint_url=ec2.url,
                                   access_key_id=aws_support.ENV['AWS_ACCESS_KEY_ID'],
                                   secret_access_key=aws_support.ENV['AWS_SECRET_ACCESS_KEY'])
    system.create_projects(app_config=APP, config_files={
        'zuul.d/aws-jobs.yaml': JOBS, 'zuul.d/aws-nodes.yaml': node_objects(ec2.account),
        'playbooks/aws.yaml': PLAYBOOK})
    system.start()
    system.start_zuul_launcher()
    change = system.store.create_change('org/app', 'master', 'Run on EC2', {'x.txt': '1\n'})
    wait_for(lambda: system.verified(change) != 0, timeout=300, what='check vote')
    message = system.messages(change)[-1]
    assert system.verified(change) == 1, message + system.launcher_log()[-3000:]
    assert 'on-nodepool-aws' in message and 'on-zuul-launcher-aws' in message
    # Both instances came from the stand-in's subnet, tagged by their launcher.
    client = ec2.client()
    found = client.describe_instances()['Reservations']
    providers = sorted({t['Value'] for r in found for i in r['Instances'] for t in i['Tags']
                        if t['Key'] == 'nodepool_provider_name'})
    assert len(providers) == 2 and providers[0].endswith('/org/project-config/zl-ec2')
    assert providers[1] == 'np-ec2'
    for reservation in found:
        for inst in reservation['Instances']:
            assert ipaddress.ip_address(inst['PrivateIpAddress']) in \
                ipaddress.ip_network(ec2.cidr)
    zl = system.service.zk.sibling(ZUUL_LAUNCHER)
    wait_for(lambda: not [n for n in zl.get_nodes() + nodepool_launcher.get_nodes()
                          if n.state in ('in-use', 'used')], timeout=60,
             what='nodes of both launchers returned')
