"""Static hosts as a provider: nothing to create or delete, a fixed set of
hosts (one slot per ``max-parallel-jobs``) to register."""

from __future__ import annotations

from nodepool.driver import (
    Instance,
    InstanceSpec,
    ProviderAdapter,
    ProviderError,
    Quota,
    StaticHost,
)
from nodepool.driver.sshutil import SSHCheckError, keyscan


class StaticAdapter(ProviderAdapter):
    reuses_nodes = True
    check_ssh = False

    def static_hosts(self) -> list[StaticHost]:
        hosts = []
        for pool in self.provider.pools.values():
            for node in pool.settings.get('nodes', []):
                for slot in range(node['max-parallel-jobs']):
                    hosts.append(StaticHost(
                        name=node['name'], slot=slot, labels=list(node['labels']),
                        pool=pool.name, username=node['username'],
                        connection_port=node['connection-port'],
                        connection_type=node['connection-type'],
                        python_path=node['python-path'], shell_type=node['shell-type'],
                        host_keys=list(node['host-key']),
                        host_key_checking=node['host-key-checking'],
                        timeout=node['timeout'], attributes=dict(pool.node_attributes)))
        return hosts

    def scan_host_keys(self, host: StaticHost) -> list[str]:
        """The keys to record: scanned (and checked against the configured
        ``host-key``) when ``host-key-checking`` is on, else as configured."""
        if not host.host_key_checking:
            return list(host.host_keys)
        try:
            scanned = keyscan(host.name, host.connection_port, host.timeout)
        except SSHCheckError as e:
            raise ProviderError(f'static node {host.name}: {e}') from None
        if host.host_keys:
            wanted = {' '.join(k.split()[:2]) for k in host.host_keys}
            if not wanted & set(scanned):
                raise ProviderError(f'static node {host.name}: none of its configured '
                                    'host keys matches the keys it presents')
            return sorted(wanted)
        return scanned

    def create(self, spec: InstanceSpec) -> str:
        raise ProviderError('static providers cannot create nodes')

    def poll(self, external_id: str) -> Instance | None:
        raise ProviderError('static providers cannot create nodes')

    def delete(self, external_id: str) -> None:
        pass

    def list(self) -> list[Instance]:
        return []

    def quota(self) -> Quota:
        return Quota(instances=len(self.static_hosts()))
