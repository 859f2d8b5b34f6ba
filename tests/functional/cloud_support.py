"""The cloud stand-ins (tests/fakes/*_standin.py, kubernetes_api.py) as
processes of their own, for the tests and benchmarks/providers.py: the
GCE and Azure ones here, EC2 in aws_support.py, Kubernetes in
kubernetes_support.py, all started and stopped by StandInProcess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class StandInProcess:
    """A stand-in run as ``python -m <module>``: started once it says
    ``READY <port>``; ``stop`` ends it (SIGTERM, then SIGKILL of its
    group) and removes its bridge.  ``headers`` go with control calls."""

    name = 'stand-in'
    headers: dict[str, str] = {}

    def _start(self, module: str, args: list[str], bridge: str) -> None:
        self.bridge = bridge
        self.proc = subprocess.Popen([sys.executable, '-m', module, *args, '--bridge', bridge],
                                     cwd=ROOT, stdout=subprocess.PIPE, text=True,
                                     start_new_session=True)
        line = self.proc.stdout.readline()
        if not line.startswith('READY'):
            self.stop()
            raise RuntimeError(f'the {self.name} did not start: {line!r}')
        self.port = int(line.split()[1])
        self.url = f'http://127.0.0.1:{self.port}'

    def control(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={'Content-Type': 'application/json',
                                              **self.headers})
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = resp.read()
        return json.loads(body) if body.strip() else {}

    def inject(self, **fault) -> None:
        """Arm a fault: see the stand-in's module for the keys it takes."""
        self.control('POST', '/_standin/faults', fault)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        subprocess.run(['ip', 'link', 'del', self.bridge], capture_output=True)


class GceStandIn(StandInProcess):
    name = 'GCE stand-in'

    def __init__(self, state_dir: str, key_file: str, cpus_quota: int = 64):
        pid = os.getpid()
        self.credentials = os.path.join(state_dir, 'sa.json')
        os.makedirs(state_dir, exist_ok=True)
        self._start('tests.fakes.gce_standin',
                    ['--state-dir', state_dir, '--credentials', self.credentials,
                     '--subnet', f'10.232.{pid % 250}.0/24', '--authorized-keys-file', key_file,
                     '--cpus-quota', str(cpus_quota)], f'gce{pid % 100000}')


class AzureStandIn(StandInProcess):
    name = 'Azure stand-in'

    def __init__(self, state_dir: str, cores_quota: int = 4):
        pid = os.getpid()
        os.makedirs(state_dir, exist_ok=True)
        self.auth = os.path.join(state_dir, 'azure.json')
        self._start('tests.fakes.azure_standin',
                    ['--state-dir', state_dir, '--auth-file', self.auth,
                     '--subnet', f'10.239.{pid % 250}.0/24', '--cores-quota', str(cores_quota)],
                    f'az{pid % 100000}')
