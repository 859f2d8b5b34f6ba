"""A fake OpenStack cloud that speaks the HTTP APIs openstacksdk calls.

One threaded HTTP server on 127.0.0.1 serves, under one base URL:

- ``/identity``: Keystone v3 version discovery and ``POST
  /v3/auth/tokens`` (password method, project scope), answering with a
  token (``X-Subject-Token``) and a service catalog naming the others;
- ``/compute``: Nova v2.1 with microversions up to ``MAX_MICROVERSION``
  (servers create/list/detail/get/delete and their metadata,
  ``os-getConsoleOutput``, flavors, limits, os-keypairs,
  os-availability-zone);
- ``/image``: Glance v2 (images list/get/create/upload/delete/patch);
- ``/network``: Neutron v2.0 (networks list/get).

Every request but discovery and token creation must carry a token the
fake issued.  Bodies and status codes follow the API references; the
state machine of a server is Nova's as a user sees it: ``BUILD`` then
``ACTIVE`` (or ``ERROR`` with a ``fault``), gone after ``DELETE``.

Servers get addresses on the networks they ask for (the ``public``
network by default, which routes externally).  With a ``host_manager``
(``nodepool.driver.netns.host.NetnsHostManager``) every server is backed
by a real host: a network namespace whose sshd answers on the server's
address and accepts the server's key pair, so SSH checks and host key
scans run for real.

Tests change the cloud through methods: ``set_limits``,
``fail_next_servers``, ``make_undeletable``, ``add_server`` (a server
made by someone else), ``fail_next_uploads``, ``hold_boots``,
``revoke_tokens``.  What
happened is in ``requests`` (method, path, time), ``servers`` and
``images``.

The formats come from the API references (docs.openstack.org/api-ref:
identity v3, compute v2.1, image v2, networking v2.0); nothing here is
taken from OpenStack's code.
"""

from __future__ import annotations

import datetime
import hashlib
import itertools
import json
import os
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

MAX_MICROVERSION = (2, 96)
MIN_MICROVERSION = (2, 1)

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


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')


def _later(seconds: float) -> str:
    when = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)
    return when.strftime('%Y-%m-%dT%H:%M:%S.000000Z')


class ApiError(Exception):
    """An error answer: status and JSON body."""

    def __init__(self, status: int, body: dict | str, headers: dict | None = None):
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers or {}


def nova_error(status: int, message: str) -> ApiError:
    key = {400: 'badRequest', 403: 'forbidden', 404: 'itemNotFound',
           406: 'notAcceptable', 409: 'conflictingRequest'}.get(status, 'computeFault')
    return ApiError(status, {key: {'code': status, 'message': message}})


def neutron_error(status: int, kind: str, message: str) -> ApiError:
    return ApiError(status, {'NeutronError': {'type': kind, 'message': message, 'detail': ''}})


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


@dataclass
class FakeImage:
    id: str
    name: str
    disk_format: str | None
    container_format: str | None
    visibility: str = 'shared'
    status: str = 'queued'
    properties: dict = field(default_factory=dict)
    size: int | None = None
    checksum: str | None = None
    sha512: str | None = None
    created_at: str = field(default_factory=_now)
    updated_at: str = field(default_factory=_now)
    fail_upload: bool = False


