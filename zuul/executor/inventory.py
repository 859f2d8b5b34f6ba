"""Ansible inventory and known_hosts for a build.

Every node answers to each of its nodeset names with ``ansible_host``,
``ansible_port``, ``ansible_user`` and ``ansible_connection`` taken from
the Nodepool record (never from job config), a ``nodepool`` dict, and the
job's ``host-vars``; groups come from the nodeset with ``group-vars``.
"""

from __future__ import annotations

from zuul.executor.protocol import JobSpec, NodeSpec
from zuul.lib.ansiblevars import connection_variables
from zuul.lib.yamlutil import mark_unsafe

# Names a node may not take: they would make ansible run on the executor.
LOCALHOST_NAMES = frozenset({'localhost', '127.0.0.1', '::1', 'localhost.localdomain'})

__all__ = ['LOCALHOST_NAMES', 'InventoryError', 'build_inventory', 'check_job',
           'connection_variables', 'known_hosts_lines', 'nodepool_vars']


class InventoryError(ValueError):
    """The job asks for something the executor refuses."""


def check_job(job: JobSpec, nodes: list[NodeSpec]) -> None:
    """Raise InventoryError if node names or variables are refused."""
    for node in nodes:
        for name in node.name:
            if name.lower() in LOCALHOST_NAMES:
                raise InventoryError(f'Node name {name!r} is not allowed: it '
                                     'would run the job on the executor')
    checks = [('vars', job.vars), ('extra-vars', job.extra_vars)]
    checks += [(f'host-vars.{h}', v) for h, v in job.host_vars.items()]
    checks += [(f'group-vars.{g}', v) for g, v in job.group_vars.items()]
    for where, variables in checks:
        bad = connection_variables(variables)
        if bad:
            raise InventoryError(
                f'Job {job.name} may not set {", ".join(bad)} in {where}: '
                'connection settings come from the node')


def nodepool_vars(node: NodeSpec) -> dict:
    """The per-host ``nodepool`` variable (released Zuul names)."""
    return {
        'label': node.label,
        'provider': node.provider,
        'region': node.region,
        'az': node.az,
        'cloud': node.cloud,
        'host_id': node.host_id,
        'interface_ip': node.interface_ip,
        'public_ipv4': node.public_ipv4,
        'private_ipv4': node.private_ipv4,
        'public_ipv6': node.public_ipv6,
    }


def _host_entry(node: NodeSpec, host_vars: dict, default_username: str) -> dict:
    entry = dict(host_vars or {})
    entry.update({
        'ansible_host': node.address,
        'ansible_port': node.connection_port,
        'ansible_user': node.username or default_username,
        'ansible_connection': node.connection_type or 'ssh',
        # Provider metadata: text, never a template.
        'nodepool': mark_unsafe(nodepool_vars(node)),
    })
    if node.python_path and node.python_path != 'auto':
        entry['ansible_python_interpreter'] = node.python_path
    return entry


def build_inventory(job: JobSpec, nodes: list[NodeSpec], all_vars: dict,
                    default_username: str = 'zuul', kube=None) -> dict:
    """The inventory as a dict ready for YAML; ``all_vars`` go to all.vars.
    A node whose record names no user is reached as ``default_username``
    (``[executor] default_username``).  ``kube`` (zuul.executor.kube
    ``KubeConfig``): namespace nodes are no hosts, pod nodes are reached
    through the kubectl connection with the node's own context."""
    hosts = {}
    for node in nodes:
        for name in node.name:
            if kube is not None and name in kube.not_hosts:
                continue
            hosts[name] = _host_entry(node, job.host_vars.get(name, {}), default_username)
            if kube is not None and name in kube.host_vars:
                hosts[name].pop('ansible_port', None)
                hosts[name].update(kube.host_vars[name])
    children = {}
    for group in job.groups:
        children[group.name] = {
            'hosts': {name: None for name in group.nodes if name in hosts},
            'vars': dict(job.group_vars.get(group.name, {})),
        }
    inventory = {'all': {'hosts': hosts, 'vars': all_vars}}
    if children:
        inventory['all']['children'] = children
    return inventory


def known_hosts_lines(nodes: list[NodeSpec]) -> list[str]:
    """known_hosts lines recording each node's keys at its address:port."""
    lines = []
    for node in nodes:
        if not node.address:
            continue
        host = node.address
        if node.connection_port and int(node.connection_port) != 22:
            host = f'[{node.address}]:{node.connection_port}'
        for key in node.host_keys:
            lines.append(f'{host} {key.strip()}')
    return lines
