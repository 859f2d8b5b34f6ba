"""nodepool-launcher with the aws driver: boto3, unmodified, against the
EC2 stand-in (moto's server in its own process) on a real ZooKeeper.
Instances are netns hosts with sshd at the address moto gave them, so
SSH checks, host key scans and logins are real."""

from __future__ import annotations

import ipaddress

import pytest

from nodepool.driver.netns.host import available
from tests.functional import aws_support
from tests.functional import test_nodepool_support as support
from tests.functional.test_nodepool_support import ssh_run, wait_until

launchers = support.launchers
requestor = support.requestor
zk = support.zk
ec2 = aws_support.ec2

pytestmark = pytest.mark.skipif(available() is not None,
                                reason=f'netns nodes unavailable: {available()}')

CONFIG = """
labels:
  - name: debian-small
providers:
  - name: ec2
    driver: aws
    region-name: us-east-1
    launch-retries: {retries}
    boot-timeout: 30
    launch-timeout: 30
    cloud-images:
      - name: debian
        image-filters:
          - name: name
            values: [debian-12-*]
        username: root
        python-path: /usr/bin/python3
    pools:
      - name: main
        max-servers: 4
        subnet-id: {subnet}
        security-group-id: {group}
        public-ipv4: false
        labels:
          - name: debian-small
            cloud-image: debian
            instance-type: t3.medium
            key-name: zuul
            volume-type: gp3
            volume-size: 20
            tags: {{team: ci}}
            dynamic-tags: {{request: '{{request.id}}'}}
"""


def config(ec2, retries=3):
    return CONFIG.format(retries=retries, subnet=ec2.account['subnet'],
                         group=ec2.account['group'])


def fulfilled(handle, timeout=60):
    assert handle.wait(timeout), f'request {handle.id} not done'
    assert handle.fulfilled, f'request {handle.id} failed'
    return handle.nodes


def instances(ec2, state='running'):
    found = ec2.client().describe_instances(Filters=[{'Name': 'instance-state-name',
                                                      'Values': [state]}])
    return [i for r in found['Reservations'] for i in r['Instances']]


def test_instance_launched_reached_and_terminated(launchers, requestor, zk, ec2,
                                                  ssh_keypair, tmp_path):
    launcher = launchers.make(config(ec2))
    handle = requestor.submit(['debian-small'])
    (node,) = fulfilled(handle)
    record = zk.get_node(node.id)
    assert record.external_id.startswith('i-')
    assert ipaddress.ip_address(record.interface_ip) in ipaddress.ip_network(ec2.cidr)
    assert record.host_keys and record.username == 'root'
    assert record.region == 'us-east-1'
    assert record.resources == {'instances': 1, 'cores': 2, 'ram': 4096}
    done = ssh_run(record.interface_ip, 22, 'root', ssh_keypair.private_key_path,
                   record.host_keys, tmp_path, 'hostname -I')
    assert done.returncode == 0 and record.interface_ip in done.stdout, done.stderr
    (inst,) = instances(ec2)
    tags = {t['Key']: t['Value'] for t in inst['Tags']}
    assert tags['nodepool_node_id'] == node.id and tags['nodepool_provider_name'] == 'ec2'
    assert tags['team'] == 'ci' and tags['request'] == handle.id
    assert inst['InstanceType'] == 't3.medium' and inst['KeyName'] == 'zuul'
    volumes = ec2.client().describe_volumes(Filters=[{'Name': 'tag:nodepool_node_id',
                                                      'Values': [node.id]}])['Volumes']
    assert [v['Size'] for v in volumes] == [20]
    requestor.release(handle)
    wait_until(launcher, lambda: not zk.get_nodes(), 'node deleted')
    assert instances(ec2) == []


def test_api_errors_retried_then_reported(launchers, requestor, zk, ec2):
    """A failed RunInstances is retried up to launch-retries; past them
    the request fails with EC2's own code and message on it."""
    launchers.make(config(ec2, retries=1))
    ec2.inject(action='RunInstances', status=500, code='InternalError',
               message='An internal error has occurred', count=1)
    fulfilled(requestor.submit(['debian-small']))
    ec2.inject(action='RunInstances', status=400, code='InvalidParameterValue',
               message='Value (t3.medium) for parameter instanceType is invalid', count=5)
    handle = requestor.submit(['debian-small'])
    assert handle.wait(60) and handle.failed
    reason = (zk.get_request(handle.id) or handle.request).failure_reason
    assert 'InvalidParameterValue' in reason and 'instanceType is invalid' in reason


def test_throttling_is_absorbed_by_retries(launchers, requestor, zk, ec2):
    """EC2 throttling (RequestLimitExceeded) is retried by the client's
    adaptive retry mode: the launch does not fail."""
    launchers.make(config(ec2, retries=0))
    before = ec2.requests().get('RunInstances', 0)
    ec2.inject(action='RunInstances', status=503, code='RequestLimitExceeded',
               message='Request limit exceeded.', count=2)
    fulfilled(requestor.submit(['debian-small']))
    assert ec2.requests()['RunInstances'] - before == 3


def test_capacity_error_pauses_and_account_quota_declines(launchers, requestor, zk, ec2):
    """VcpuLimitExceeded pauses the pool (the request waits and is
    served once a node goes); the account's vCPU quota (Service Quotas)
    is counted before launching: more nodes than it allows are declined."""
    launcher = launchers.make(config(ec2, retries=0))
    first = requestor.submit(['debian-small'])
    fulfilled(first)
    ec2.inject(action='RunInstances', status=400, code='VcpuLimitExceeded',
               message='You have requested more vCPU capacity than your current vCPU '
                       'limit of 2 allows', count=1)
    second = requestor.submit(['debian-small'])
    wait_until(launcher, lambda: any(r.paused for r in launcher.launcher_records().values()),
               'pool paused for quota')
    assert not second.done.is_set()
    requestor.release(first)
    fulfilled(second)
    ec2.control('POST', '/_standin/quota', {'vcpus': 4})
    adapter = launcher.adapters['ec2']
    adapter.invalidate_quota()
    too_many = requestor.submit(['debian-small'] * 3)
    assert too_many.wait(60) and too_many.failed


def test_leaked_instances_and_volumes_removed(launchers, zk, ec2):
    launcher = launchers.make(config(ec2))
    client = ec2.client()
    tags = [{'Key': 'nodepool_provider_name', 'Value': 'ec2'},
            {'Key': 'nodepool_node_id', 'Value': '0000009999'}]
    client.run_instances(ImageId=ec2.account['image'], MinCount=1, MaxCount=1,
                         InstanceType='t3.micro', SubnetId=ec2.account['subnet'],
                         TagSpecifications=[{'ResourceType': 'instance', 'Tags': tags}])
    foreign = client.run_instances(ImageId=ec2.account['image'], MinCount=1, MaxCount=1,
                                   InstanceType='t3.micro', SubnetId=ec2.account['subnet'])
    client.create_volume(AvailabilityZone='us-east-1a', Size=8, TagSpecifications=[
        {'ResourceType': 'volume', 'Tags': tags}])
    launcher.run_cleanup()
    wait_until(launcher, lambda: [i['InstanceId'] for i in instances(ec2)] ==
               [foreign['Instances'][0]['InstanceId']], 'leaked instance terminated')
    left = client.describe_volumes(Filters=[{'Name': 'tag:nodepool_provider_name',
                                             'Values': ['ec2']}])['Volumes']
    assert left == []