class FakeOpenStackCloud:
    """The cloud's state and behaviour; ``start`` serves it over HTTP."""

    def __init__(self, *, region: str = 'RegionOne', username: str = 'demo',
                 password: str = 'secret', project: str = 'demo',
                 availability_zones=('nova',), flavors=DEFAULT_FLAVORS,
                 boot_delay: float = 0.0, delete_delay: float = 0.0,
                 upload_delay: float = 0.0, host_manager=None, host_prefix: str | None = None):
        self.region = region
        self.username = username
        self.password = password
        self.project = project
        self.project_id = uuid.uuid4().hex
        self.user_id = uuid.uuid4().hex
        self.availability_zones = list(availability_zones)
        self.boot_delay = boot_delay
        self.delete_delay = delete_delay
        self.upload_delay = upload_delay
        self.host_manager = host_manager
        self.host_prefix = host_prefix or f't{os.getpid()}-os'
        self.lock = threading.RLock()
        # Its own lock: predicates of ``wait_for`` call the API.
        self.changed = threading.Condition()
        self._changes = 0
        self.tokens: dict[str, float] = {}
        self.flavors = {fid: {'id': fid, 'name': name, 'vcpus': vcpus, 'ram': ram, 'disk': disk}
                        for fid, name, vcpus, ram, disk in flavors}
        self.servers: dict[str, FakeServer] = {}
        self.images: dict[str, FakeImage] = {}
        self.keypairs: dict[str, dict] = {}
        self.networks: dict[str, dict] = {}
        self.limits = {'instances': UNLIMITED, 'cores': UNLIMITED, 'ram': UNLIMITED}
        #: Every request: (method, path, monotonic time).
        self.requests: list[tuple[str, str, float]] = []
        self.trace: list | None = None
        self._fail_servers: list[str] = []
        self._fail_uploads = 0
        self._boots_held = threading.Event()
        self._boots_held.set()
        self._ips = itertools.count(10)
        self._az_turn = itertools.count()
        self._httpd = None
        self._thread = None
        self.add_network('public', external=True)
        self.add_network('private', external=False)
        self.add_image('cirros', status='active')

    # -- life ----------------------------------------------------------------------

    def start(self) -> FakeOpenStackCloud:
        handler = type('Handler', (_Handler,), {'cloud': self})
        self._httpd = ThreadingHTTPServer(('127.0.0.1', 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True,
                                        name='fake-openstack')
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        self._boots_held.set()
        with self.lock:
            servers = list(self.servers.values())
            self.servers.clear()
        for server in servers:
            self._release_host(server)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f'http://{host}:{port}'

    @property
    def auth_url(self) -> str:
        return f'{self.url}/identity/v3'

    def write_clouds_yaml(self, path, cloud: str = 'fake') -> str:
        """A clouds.yaml with this cloud under the name ``cloud``."""
        doc = {'clouds': {cloud: {
            'auth': {'auth_url': self.auth_url, 'username': self.username,
                     'password': self.password, 'project_name': self.project,
                     'user_domain_name': 'Default', 'project_domain_name': 'Default'},
            'region_name': self.region,
            'identity_api_version': 3,
        }}}
        with open(path, 'w') as f:
            yaml.safe_dump(doc, f)
        return str(path)

    # -- what tests set up -------------------------------------------------------------

    def add_network(self, name: str, external: bool = False) -> str:
        net_id = str(uuid.uuid4())
        with self.lock:
            self.networks[net_id] = {'id': net_id, 'name': name, 'external': external}
        return net_id

    def add_image(self, name: str, status: str = 'active', disk_format: str = 'qcow2',
                  properties: dict | None = None) -> str:
        image = FakeImage(str(uuid.uuid4()), name, disk_format, 'bare', visibility='public',
                          status=status, properties=dict(properties or {}))
        with self.lock:
            self.images[image.id] = image
        return image.id

    def add_keypair(self, name: str, public_key: str) -> None:
        with self.lock:
            self.keypairs[name] = self._keypair_record(name, public_key)

    def set_limits(self, instances: int | None = None, cores: int | None = None,
                   ram: int | None = None) -> None:
        """Absolute limits (-1: unlimited); None leaves one unchanged."""
        with self.lock:
            for key, value in (('instances', instances), ('cores', cores), ('ram', ram)):
                if value is not None:
                    self.limits[key] = value

    def fail_next_servers(self, count: int, message: str = 'No valid host was found.') -> None:
        """The next ``count`` servers created go to ERROR with this fault."""
        with self.lock:
            self._fail_servers += [message] * count

    def fail_next_uploads(self, count: int) -> None:
        """The next ``count`` image uploads end with the image ``killed``."""
        with self.lock:
            self._fail_uploads += count

    def make_undeletable(self, server_id: str, undeletable: bool = True) -> None:
        """DELETE is accepted but the server stays (a stuck compute host)."""
        with self.lock:
            self.servers[server_id].undeletable = undeletable

    def revoke_tokens(self) -> None:
        """Every token issued so far stops working (401 until the client
        authenticates again)."""
        with self.lock:
            self.tokens.clear()

    def hold_boots(self) -> None:
        """New servers stay in BUILD until ``release_boots``."""
        self._boots_held.clear()

    def release_boots(self) -> None:
        self._boots_held.set()

    def add_server(self, name: str, metadata: dict | None = None,
                   flavor: str = 'm1.small', az: str | None = None) -> str:
        """A server someone else made (through the API's own path)."""
        flavor_id = next(f['id'] for f in self.flavors.values() if f['name'] == flavor)
        body = {'name': name, 'flavorRef': flavor_id, 'imageRef': self.image_id('cirros'),
                'metadata': dict(metadata or {}), 'networks': 'auto'}
        if az:
            body['availability_zone'] = az
        return self._create_server(body)['server']['id']

    # -- looking on ---------------------------------------------------------------------

    def image_id(self, name: str) -> str:
        with self.lock:
            return next(i.id for i in self.images.values() if i.name == name)

    def live_servers(self) -> list[FakeServer]:
        with self.lock:
            return [s for s in self.servers.values() if s.task_state != 'deleting']

    def request_count(self, since: float = 0.0) -> int:
        with self.lock:
            return sum(1 for r in self.requests if r[2] >= since)

    def wait_for(self, predicate, timeout: float = 20.0, what: str = 'condition'):
        """Wait until ``predicate()`` holds (returning its value): checked
        again whenever a server or image changes state, and at least
        every 0.2 s for predicates about time."""
        deadline = time.monotonic() + timeout
        while True:
            with self.changed:
                seen = self._changes
            result = predicate()
            if result:
                return result
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f'fake cloud: timed out waiting for {what}')
            with self.changed:
                if self._changes == seen:
                    self.changed.wait(min(left, 0.2))

    def _notify(self) -> None:
        with self.changed:
            self._changes += 1
            self.changed.notify_all()

    # -- dispatch -------------------------------------------------------------------------

    def handle(self, method: str, path: str, query: dict, headers, body: bytes):
        """(status, headers, body) for one request."""
        with self.lock:
            self.requests.append((method, path, time.monotonic()))
            if self.trace is not None:
                self.trace.append((method, path, headers.get('OpenStack-API-Version')))
        for route_method, pattern, name in ROUTES:
            if route_method != method:
                continue
            m = re.fullmatch(pattern, path)
            if m is None:
                continue
            if not name.startswith(('identity_', 'version_')):
                self._check_token(headers)
            ctx = _Context(self, headers, query, body)
            result = getattr(self, name)(ctx, *m.groups())
            status, payload = result if isinstance(result, tuple) else (200, result)
            return status, ctx.response_headers, payload
        known = any(re.fullmatch(p, path) for _, p, _ in ROUTES)
        raise ApiError(405 if known else 404, f'{method} {path} is not served here')

    def _check_token(self, headers) -> None:
        token = headers.get('X-Auth-Token')
        with self.lock:
            expiry = self.tokens.get(token)
        if expiry is None or expiry < time.time():
            raise ApiError(401, {'error': {'code': 401, 'title': 'Unauthorized',
                                           'message': 'The request you have made requires '
                                                      'authentication.'}})

    # -- identity --------------------------------------------------------------------------

    def identity_versions(self, ctx):
        return 300, {'versions': {'values': [self._identity_version()]}}

    def identity_v3(self, ctx):
        return {'version': self._identity_version()}

    def _identity_version(self) -> dict:
        return {'id': 'v3.14', 'status': 'stable', 'updated': '2020-04-07T00:00:00Z',
                'links': [{'rel': 'self', 'href': f'{self.url}/identity/v3/'}],
                'media-types': [{'base': 'application/json',
                                 'type': 'application/vnd.openstack.identity-v3+json'}]}

    def identity_tokens(self, ctx):
        auth = ctx.json().get('auth') or {}
        identity = auth.get('identity') or {}
        user = (identity.get('password') or {}).get('user') or {}
        if 'password' not in (identity.get('methods') or []) or \
                user.get('name') != self.username or user.get('password') != self.password:
            raise ApiError(401, {'error': {'code': 401, 'title': 'Unauthorized',
                                           'message': 'The request you have made requires '
                                                      'authentication.'}})
        project = ((auth.get('scope') or {}).get('project') or {})
        if project and project.get('name', self.project) != self.project and \
                project.get('id') != self.project_id:
            raise ApiError(401, {'error': {'code': 401, 'title': 'Unauthorized',
                                           'message': 'not authorized for that project'}})
        token = uuid.uuid4().hex
        with self.lock:
            self.tokens[token] = time.time() + 3600
        ctx.response_headers['X-Subject-Token'] = token
        domain = {'id': 'default', 'name': 'Default'}
        return 201, {'token': {
            'methods': ['password'],
            'user': {'id': self.user_id, 'name': self.username, 'domain': domain,
                     'password_expires_at': None},
            'project': {'id': self.project_id, 'name': self.project, 'domain': domain},
            'roles': [{'id': 'member-role', 'name': 'member'}],
            'is_domain': False,
            'audit_ids': [uuid.uuid4().hex[:22]],
            'issued_at': _later(0), 'expires_at': _later(3600),
            'catalog': self._catalog(),
        }}

    def _catalog(self) -> list[dict]:
        def service(kind, name, url):
            return {'type': kind, 'name': name, 'id': uuid.uuid5(uuid.NAMESPACE_URL, url).hex,
                    'endpoints': [{'id': uuid.uuid5(uuid.NAMESPACE_URL, url + i).hex,
                                   'interface': i, 'region': self.region,
                                   'region_id': self.region, 'url': url}
                                  for i in ('public', 'internal', 'admin')]}
        return [service('identity', 'keystone', f'{self.url}/identity'),
                service('compute', 'nova', f'{self.url}/compute/v2.1'),
                service('image', 'glance', f'{self.url}/image'),
                service('network', 'neutron', f'{self.url}/network')]

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
            mac = 'fa:16:3e:%02x:%02x:%02x' % (n >> 16 & 255, n >> 8 & 255, n & 255)
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
                'addresses': json.loads(json.dumps(s.addresses)),
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

    # -- image -----------------------------------------------------------------------------

    def version_image(self, ctx):
        return 300, {'versions': [
            {'id': f'v2.{n}', 'status': 'CURRENT' if n == 16 else 'SUPPORTED',
             'links': [{'rel': 'self', 'href': f'{self.url}/image/v2/'}]}
            for n in range(16, 0, -1)]}

    def _image_body(self, image: FakeImage) -> dict:
        body = dict(image.properties)
        body.update({
            'id': image.id, 'name': image.name, 'status': image.status,
            'visibility': image.visibility, 'protected': False, 'os_hidden': False,
            'disk_format': image.disk_format, 'container_format': image.container_format,
            'min_disk': 0, 'min_ram': 0, 'size': image.size, 'virtual_size': None,
            'checksum': image.checksum, 'os_hash_algo': 'sha512' if image.sha512 else None,
            'os_hash_value': image.sha512, 'owner': self.project_id,
            'created_at': image.created_at, 'updated_at': image.updated_at, 'tags': [],
            'self': f'/v2/images/{image.id}', 'file': f'/v2/images/{image.id}/file',
            'schema': '/v2/schemas/image',
        })
        return body

    def _image(self, image_id: str) -> FakeImage:
        with self.lock:
            image = self.images.get(image_id)
        if image is None:
            raise ApiError(404, f'404 Not Found\n\nNo image found with ID {image_id}\n\n')
        return image

    def images_list(self, ctx):
        with self.lock:
            images = [i for i in self.images.values() if i.status != 'deleted']
        for key in ('name', 'status', 'visibility', 'id'):
            if key in ctx.query:
                images = [i for i in images if str(getattr(i, key)) == ctx.query[key]]
        images.sort(key=lambda i: (i.created_at, i.id), reverse=True)
        return {'images': [self._image_body(i) for i in images],
                'schema': '/v2/schemas/images', 'first': '/v2/images'}

    def images_get(self, ctx, image_id):
        return self._image_body(self._image(image_id))

    def images_create(self, ctx):
        body = ctx.json()
        reserved = {'id', 'status', 'size', 'checksum', 'created_at', 'updated_at', 'self',
                    'file', 'schema', 'os_hash_value', 'os_hash_algo', 'owner'}
        bad = sorted(set(body) & (reserved - {'id'}))
        if bad:
            raise ApiError(403, f'403 Forbidden\n\nAttribute {bad[0]!r} is read-only.\n\n')
        props = {k: val for k, val in body.items()
                 if k not in ('name', 'disk_format', 'container_format', 'visibility',
                              'tags', 'protected', 'min_disk', 'min_ram', 'id', 'os_hidden')}
        image = FakeImage(body.get('id') or str(uuid.uuid4()), body.get('name'),
                          body.get('disk_format'), body.get('container_format'),
                          visibility=body.get('visibility', 'shared'), properties=props)
        with self.lock:
            self.images[image.id] = image
        ctx.response_headers['Location'] = f'{self.url}/image/v2/images/{image.id}'
        return 201, self._image_body(image)

    def images_upload(self, ctx, image_id):
        image = self._image(image_id)
        if image.status != 'queued':
            raise ApiError(409, f'409 Conflict\n\nImage status transition from {image.status} '
                                'to saving is not allowed\n\n')
        data = ctx.body
        with self.lock:
            image.status = 'saving'
            image.size = len(data)
            image.checksum = hashlib.md5(data, usedforsecurity=False).hexdigest()
            image.sha512 = hashlib.sha512(data).hexdigest()
            image.fail_upload = self._fail_uploads > 0
            if image.fail_upload:
                self._fail_uploads -= 1
        threading.Thread(target=self._finish_upload, args=(image,), daemon=True).start()
        return 204, b''

    def _finish_upload(self, image: FakeImage) -> None:
        if self.upload_delay:
            time.sleep(self.upload_delay)
        with self.lock:
            if image.status == 'saving':
                image.status = 'killed' if image.fail_upload else 'active'
                image.updated_at = _now()
        self._notify()

    def images_delete(self, ctx, image_id):
        image = self._image(image_id)
        with self.lock:
            self.images.pop(image.id, None)
        self._notify()
        return 204, b''

    def images_patch(self, ctx, image_id):
        image = self._image(image_id)
        with self.lock:
            for op in ctx.json():
                key = op.get('path', '').lstrip('/')
                if op.get('op') in ('add', 'replace'):
                    if key == 'name':
                        image.name = op.get('value')
                    else:
                        image.properties[key] = op.get('value')
                elif op.get('op') == 'remove':
                    image.properties.pop(key, None)
            image.updated_at = _now()
        return self._image_body(image)

    # -- network ------------------------------------------------------------------------

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
        for key, value in ctx.query.items():
            nets = [n for n in nets if key not in n or str(n[key]).lower() == value.lower()]
        return {'networks': nets}

    def networks_get(self, ctx, net_id):
        with self.lock:
            net = self.networks.get(net_id)
        if net is None:
            raise neutron_error(404, 'NetworkNotFound', f'Network {net_id} could not be found.')
        return {'network': self._network_body(net)}

    def network_extensions(self, ctx):
        return {'extensions': []}

    # -- helpers -----------------------------------------------------------------------

    def _links(self, kind: str, item_id) -> list[dict]:
        return [{'rel': 'self', 'href': f'{self.url}/compute/v2.1/{kind}/{item_id}'},
                {'rel': 'bookmark', 'href': f'{self.url}/compute/{kind}/{item_id}'}]


