"""How long an image takes from ``nodepool image-build`` to a ready
upload and to a node booted from it, and the ZooKeeper work per build:
a real nodepool-builder and launcher (in this process) over a real
ZooKeeper (this machine's), uploading to and launching in a netns
provider (root needed).

    .venv/bin/python -m benchmarks.builder [--builds N]

Scenarios:

- trivial: a dib-cmd that writes a tar of one small file; N requested
  builds one after another (steady state: from the third on, every
  build also retires the oldest, deleting its upload and files).
- trivial, 2 builders: the same with two builders competing for every
  request (each is built once; the table shows how many builds ran).
- rootfs: ``tools/netns-rootfs-image.sh`` (a 15 MB root filesystem with
  sshd), then a node request for a label that boots it: request-build
  to a ready build, to a ready upload, and to the node in the
  requestor's hands (sshd answering in the uploaded image).

ZooKeeper operations are the client requests of the builders' sessions
(a transaction counts once; pings are not requests) from the request to
the point where the builder is idle again (build, upload, retirement of
the oldest build, the reads its watches trigger, and one explicit build,
upload and cleanup pass per builder that confirms it is idle).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter

from benchmarks.nodepool import OpCounter, percentile, print_table
from nodepool.builder.builder import NodepoolBuilder
from nodepool.builder.settings import BuilderSettings
from nodepool.config import load_config_text
from nodepool.driver.netns.host import NetnsHostManager, available
from nodepool.launcher.launcher import Launcher
from nodepool.launcher.settings import LauncherSettings
from nodepool.zk.api import NodepoolZooKeeper, connect
from nodepool.zk.images import READY
from nodepool.zk.localserver import LocalZooKeeper
from nodepool.zk.requestor import NodeRequestClient

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOTFS = os.path.join(TOP, 'tools', 'netns-rootfs-image.sh')
TRIVIAL = """#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in -o) out=$2; shift 2;; *) shift;; esac; done
mkdir -p "$out.root/etc" && echo "image=$(basename "$out")" > "$out.root/etc/nodepool-image"
tar -C "$out.root" -cf "$out.tar" . && rm -rf "$out.root"
"""

READS = {'GetData', 'GetChildren', 'GetChildren2', 'Exists', 'Sync', 'GetACL',
         'CheckWatches', 'RemoveWatches', 'SetWatches', 'SetWatches2'}

CONFIG = """
zookeeper-servers:
  - host: {zk_host}
    port: {zk_port}
    chroot: /bench-{net}
images-dir: {base}/images-{name}
build-log-dir: {base}/logs-{name}
diskimages:
  - name: bench
    dib-cmd: {dib_cmd}
    rebuild-age: 864000
    username: root
labels:
  - name: bench-node
providers:
  - name: bench
    driver: netns
    authorized-keys: ['{key}']
    subnet: 10.236.{net}.0/24
    bridge: npbench{net}
    state-dir: {base}/netns
    diskimages:
      - name: bench
    pools:
      - name: main
        max-servers: 4
        labels:
          - name: bench-node
            diskimage: bench
