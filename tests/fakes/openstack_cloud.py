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
- ``/network``: Neutron v2.0 (networks list/get; ports list/get/delete;
  floating IPs list/create/get/update/delete), in openstack_network.py.

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
``revoke_tokens``, ``add_port``, ``add_floating_ip``.  What happened is
in ``requests`` (method, path, time), ``servers``, ``images``, ``ports``
and ``floating_ips``.

This module holds the cloud's state, Keystone and Glance; Nova is in
openstack_compute.py, Neutron in openstack_network.py, the HTTP
plumbing in openstack_http.py.

The formats come from the API references (docs.openstack.org/api-ref:
identity v3, compute v2.1, image v2, networking v2.0); nothing here is
taken from OpenStack's code.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer

import pytest
import yaml

from tests.fakes.openstack_compute import DEFAULT_FLAVORS, UNLIMITED, ComputeApi, FakeServer
from tests.fakes.openstack_http import ApiError, Context, Handler
from tests.fakes.openstack_http import later as _later
from tests.fakes.openstack_http import now as _now
from tests.fakes.openstack_network import NETWORK_ROUTES, FakeFloatingIp, FakePort, NetworkApi


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


class FakeOpenStackCloud(ComputeApi, NetworkApi):
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
        self.ports: dict[str, FakePort] = {}
        self.floating_ips: dict[str, FakeFloatingIp] = {}
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
        handler = type('Handler', (Handler,), {'cloud': self})
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
            ctx = Context(self, headers, query, body)
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
    *NETWORK_ROUTES,
]


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
