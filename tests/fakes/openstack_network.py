"""Neutron (networking v2.0) of the fake OpenStack cloud: networks,
ports and floating IPs.  A mixin of ``FakeOpenStackCloud``
(openstack_cloud.py), whose state and lock it shares.

A server that becomes ACTIVE gets one port per network it asked for
(``device_id`` the server, ``device_owner`` ``compute:<az>``, status
``ACTIVE``); deleting the server deletes its ports, and a floating IP
that was associated with one of them stays allocated but unattached
(``port_id`` null, status ``DOWN``), as Neutron does.  A floating IP
associated with a server's port is shown in the server's ``addresses``
under the port's network with ``OS-EXT-IPS:type: floating``, as Nova
shows it.

Floating IPs come from networks with ``router:external``; they can be
associated only with a port on an internal network (an external one is
not reachable through a router).  Their addresses are taken from
198.51.100.0/24 (TEST-NET-2), fixed addresses of external networks from
203.0.113.0/24.

Formats from the Networking API v2.0 reference
(docs.openstack.org/api-ref/network/v2); nothing is taken from
Neutron's code.
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, field

from tests.fakes.openstack_http import neutron_error
from tests.fakes.openstack_http import now as _now


@dataclass
class FakePort:
    id: str
    network_id: str
    device_id: str = ''
    device_owner: str = ''
    status: str = 'DOWN'
    mac_address: str = 'fa:16:3e:00:00:00'
    fixed_ips: list = field(default_factory=list)
    name: str = ''
    created_at: str = field(default_factory=_now)


@dataclass
class FakeFloatingIp:
    id: str
    address: str
    network_id: str
    port_id: str | None = None
    fixed_ip: str | None = None
    description: str = ''
    created_at: str = field(default_factory=_now)

    @property
    def status(self) -> str:
        return 'ACTIVE' if self.port_id else 'DOWN'


_FIP_NUMBERS = itertools.count(2)


def _matches(body: dict, query: dict) -> bool:
    """Neutron's list filters: each query key equal to the field (keys
    the resource does not have are ignored here, as ``fields`` and
    paging are)."""
    for key, value in query.items():
        if key not in body:
            continue
        have = body[key]
        if have is None:
            if value not in ('', 'null', 'None'):
                return False
        elif str(have).lower() != value.lower():
            return False
    return True


class NetworkApi:
    """The network routes, and what Nova asks of Neutron."""

    # -- what tests set up ----------------------------------------------------------

    def add_port(self, network: str = 'private', status: str = 'DOWN',
                 device_owner: str = 'compute:nova', device_id: str = '') -> str:
        """A port nobody uses (a leak): on the network named ``network``."""
        with self.lock:
            net_id = self._network_named(network)
            port = FakePort(str(uuid.uuid4()), net_id, device_id=device_id,
                            device_owner=device_owner, status=status,
                            mac_address=self._mac(next(self._ips)))
            self.ports[port.id] = port
        return port.id

    def add_floating_ip(self, network: str = 'public', port_id: str | None = None) -> str:
        """A floating IP someone allocated (unattached unless ``port_id``)."""
        with self.lock:
            fip = self._allocate_fip(self._network_named(network), port_id, '')
        return fip.id

    def set_port_status(self, port_id: str, status: str) -> None:
        with self.lock:
            self.ports[port_id].status = status

    def _network_named(self, name: str) -> str:
        return next(n['id'] for n in self.networks.values() if n['name'] == name)

    @staticmethod
    def _mac(n: int) -> str:
        return 'fa:16:3e:%02x:%02x:%02x' % (n >> 16 & 255, n >> 8 & 255, n & 255)

    # -- what Nova asks ---------------------------------------------------------------

    def _plug(self, server, net_id: str, v4: str, mac: str) -> None:
        """A port for ``server`` on ``net_id`` (called with the lock)."""
        port = FakePort(str(uuid.uuid4()), net_id, device_id=server.id,
                        device_owner=f'compute:{server.az}', status='ACTIVE',
                        mac_address=mac,
                        fixed_ips=[{'subnet_id': f'{net_id}-v4', 'ip_address': v4}])
        self.ports[port.id] = port

    def _unplug(self, server_id: str) -> None:
        """Delete the server's ports; their floating IPs stay, unattached
        (called with the lock)."""
        for port in [p for p in self.ports.values() if p.device_id == server_id]:
            self._drop_port(port.id)

    def _drop_port(self, port_id: str) -> None:
        self.ports.pop(port_id, None)
        for fip in self.floating_ips.values():
            if fip.port_id == port_id:
                fip.port_id = fip.fixed_ip = None

    def _floating_addresses(self, server_id: str) -> dict[str, list[dict]]:
        """Network name -> Nova's address entries of the floating IPs
        associated with the server's ports (called with the lock)."""
        out: dict[str, list[dict]] = {}
        for fip in self.floating_ips.values():
            port = self.ports.get(fip.port_id or '')
            if port is None or port.device_id != server_id:
                continue
            name = self.networks[port.network_id]['name']
            out.setdefault(name, []).append({
                'version': 4, 'addr': fip.address, 'OS-EXT-IPS:type': 'floating',
                'OS-EXT-IPS-MAC:mac_addr': port.mac_address})
        return out

    # -- versions and networks -----------------------------------------------------------

    def version_network(self, ctx):
        return {'versions': [{'id': 'v2.0', 'status': 'CURRENT',
                              'links': [{'rel': 'self', 'href': f'{self.url}/network/v2.0/'}]}]}

    def _network_body(self, net: dict) -> dict:
        return {'id': net['id'], 'name': net['name'], 'status': 'ACTIVE', 'subnets': [],
                'admin_state_up': True, 'shared': False, 'tenant_id': self.project_id,
                'project_id': self.project_id, 'router:external': net['external'],
                'mtu': 1500, 'description': '', 'availability_zones': [],
                'port_security_enabled': True, 'tags': [], 'revision_number': 1,
                'ipv4_address_scope': None, 'ipv6_address_scope': None,
                'created_at': _now(), 'updated_at': _now()}

    def networks_list(self, ctx):
        with self.lock:
            nets = [self._network_body(n) for n in self.networks.values()]
        return {'networks': [n for n in nets if _matches(n, ctx.query)]}

    def networks_get(self, ctx, net_id):
        with self.lock:
            net = self.networks.get(net_id)
        if net is None:
            raise neutron_error(404, 'NetworkNotFound', f'Network {net_id} could not be found.')
        return {'network': self._network_body(net)}

    def network_extensions(self, ctx):
        return {'extensions': []}

    # -- ports -----------------------------------------------------------------------

    def _port_body(self, port: FakePort) -> dict:
        return {'id': port.id, 'name': port.name, 'network_id': port.network_id,
                'tenant_id': self.project_id, 'project_id': self.project_id,
                'mac_address': port.mac_address, 'admin_state_up': True,
                'status': port.status, 'device_id': port.device_id,
                'device_owner': port.device_owner, 'fixed_ips': list(port.fixed_ips),
                'allowed_address_pairs': [], 'extra_dhcp_opts': [],
                'security_groups': [], 'description': '', 'binding:vnic_type': 'normal',
                'port_security_enabled': True, 'tags': [], 'revision_number': 1,
                'created_at': port.created_at, 'updated_at': port.created_at}

    def _port(self, port_id: str) -> FakePort:
        port = self.ports.get(port_id)
        if port is None:
            raise neutron_error(404, 'PortNotFound', f'Port {port_id} could not be found.')
        return port

    def ports_list(self, ctx):
        with self.lock:
            ports = [self._port_body(p) for p in self.ports.values()]
        return {'ports': [p for p in ports if _matches(p, ctx.query)]}

    def ports_get(self, ctx, port_id):
        with self.lock:
            return {'port': self._port_body(self._port(port_id))}

    def ports_delete(self, ctx, port_id):
        with self.lock:
            self._port(port_id)
            self._drop_port(port_id)
        self._notify()
        return 204, b''

    # -- floating IPs ---------------------------------------------------------------------

    def _fip_body(self, fip: FakeFloatingIp) -> dict:
        port = self.ports.get(fip.port_id or '')
        details = None
        if port is not None:
            details = {'name': port.name, 'network_id': port.network_id,
                       'mac_address': port.mac_address, 'admin_state_up': True,
                       'status': port.status, 'device_id': port.device_id,
                       'device_owner': port.device_owner}
        return {'id': fip.id, 'floating_ip_address': fip.address,
                'floating_network_id': fip.network_id, 'router_id': None,
                'port_id': fip.port_id, 'fixed_ip_address': fip.fixed_ip,
                'status': fip.status, 'tenant_id': self.project_id,
                'project_id': self.project_id, 'description': fip.description,
                'dns_domain': '', 'dns_name': '', 'port_details': details,
                'port_forwardings': [], 'qos_policy_id': None, 'tags': [],
                'revision_number': 1, 'created_at': fip.created_at,
                'updated_at': fip.created_at}

    def _fip(self, fip_id: str) -> FakeFloatingIp:
        fip = self.floating_ips.get(fip_id)
        if fip is None:
            raise neutron_error(404, 'FloatingIPNotFound',
                                f'Floating IP {fip_id} could not be found')
        return fip

    def _allocate_fip(self, net_id: str, port_id: str | None, description: str):
        net = self.networks.get(net_id or '')
        if net is None:
            raise neutron_error(404, 'NetworkNotFound', f'Network {net_id} could not be found.')
        if not net['external']:
            raise neutron_error(400, 'BadRequest', f'Bad floatingip request: Network '
                                                   f'{net_id} is not a valid external network.')
        fip = FakeFloatingIp(str(uuid.uuid4()), f'198.51.100.{next(_FIP_NUMBERS) % 250 + 2}',
                             net_id, description=description)
        if port_id:
            self._associate(fip, port_id)
        self.floating_ips[fip.id] = fip
        return fip

    def _associate(self, fip: FakeFloatingIp, port_id: str) -> None:
        port = self.ports.get(port_id)
        if port is None:
            raise neutron_error(404, 'PortNotFound', f'Port {port_id} could not be found.')
        if self.networks[port.network_id]['external']:
            raise neutron_error(400, 'ExternalGatewayForFloatingIPNotFound',
                                f'External network {fip.network_id} is not reachable from '
                                f'subnet {port.network_id}-v4.')
        taken = [f for f in self.floating_ips.values() if f.port_id == port_id and f is not fip]
        if taken:
            raise neutron_error(409, 'FloatingIPPortAlreadyAssociated',
                                f'Port {port_id} already has floating IP '
                                f'{taken[0].address}.')
        fip.port_id = port_id
        fip.fixed_ip = port.fixed_ips[0]['ip_address'] if port.fixed_ips else None

    def floating_ips_list(self, ctx):
        with self.lock:
            fips = [self._fip_body(f) for f in self.floating_ips.values()]
        return {'floatingips': [f for f in fips if _matches(f, ctx.query)]}

    def floating_ips_create(self, ctx):
        body = ctx.json().get('floatingip')
        if not isinstance(body, dict):
            raise neutron_error(400, 'BadRequest', 'Bad floatingip request: no floatingip')
        with self.lock:
            fip = self._allocate_fip(body.get('floating_network_id'), body.get('port_id'),
                                     body.get('description') or '')
            answer = self._fip_body(fip)
        self._notify()
        return 201, {'floatingip': answer}

    def floating_ips_get(self, ctx, fip_id):
        with self.lock:
            return {'floatingip': self._fip_body(self._fip(fip_id))}

    def floating_ips_update(self, ctx, fip_id):
        body = ctx.json().get('floatingip') or {}
        with self.lock:
            fip = self._fip(fip_id)
            if 'port_id' in body:
                if body['port_id']:
                    self._associate(fip, body['port_id'])
                else:
                    fip.port_id = fip.fixed_ip = None
            answer = self._fip_body(fip)
        self._notify()
        return {'floatingip': answer}

    def floating_ips_delete(self, ctx, fip_id):
        with self.lock:
            self._fip(fip_id)
            self.floating_ips.pop(fip_id)
        self._notify()
        return 204, b''


NETWORK_ROUTES = [
    ('GET', r'/network/?', 'version_network'),
    ('GET', r'/network/v2\.0/networks', 'networks_list'),
    ('GET', r'/network/v2\.0/networks/([^/]+)', 'networks_get'),
    ('GET', r'/network/v2\.0/extensions', 'network_extensions'),
    ('GET', r'/network/v2\.0/ports', 'ports_list'),
    ('GET', r'/network/v2\.0/ports/([^/]+)', 'ports_get'),
    ('DELETE', r'/network/v2\.0/ports/([^/]+)', 'ports_delete'),
    ('GET', r'/network/v2\.0/floatingips', 'floating_ips_list'),
    ('POST', r'/network/v2\.0/floatingips', 'floating_ips_create'),
    ('GET', r'/network/v2\.0/floatingips/([^/]+)', 'floating_ips_get'),
    ('PUT', r'/network/v2\.0/floatingips/([^/]+)', 'floating_ips_update'),
    ('DELETE', r'/network/v2\.0/floatingips/([^/]+)', 'floating_ips_delete'),
]
