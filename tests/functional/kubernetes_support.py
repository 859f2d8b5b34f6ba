"""The Kubernetes API stand-in (tests/fakes/kubernetes_api.py) as a
fixture: its own process, its kubeconfig in ``KUBECONFIG``, pods backed
by network namespaces of this test process's own subnet and bridge."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request

import pytest
import yaml

from nodepool.driver.netns.host import available

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class KubeStandIn:
    """A running stand-in: its URL, admin token and fault controls."""

    def __init__(self, state_dir: str, max_pods: int | None = None):
        self.state_dir = state_dir
        self.kubeconfig = os.path.join(state_dir, 'kubeconfig')
        pid = os.getpid()
        self.subnet = f'10.{225 + pid % 5}.{(pid // 5) % 250}.0/24'
        self.bridge = f'k8s{pid % 100000}'
        backing = 'netns' if available() is None else 'process'
        cmd = [sys.executable, '-m', 'tests.fakes.kubernetes_api', '--state-dir', state_dir,
               '--kubeconfig', self.kubeconfig, '--backing', backing,
               '--subnet', self.subnet, '--bridge', self.bridge]
        if max_pods is not None:
            cmd += ['--max-pods', str(max_pods)]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True,
                                     start_new_session=True)
        line = self.proc.stdout.readline()
        if not line.startswith('READY'):
            self.stop()
            raise RuntimeError(f'the Kubernetes stand-in did not start: {line!r}')
        self.port = int(line.split()[1])
        self.url = f'http://127.0.0.1:{self.port}'
        with open(self.kubeconfig) as f:
            self.admin_token = yaml.safe_load(f)['users'][0]['user']['token']

    def control(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={
            'Authorization': f'Bearer {self.admin_token}', 'Content-Type': 'application/json'})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.load(resp)

    def inject(self, **fault) -> None:
        """``verb``, ``plural``, ``code``, ``reason``, ``message``, ``count``
        (or ``pending=True``): see tests/fakes/kubernetes_api.py."""
        self.control('POST', '/_standin/faults', fault)

    def clear_faults(self) -> None:
        self.control('DELETE', '/_standin/faults')

    def admin_api(self):
        from kubernetes import config
        return config.new_client_from_config(config_file=self.kubeconfig, context='standin',
                                             persist_config=False)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        subprocess.run(['ip', 'link', 'del', self.bridge], capture_output=True)


@pytest.fixture
def kube(tmp_path, monkeypatch):
    standin = KubeStandIn(str(tmp_path / 'k8s'))
    monkeypatch.setenv('KUBECONFIG', standin.kubeconfig)
    try:
        yield standin
    finally:
        standin.stop()
