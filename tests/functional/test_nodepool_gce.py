"""nodepool-launcher with the gce driver: Google's API client and
google-auth, unmodified, against the GCE stand-in (its own process: the
Compute v1 REST API and an OAuth token endpoint) on a real ZooKeeper.
Instances are netns hosts with sshd."""

from __future__ import annotations

import pytest

from nodepool.driver.netns.host import available
from tests.functional import test_nodepool_support as support
from tests.functional.cloud_support import GceStandIn
from tests.functional.test_nodepool_support import ssh_run, wait_until

launchers = support.launchers
requestor = support.requestor
zk = support.zk

pytestmark = pytest.mark.skipif(available() is not None,
                                reason=f'netns nodes unavailable: {available()}')


@pytest.fixture
def gce(tmp_path, monkeypatch, ssh_keypair):
    standin = GceStandIn(str(tmp_path / 'gce'), ssh_keypair.private_key_path + '.pub',
                         cpus_quota=4)
    monkeypatch.setenv('GOOGLE_APPLICATION_CREDENTIALS', standin.credentials)
    monkeypatch.setenv('CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE',
                       standin.url + '/compute/v1/')
    try:
        yield standin
    finally:
        standin.stop()


CONFIG = """
labels:
  - name: debian
providers:
  - name: gcloud
    driver: gce
    project: standin-project
    region: us-central1
    zone: us-central1-a
    launch-retries: {retries}
    boot-timeout: 30
    cloud-images:
      - name: debian12
        image-project: debian-cloud
        image-family: debian-12
        username: root
        python-path: /usr/bin/python3
    pools:
      - name: main
        max-servers: 4
        labels:
          - name: debian
            cloud-image: debian12
            instance-type: e2-medium
            volume-size: 20
"""


def fulfilled(handle, timeout=60):
    assert handle.wait(timeout), f'request {handle.id} not done'
    assert handle.fulfilled, f'request {handle.id} failed'
    return handle.nodes


def test_instance_launched_reached_deleted_and_quota(launchers, requestor, zk, gce,
                                                     ssh_keypair, tmp_path):
    """A node on a GCE instance (reached over SSH with the scanned keys);
    the region's CPUS quota (4: two e2-medium) declines three nodes; a
    QUOTA_EXCEEDED operation error pauses the pool instead of failing."""
    launcher = launchers.make(CONFIG.format(retries=1))
    first = requestor.submit(['debian'])
    (node,) = fulfilled(first)
    record = zk.get_node(node.id)
    assert record.external_id == f'gcloud-{node.id}' and record.host_keys
    assert record.resources == {'instances': 1, 'cores': 2, 'ram': 4096}
    done = ssh_run(record.interface_ip, 22, 'root', ssh_keypair.private_key_path,
                   record.host_keys, tmp_path, 'true')
    assert done.returncode == 0, done.stderr
    too_many = requestor.submit(['debian'] * 3)
    assert too_many.wait(60) and too_many.failed
    gce.inject(op='insert', reason='QUOTA_EXCEEDED', message="Quota 'CPUS' exceeded.",
               code=403, count=1, **{'async': True})
    second = requestor.submit(['debian'])
    wait_until(launcher, lambda: any(r.paused for r in launcher.launcher_records().values()),
               'pool paused for quota')
    requestor.release(first)
    fulfilled(second)
    requestor.release(second)
    wait_until(launcher, lambda: not zk.get_nodes(), 'nodes deleted')


def test_api_error_reported_and_leak_removed(launchers, requestor, zk, gce):
    launcher = launchers.make(CONFIG.format(retries=0))
    gce.inject(op='insert', code=400, reason='invalid',
               message="Invalid value for field 'resource.disks[0]'", count=1)
    handle = requestor.submit(['debian'])
    assert handle.wait(60) and handle.failed
    assert "Invalid value for field 'resource.disks[0]'" in \
        (zk.get_request(handle.id) or handle.request).failure_reason
    adapter = launcher.adapters['gcloud']
    compute = adapter.compute
    compute.instances().insert(project='standin-project', zone='us-central1-a', body={
        'name': 'leaked-1', 'machineType': 'zones/us-central1-a/machineTypes/e2-small',
        'networkInterfaces': [{}], 'labels': {'nodepool_provider_name': 'gcloud',
                                              'nodepool_node_id': '0000009999'}}).execute()
    launcher.run_cleanup()
    wait_until(launcher, lambda: adapter.list() == [], 'leaked instance deleted')