ROUTES = [
    ('GET', r'/identity/?', 'identity_versions'),
    ('GET', r'/identity/v3/?', 'identity_v3'),
    ('POST', r'/identity/v3/auth/tokens', 'identity_tokens'),
    ('GET', r'/compute/?', 'version_compute'),
    ('GET', r'/compute/v2\.1/?', 'version_compute_v21'),
    ('POST', r'/compute/v2\.1/servers', 'servers_create'),
    ('GET', r'/compute/v2\.1/servers(/detail)?', 'servers_list'),
    ('GET', r'/compute/v2\.1/servers/([^/]+)', 'servers_get'),
    ('DELETE', r'/compute/v2\.1/servers/([^/]+)', 'servers_delete'),
    ('GET', r'/compute/v2\.1/servers/([^/]+)/metadata', 'servers_metadata'),
    ('PUT', r'/compute/v2\.1/servers/([^/]+)/metadata', 'servers_metadata'),
    ('POST', r'/compute/v2\.1/servers/([^/]+)/metadata', 'servers_metadata'),
    ('POST', r'/compute/v2\.1/servers/([^/]+)/action', 'servers_action'),
    ('GET', r'/compute/v2\.1/flavors(/detail)?', 'flavors_list'),
    ('GET', r'/compute/v2\.1/flavors/([^/]+)', 'flavors_get'),
    ('GET', r'/compute/v2\.1/limits', 'limits_get'),
    ('GET', r'/compute/v2\.1/os-keypairs', 'keypairs_list'),
    ('POST', r'/compute/v2\.1/os-keypairs', 'keypairs_create'),
    ('GET', r'/compute/v2\.1/os-keypairs/([^/]+)', 'keypairs_get'),
    ('DELETE', r'/compute/v2\.1/os-keypairs/([^/]+)', 'keypairs_delete'),
    ('GET', r'/compute/v2\.1/os-availability-zone(/detail)?', 'availability_zones_list'),
    ('GET', r'/image/?', 'version_image'),
    ('GET', r'/image/versions', 'version_image'),
    ('GET', r'/image/v2/images', 'images_list'),
    ('POST', r'/image/v2/images', 'images_create'),
    ('GET', r'/image/v2/images/([^/]+)', 'images_get'),
    ('DELETE', r'/image/v2/images/([^/]+)', 'images_delete'),
    ('PATCH', r'/image/v2/images/([^/]+)', 'images_patch'),
    ('PUT', r'/image/v2/images/([^/]+)/file', 'images_upload'),
    ('GET', r'/network/?', 'version_network'),
    ('GET', r'/network/v2\.0/networks', 'networks_list'),
    ('GET', r'/network/v2\.0/networks/([^/]+)', 'networks_get'),
    ('GET', r'/network/v2\.0/extensions', 'network_extensions'),
]


