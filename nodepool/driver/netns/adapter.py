"""netns hosts as a provider: ``create`` builds a namespace with its own
address and sshd (NetnsHostManager) and returns once sshd answers."""

from __future__ import annotations

import glob
import ipaddress
import os
import threading

from nodepool.driver import (
    Instance,
    InstanceSpec,
    LaunchError,
    ProviderAdapter,
    ProviderError,
    Quota,
    instance_prefix,
)
from nodepool.driver.netns.host import NetnsError, NetnsHost, NetnsHostManager, available


class NetnsAdapter(ProviderAdapter):
    check_ssh = True

    def __init__(self, provider):
        super().__init__(provider)
        self.settings = provider.settings
        self.prefix = instance_prefix(provider.name)
        self.manager: NetnsHostManager | None = None
        self._hosts: dict[str, tuple[NetnsHost, InstanceSpec]] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        why = available()
        if why:
            raise ProviderError(f'netns provider {self.provider.name}: {why}')
        self.manager = NetnsHostManager(base_dir=self.settings['state-dir'],
                                        subnet=self.settings['subnet'],
                                        bridge=self.settings['bridge'])

    def authorized_keys(self) -> list[str]:
        keys = list(self.settings.get('authorized-keys') or [])
        path = self.settings.get('authorized-keys-file')
        if path:
            try:
                with open(path) as f:
                    keys += [line.strip() for line in f if line.strip()]
            except OSError as e:
                raise ProviderError(f'cannot read authorized-keys-file {path}: '
                                    f'{e.strerror}') from None
        if not keys:
            for pub in sorted(glob.glob(os.path.expanduser('~/.ssh/*.pub'))):
                with open(pub) as f:
                    keys += [line.strip() for line in f if line.strip()]
        if not keys:
            raise ProviderError(f'netns provider {self.provider.name}: no key to authorize '
                                '(set authorized-keys or authorized-keys-file)')
        return keys

    def create(self, spec: InstanceSpec) -> str:
        if self.manager is None:
            self.start()
        try:
            host = self.manager.create(spec.name, self.authorized_keys(),
                                       timeout=self.provider.boot_timeout,
                                       rootfs=spec.label_settings.get('rootfs'))
        except NetnsError as e:
            raise LaunchError(str(e)) from None
        with self._lock:
            self._hosts[spec.name] = (host, spec)
        return spec.name

    def poll(self, external_id: str) -> Instance | None:
        with self._lock:
            entry = self._hosts.get(external_id)
        if entry is None:
            raise LaunchError(f'{external_id} is not a host of this launcher')
        host, spec = entry
        return Instance(external_id=external_id, node_id=spec.node_id, ready=True,
                        interface_ip=host.address, private_ipv4=host.address,
                        public_ipv4=host.address, hostname=host.name,
                        connection_port=host.port, username=spec.username or host.username,
                        host_keys=list(host.host_keys), region='local')

    def delete(self, external_id: str) -> None:
        if self.manager is None:
            self.start()
        with self._lock:
            entry = self._hosts.pop(external_id, None)
        self.manager.delete(entry[0] if entry else external_id)

    def list(self) -> list[Instance]:
        if self.manager is None:
            self.start()
        return [Instance(external_id=name, node_id=name[len(self.prefix):])
                for name in self.manager.list(self.prefix)]

    def quota(self) -> Quota:
        size = ipaddress.ip_network(self.settings['subnet']).num_addresses
        return Quota(instances=max(size - 3, 0))
