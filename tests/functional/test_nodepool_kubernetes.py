"""nodepool-launcher with the kubernetes driver: the official client,
unmodified, against the Kubernetes API stand-in (its own process) on a
real ZooKeeper.  Pods are network namespaces: exec runs there."""

from __future__ import annotations

import json
import logging

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from kubernetes.stream import stream

from nodepool.zk.records import FAILED, READY
from tests.functional import kubernetes_support
from tests.functional import test_nodepool_support as support
from tests.functional.test_nodepool_support import wait_until
from zuul.executor import kube as executor_kube
from zuul.executor.protocol import NodeSpec

launchers = support.launchers
kube = kubernetes_support.kube
requestor = support.requestor
zk = support.zk

CONFIG = """
labels:
  - name: pod-debian
  - name: k8s-namespace
providers:
  - name: k8s
    driver: kubernetes
    context: standin
    launch-retries: {retries}
    boot-timeout: {boot_timeout}
    pools:
      - name: main
        max-pods: 4
        default-label-memory: 128
        labels:
          - name: pod-debian
            type: pod
            image: docker.io/debian:12
            cpu: 1
            env: [{{name: GREETING, value: hello}}]
          - name: k8s-namespace
            type: namespace
"""


def config(retries=3, boot_timeout=30):
    return CONFIG.format(retries=retries, boot_timeout=boot_timeout)


def fulfilled(handle, timeout=30):
    assert handle.wait(timeout), f'request {handle.id} not done'
    assert handle.fulfilled, f'request {handle.id} failed'
    return handle.nodes


def user_api(kube, node, secret):
    """A client with the node's own kubeconfig, as a job gets it."""
    from kubernetes import config as k8s_config
    spec = NodeSpec(name=['n'], connection_type=node.connection_type,
                    resource=node.resource, secret=secret)
    doc, _ = executor_kube.build_config([spec])
    return k8s_config.new_client_from_config_dict(doc)


def pod_exec(api, namespace, pod, command):
    ws = stream(k8s.CoreV1Api(api).connect_get_namespaced_pod_exec, pod, namespace,
                command=command, stdin=False, stdout=True, stderr=True, tty=False,
                _preload_content=False, binary=True)
    out = b''
    while ws.is_open():
        ws.update(timeout=1)
        out += ws.read_stdout(timeout=0) or b''
    out += ws.read_stdout(timeout=0) or b''
    return ws.returncode, out.decode()


def test_pod_and_namespace_nodes(launchers, requestor, zk, kube):
    """A pod and a namespace node: records say how to reach them (never
    the token), the token sits beside the record, works in the node's
    own namespace and is refused in any other."""
    launcher = launchers.make(config())
    handle = requestor.submit(['pod-debian', 'k8s-namespace'])
    pod_node, ns_node = fulfilled(handle)
    assert pod_node.connection_type == 'kubectl'
    assert pod_node.interface_ip == 'pod-debian'
    assert pod_node.resource['namespace'].startswith('pod-debian-')
    assert ns_node.connection_type == 'namespace'
    assert ns_node.resource['pod'] is None
    for node in (pod_node, ns_node):
        record = zk.get_node(node.id)
        assert 'token' not in json.dumps(record.to_dict())
        assert record.resource['host'] == kube.url
    pod_secret = zk.get_node_secret(pod_node.id)
    ns_secret = zk.get_node_secret(ns_node.id)
    assert pod_secret['token'] and ns_secret['token'] != pod_secret['token']
    api = user_api(kube, pod_node, pod_secret)
    rc, out = pod_exec(api, pod_node.resource['namespace'], 'pod-debian',
                       ['/bin/sh', '-c', 'echo $GREETING; exit 0'])
    assert (rc, out) == (0, 'hello\n')
    # The namespace node's token works in its namespace only.
    ns_api = user_api(kube, ns_node, ns_secret)
    core = k8s.CoreV1Api(ns_api)
    core.create_namespaced_config_map(ns_node.resource['namespace'],
                                      {'metadata': {'name': 'made-by-job'}, 'data': {'a': 'b'}})
    with pytest.raises(ApiException) as refused:
        pod_exec(ns_api, pod_node.resource['namespace'], 'pod-debian', ['true'])
    assert '403' in str(refused.value)     # the websocket handshake is refused
    with pytest.raises(ApiException) as refused:
        core.list_namespace()
    assert refused.value.status == 403
    # Used nodes go, with their namespaces (and the secrets beside them).
    requestor.release(handle)
    wait_until(launcher, lambda: not zk.get_nodes(), 'nodes deleted')
    admin = k8s.CoreV1Api(kube.admin_api())
    names = [ns.metadata.name for ns in admin.list_namespace().items]
    assert names == ['default']


