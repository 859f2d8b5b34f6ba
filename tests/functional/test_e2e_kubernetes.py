"""Jobs on Kubernetes nodes, end to end: the dev Gerrit, a real
ZooKeeper, Gearman, merger, executor and scheduler, nodepool-launcher's
kubernetes provider and the Kubernetes API stand-in (its pods are
network namespaces).

- A job from an untrusted project runs its tasks in a pod node through
  the kubectl connection: commands, files copied in and fetched out,
  in the pod's own network namespace.
- A job with a namespace node gets ``zuul.resources`` and a kubeconfig
  for the namespace; its (trusted) playbook uses them to make and read
  objects there, and the token is refused anywhere else.
"""

from __future__ import annotations

import textwrap

import pytest

from nodepool.config import load_config_text
from nodepool.launcher.launcher import Launcher
from nodepool.launcher.settings import LauncherSettings
from nodepool.zk.api import NodepoolZooKeeper
from tests.functional.kubernetes_support import kube  # noqa: F401 - fixture
from tests.functional.system_support import zuul_system  # noqa: F401 - fixture
from tests.harness import docs
from tests.harness.waiting import wait_for

POD_PLAYBOOK = """
- hosts: pod
  tasks:
    - name: A command runs in the pod's own network namespace
      command: ip -4 -o addr show eth0
      register: addr
    - assert:
        that:
          - "'{subnet_prefix}' in addr.stdout"
          - "zuul.resources.pod.pod == 'pod-debian'"
          - "zuul.resources.pod.namespace == ansible_kubectl_namespace"
    - name: A file goes in
      copy:
        content: "made by {{{{ zuul.job }}}}\\n"
        dest: "{{{{ ansible_env.HOME }}}}/in-pod.txt"
    - name: And comes out to the job's logs
      fetch:
        src: "{{{{ ansible_env.HOME }}}}/in-pod.txt"
        dest: "{{{{ zuul.executor.log_root }}}}/"
        flat: true
    - slurp:
        src: "{{{{ ansible_env.HOME }}}}/in-pod.txt"
      register: back
    - assert:
        that: "(back.content | b64decode) == 'made by on-pod\\n'"
"""

# The documentation's example, as printed.
NAMESPACE_PLAYBOOK = docs.code_blocks('doc/source/reference/drivers/kubernetes.rst', 'yaml')[-1]

APP = """
- job:
    name: on-pod
    nodeset:
      nodes:
        - name: pod
          label: pod-debian
    run: playbooks/pod.yaml
- project:
    check:
      jobs:
        - on-pod
        - on-namespace
"""

CONFIG_JOBS = """
- job:
    name: on-namespace
    nodeset:
      nodes:
        - name: space
          label: k8s-namespace
    run: playbooks/namespace.yaml
"""


@pytest.fixture
def launcher(zuul_system, zk_chroot, kube):  # noqa: F811
    config = load_config_text(textwrap.dedent("""
        labels:
          - name: pod-debian
          - name: k8s-namespace
        providers:
          - name: e2e-k8s
            driver: kubernetes
            context: standin
            pools:
              - name: main
                max-pods: 4
                labels:
                  - name: pod-debian
                    type: pod
                    image: docker.io/debian:12
                    python-path: /usr/bin/python3
                  - name: k8s-namespace
                    type: namespace
        """))
    zk = NodepoolZooKeeper.from_hosts(zk_chroot.hosts)
    launcher = Launcher(config, zk, LauncherSettings(
        hostname='launcher.test', cleanup_interval=1.0, poll_interval=0.5,
        min_ready_interval=1.0))
    launcher.start()
    try:
        yield zk
    finally:
        launcher.stop()
        zk.close()


def test_jobs_on_pod_and_namespace_nodes(zuul_system, launcher, kube):  # noqa: F811
    system = zuul_system
    prefix = kube.subnet.rsplit('.', 2)[0] + '.'
    system.create_projects(app_config=APP, config_files={
        'zuul.d/k8s-jobs.yaml': CONFIG_JOBS,
        'playbooks/namespace.yaml': NAMESPACE_PLAYBOOK})
    system.store.push_branch('org/app', 'master', {
        'playbooks/pod.yaml': textwrap.dedent(POD_PLAYBOOK.format(subnet_prefix=prefix))},
        'The pod playbook')
    system.start()
    change = system.store.create_change('org/app', 'master', 'Run on Kubernetes',
                                        {'x.txt': '1\n'})
    wait_for(lambda: system.verified(change) != 0, timeout=300, what='check vote')
    message = system.messages(change)[-1]
    assert system.verified(change) == 1, message
    assert 'on-pod' in message and 'on-namespace' in message
    wait_for(lambda: not [n for n in launcher.get_nodes() if n.state in ('in-use', 'used')],
             timeout=60, what='nodes returned and cleaned up')
