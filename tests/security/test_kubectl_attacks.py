"""Attacks on pod nodes by an unreviewed change to an untrusted project.

Two builds, each with a pod node of its own from the kubernetes driver
and the Kubernetes API stand-in.  Build A's untrusted playbook tries to
reach build B's pod or namespace, or to choose what the kubectl
connection reads; every try is refused, and B's pod sees nothing of A.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.stream import stream

from nodepool.config import load_config_text
from nodepool.driver import InstanceSpec, default_registry
from tests.functional.kubernetes_support import kube  # noqa: F401 - fixture
from tests.functional.test_executor_builds import explain, run_build, task_results
from tests.functional.test_executor_support import (  # noqa: F401 - fixtures
    exec_env,
    exec_keypair,
    exec_nodes,
    execute_request,
    item,
    playbook,
)
from zuul.executor import kube as executor_kube
from zuul.executor.protocol import JobSpec, NodeSpec

pytestmark = pytest.mark.skipif(shutil.which('bwrap') is None, reason='needs bubblewrap')

REFUSED = 'prohibited in untrusted playbooks'

PROVIDER = """
labels: [{name: pod}]
providers:
  - name: k8s
    driver: kubernetes
    context: standin
    pools:
      - name: main
        labels:
          - {name: pod, type: pod, image: debian:12, python-path: /usr/bin/python3}
"""


def pod_node(adapter, node_id: str) -> NodeSpec:
    external = adapter.create(InstanceSpec(name=node_id, node_id=node_id, provider='k8s',
                                           pool='main', label='pod'))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        inst = adapter.poll(external)
        if inst is not None and inst.ready:
            return NodeSpec(name=['pod'], label='pod', provider='k8s',
                            interface_ip=inst.interface_ip, connection_type='kubectl',
                            python_path='/usr/bin/python3', resource=inst.resource,
                            secret=inst.secret)
        time.sleep(0.05)
    raise AssertionError(f'pod {external} not running')


ATTACKS = """
- hosts: pod
  gather_facts: false
  tasks:
    - name: own pod
      command: hostname
    - name: other namespace
      command: touch /tmp/{{ zuul.build }}-other-namespace
      vars:
        ansible_kubectl_namespace: "{{ victim_namespace }}"
      ignore_errors: true
    - name: other pod
      command: "true"
      vars:
        ansible_kubectl_pod: other-pod
      ignore_errors: true
    - name: own kubeconfig copy
      command: "true"
      vars:
        ansible_kubectl_kubeconfig: "{{ zuul.executor.work_root }}/.kube/config"
      ignore_errors: true
    - name: another context
      command: "true"
      vars:
        ansible_kubectl_context: admin
      ignore_errors: true
    - name: add a host over kubectl
      add_host:
        name: victim
        ansible_connection: kubectl
        ansible_kubectl_namespace: "{{ victim_namespace }}"
      ignore_errors: true
    - name: read the victim's kubeconfig
      debug:
        msg: "{{ lookup('file', victim_kubeconfig) }}"
      ignore_errors: true