def test_api_errors_are_retried_then_reported(launchers, requestor, zk, kube, caplog):
    """An API error during a launch is retried up to launch-retries; past
    them the request fails with the API server's reason on it and in the
    launcher's log."""
    launcher = launchers.make(config(retries=2))
    kube.inject(verb='create', plural='pods', code=500, reason='InternalError',
                message='etcdserver: request timed out', count=2)
    nodes = fulfilled(requestor.submit(['pod-debian']))
    assert zk.get_node(nodes[0].id).state in (READY, 'in-use')
    kube.inject(verb='create', plural='pods', code=500, reason='InternalError',
                message='etcdserver: leader changed', count=10)
    with caplog.at_level(logging.INFO, logger='nodepool'):
        handle = requestor.submit(['pod-debian'])
        assert handle.wait(60)
    assert handle.failed
    reason = (zk.get_request(handle.id) or handle.request).failure_reason
    assert 'etcdserver: leader changed' in reason
    assert 'etcdserver: leader changed' in caplog.text
    # The half-made namespaces of the failed attempts are gone.
    wait_until(launcher, lambda: len(k8s.CoreV1Api(kube.admin_api()).list_namespace(
        label_selector='nodepool_provider_name=k8s').items) == 1, 'failed attempts cleaned')


def test_launch_timeout(launchers, requestor, zk, kube):
    """A pod that never runs fails its launch at boot-timeout; the
    request fails once the retries are spent, saying so."""
    launchers.make(config(retries=0, boot_timeout=1))
    kube.inject(pending=True)
    handle = requestor.submit(['pod-debian'])
    assert handle.wait(60)
    assert handle.failed
    assert 'not ready within' in (zk.get_request(handle.id) or handle.request).failure_reason


def test_quota_exhausted_pauses_the_pool(launchers, requestor, zk, kube, tmp_path):
    """The cluster refuses a pod with '403 exceeded quota': the pool
    pauses (its launcher record says so) and the request waits, fulfilled
    once a node goes; it never fails."""
    launcher = launchers.make(config(retries=0))
    first = requestor.submit(['pod-debian'])
    fulfilled(first)
    kube.inject(verb='create', plural='pods', code=403, reason='Forbidden',
                message='pods "x" is forbidden: exceeded quota: compute, requested: pods=1, '
                        'used: pods=1, limited: pods=1', count=1)
    second = requestor.submit(['pod-debian'])
    wait_until(launcher, lambda: any(r.paused for r in launcher.launcher_records().values()),
               'pool paused for quota')
    assert not second.done.is_set()
    assert zk.get_request(second.id).state != FAILED
    requestor.release(first)
    fulfilled(second, timeout=60)


def test_leaked_namespace_is_deleted(launchers, zk, kube):
    """A namespace with our labels and no node record is removed by
    leak cleanup; one of another provider is left alone."""
    launcher = launchers.make(config())
    admin = k8s.CoreV1Api(kube.admin_api())
    for name, provider in (('leaked-0000009999', 'k8s'), ('foreign-1', 'other')):
        admin.create_namespace({'metadata': {'name': name, 'labels': {
            'nodepool_node_id': '0000009999', 'nodepool_provider_name': provider}}})
    launcher.run_cleanup()
    wait_until(launcher, lambda: sorted(ns.metadata.name for ns in admin.list_namespace().items)
               == ['default', 'foreign-1'], 'leaked namespace deleted')


OPENSHIFT = """
labels:
  - name: os-project
  - name: os-pod
  - name: pods-pod
providers:
  - name: openshift
    driver: openshift
    context: standin
    max-projects: 4
    pools:
      - name: main
        labels:
          - {name: os-project, type: project}
          - {name: os-pod, type: pod, image: registry.example.org/ubi9}
  - name: openshiftpods
    driver: openshiftpods
    context: standin
    max-pods: 4
    pools:
      - name: ci
        labels:
          - {name: pods-pod, image: registry.example.org/ubi9}
"""


def test_openshift_projects_and_openshiftpods_pods(launchers, requestor, zk, kube):
    """openshift: a project (through a project request) and a pod in a
    project of its own; openshiftpods: pods in the existing project
    ``ci`` whose tokens reach their own pod and no other."""
    admin = k8s.CoreV1Api(kube.admin_api())
    admin.create_namespace({'metadata': {'name': 'ci'}})
    launcher = launchers.make(OPENSHIFT)
    project, os_pod = fulfilled(requestor.submit(['os-project', 'os-pod']))
    assert project.connection_type == 'project'
    assert os_pod.connection_type == 'kubectl'
    first, second = fulfilled(requestor.submit(['pods-pod', 'pods-pod']))
    assert first.resource['namespace'] == second.resource['namespace'] == 'ci'
    assert first.resource['pod'] != second.resource['pod']
    api = user_api(kube, first, zk.get_node_secret(first.id))
    assert pod_exec(api, 'ci', first.resource['pod'], ['/bin/sh', '-c', 'echo mine'])[1] == \
        'mine\n'
    with pytest.raises(ApiException) as refused:
        pod_exec(api, 'ci', second.resource['pod'], ['true'])
    assert '403' in str(refused.value)
    projects = k8s.CustomObjectsApi(kube.admin_api()).list_cluster_custom_object(
        'project.openshift.io', 'v1', 'projects', label_selector='nodepool_provider_name=openshift')
    assert len(projects['items']) == 2
    del launcher
