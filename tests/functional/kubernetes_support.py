"""The Kubernetes API stand-in (tests/fakes/kubernetes_api.py) as a
fixture: its own process, its kubeconfig in ``KUBECONFIG``, pods backed
by network namespaces of this test process's own subnet and bridge."""

from __future__ import annotations

import os

import pytest
import yaml

from nodepool.driver.netns.host import available
from tests.functional.cloud_support import StandInProcess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class KubeStandIn(StandInProcess):
    """A running stand-in: its URL, admin token and fault controls
    (``inject``: ``verb``, ``plural``, ``code``, ``reason``, ``message``,
    ``count`` or ``pending=True``; see tests/fakes/kubernetes_api.py)."""

    name = 'Kubernetes stand-in'

    def __init__(self, state_dir: str, max_pods: int | None = None):
        self.state_dir = state_dir
        self.kubeconfig = os.path.join(state_dir, 'kubeconfig')
        pid = os.getpid()
        self.subnet = f'10.{225 + pid % 5}.{(pid // 5) % 250}.0/24'
        backing = 'netns' if available() is None else 'process'
        args = ['--state-dir', state_dir, '--kubeconfig', self.kubeconfig,
                '--backing', backing, '--subnet', self.subnet]
        if max_pods is not None:
            args += ['--max-pods', str(max_pods)]
        self._start('tests.fakes.kubernetes_api', args, f'k8s{pid % 100000}')
        with open(self.kubeconfig) as f:
            self.admin_token = yaml.safe_load(f)['users'][0]['user']['token']
        self.headers = {'Authorization': f'Bearer {self.admin_token}'}

    def clear_faults(self) -> None:
        self.control('DELETE', '/_standin/faults')

    def admin_api(self):
        from kubernetes import config
        return config.new_client_from_config(config_file=self.kubeconfig, context='standin',
                                             persist_config=False)


@pytest.fixture
def kube(tmp_path, monkeypatch):
    standin = KubeStandIn(str(tmp_path / 'k8s'))
    monkeypatch.setenv('KUBECONFIG', standin.kubeconfig)
    try:
        yield standin
    finally:
        standin.stop()