"""


def pod_exec(api, namespace: str, pod: str, command: list[str]) -> str:
    ws = stream(k8s.CoreV1Api(api).connect_get_namespaced_pod_exec, pod, namespace,
                command=command, stdin=False, stdout=True, stderr=True, tty=False,
                _preload_content=False)
    ws.run_forever(timeout=30)
    return ws.read_stdout() or ''


def test_a_build_reaches_only_its_own_pod(exec_env, kube):  # noqa: F811
    env = exec_env
    config = load_config_text(PROVIDER)
    adapter = default_registry().get('kubernetes').get_adapter(config.providers['k8s'])
    adapter.start()
    victim = pod_node(adapter, '0000000001')
    attacker = pod_node(adapter, '0000000002')
    victim_uuid = uuid.uuid4().hex
    # The victim's build dir as it is while B runs: its kubeconfig in it.
    victim_dir = f'{env.settings.job_dir}/{victim_uuid}'
    os.makedirs(f'{victim_dir}/ansible')
    conf = executor_kube.write_for_build(f'{victim_dir}/ansible', f'{victim_dir}/work', [victim])
    env.upstream.create('org/project', {'playbooks/run.yaml': ATTACKS})
    job = JobSpec(name='attack', vars={'victim_namespace': victim.resource['namespace'],
                                       'victim_kubeconfig': conf.path},
                  run=[playbook('org/project', 'playbooks/run')])
    result, build = run_build(env, execute_request(uuid.uuid4().hex, job, [attacker],
                                                   [item('org/project')]))
    assert result.result == 'SUCCESS', explain(build)
    tasks = task_results(build)
    assert tasks['own pod']['pod'].get('rc') == 0, explain(build)
    for name, why in (('other namespace', 'ansible_kubectl_namespace'),
                      ('other pod', 'ansible_kubectl_pod'),
                      ('own kubeconfig copy', 'ansible_kubectl_kubeconfig'),
                      ('another context', 'ansible_kubectl_context'),
                      ('add a host over kubectl', 'kubectl connection')):
        (entry,) = [v for k, v in tasks.items() if k.startswith(name)]
        text = str(entry)
        assert REFUSED in text and why in text, (name, text)
    # The other build's dir does not even exist in the attacker's sandbox.
    text = str(tasks["read the victim's kubeconfig"])
    assert 'FAILED' in text and 'File not found' in text, text
    assert victim.secret['token'] not in text
    # Nothing ran in the victim's pod.
    admin = kube.admin_api()
    listing = pod_exec(admin, victim.resource['namespace'], 'pod',
                       ['/bin/sh', '-c', 'ls /tmp'])
    assert 'other-namespace' not in listing
    # The attacker's token (readable in its own work dir) is refused in
    # the victim's namespace by the cluster itself.
    doc, _ = executor_kube.build_config([attacker])
    own = k8s_config.new_client_from_config_dict(doc)
    with pytest.raises(Exception) as refused:
        pod_exec(own, victim.resource['namespace'], 'pod', ['true'])
    assert '403' in str(refused.value)


def test_job_variables_cannot_choose_the_kubectl_connection(exec_env, kube):  # noqa: F811
    env = exec_env
    env.upstream.create('org/project', {'playbooks/run.yaml': '- hosts: all\n  tasks: []\n'})
    job = JobSpec(name='attack', vars={'ansible_kubectl_namespace': 'kube-system'},
                  run=[playbook('org/project', 'playbooks/run')])
    node = NodeSpec(name=['pod'], connection_type='kubectl', interface_ip='pod',
                    resource={'namespace': 'mine', 'pod': 'pod', 'host': kube.url,
                              'user': 'zuul-worker'}, secret={'token': 'x'})
    result, build = run_build(env, execute_request(uuid.uuid4().hex, job, [node],
                                                   [item('org/project')]))
    assert result.result == 'ERROR'
    assert 'ansible_kubectl_namespace' in result.error_detail


def test_token_never_in_the_inventory_or_job_variables(exec_env, kube):  # noqa: F811
    """The token reaches the build's kubeconfig files only: never the
    inventory, the zuul variables or the job's log."""
    env = exec_env
    env.upstream.create('org/project', {'playbooks/run.yaml':
                                        '- hosts: all\n  gather_facts: false\n  tasks:\n'
                                        '    - debug: var=zuul.resources\n'
                                        '    - debug: var=hostvars\n'})
    config = load_config_text(PROVIDER)
    adapter = default_registry().get('kubernetes').get_adapter(config.providers['k8s'])
    node = pod_node(adapter, '0000000003')
    job = JobSpec(name='leak', run=[playbook('org/project', 'playbooks/run')])
    result, build = run_build(env, execute_request(uuid.uuid4().hex, job, [node],
                                                   [item('org/project')]))
    assert result.result == 'SUCCESS', explain(build)
    token = node.secret['token']
    for path in (build.jobdir.inventory_file, build.zuul_vars_file,
                 build.jobdir.job_output_txt, build.jobdir.job_output_json):
        with open(path) as f:
            assert token not in f.read(), path
    with open(f'{build.jobdir.ansible_root}/kubeconfig') as f:
        assert token in f.read()
    assert repr(node).count(token) == 0