class _Context:
    """One request as a route sees it."""

    def __init__(self, cloud: FakeOpenStackCloud, headers, query: dict, body: bytes):
        self.cloud = cloud
        self.headers = headers
        self.query = query
        self.body = body
        self.method = headers.get('X-Fake-Method', '')
        self.response_headers: dict[str, str] = {}

    def json(self):
        if not self.body:
            return {}
        try:
            return json.loads(self.body)
        except ValueError:
            raise nova_error(400, 'Malformed request body') from None

    def microversion(self) -> tuple[int, int]:
        """The compute microversion asked for (2.1 without a header);
        406 outside what the fake serves.  Echoed in the answer."""
        raw = None
        header = self.headers.get('OpenStack-API-Version')
        if header:
            parts = header.split()
            if len(parts) == 2 and parts[0].lower() == 'compute':
                raw = parts[1]
        raw = raw or self.headers.get('X-OpenStack-Nova-API-Version')
        if raw is None:
            version = MIN_MICROVERSION
        elif raw == 'latest':
            version = MAX_MICROVERSION
        else:
            try:
                major, minor = (int(x) for x in raw.split('.'))
            except ValueError:
                raise nova_error(400, f'Invalid API version request {raw!r}') from None
            version = (major, minor)
        if not MIN_MICROVERSION <= version <= MAX_MICROVERSION:
            raise nova_error(406, f'Version {raw} is not supported by the API. Minimum is '
                                  '%d.%d and maximum is %d.%d.' % (*MIN_MICROVERSION,
                                                                   *MAX_MICROVERSION))
        text = '%d.%d' % version
        self.response_headers.update({
            'OpenStack-API-Version': f'compute {text}',
            'X-OpenStack-Nova-API-Version': text,
            'Vary': 'OpenStack-API-Version, X-OpenStack-Nova-API-Version'})
        return version


