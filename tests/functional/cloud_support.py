"""The GCE and Azure stand-ins (tests/fakes/gce_standin.py,
tests/fakes/azure_standin.py) as their own processes, for the tests and
benchmarks/providers.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class GceStandIn:
    def __init__(self, state_dir: str, key_file: str, cpus_quota: int = 64):
        pid = os.getpid()
        self.bridge = f'gce{pid % 100000}'
        self.credentials = os.path.join(state_dir, 'sa.json')
        os.makedirs(state_dir, exist_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, '-m', 'tests.fakes.gce_standin', '--state-dir', state_dir,
             '--credentials', self.credentials, '--subnet', f'10.232.{pid % 250}.0/24',
             '--bridge', self.bridge, '--authorized-keys-file', key_file,
             '--cpus-quota', str(cpus_quota)],
            cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True)
        line = self.proc.stdout.readline()
        assert line.startswith('READY'), line
        self.url = f'http://127.0.0.1:{line.split()[1]}'

    def inject(self, **fault) -> None:
        req = urllib.request.Request(self.url + '/_standin/faults', method='POST',
                                     data=json.dumps(fault).encode())
        urllib.request.urlopen(req, timeout=10).close()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        self.proc.stdout.close()
        subprocess.run(['ip', 'link', 'del', self.bridge], capture_output=True)


class AzureStandIn:
    def __init__(self, state_dir: str, cores_quota: int = 4):
        pid = os.getpid()
        self.bridge = f'az{pid % 100000}'
        os.makedirs(state_dir, exist_ok=True)
        self.auth = os.path.join(state_dir, 'azure.json')
        self.proc = subprocess.Popen(
            [sys.executable, '-m', 'tests.fakes.azure_standin', '--state-dir', state_dir,
             '--auth-file', self.auth, '--subnet', f'10.239.{pid % 250}.0/24',
             '--bridge', self.bridge, '--cores-quota', str(cores_quota)],
            cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True)
        line = self.proc.stdout.readline()
        assert line.startswith('READY'), line
        self.url = f'http://127.0.0.1:{line.split()[1]}'

    def inject(self, **fault) -> None:
        req = urllib.request.Request(self.url + '/_standin/faults', method='POST',
                                     data=json.dumps(fault).encode())
        urllib.request.urlopen(req, timeout=10).close()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        self.proc.stdout.close()
        subprocess.run(['ip', 'link', 'del', self.bridge], capture_output=True)
