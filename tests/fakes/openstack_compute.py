"""Nova (compute v2.1) of the fake OpenStack cloud: servers and their
life (BUILD, ACTIVE or ERROR, gone after DELETE), flavors, limits and
quota, key pairs, availability zones.  A mixin of ``FakeOpenStackCloud``
(openstack_cloud.py), whose state it shares."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field

from tests.fakes.openstack_http import (
    MAX_MICROVERSION,
    MIN_MICROVERSION,
    nova_error,
)
from tests.fakes.openstack_http import now as _now

DEFAULT_FLAVORS = [
    # (id, name, vcpus, ram MiB, disk GiB)
    ('1', 'm1.tiny', 1, 512, 1),
    ('2', 'm1.small', 1, 2048, 20),
    ('3', 'm1.medium', 2, 4096, 40),
    ('4', 'm1.large', 4, 8192, 80),
]

UNLIMITED = -1

# Host names stay unique across the clouds of one test process.
_HOST_NUMBERS = itertools.count(1)


@dataclass
class FakeServer:
    id: str
    name: str
    flavor: dict
    image_id: str | None
    metadata: dict
    az: str
    networks: list[str]
    key_name: str | None
    user_data: str | None
    config_drive: bool
    security_groups: list[str]
    block_devices: list[dict]
    created: float = field(default_factory=time.monotonic)
    created_at: str = field(default_factory=_now)
    status: str = 'BUILD'
    task_state: str | None = 'scheduling'
    fault: dict | None = None
    addresses: dict = field(default_factory=dict)
    host: object = None
    ready: threading.Event = field(default_factory=threading.Event)
    undeletable: bool = False
    console: str = ''


class ComputeApi:
    """The compute routes and server behaviour."""

    # -- compute: versions -----------------------------------------------------------------

    def _nova_version(self, vid: str) -> dict:
        current = vid == 'v2.1'
        return {'id': vid, 'status': 'CURRENT' if current else 'SUPPORTED',
                'version': '%d.%d' % MAX_MICROVERSION if current else '',
                'min_version': '%d.%d' % MIN_MICROVERSION if current else '',
                'updated': '2013-07-23T11:33:21Z',
                'links': [{'rel': 'self', 'href': f'{self.url}/compute/{vid[:4]}/'}],
                'media-types': [{'base': 'application/json',
                                 'type': f'application/vnd.openstack.compute+json;version='
                                         f'{vid[1:]}'}]}

    def version_compute(self, ctx):
        return {'versions': [self._nova_version('v2.0'), self._nova_version('v2.1')]}

    def version_compute_v21(self, ctx):
        return {'version': self._nova_version('v2.1')}

    # -- compute: servers ------------------------------------------------------------------

    def servers_create(self, ctx):
        ctx.microversion()
        return 202, self._create_server(ctx.json().get('server') or {}, ctx)

    def _create_server(self, body: dict, ctx=None) -> dict:
        name = body.get('name')
        if not isinstance(name, str) or not name.strip():
            raise nova_error(400, "Invalid input for field/attribute name.")
        flavor = self.flavors.get(str(body.get('flavorRef')))
        if flavor is None:
            raise nova_error(400, f"Flavor {body.get('flavorRef')} could not be found.")
        image_id = body.get('imageRef') or None
        devices = list(body.get('block_device_mapping_v2') or [])
        boot_image = image_id or next((d.get('uuid') for d in devices
                                       if d.get('source_type') == 'image'), None)
        with self.lock:
            image = self.images.get(boot_image or '')
        if image is None:
            raise nova_error(400, f'Image {boot_image} could not be found.')
        if image.status != 'active':
            raise nova_error(400, f'Image {boot_image} is not active.')
        metadata = body.get('metadata') or {}
        for k, val in metadata.items():
            if not isinstance(val, str) or len(k) > 255 or len(val) > 255:
                raise nova_error(400, "Invalid input for field/attribute metadata.")
        if len(metadata) > 128:
            raise nova_error(403, 'Quota exceeded for metadata_items: the limit is 128')
        key_name = body.get('key_name')
        with self.lock:
            if key_name is not None and key_name not in self.keypairs:
                raise nova_error(400, 'Invalid key_name provided.')
        az = body.get('availability_zone')
        if az is not None and az not in self.availability_zones:
            raise nova_error(400, 'The requested availability zone is not available')
        networks = self._requested_networks(body.get('networks', 'auto'))
        groups = [g.get('name') for g in body.get('security_groups') or [{'name': 'default'}]]
        with self.lock:
            self._check_quota(flavor)
            if az is None:
                # Nova's scheduler spreads servers; round robin makes a
                # request that does not pin its AZ visibly spread.
                az = self.availability_zones[next(self._az_turn) % len(self.availability_zones)]
            server = FakeServer(
                id=str(uuid.uuid4()), name=name, flavor=flavor,
                image_id=image_id, metadata=dict(metadata), az=az, networks=networks,
                key_name=key_name, user_data=body.get('user_data'),
                config_drive=bool(body.get('config_drive')), security_groups=groups,
                block_devices=devices)
            self.servers[server.id] = server
            fault = self._fail_servers.pop(0) if self._fail_servers else None
        threading.Thread(target=self._boot, args=(server, fault), daemon=True,
                         name=f'boot-{server.id[:8]}').start()
        return {'server': {'id': server.id, 'links': self._links('servers', server.id),
                           'OS-DCF:diskConfig': 'MANUAL', 'adminPass': uuid.uuid4().hex[:12],
                           'security_groups': [{'name': g} for g in groups]}}

    def _requested_networks(self, value) -> list[str]:
        with self.lock:
            if value in ('auto', None):
                return [next(n for n in self.networks.values() if n['name'] == 'public')['id']]
            if value == 'none':
                return []
            if not isinstance(value, list):
                raise nova_error(400, "Invalid input for field/attribute networks.")
            out = []
            for entry in value:
                net_id = entry.get('uuid') if isinstance(entry, dict) else None
                if net_id not in self.networks:
                    raise nova_error(400, f'Network {net_id} could not be found.')
                out.append(net_id)
            return out

    def _usage(self) -> dict:
        servers = [s for s in self.servers.values() if s.task_state != 'deleting']
        return {'instances': len(servers),
                'cores': sum(s.flavor['vcpus'] for s in servers),
                'ram': sum(s.flavor['ram'] for s in servers)}

    def _check_quota(self, flavor: dict) -> None:
        used = self._usage()
        want = {'instances': 1, 'cores': flavor['vcpus'], 'ram': flavor['ram']}
        for key, amount in want.items():
            limit = self.limits[key]
            if limit != UNLIMITED and used[key] + amount > limit:
                raise nova_error(403, f'Quota exceeded for {key}: Requested {amount}, but '
                                      f'already used {used[key]} of {limit} {key}')

    def _boot(self, server: FakeServer, fault: str | None) -> None:
        if self.boot_delay:
            time.sleep(self.boot_delay)
        self._boots_held.wait()
        error = fault
        if error is None:
            try:
                self._attach(server)
            except Exception as e:  # the host could not be made: Nova says ERROR
                error = f'Build of instance {server.id} aborted: {e}'
        with self.lock:
            if server.id not in self.servers or server.task_state == 'deleting':
                self._release_host(server)
                self._unplug(server.id)
                return
            if error is not None:
                server.status, server.task_state = 'ERROR', None
                server.fault = {'code': 500, 'message': error, 'created': _now()}
                server.console = f'[    0.000000] {server.name} failed: {error}\n'
            else:
                server.status, server.task_state = 'ACTIVE', None
                server.console = (f'[    0.000000] Linux version 6.1.0 (fake)\n'
                                  f'{server.name} login:\n')
        server.ready.set()
        self._notify()

    def _attach(self, server: FakeServer) -> None:
        """Addresses, and with a host manager, a real host behind them."""
        addresses = {}
        host_address = None
        if self.host_manager is not None:
            keys = []
            if server.key_name:
                keys = [self.keypairs[server.key_name]['public_key']]
            name = f'{self.host_prefix}{next(_HOST_NUMBERS)}'
            server.host = self.host_manager.create(name, keys, timeout=20)
            host_address = server.host.address
        for i, net_id in enumerate(server.networks):
            net = self.networks[net_id]
            n = next(self._ips)
            if i == 0 and host_address:
                v4 = host_address
            elif net['external']:
                v4 = f'203.0.113.{n % 250 + 1}'
            else:
                v4 = f'10.0.{n // 250 % 250}.{n % 250 + 1}'
            mac = self._mac(n)
            with self.lock:
                self._plug(server, net_id, v4, mac)
            entries = [{'version': 4, 'addr': v4, 'OS-EXT-IPS:type': 'fixed',
                        'OS-EXT-IPS-MAC:mac_addr': mac}]
            if net['external']:
                entries.append({'version': 6, 'addr': f'2001:db8::{n:x}',
                                'OS-EXT-IPS:type': 'fixed', 'OS-EXT-IPS-MAC:mac_addr': mac})
            addresses[net['name']] = entries
        server.addresses = addresses

    def _release_host(self, server: FakeServer) -> None:
        host, server.host = server.host, None
        if host is not None:
            self.host_manager.delete(host)

    def servers_list(self, ctx, detail=None):
        version = ctx.microversion()
        with self.lock:
            servers = list(self.servers.values())
        name = ctx.query.get('name')
        status = ctx.query.get('status')
        if name:
            servers = [s for s in servers if re.search(name, s.name)]
        if status:
            servers = [s for s in servers if s.status == status.upper()]
        if detail:
            return {'servers': [self._server_body(s, version) for s in servers]}
        return {'servers': [{'id': s.id, 'name': s.name, 'links': self._links('servers', s.id)}
                            for s in servers]}

    def _server(self, server_id: str) -> FakeServer:
        with self.lock:
            server = self.servers.get(server_id)
        if server is None:
            raise nova_error(404, f'Instance {server_id} could not be found.')
        return server

    def servers_get(self, ctx, server_id):
        version = ctx.microversion()
        return {'server': self._server_body(self._server(server_id), version)}

    def _server_body(self, s: FakeServer, version: tuple) -> dict:
        with self.lock:
            if version >= (2, 47):
                flavor = {'vcpus': s.flavor['vcpus'], 'ram': s.flavor['ram'],
                          'disk': s.flavor['disk'], 'ephemeral': 0, 'swap': 0,
                          'original_name': s.flavor['name'], 'extra_specs': {}}
            else:
                flavor = {'id': s.flavor['id'], 'links': self._links('flavors', s.flavor['id'])}
            body = {
                'id': s.id, 'name': s.name, 'status': s.status,
                'tenant_id': self.project_id, 'user_id': self.user_id,
                'metadata': dict(s.metadata), 'hostId': uuid.uuid5(
                    uuid.NAMESPACE_DNS, s.az).hex if s.status == 'ACTIVE' else '',
                'image': {'id': s.image_id, 'links': self._links('images', s.image_id)}
                if s.image_id else '',
                'flavor': flavor, 'created': s.created_at, 'updated': _now(),
                'addresses': self._addresses_of(s),
                'accessIPv4': '', 'accessIPv6': '',
                'links': self._links('servers', s.id),
                'OS-DCF:diskConfig': 'MANUAL', 'progress': 0,
                'OS-EXT-AZ:availability_zone': s.az if s.status != 'BUILD' else '',
                'config_drive': 'True' if s.config_drive else '',
                'key_name': s.key_name,
                'OS-SRV-USG:launched_at': s.created_at if s.status == 'ACTIVE' else None,
                'OS-SRV-USG:terminated_at': None,
                'security_groups': [{'name': g} for g in s.security_groups],
                'OS-EXT-STS:task_state': s.task_state,
                'OS-EXT-STS:vm_state': {'BUILD': 'building', 'ACTIVE': 'active',
                                        'ERROR': 'error'}.get(s.status, 'active'),
                'OS-EXT-STS:power_state': 1 if s.status == 'ACTIVE' else 0,
                'os-extended-volumes:volumes_attached': [],
                'locked': False, 'locked_reason': None, 'description': None,
                'tags': [], 'trusted_image_certificates': None,
                'server_groups': [], 'pinned_availability_zone': None,
            }
            if s.fault is not None:
                body['fault'] = dict(s.fault)
        return body

    def _addresses_of(self, s: FakeServer) -> dict:
        """Its fixed addresses and the floating IPs on its ports (with
        the lock)."""
        addresses = json.loads(json.dumps(s.addresses))
        for name, entries in self._floating_addresses(s.id).items():
            addresses.setdefault(name, []).extend(entries)
        return addresses

    def servers_delete(self, ctx, server_id):
        server = self._server(server_id)
        with self.lock:
            if server.undeletable:
                server.task_state = None
                return 204, b''
            server.task_state = 'deleting'
        threading.Thread(target=self._finish_delete, args=(server,), daemon=True,
                         name=f'delete-{server.id[:8]}').start()
        return 204, b''

    def _finish_delete(self, server: FakeServer) -> None:
        if self.delete_delay:
            time.sleep(self.delete_delay)
        # A server still booting is torn down once its boot thread is done.
        server.ready.wait(30)
        self._release_host(server)
        with self.lock:
            if not server.undeletable:
                self.servers.pop(server.id, None)
                self._unplug(server.id)
        self._notify()

    def servers_metadata(self, ctx, server_id):
        server = self._server(server_id)
        with self.lock:
            if ctx.method == 'PUT':
                server.metadata = dict(ctx.json().get('metadata') or {})
            elif ctx.method == 'POST':
                server.metadata.update(ctx.json().get('metadata') or {})
            return {'metadata': dict(server.metadata)}

    def servers_action(self, ctx, server_id):
        server = self._server(server_id)
        body = ctx.json()
        if 'os-getConsoleOutput' in body:
            length = (body['os-getConsoleOutput'] or {}).get('length')
            lines = server.console.splitlines(keepends=True)
            if length not in (None, -1):
                lines = lines[-int(length):]
            return {'output': ''.join(lines)}
        raise nova_error(400, f'Unsupported server action {sorted(body)}')

    # -- compute: the rest -------------------------------------------------------------------

    def _flavor_body(self, f: dict, version: tuple) -> dict:
        body = {'id': f['id'], 'name': f['name'], 'vcpus': f['vcpus'], 'ram': f['ram'],
                'disk': f['disk'], 'OS-FLV-EXT-DATA:ephemeral': 0,
                'OS-FLV-DISABLED:disabled': False,
                'swap': 0 if version >= (2, 75) else '', 'rxtx_factor': 1.0,
                'os-flavor-access:is_public': True, 'links': self._links('flavors', f['id'])}
        if version >= (2, 55):
            body['description'] = None
        if version >= (2, 61):
            body['extra_specs'] = {}
        return body

    def flavors_list(self, ctx, detail=None):
        version = ctx.microversion()
        flavors = sorted(self.flavors.values(), key=lambda f: (f['ram'], f['id']))
        if detail:
            return {'flavors': [self._flavor_body(f, version) for f in flavors]}
        return {'flavors': [{'id': f['id'], 'name': f['name'],
                             'links': self._links('flavors', f['id'])} for f in flavors]}

    def flavors_get(self, ctx, flavor_id):
        version = ctx.microversion()
        flavor = self.flavors.get(flavor_id)
        if flavor is None:
            raise nova_error(404, f'Flavor {flavor_id} could not be found.')
        return {'flavor': self._flavor_body(flavor, version)}

    def limits_get(self, ctx):
        version = ctx.microversion()
        with self.lock:
            used = self._usage()
            absolute = {
                'maxServerMeta': 128, 'maxTotalInstances': self.limits['instances'],
                'maxTotalCores': self.limits['cores'], 'maxTotalRAMSize': self.limits['ram'],
                'maxTotalKeypairs': 100, 'maxServerGroups': 10, 'maxServerGroupMembers': 10,
                'totalInstancesUsed': used['instances'], 'totalCoresUsed': used['cores'],
                'totalRAMUsed': used['ram'], 'totalServerGroupsUsed': 0,
            }
        if version < (2, 57):
            absolute.update({'maxImageMeta': 128, 'maxPersonality': 5,
                             'maxPersonalitySize': 10240})
        if version < (2, 36):
            absolute.update({'maxSecurityGroups': 10, 'maxSecurityGroupRules': 20,
                             'maxTotalFloatingIps': 10, 'totalFloatingIpsUsed': 0,
                             'totalSecurityGroupsUsed': 1})
        return {'limits': {'rate': [], 'absolute': absolute}}

    def _keypair_record(self, name: str, public_key: str) -> dict:
        digest = hashlib.md5(public_key.encode(), usedforsecurity=False).hexdigest()
        return {'name': name, 'public_key': public_key, 'type': 'ssh',
                'fingerprint': ':'.join(digest[i:i + 2] for i in range(0, 32, 2)),
                'user_id': self.user_id, 'created_at': _now(), 'deleted': False, 'id': 1}

    def keypairs_list(self, ctx):
        ctx.microversion()
        with self.lock:
            return {'keypairs': [{'keypair': {k: kp[k] for k in
                                              ('name', 'public_key', 'fingerprint', 'type')}}
                                 for kp in self.keypairs.values()], 'keypairs_links': []}

    def keypairs_create(self, ctx):
        ctx.microversion()
        body = ctx.json().get('keypair') or {}
        name, public_key = body.get('name'), body.get('public_key')
        if not name or not public_key:
            raise nova_error(400, 'Keypair data is invalid: a name and a public key are needed '
                                  'here')
        with self.lock:
            if name in self.keypairs:
                raise nova_error(409, f'Key pair {name!r} already exists.')
            self.keypairs[name] = self._keypair_record(name, public_key)
            return {'keypair': dict(self.keypairs[name])}

    def keypairs_get(self, ctx, name):
        ctx.microversion()
        with self.lock:
            if name not in self.keypairs:
                raise nova_error(404, f'Keypair {name} not found for user {self.user_id}')
            return {'keypair': dict(self.keypairs[name])}

    def keypairs_delete(self, ctx, name):
        with self.lock:
            if self.keypairs.pop(name, None) is None:
                raise nova_error(404, f'Keypair {name} not found for user {self.user_id}')
        return 202, b''

    def availability_zones_list(self, ctx, detail=None):
        ctx.microversion()
        return {'availabilityZoneInfo': [{'zoneName': az, 'zoneState': {'available': True},
                                          'hosts': None} for az in self.availability_zones]}

    def _links(self, kind: str, item_id) -> list[dict]:
        return [{'rel': 'self', 'href': f'{self.url}/compute/v2.1/{kind}/{item_id}'},
                {'rel': 'bookmark', 'href': f'{self.url}/compute/{kind}/{item_id}'}]

