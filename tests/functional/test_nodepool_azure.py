"""nodepool-launcher with the azure driver: its ARM client against the
Azure stand-in (its own process: Resource Manager REST and Azure AD's
token endpoint) on a real ZooKeeper.  VMs are netns hosts with sshd."""

from __future__ import annotations

import pytest

from nodepool.driver.netns.host import available
from tests.functional import test_nodepool_support as support
from tests.functional.cloud_support import AzureStandIn
from tests.functional.test_nodepool_support import ssh_run, wait_until

launchers = support.launchers
requestor = support.requestor
zk = support.zk

pytestmark = pytest.mark.skipif(available() is not None,
                                reason=f'netns nodes unavailable: {available()}')


@pytest.fixture
def azure(tmp_path):
    standin = AzureStandIn(str(tmp_path / 'azure'))
    try:
        yield standin
    finally:
        standin.stop()


CONFIG = """
labels:
  - name: ubuntu
providers:
  - name: azure
    driver: azure
    location: centralus
    resource-group: nodepool
    auth-path: {auth}
    network: {{resource-group: net, network: vnet, subnet: default}}
    launch-retries: {retries}
    boot-timeout: 30
    launch-timeout: 30
    cloud-images:
      - name: jammy
        username: root
        key: {key}
        python-path: /usr/bin/python3
        image-reference:
          publisher: Canonical
          offer: 0001-com-ubuntu-server-jammy
          sku: 22_04-lts
          version: latest
    pools:
      - name: main
        max-servers: 4
        labels:
          - name: ubuntu
            cloud-image: jammy
            hardware-profile:
              vm-size: Standard_B2s
            tags: {{team: ci}}
"""


def fulfilled(handle, timeout=60):
    assert handle.wait(timeout), f'request {handle.id} not done'
    assert handle.fulfilled, f'request {handle.id} failed'
    return handle.nodes


def config(azure, ssh_keypair, retries=1):
    return CONFIG.format(auth=azure.auth, key=ssh_keypair.public_key.strip(),
                         retries=retries)


def test_vm_launched_reached_quota_and_deleted(launchers, requestor, zk, azure, ssh_keypair,
                                               tmp_path):
    """A node on an Azure VM reached over SSH; the location's cores quota
    (4: two Standard_B2s) declines three nodes; an OperationNotAllowed
    quota refusal pauses the pool and the request waits."""
    launcher = launchers.make(config(azure, ssh_keypair))
    first = requestor.submit(['ubuntu'])
    (node,) = fulfilled(first)
    record = zk.get_node(node.id)
    assert record.external_id == f'azure-{node.id}' and record.host_keys
    assert record.resources == {'instances': 1, 'cores': 2, 'ram': 4096}
    done = ssh_run(record.interface_ip, 22, 'root', ssh_keypair.private_key_path,
                   record.host_keys, tmp_path, 'true')
    assert done.returncode == 0, done.stderr
    too_many = requestor.submit(['ubuntu'] * 3)
    assert too_many.wait(60) and too_many.failed
    azure.inject(kind='virtualMachines', status=409, code='OperationNotAllowed',
                 message='Operation could not be completed as it results in exceeding '
                         'approved Total Regional Cores quota.', count=1)
    second = requestor.submit(['ubuntu'])
    wait_until(launcher, lambda: any(r.paused for r in launcher.launcher_records().values()),
               'pool paused for quota')
    requestor.release(first)
    fulfilled(second)
    requestor.release(second)
    wait_until(launcher, lambda: not zk.get_nodes(), 'nodes deleted')
    adapter = launcher.adapters['azure']
    assert adapter.list() == []


def test_failed_provisioning_reported_and_leaks_removed(launchers, requestor, zk, azure,
                                                        ssh_keypair):
    launcher = launchers.make(config(azure, ssh_keypair, retries=0))
    azure.inject(kind='virtualMachines', code='OSProvisioningTimedOut', count=1,
                 message='OS Provisioning for VM did not finish in the allotted time.',
                 **{'async': True})
    handle = requestor.submit(['ubuntu'])
    assert handle.wait(60) and handle.failed
    assert 'OS Provisioning for VM did not finish' in \
        (zk.get_request(handle.id) or handle.request).failure_reason
    adapter = launcher.adapters['azure']
    nic = f'{adapter.group}/providers/Microsoft.Network/networkInterfaces/azure-9999-nic'
    adapter.arm.request('PUT', nic, 'leaking an interface', {
        'location': 'centralus', 'tags': {'nodepool_provider_name': 'azure'},
        'properties': {'ipConfigurations': [{'name': 'ip', 'properties': {}}]}})
    launcher.run_cleanup()
    wait_until(launcher, lambda: adapter.arm.request('GET', nic, 'reading', ok404=True)
               is None, 'leaked interface deleted')