class _Handler(BaseHTTPRequestHandler):
    cloud: FakeOpenStackCloud = None
    protocol_version = 'HTTP/1.1'

    def log_message(self, *args) -> None:  # no stderr chatter in tests
        pass

    def _read_body(self) -> bytes:
        if self.headers.get('Transfer-Encoding', '').lower() == 'chunked':
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b';')[0].strip() or b'0', 16)
                if size == 0:
                    while self.rfile.readline() not in (b'\r\n', b'\n', b''):
                        pass
                    return b''.join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get('Content-Length') or 0)
        return self.rfile.read(length) if length else b''

    def _serve(self) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        body = self._read_body()
        headers = _Headers(self.headers, self.command)
        try:
            status, extra, payload = self.cloud.handle(self.command, parts.path.rstrip('/')
                                                       or '/', query, headers, body)
        except ApiError as e:
            status, extra, payload = e.status, e.headers, e.body
        except Exception as e:  # a fake bug: say so rather than hang the client
            status, extra, payload = 500, {}, {'computeFault': {'code': 500,
                                                                'message': repr(e)}}
        if isinstance(payload, (dict, list)):
            data = json.dumps(payload).encode()
            ctype = 'application/json'
        elif isinstance(payload, str):
            data = payload.encode()
            ctype = 'text/plain; charset=UTF-8'
        else:
            data = payload or b''
            ctype = 'application/json'
        self.send_response(status)
        for key, value in extra.items():
            self.send_header(key, value)
        if status != 204:
            self.send_header('Content-Type', ctype)
        self.send_header('Content-Length', str(0 if status == 204 else len(data)))
        self.send_header('X-Openstack-Request-Id', f'req-{uuid.uuid4()}')
        self.end_headers()
        if status != 204 and self.command != 'HEAD':
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _serve  # noqa: N815


class _Headers:
    """Request headers, case-insensitive, with the method for routes
    shared between methods."""

    def __init__(self, headers, method: str):
        self._headers = headers
        self._method = method

    def get(self, name: str, default=None):
        if name == 'X-Fake-Method':
            return self._method
        return self._headers.get(name, default)


# -- pytest fixture ----------------------------------------------------------------------


@pytest.fixture
def openstack_cloud(tmp_path, monkeypatch):
    """A started fake cloud named ``fake`` in a clouds.yaml that
    openstacksdk reads (``OS_CLIENT_CONFIG_FILE``); stopped afterwards.
    Tests change its settings (``boot_delay``, ``host_manager``, ...)
    before their launcher starts."""
    cloud = FakeOpenStackCloud(availability_zones=['az1', 'az2']).start()
    path = cloud.write_clouds_yaml(tmp_path / 'clouds.yaml')
    monkeypatch.setenv('OS_CLIENT_CONFIG_FILE', path)
    try:
        yield cloud
    finally:
        cloud.stop()
