"""Registering the hosts of static providers as ``ready`` nodes.

Every slot of every configured host (``max-parallel-jobs`` of them) gets
one node record; a record whose host left the configuration is removed
once it is idle.  Host keys are scanned (and checked against the
configured ``host-key``) when ``host-key-checking`` is on; a host that
cannot be scanned is tried again on the next pass.
"""

from __future__ import annotations

import ipaddress
import logging

from nodepool.zk.records import READY, Node

log = logging.getLogger('nodepool.launcher.static')


def _is_ipv4(name: str) -> bool:
    try:
        return ipaddress.ip_address(name).version == 4
    except ValueError:
        return False


class StaticNodeRegistrar:
    def __init__(self, launcher):
        self.launcher = launcher
        self.zk = launcher.zk

    def sync(self) -> None:
        static = {name: a for name, a in self.launcher.adapters.items()
                  if a.reuses_nodes and name not in self.launcher.broken_providers}
        if not static:
            return
        records = [n for n in self.zk.get_nodes() if n.provider in static]
        for name, adapter in static.items():
            self._sync_provider(name, adapter, [n for n in records if n.provider == name])

    def _sync_provider(self, provider: str, adapter, records: list[Node]) -> None:
        hosts = adapter.static_hosts()
        existing = {(n.hostname, n.connection_port, n.slot): n for n in records}
        wanted = set()
        for host in hosts:
            key = (host.name, host.connection_port, host.slot)
            wanted.add(key)
            if key in existing:
                continue
            try:
                keys = adapter.scan_host_keys(host)
            except Exception as e:
                log.warning('Static node %s: not registered: %s', host.name, e)
                continue
            node = Node(type=host.labels[0], provider=provider, pool=host.pool,
                        hostname=host.name, interface_ip=host.name,
                        public_ipv4=host.name if _is_ipv4(host.name) else None,
                        connection_port=host.connection_port,
                        connection_type=host.connection_type, username=host.username,
                        host_keys=keys, python_path=host.python_path,
                        shell_type=host.shell_type, state=READY, slot=host.slot,
                        external_id=host.name, attributes=dict(host.attributes))
            self.zk.store_node(node)
            log.info('Static node %s slot %d registered as node %s (%s)', host.name,
                     host.slot, node.id, ', '.join(host.labels))
        for key, node in existing.items():
            if key in wanted or node.state != READY or node.allocated_to:
                continue
            stub = Node(id=node.id)
            if not self.zk.lock_node(stub, blocking=False, identifier='static-sync'):
                continue
            fresh = self.zk.get_node(node.id)
            if fresh is not None and fresh.state == READY and not fresh.allocated_to:
                fresh.lock = stub.lock
                self.zk.delete_node(fresh)
                log.info('Static node %s slot %s left the configuration; node %s removed',
                         node.hostname, node.slot, node.id)
            else:
                self.zk.unlock_node(stub)
