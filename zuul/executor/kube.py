"""Kubernetes nodes of a build: their kubeconfig and ``zuul.resources``.

A node whose record says ``connection_type`` ``namespace`` (``project``
on OpenShift) or ``kubectl`` is not a host with an address: it is a
namespace, or a pod in one, reached through the cluster's API with the
node's own service-account token.  As released Zuul does:

- every such node gets a context in the build's kubeconfig, named
  ``<namespace>:<user>/<cluster>``, its namespace set; the first is the
  current context;
- ``zuul.resources`` maps each node name to ``{namespace, context}``
  (and ``pod`` for a pod);
- a pod node is an inventory host with ``ansible_connection: kubectl``
  (zuul/ansible/connection/kubectl.py); a namespace node is not a host.

Two copies of the kubeconfig: ``ansible/kubeconfig``, which the kubectl
connection reads and no playbook can write (``ansible/`` is read-only
in every sandbox), and ``work/.kube/config``, the job's own (``KUBECONFIG``
of its playbooks; ``~/.kube/config`` of trusted ones).  Both are this
build's alone: the job dir is the only place a token is written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import yaml

from zuul.executor.protocol import NodeSpec

KUBE_TYPES = ('kubectl', 'namespace', 'project')
HOST_TYPES = ('kubectl',)


@dataclass
class KubeConfig:
    """What the build's Kubernetes nodes give it."""

    resources: dict = field(default_factory=dict)
    #: node name -> inventory variables of a pod node
    host_vars: dict = field(default_factory=dict)
    #: names of nodes that are not inventory hosts
    not_hosts: set = field(default_factory=set)
    path: str | None = None
    job_path: str | None = None


def is_kube(node: NodeSpec) -> bool:
    return node.connection_type in KUBE_TYPES


def _cluster_name(host: str) -> str:
    netloc = urlsplit(host).netloc or host
    return netloc.replace('.', '-').replace(':', '-') or 'cluster'


def build_config(nodes: list[NodeSpec]) -> tuple[dict, KubeConfig]:
    """The kubeconfig document and what the build needs to know of it."""
    doc = {'apiVersion': 'v1', 'kind': 'Config', 'preferences': {}, 'clusters': [],
           'users': [], 'contexts': [], 'current-context': None}
    out = KubeConfig()
    for node in nodes:
        if not is_kube(node) or not node.resource:
            continue
        res = node.resource
        cluster = _cluster_name(str(res.get('host') or ''))
        if cluster not in [c['name'] for c in doc['clusters']]:
            entry = {'server': res.get('host')}
            if res.get('ca_crt'):
                entry['certificate-authority-data'] = res['ca_crt']
            if res.get('skiptls'):
                entry['insecure-skip-tls-verify'] = True
            doc['clusters'].append({'name': cluster, 'cluster': entry})
        user = f'{res.get("namespace")}:{res.get("user")}'
        if user not in [u['name'] for u in doc['users']]:
            doc['users'].append({'name': user, 'user': {
                'token': (node.secret or {}).get('token', '')}})
        context = f'{user}/{cluster}'
        if context not in [c['name'] for c in doc['contexts']]:
            doc['contexts'].append({'name': context, 'context': {
                'user': user, 'cluster': cluster, 'namespace': res.get('namespace')}})
        doc['current-context'] = doc['current-context'] or context
        for name in node.name:
            entry = {'namespace': res.get('namespace'), 'context': context}
            if node.connection_type in HOST_TYPES:
                entry['pod'] = res.get('pod')
                out.host_vars[name] = {'ansible_kubectl_context': context,
                                       'ansible_kubectl_namespace': res.get('namespace'),
                                       'ansible_kubectl_pod': res.get('pod')}
            else:
                out.not_hosts.add(name)
            out.resources[name] = entry
    return doc, out


def write_for_build(ansible_root: str, work_root: str, nodes: list[NodeSpec]) -> KubeConfig:
    """Write the kubeconfig (if the build has Kubernetes nodes)."""
    doc, out = build_config(nodes)
    if not doc['contexts']:
        return out
    text = yaml.safe_dump(doc, default_flow_style=False)
    out.path = os.path.join(ansible_root, 'kubeconfig')
    out.job_path = os.path.join(work_root, '.kube', 'config')
    os.makedirs(os.path.dirname(out.job_path), mode=0o700, exist_ok=True)
    for path in (out.path, out.job_path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, 'w') as f:
            f.write(text)
    for vars_ in out.host_vars.values():
        vars_['ansible_kubectl_kubeconfig'] = out.path
    return out
