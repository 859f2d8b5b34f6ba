"""The EC2 stand-in (tests/fakes/ec2_standin.py: moto's server, its
instances backed by netns hosts) as a fixture, with a VPC, subnet,
security group, key pair and image made in it the way an AWS
administrator would, through boto3."""

from __future__ import annotations

import os

import boto3
import pytest

from tests.functional.cloud_support import StandInProcess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REGION = 'us-east-1'
ENV = {'AWS_ACCESS_KEY_ID': 'AKIDSTANDIN', 'AWS_SECRET_ACCESS_KEY': 'standin-secret',
       'AWS_DEFAULT_REGION': REGION}


class EC2StandIn(StandInProcess):
    name = 'EC2 stand-in'

    def __init__(self, state_dir: str, public_key_file: str | None, vcpu_quota: int = 256):
        pid = os.getpid()
        self.cidr = f'10.{235 + pid % 4}.{(pid // 4) % 250}.0/24'
        args = ['--state-dir', state_dir, '--subnet', self.cidr, '--vcpu-quota', str(vcpu_quota)]
        if public_key_file:
            args += ['--authorized-keys-file', public_key_file]
        self._start('tests.fakes.ec2_standin', args, f'ec2{pid % 100000}')
        self.env = {**ENV, 'AWS_ENDPOINT_URL': self.url}

    def client(self, service: str = 'ec2'):
        return boto3.client(service, region_name=REGION, endpoint_url=self.url,
                            aws_access_key_id=ENV['AWS_ACCESS_KEY_ID'],
                            aws_secret_access_key=ENV['AWS_SECRET_ACCESS_KEY'])

    def setup_account(self, public_key: str) -> dict:
        """A VPC and subnet on the netns subnet, a security group, the key
        pair ``zuul`` and an image ``debian-12-standin``: their ids."""
        ec2 = self.client()
        vpc = ec2.create_vpc(CidrBlock=self.cidr)['Vpc']['VpcId']
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=self.cidr)['Subnet']['SubnetId']
        group = ec2.create_security_group(GroupName='ci', Description='ci nodes',
                                          VpcId=vpc)['GroupId']
        ec2.import_key_pair(KeyName='zuul', PublicKeyMaterial=public_key.encode())
        image = ec2.register_image(Name='debian-12-standin', Architecture='x86_64',
                                   RootDeviceName='/dev/sda1', VirtualizationType='hvm',
                                   BlockDeviceMappings=[{'DeviceName': '/dev/sda1',
                                                         'Ebs': {'VolumeSize': 8}}])['ImageId']
        return {'vpc': vpc, 'subnet': subnet, 'group': group, 'image': image}

    def requests(self) -> dict:
        return self.control('GET', '/_standin/state')['requests']


@pytest.fixture
def ec2(tmp_path, monkeypatch, ssh_keypair):
    """A fresh EC2 stand-in; boto3 in this process reaches it."""
    standin = EC2StandIn(str(tmp_path / 'ec2'), ssh_keypair.private_key_path + '.pub')
    for key, value in standin.env.items():
        monkeypatch.setenv(key, value)
    try:
        standin.account = standin.setup_account(ssh_keypair.public_key)
        yield standin
    finally:
        standin.stop()
