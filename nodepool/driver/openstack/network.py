"""Neutron work of the openstack adapter: floating IPs and leaked ports.

- ``auto-floating-ip`` (a pool's, default true): a server whose
  addresses include no public IPv4 (none floating, none on a network
  that routes externally) gets a floating IP from the cloud's first
  external network, associated with its port on an internal network.
  The node's ``public_ipv4`` (and ``interface_ip``) is that address.
  Deleting the node deletes the floating IP.
- ``clean-floating-ips`` (a provider's, default true): nodepool takes
  itself for the only user of the project, so every floating IP that is
  not associated with a port is deleted by the launcher's cleanup.
- ``port-cleanup-interval`` (a provider's, seconds, default 600; 0
  disables): a port seen ``DOWN`` by one cleanup pass and still ``DOWN``
  this long after is deleted.  Ports Neutron owns itself (router
  interfaces, DHCP: a ``device_owner`` starting with ``network:``) are
  never touched.
"""

from __future__ import annotations

import logging
import threading
import time

from nodepool.driver import LaunchError, ProviderError

log = logging.getLogger('nodepool.driver.openstack')


class NeutronJanitor:
    """Floating IPs made for servers, and the provider's cleanup of
    floating IPs and ports.  ``clock`` (monotonic seconds) is replaceable
    for tests of ``port-cleanup-interval``."""

    def __init__(self, adapter):
        self.adapter = adapter
        self.clock = time.monotonic
        self._lock = threading.Lock()
        #: Server id -> ids of the floating IPs made for it (every server
        #: this adapter created is here, with [] when it needed none).
        self._floating: dict[str, list[str]] = {}
        #: Port id -> when a cleanup pass first saw it DOWN.
        self._down_since: dict[str, float] = {}

    @property
    def name(self) -> str:
        return self.adapter.provider.name

    def _network(self, error=LaunchError):
        return self.adapter._proxy('network', error)

    def _api(self, what, fn, *args, error=LaunchError, **kwargs):
        return self.adapter._api(what, fn, *args, error=error, **kwargs)

    # -- floating IPs of servers --------------------------------------------------

    def created(self, server_id: str) -> None:
        with self._lock:
            self._floating.setdefault(server_id, [])

    def attach(self, server_id: str) -> str | None:
        """A floating IP for the server, associated with its port on an
        internal network: its address, or None while the server has no
        such port yet.  Raises ``LaunchError`` if the cloud has no
        external network or refuses."""
        with self._lock:
            made = list(self._floating.get(server_id) or [])
        network = self._network()
        if made:
            fip = self._api(f'reading floating IP {made[0]}', network.get_ip, made[0])
            return fip.floating_ip_address
        index = self.adapter._network_index()
        external = next((n for n in index.values() if getattr(n, 'is_router_external', False)),
                        None)
        if external is None:
            raise LaunchError(f'provider {self.name}: auto-floating-ip: the cloud has no '
                              'external network to take a floating IP from')
        ports = self._api(f'listing the ports of server {server_id}',
                          lambda: list(network.ports(device_id=server_id)))
        port = next((p for p in ports if not getattr(index.get(p.network_id), 'is_router_external',
                                                     False)), None)
        if port is None:
            return None
        fip = self._api(f'making a floating IP for server {server_id}', network.create_ip,
                        floating_network_id=external.id, port_id=port.id,
                        description=f'nodepool {self.name} server {server_id}')
        with self._lock:
            self._floating.setdefault(server_id, []).append(fip.id)
        log.info('Provider %s: floating IP %s (%s) attached to server %s', self.name,
                 fip.floating_ip_address, fip.id, server_id)
        return fip.floating_ip_address

    def release(self, server_id: str, look_up: bool) -> None:
        """Delete the floating IPs made for the server (before it goes).
        A server this adapter did not create (a launcher restarted) is
        looked up in Neutron when ``look_up``."""
        with self._lock:
            ids = self._floating.pop(server_id, None)
        if ids is None and look_up:
            ids = self._server_fips(server_id)
        for fip_id in ids or []:
            self._api(f'deleting floating IP {fip_id}', self._network(ProviderError).delete_ip,
                      fip_id, ignore_missing=True, error=ProviderError)
            log.info('Provider %s: floating IP %s of server %s deleted', self.name, fip_id,
                     server_id)

    def _server_fips(self, server_id: str) -> list[str]:
        network = self._network(ProviderError)
        err = ProviderError
        ports = self._api(f'listing the ports of server {server_id}',
                          lambda: list(network.ports(device_id=server_id)), error=err)
        out = []
        for port in ports:
            fips = self._api(f'listing the floating IPs of port {port.id}',
                             lambda p=port: list(network.ips(port_id=p.id)), error=err)
            out += [f.id for f in fips]
        return out

    # -- cleanup ------------------------------------------------------------------

    def clean_floating_ips(self) -> None:
        network = self._network(ProviderError)
        err = ProviderError
        for fip in self._api('listing floating IPs', lambda: list(network.ips()), error=err):
            if fip.port_id:
                continue
            self._api(f'deleting floating IP {fip.id}', network.delete_ip, fip.id,
                      ignore_missing=True, error=err)
            log.info('Provider %s: unattached floating IP %s (%s) deleted', self.name,
                     fip.floating_ip_address, fip.id)

    def clean_ports(self, interval: float) -> None:
        network = self._network(ProviderError)
        err = ProviderError
        ports = self._api('listing DOWN ports', lambda: list(network.ports(status='DOWN')),
                          error=err)
        now = self.clock()
        down = {p.id for p in ports if p.status == 'DOWN' and
                not (p.device_owner or '').startswith('network:')}
        with self._lock:
            self._down_since = {pid: self._down_since.get(pid, now) for pid in down}
            due = [pid for pid, since in self._down_since.items() if now - since >= interval]
        for port_id in due:
            self._api(f'deleting port {port_id}', network.delete_port, port_id,
                      ignore_missing=True, error=err)
            with self._lock:
                self._down_since.pop(port_id, None)
            log.info('Provider %s: port %s DOWN for %ss or more deleted', self.name, port_id,
                     interval)