"""


class Bench:
    """Builders (and a launcher) of one scenario, and what they did."""

    def __init__(self, server: LocalZooKeeper, base: str, dib_cmd: str, builders: int,
                 key: str, net: int):
        host, port = server.hosts.split(':')
        self.hosts = f'{server.hosts}/bench-{net}'
        admin = connect(server.hosts)
        admin.ensure_path(f'/bench-{net}')
        admin.stop()
        admin.close()
        self.texts = [CONFIG.format(zk_host=host, zk_port=port, base=base, name=i,
                                    dib_cmd=dib_cmd, key=key, net=net)
                      for i in range(builders)]
        self.server = server
        self.builders: list[NodepoolBuilder] = []
        self.counters: list[OpCounter] = []
        self.changed = threading.Condition()
        for text in self.texts:
            client = connect(self.hosts)
            self.counters.append(OpCounter(client))
            settings = BuilderSettings(build_interval=3600, upload_interval=3600,
                                       cleanup_interval=3600, upload_workers=2)
            builder = NodepoolBuilder(load_config_text(text), NodepoolZooKeeper(
                client, owns_client=True), settings)
            builder.changed = self.changed
            self.builders.append(builder)
        # The benchmark watches through a session of its own (not counted).
        self.observer = NodepoolZooKeeper(connect(self.hosts), owns_client=True)
        self.images = self.observer.images

    def start(self) -> None:
        for builder in self.builders:
            builder.start()

    def stop(self) -> None:
        for builder in self.builders:
            builder.stop()
            builder.zk.close()
        self.observer.close()

    def ops(self) -> Counter:
        total = Counter()
        for counter in self.counters:
            total += counter.snapshot()
        return total

    def wait(self, predicate, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError('the builder did not finish')
                self.changed.wait(min(left, 0.5))

    def idle(self) -> None:
        """Until every builder has run a build, upload and cleanup pass
        with nothing left to do."""
        for builder in self.builders:
            builder.run_build_pass()
            builder.run_upload_pass()
            builder.run_cleanup()

    def ready_upload(self, build_id: str) -> bool:
        upload = self.images.get_most_recent_upload('bench', 'bench')
        return upload is not None and upload.build_id == build_id

    def one_build(self) -> tuple[float, float, str]:
        """Request a build; seconds to the ready build and to its upload."""
        before = {b.id for b in self.images.get_builds('bench')}
        start = time.perf_counter()
        self.images.request_build('bench')
        found = {}

        def built():
            for b in self.images.get_builds('bench', (READY,)):
                if b.id not in before:
                    found.setdefault('build', (time.perf_counter(), b.id))
                    return True
            return False
        self.wait(built)
        build_at, build_id = found['build']
        self.wait(lambda: self.ready_upload(build_id))
        upload_at = time.perf_counter()
        return build_at - start, upload_at - start, build_id


def run_builds(bench: Bench, n: int) -> dict:
    bench.start()
    bench.one_build()          # the first build (no build yet) is not a request
    bench.idle()
    build_s, upload_s = [], []
    ops_before = bench.ops()
    for _ in range(n):
        b, u, _ = bench.one_build()
        bench.idle()
        build_s.append(b)
        upload_s.append(u)
    ops = bench.ops() - ops_before
    started = sum(b.counters['builds_started'] for b in bench.builders)
    return {'build': build_s, 'upload': upload_s, 'ops': ops, 'builds': started - 1,
            'requests': n}


def run_launch(bench: Bench, tmpdir: str) -> dict:
    hosts = bench.hosts
    bench.start()
    launcher = Launcher(load_config_text(bench.texts[0]), NodepoolZooKeeper(
        connect(hosts), owns_client=True), LauncherSettings(cleanup_interval=3600,
                                                            boot_poll_interval=0.05))
    launcher.start()
    requestor = NodeRequestClient(NodepoolZooKeeper(connect(hosts), owns_client=True),
                                  requestor='bench')
    requestor.start()
    rows = []
    try:
        bench.one_build()
        bench.idle()
        for _ in range(3):
            start = time.perf_counter()
            build_s, upload_s, build_id = bench.one_build()
            handle = requestor.submit(['bench-node'])
            if not handle.wait(120) or not handle.fulfilled:
                raise SystemExit('the node request was not fulfilled')
            node_s = time.perf_counter() - start
            assert handle.nodes[0].image_id.startswith(f'bench-{build_id}-')
            requestor.release(handle)
            launcher.wait_for(lambda: not launcher.zk.get_nodes(), 60, 'node deleted')
            bench.idle()
            rows.append((build_s, upload_s, node_s))
    finally:
        requestor.stop()
        launcher.stop()
        manager = NetnsHostManager(base_dir=os.path.join(tmpdir, 'netns'))
        manager.cleanup_all('bench-')
    return {'build': [r[0] for r in rows], 'upload': [r[1] for r in rows],
            'node': [r[2] for r in rows]}


def ms(values: list[float], p: float | None = None) -> str:
    if not values:
        return '-'
    value = statistics.median(values) if p is None else percentile(values, p)
    return f'{value * 1000:.0f}'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--builds', type=int, default=10)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    why = available()
    if why:
        raise SystemExit(f'benchmarks.builder needs netns nodes: {why}')
    tmp = tempfile.mkdtemp(prefix='bench-builder-')
    key_path = os.path.join(tmp, 'key')
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', key_path],
                   check=True)
    with open(key_path + '.pub') as f:
        key = f.read().strip()
    trivial = os.path.join(tmp, 'trivial.sh')
    with open(trivial, 'w') as f:
        f.write(TRIVIAL)
    os.chmod(trivial, 0o755)
    results = []
    try:
        with LocalZooKeeper() as server:
            for name, cmd, count, net in (('trivial', trivial, 1, 1),
                                          ('trivial, 2 builders', trivial, 2, 2)):
                base = os.path.join(tmp, f'run{net}')
                bench = Bench(server, base, cmd, count, key, net)
                try:
                    results.append((name, run_builds(bench, args.builds)))
                finally:
                    bench.stop()
            base = os.path.join(tmp, 'run3')
            bench = Bench(server, base, ROOTFS, 1, key, 3)
            try:
                launch = run_launch(bench, base)
            finally:
                bench.stop()
    finally:
        for net in (1, 2, 3):
            subprocess.run(['ip', 'link', 'del', f'npbench{net}'], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)

    print(f'nodepool-builder: {args.builds} requested builds per scenario, real ZooKeeper, '
          'netns provider (uploads unpacked on this disk)')
    print()
    print_table(['scenario', 'requests', 'builds run', 'to build p50 ms', 'p90 ms',
                 'to upload p50 ms', 'p90 ms', 'ZK ops/build', 'reads', 'writes'],
                [[name, str(r['requests']), str(r['builds']), ms(r['build']),
                  ms(r['build'], 90), ms(r['upload']), ms(r['upload'], 90),
                  f'{sum(r["ops"].values()) / r["requests"]:.0f}',
                  f'{sum(v for k, v in r["ops"].items() if k in READS) / r["requests"]:.0f}',
                  f'{sum(v for k, v in r["ops"].items() if k not in READS) / r["requests"]:.0f}']
                 for name, r in results])
    print()
    print('rootfs image (tools/netns-rootfs-image.sh), 3 runs: from request-build')
    print()
    print_table(['image', 'to build p50 ms', 'to upload p50 ms', 'to node in use p50 ms',
                 'max ms'],
                [['rootfs', ms(launch['build']), ms(launch['upload']), ms(launch['node']),
                  f'{max(launch["node"]) * 1000:.0f}']])
    kinds = sorted({k for _, r in results for k in r['ops']})
    print()
    print('ZooKeeper operations by kind, per requested build')
    print()
    print_table(['scenario', *kinds],
                [[name, *(f'{r["ops"][k] / r["requests"]:.1f}' for k in kinds)]
                 for name, r in results])



if __name__ == '__main__':
    main()
