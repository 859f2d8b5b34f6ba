"""What benchmarks/github.py and benchmarks/gitlab.py share: a Zuul
system on real ZooKeeper and Gearman with the instant executor of
benchmarks/scheduler.py (the numbers are about Zuul and the hosted
service's API, not Ansible), torn down whatever happens."""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import tempfile

from benchmarks.scheduler import InstantExecutor
from nodepool.zk.localserver import LocalZooKeeper, free_port
from tests.fakes.gerrit import GerritFixture
from tests.functional.system_support import ZuulSystem
from zuul.lib.gearlib import GearServer


def median_p95_ms(values) -> str:
    """``median / p95`` of seconds, in milliseconds."""
    values = sorted(values)
    p95 = values[min(len(values) - 1, int(0.95 * len(values)))]
    return f'{statistics.median(values) * 1000:.0f} / {p95 * 1000:.0f}'


class HostedRun:
    """The parts of one run: ``system`` (its executor does nothing),
    ``side`` (the hosted service's side, ``side_class(system, root)``),
    ``zk`` and, once ``start_executor`` is called, the instant executor."""

    def __init__(self, root: str, side_class):
        self.root = root
        self.zk = LocalZooKeeper(os.path.join(root, 'zk'))
        self.zk.start()
        self.gear_port = free_port()
        self.gear_server = GearServer(port=self.gear_port, host='127.0.0.1')
        self.gerrit = GerritFixture(os.path.join(root, 'gerrit'))
        key = os.path.join(root, 'id')
        os.system(f'ssh-keygen -q -t ed25519 -N "" -f {key}')
        self.system = ZuulSystem(root, self.gerrit, self.zk.hosts, self.gear_port, key)
        self.system.executor.start = lambda: None
        self.system.executor.stop = lambda: None
        self.side = side_class(self.system, root)
        self.executor = None

    def start_executor(self) -> None:
        self.executor = InstantExecutor(self.gear_port)

    def stop(self) -> None:
        if self.executor is not None:
            self.executor.stop()
        self.side.stop()
        self.system.stop()
        self.gerrit.server.stop()
        self.gear_server.shutdown()
        self.zk.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def hosted_run(prefix: str, side_class):
    run = None
    root = tempfile.mkdtemp(prefix=prefix, dir='/tmp')
    try:
        run = HostedRun(root, side_class)
        yield run
    finally:
        if run is not None:
            run.stop()
        else:
            shutil.rmtree(root, ignore_errors=True)
