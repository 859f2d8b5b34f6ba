"""Request-to-ready latency per provider driver, each against its
stand-in, on a real ZooKeeper (this machine's):

    .venv/bin/python -m benchmarks.providers [--requests N] [--drivers a,b]

nodepool-launcher runs in this process with one provider at a time; a
requestor submits N one-node requests one after another and the time
from submit to the requestor holding the node is measured (each node is
released at once).  What a launch includes differs by driver, as it does
in production:

- openstack: openstacksdk against the fake Nova/Neutron/Glance; each
  server is a netns host with sshd, the launcher waits for SSH and scans
  its host keys (host-key-checking);
- aws: boto3 against moto's server; each instance a netns host with
  sshd, SSH and host keys as above;
- gce: Google's API client against the GCE stand-in (Compute REST and
  its OAuth token endpoint); netns host, SSH and host keys as above;
- azure: the ARM client against the Azure stand-in (public IP, interface
  and VM per node); netns host, SSH and host keys as above;
- kubernetes-pod: the official client against the Kubernetes API
  stand-in: namespace, service account, token, role and binding, then a
  pod (a network namespace, no sshd) until Running;
- kubernetes-namespace: the same without the pod;
- metastatic: a slot of a netns backing node (max-parallel-jobs 2,
  grace-time 60): the first request waits for the backing node, the
  next ones reuse it.

The table gives p50 and p99 (with N samples, p99 is the slowest but
one percent: for N < 100 it is the maximum) and the mean.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

from nodepool.config import load_config_text
from nodepool.driver.netns.host import NetnsHostManager, available
from nodepool.launcher.launcher import Launcher
from nodepool.launcher.settings import LauncherSettings
from nodepool.zk.api import NodepoolZooKeeper
from nodepool.zk.localserver import LocalZooKeeper
from nodepool.zk.requestor import NodeRequestClient

DRIVERS = ('openstack', 'aws', 'gce', 'azure', 'kubernetes-pod', 'kubernetes-namespace',
           'metastatic')


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


class Bench:
    def __init__(self, root: str, key_file: str):
        self.root = root
        self.key_file = key_file
        with open(key_file + '.pub') as f:
            self.public_key = f.read().strip()
        pid = os.getpid()
        self.subnet = f'10.{230}.{pid % 250}.0/24'
        self.bridge = f'bnp{pid % 100000}'
        self.cleanups: list = []

    def netns(self, name: str) -> NetnsHostManager:
        return NetnsHostManager(os.path.join(self.root, name), self.subnet, self.bridge)

    # -- per driver: (nodepool.yaml, label) with its stand-in started ---------------

    def openstack(self) -> tuple[str, str]:
        from tests.fakes.openstack_cloud import FakeOpenStackCloud
        cloud = FakeOpenStackCloud(availability_zones=['az1']).start()
        self.cleanups.append(cloud.stop)
        cloud.host_manager = self.netns('os')
        cloud.add_keypair('nodepool', self.public_key)
        os.environ['OS_CLIENT_CONFIG_FILE'] = cloud.write_clouds_yaml(
            os.path.join(self.root, 'clouds.yaml'))
        return textwrap.dedent("""
            labels: [{name: small}]
            providers:
              - name: cloud1
                cloud: fake
                region-name: RegionOne
                rate: 0
                cloud-images: [{name: cirros, username: root}]
                pools:
                  - name: main
                    max-servers: 100
                    host-key-checking: true
                    labels:
                      - {name: small, cloud-image: cirros, min-ram: 1024, key-name: nodepool}
            """), 'small'

    def aws(self) -> tuple[str, str]:
        from tests.functional.aws_support import EC2StandIn
        ec2 = EC2StandIn(os.path.join(self.root, 'ec2'), self.key_file + '.pub')
        self.cleanups.append(ec2.stop)
        os.environ.update(ec2.env)
        account = ec2.setup_account(self.public_key)
        return textwrap.dedent(f"""
            labels: [{{name: small}}]
            providers:
              - name: ec2
                driver: aws
                region-name: us-east-1
                cloud-images: [{{name: debian, image-id: {account['image']}, username: root}}]
                pools:
                  - name: main
                    max-servers: 100
                    subnet-id: {account['subnet']}
                    security-group-id: {account['group']}
                    labels:
                      - {{name: small, cloud-image: debian, instance-type: t3.medium,
                         key-name: zuul}}
            """), 'small'

    def gce(self) -> tuple[str, str]:
        from tests.functional.cloud_support import GceStandIn
        gce = GceStandIn(os.path.join(self.root, 'gce'), self.key_file + '.pub',
                         cpus_quota=1000)
        self.cleanups.append(gce.stop)
        os.environ['GOOGLE_APPLICATION_CREDENTIALS'] = gce.credentials
        os.environ['CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE'] = gce.url + '/compute/v1/'
        return textwrap.dedent("""
            labels: [{name: small}]
            providers:
              - name: gcloud
                driver: gce
                project: bench
                region: us-central1
                zone: us-central1-a
                cloud-images: [{name: debian, image-family: debian-12, username: root}]
                pools:
                  - name: main
                    max-servers: 100
                    labels: [{name: small, cloud-image: debian, instance-type: e2-medium}]
            """), 'small'

    def azure(self) -> tuple[str, str]:
        from tests.functional.cloud_support import AzureStandIn
        azure = AzureStandIn(os.path.join(self.root, 'azure'), cores_quota=1000)
        self.cleanups.append(azure.stop)
        return textwrap.dedent(f"""
            labels: [{{name: small}}]
            providers:
              - name: azure
                driver: azure
                location: centralus
                resource-group: bench
                auth-path: {azure.auth}
                network: {{resource-group: net, network: vnet, subnet: nodes}}
                cloud-images:
                  - name: jammy
                    username: root
                    key: {self.public_key}
                    image-reference:
                      {{publisher: Canonical, offer: jammy, sku: lts, version: latest}}
                pools:
                  - name: main
                    max-servers: 100
                    labels:
                      - name: small
                        cloud-image: jammy
                        hardware-profile: {{vm-size: Standard_B1ls}}
            """), 'small'

    def _kube(self, label_type: str) -> tuple[str, str]:
        from tests.functional.kubernetes_support import KubeStandIn
        kube = KubeStandIn(os.path.join(self.root, f'k8s-{label_type}'))
        self.cleanups.append(kube.stop)
        os.environ['KUBECONFIG'] = kube.kubeconfig
        extra = ', image: debian:12' if label_type == 'pod' else ''
        return textwrap.dedent(f"""
            labels: [{{name: small}}]
            providers:
              - name: k8s
                driver: kubernetes
                context: standin
                pools:
                  - name: main
                    max-pods: 100
                    labels:
                      - {{name: small, type: {label_type}{extra}}}
            """), 'small'

    def kubernetes_pod(self):
        return self._kube('pod')

    def kubernetes_namespace(self):
        return self._kube('namespace')

    def metastatic(self) -> tuple[str, str]:
        return textwrap.dedent(f"""
            labels: [{{name: big}}, {{name: small}}]
            providers:
              - name: backing
                driver: netns
                subnet: {self.subnet}
                bridge: {self.bridge}
                state-dir: {os.path.join(self.root, 'meta')}
                authorized-keys: ['{self.public_key}']
                pools:
                  - name: main
                    max-servers: 10
                    labels: [{{name: big, username: root}}]
              - name: meta
                driver: metastatic
                pools:
                  - name: main
                    max-servers: 100
                    labels:
                      - {{name: small, backing-label: big, max-parallel-jobs: 2,
                         grace-time: 60}}
            """), 'small'

    def close(self) -> None:
        for cleanup in reversed(self.cleanups):
            try:
                cleanup()
            except Exception as e:
                print(f'cleanup: {e}', file=sys.stderr)
        self.cleanups = []
        for name in ('os', 'meta'):
            self.netns(name).cleanup_all('')
        subprocess.run(['ip', 'link', 'del', self.bridge], capture_output=True)


def measure(server: LocalZooKeeper, yaml_text: str, label: str, n: int) -> list[float]:
    zk = NodepoolZooKeeper.from_hosts(server.hosts)
    launcher = Launcher(load_config_text(yaml_text), zk, LauncherSettings(
        hostname='bench', cleanup_interval=3600, poll_interval=5.0, min_ready_interval=3600,
        boot_poll_interval=0.05))
    launcher.start()
    client = NodeRequestClient(NodepoolZooKeeper.from_hosts(server.hosts), requestor='bench')
    client.start()
    times = []
    try:
        launcher.wait_for(launcher.registered, what='pool workers registered')
        for _ in range(n):
            started = time.monotonic()
            handle = client.submit([label])
            if not handle.wait(300) or not handle.fulfilled:
                raise RuntimeError(f'request {handle.id} not fulfilled')
            times.append(time.monotonic() - started)
            client.release(handle)
    finally:
        client.stop()
        launcher.stop()
        # Wait for the used nodes to go before the next driver starts.
        deadline = time.monotonic() + 60
        while zk.get_nodes() and time.monotonic() < deadline:
            launcher.run_cleanup() if launcher._running else None
            time.sleep(0.2)
        zk.close()
    return times


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--requests', type=int, default=20)
    parser.add_argument('--drivers', default=','.join(DRIVERS))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    if available() is not None:
        print(f'needs netns hosts: {available()}', file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix='bprov') as root, LocalZooKeeper() as server:
        subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f',
                        f'{root}/id'], check=True)
        for driver in args.drivers.split(','):
            bench = Bench(root, f'{root}/id')
            try:
                yaml_text, label = getattr(bench, driver.replace('-', '_'))()
                times = measure(server, yaml_text, label, args.requests)
            finally:
                bench.close()
            rows.append((driver, len(times), percentile(times, 0.5),
                         percentile(times, 0.99), statistics.mean(times)))
            print(f'{driver}: done', file=sys.stderr, flush=True)
    print(f'{"driver":<22} {"n":>4} {"p50 (s)":>9} {"p99 (s)":>9} {"mean (s)":>9}')
    for driver, n, p50, p99, mean in rows:
        print(f'{driver:<22} {n:>4} {p50:>9.3f} {p99:>9.3f} {mean:>9.3f}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
