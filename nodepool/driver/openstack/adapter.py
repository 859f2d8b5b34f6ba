"""An OpenStack cloud as a provider, through openstacksdk.

The connection comes from ``clouds.yaml`` (``cloud`` and ``region-name``
of the provider; ``OS_CLIENT_CONFIG_FILE`` names another file), made on
first use and shared by every launcher thread.  Every HTTP request it
makes passes one ``RateLimiter`` (the provider's ``rate``: the least time
between two calls), so the framework does not space the adapter's
methods itself (``limits_own_rate``).

A launch: ``create`` picks the flavor (by name, or the smallest with
``min-ram``) and the image (the builder's upload the framework chose, or
a cloud image by id or name), and boots the server with the pool's
networks, security groups and availability zone, the label's key pair,
user data and properties, and nodepool's metadata.  ``poll`` waits for
``ACTIVE`` (``ERROR`` fails the launch with Nova's fault) within
``launch-timeout``, then for SSH and its host keys within
``boot-timeout`` (unless ``host-key-checking`` is off).  ``delete``
returns once Nova no longer knows the server.  ``list`` reports the
servers whose metadata names this provider, so the launcher's cleanup
finds leaked ones.  ``quota`` is the cloud's absolute limits less what
servers that are not this provider's use.  Floating IPs and the
cleanup of leaked floating IPs and ports are in network.py.
"""

from __future__ import annotations

import base64
import ipaddress
import logging
import random
import subprocess
import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace

import openstack
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1.session import TCPKeepAliveAdapter
from openstack import exceptions as os_exc

from nodepool.driver import (
    CachedQuota,
    Instance,
    InstanceSpec,
    LaunchError,
    ProviderAdapter,
    ProviderError,
    Quota,
    UploadSpec,
)
from nodepool.driver.openstack.network import NeutronJanitor
from nodepool.driver.settings import PoolConfig
from nodepool.driver.sshutil import SSHCheckError, paramiko_keyscan, ssh_banner
from nodepool.launcher.ratelimit import RateLimiter

log = logging.getLogger('nodepool.driver.openstack')

API_ERRORS = (os_exc.SDKException, ks_exc.ClientException)
BUILDING_STATES = ('BUILD', 'REBUILD', '', None)
UNLIMITED = -1


class _LimitedHTTPAdapter(TCPKeepAliveAdapter):
    """Where every HTTP request of the connection goes: it waits for the
    provider's rate limiter and is counted."""

    def __init__(self, limiter: RateLimiter | None, on_request):
        super().__init__()
        self.limiter = limiter
        self.on_request = on_request

    def send(self, request, *args, **kwargs):
        if self.limiter is not None:
            self.limiter.wait()
        self.on_request(request)
        return super().send(request, *args, **kwargs)


@dataclass
class _BootSource:
    image_id: str
    image_name: str | None
    config_drive: bool | None
    connection_type: str
    connection_port: int
    username: str | None


@dataclass
class _Launch:
    """What ``poll`` needs to know about a server this adapter created."""

    spec: InstanceSpec
    source: _BootSource
    host_key_checking: bool
    console_log: bool
    started: float
    active_at: float | None = None
    #: The pool's ``auto-floating-ip``.
    auto_floating_ip: bool = False


def pick_flavor(flavors, name: str | None, min_ram: int | None):
    """Released Nodepool's rule: with ``min_ram``, the smallest flavor with
    at least that much RAM (whose name contains ``name``, if given);
    otherwise the flavor named (or with the id) ``name``."""
    usable = [f for f in flavors if not getattr(f, 'is_disabled', False)]
    if min_ram is not None:
        fits = [f for f in usable if f.ram >= min_ram and (not name or name in f.name)]
        fits.sort(key=lambda f: (f.ram, f.vcpus, f.name))
        return fits[0] if fits else None
    return next((f for f in usable if name in (f.name, f.id)), None)


def dynamic_properties(templates: dict, request: dict | None, node_id: str) -> dict:
    """A label's ``dynamic-instance-properties``, formatted with
    ``request`` (``InstanceSpec.request``).  A property that cannot be
    formatted (a launch no request prompted, a key its requestor_data
    lacks) is left out, with a warning."""
    fields = SimpleNamespace(**(request or {}))
    out = {}
    for key, template in templates.items():
        try:
            out[str(key)] = template.format(request=fields)
        except (AttributeError, KeyError, IndexError, ValueError) as e:
            log.warning('Node %s: dynamic-instance-property %s (%r) left out: %r', node_id,
                        key, template, e)
    return out


class OpenStackAdapter(CachedQuota, ProviderAdapter):
    check_ssh = False       # poll waits for SSH itself, to scan the host keys
    limits_own_rate = True  # every HTTP request passes the rate limiter
    times_own_launch = True  # launch-timeout to ACTIVE, boot-timeout to SSH

    #: Seconds the cloud's limits (and the other servers' usage) are kept.
    #: Seconds ``delete`` waits for a server to go.
    delete_timeout = 600.0
    #: Seconds an image upload may take to become active.
    image_timeout = 3600.0
    #: Seconds a cloud image's id found by name is kept.
    image_cache_seconds = 300.0

    def __init__(self, provider):
        super().__init__(provider)
        self.settings = provider.settings
        self.limiter = RateLimiter(provider.rate) if provider.rate and provider.rate > 0 \
            else None
        self._lock = threading.Lock()
        self._conn = None
        self._launches: dict[str, _Launch] = {}
        self._flavors: list | None = None
        self._networks: dict[str, object] | None = None
        self._azs: list[str] | None = None
        self._images: dict[str, tuple[str, float]] = {}
        #: HTTP requests made so far (tests and benchmarks read it).
        self.api_calls = 0
        self.neutron = NeutronJanitor(self)

    # -- connection -------------------------------------------------------------------

    @property
    def connection(self):
        with self._lock:
            if self._conn is None:
                self._conn = self._connect()
            return self._conn

    def _connect(self):
        cloud, region = self.settings.get('cloud'), self.settings.get('region-name')
        try:
            conn = openstack.connect(cloud=cloud, region_name=region,
                                     app_name='gatekeep-ci-nodepool')
        except (os_exc.ConfigException, OSError) as e:
            raise ProviderError(f'openstack provider {self.provider.name}: cloud {cloud!r}: '
                                f'{e}') from None
        adapter = _LimitedHTTPAdapter(self.limiter, self._count)
        conn.session.mount('http://', adapter)
        conn.session.mount('https://', adapter)
        return conn

    def _count(self, request) -> None:
        with self._lock:
            self.api_calls += 1

    def start(self) -> None:
        self.connection   # reads clouds.yaml: a missing cloud is found now

    def stop(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def _proxy(self, service: str, error=ProviderError):
        """openstacksdk's proxy for ``service`` (its first use discovers
        the service's versions: the cloud may not answer)."""
        try:
            return getattr(self.connection, service)
        except API_ERRORS as e:
            raise error(f'reaching the {service} service: {e}') from None

    def _api(self, what: str, fn, *args, error=ProviderError, **kwargs):
        try:
            return fn(*args, **kwargs)
        except API_ERRORS as e:
            raise error(f'{what}: {e}') from None

    # -- what a label needs ---------------------------------------------------------------

    def _flavor_list(self, refresh: bool = False) -> list:
        with self._lock:
            flavors = self._flavors
        if flavors is None or refresh:
            compute = self._proxy('compute')
            flavors = self._api('listing flavors', lambda: list(compute.flavors(details=True)))
            with self._lock:
                self._flavors = flavors
        return flavors

    def flavor_for(self, settings: dict):
        name, min_ram = settings.get('flavor-name'), settings.get('min-ram')
        for refresh in (False, True):
            flavor = pick_flavor(self._flavor_list(refresh), name, min_ram)
            if flavor is not None:
                return flavor
        want = f'at least {min_ram} MiB of RAM' if min_ram is not None else ''
        if name and min_ram is not None:
            want += f' and {name!r} in its name'
        elif name:
            want = f'the name {name!r}'
        raise LaunchError(f'provider {self.provider.name}: no flavor with {want}')

    def label_quota(self, pool: PoolConfig, label: str) -> Quota:
        pool_label = pool.labels.get(label)
        if pool_label is None:
            return Quota(instances=1)
        flavor = self.flavor_for(pool_label.settings)
        return Quota(instances=1, cores=flavor.vcpus, ram=flavor.ram)

    def _boot_source(self, spec: InstanceSpec, settings: dict) -> _BootSource:
        if settings.get('diskimage'):
            if spec.image is None:
                raise LaunchError(f'diskimage {settings["diskimage"]!r} has no ready upload '
                                  f'to {self.provider.name}')
            image = self.provider.diskimages[settings['diskimage']]
            ctype = image.settings.get('connection-type') or spec.connection_type or 'ssh'
            port = image.settings.get('connection-port') or \
                (spec.connection_port if ctype == spec.connection_type else None) or \
                (5986 if ctype == 'winrm' else 22)
            return _BootSource(spec.image.external_id, image.name,
                               image.settings.get('config-drive'), ctype, port, None)
        cloud_image = self.settings['cloud-images'][settings['cloud-image']]
        image_id = cloud_image['image-id'] or \
            self._image_id(cloud_image['image-name'] or cloud_image['name'])
        return _BootSource(image_id, None, cloud_image['config-drive'],
                           cloud_image['connection-type'], cloud_image['connection-port'],
                           cloud_image['username'])

    def _image_id(self, name: str) -> str:
        now = time.monotonic()
        with self._lock:
            cached = self._images.get(name)
        if cached is not None and now - cached[1] < self.image_cache_seconds:
            return cached[0]
        find = self._proxy('image', LaunchError).find_image
        image = self._api(f'finding image {name!r}', find, name, ignore_missing=True,
                          error=LaunchError)
        if image is None:
            raise LaunchError(f'provider {self.provider.name}: the cloud has no image {name!r}')
        with self._lock:
            self._images[name] = (image.id, now)
        return image.id

    def _network_index(self, refresh: bool = False) -> dict[str, object]:
        """Networks by name and by id (from Neutron), cached."""
        with self._lock:
            index = self._networks
        if index is None or refresh:
            networks = self._api('listing networks',
                                 lambda: list(self._proxy('network').networks()))
            index = {}
            for net in networks:
                index[net.id] = net
                index.setdefault(net.name, net)
            with self._lock:
                self._networks = index
        return index

    def _network_id(self, name: str) -> str:
        for refresh in (False, True):
            net = self._network_index(refresh).get(name)
            if net is not None:
                return net.id
        raise LaunchError(f'provider {self.provider.name}: the cloud has no network {name!r}')

    # -- launching ----------------------------------------------------------------------

    def _hostname(self, spec: InstanceSpec) -> str:
        return self.settings['hostname-format'].format(
            label=SimpleNamespace(name=spec.label), provider=SimpleNamespace(name=spec.provider),
            node=SimpleNamespace(id=spec.node_id))

    def _metadata(self, spec: InstanceSpec, settings: dict, source: _BootSource) -> dict:
        groups = [spec.provider] + ([source.image_name] if source.image_name else []) + \
            [spec.label]
        meta = {str(k): str(val) for k, val in (settings.get('instance-properties') or
                                                {}).items()}
        meta.update(dynamic_properties(settings.get('dynamic-instance-properties') or {},
                                       spec.request, spec.node_id))
        meta.update({str(k): str(val) for k, val in spec.metadata.items()})
        meta.update({
            'groups': ','.join(groups),
            'nodepool_provider_name': spec.provider,
            'nodepool_pool_name': spec.pool,
            'nodepool_node_id': spec.node_id,
            'nodepool_node_label': spec.label,
        })
        if source.image_name:
            meta['nodepool_image_name'] = source.image_name
        return meta

    def server_request(self, spec: InstanceSpec) -> tuple[dict, _BootSource]:
        """The arguments of ``compute.create_server`` for ``spec``, and
        what it boots from."""
        pool = self.provider.pools[spec.pool]
        settings = pool.labels[spec.label].settings
        flavor = self.flavor_for(settings)
        source = self._boot_source(spec, settings)
        networks = settings.get('networks') or pool.settings.get('networks') or []
        request = {
            'name': self._hostname(spec),
            'flavor_id': flavor.id,
            'metadata': self._metadata(spec, settings, source),
            'networks': [{'uuid': self._network_id(n)} for n in networks] or 'auto',
        }
        groups = pool.settings.get('security-groups') or []
        if groups:
            request['security_groups'] = [{'name': g} for g in groups]
        if source.config_drive:
            request['config_drive'] = True
        if settings.get('key-name'):
            request['key_name'] = settings['key-name']
        if settings.get('userdata'):
            request['user_data'] = base64.b64encode(settings['userdata'].encode()).decode()
        if spec.az:
            request['availability_zone'] = spec.az
        if settings.get('boot-from-volume'):
            request['block_device_mapping'] = [{
                'boot_index': 0, 'uuid': source.image_id, 'source_type': 'image',
                'destination_type': 'volume', 'volume_size': settings['volume-size'],
                'delete_on_termination': True}]
        else:
            request['image_id'] = source.image_id
        return request, source

    def create(self, spec: InstanceSpec) -> str:
        request, source = self.server_request(spec)
        pool = self.provider.pools[spec.pool]
        settings = pool.labels[spec.label].settings
        try:
            server = self.connection.compute.create_server(**request)
        except API_ERRORS as e:
            if 'quota' in str(e).lower():
                self.invalidate_quota()
            raise LaunchError(f'creating server {request["name"]}: {e}') from None
        self.neutron.created(server.id)
        with self._lock:
            self._launches[server.id] = _Launch(
                spec=spec, source=source,
                host_key_checking=settings.get('host-key-checking', True),
                console_log=bool(settings.get('console-log')), started=time.monotonic(),
                auto_floating_ip=pool.settings.get('auto-floating-ip', True))
        log.info('Provider %s: server %s (%s) created for node %s', self.provider.name,
                 server.id, request['name'], spec.node_id)
        return server.id

    def poll(self, external_id: str) -> Instance | None:
        with self._lock:
            launch = self._launches.get(external_id)
        try:
            server = self.connection.compute.get_server(external_id)
        except os_exc.NotFoundException:
            self._forget(external_id)
            raise LaunchError(f'server {external_id} vanished') from None
        except API_ERRORS as e:
            log.warning('Provider %s: polling server %s: %s', self.provider.name, external_id, e)
            return None
        now = time.monotonic()
        if server.status == 'ERROR':
            fault = server.fault or {}
            self._fail(launch, server, f'server {external_id} went to ERROR: '
                                       f'{fault.get("message") or "no fault given"}')
        if server.status in BUILDING_STATES:
            if launch is not None and \
                    now - launch.started > self.settings['launch-timeout']:
                self._fail(launch, server, f'server {external_id} not ACTIVE within '
                                           f'launch-timeout {self.settings["launch-timeout"]}s')
            return None
        if server.status != 'ACTIVE':
            self._fail(launch, server, f'server {external_id} is {server.status}')
        inst = self._instance(server)
        if launch is None:
            inst.ready = True
            return inst
        if launch.active_at is None:
            launch.active_at = now
        inst.connection_type = launch.source.connection_type
        inst.connection_port = launch.source.connection_port
        inst.username = launch.source.username
        if not self._floating_ip(launch, inst, server, now) or \
                not self._reachable(launch, inst, server, now):
            return None
        inst.ready = True
        self._forget(external_id)
        return inst

    def _floating_ip(self, launch: _Launch, inst: Instance, server, now: float) -> bool:
        """With ``auto-floating-ip``, a server without a public IPv4 gets
        a floating IP, which becomes its public and interface address.
        False while its port is not there yet (LaunchError once
        ``boot-timeout`` has passed since ACTIVE)."""
        if not launch.auto_floating_ip or inst.public_ipv4:
            return True
        try:
            address = self.neutron.attach(server.id)
        except LaunchError as e:
            self._fail(launch, server, str(e))
        if address is None:
            if now - launch.active_at > self.settings['boot-timeout']:
                self._fail(launch, server, f'server {server.id}: no port for a floating IP '
                                           f'within boot-timeout {self.settings["boot-timeout"]}s')
            return False
        inst.public_ipv4 = inst.interface_ip = address
        return True

    def _reachable(self, launch: _Launch, inst: Instance, server, now: float) -> bool:
        """Whether the server can be handed out: it has an address and,
        with host key checking, SSH answers and gave its keys.  Raises
        LaunchError once ``boot-timeout`` has passed since ACTIVE."""
        late = now - launch.active_at > self.settings['boot-timeout']
        if not inst.interface_ip:
            problem = 'no address'
        elif not launch.host_key_checking or inst.connection_type != 'ssh':
            return True
        elif not ssh_banner(inst.interface_ip, inst.connection_port, timeout=2.0):
            problem = f'SSH on {inst.interface_ip}:{inst.connection_port} does not answer'
        else:
            try:
                inst.host_keys = paramiko_keyscan(inst.interface_ip, inst.connection_port,
                                                  timeout=5.0)
                return True
            except SSHCheckError as e:
                problem = str(e)
        if late:
            self._fail(launch, server, f'server {server.id}: {problem} within boot-timeout '
                                       f'{self.settings["boot-timeout"]}s')
        return False

    def _fail(self, launch: _Launch | None, server, message: str) -> None:
        self._forget(server.id)
        if launch is not None and launch.console_log:
            try:
                output = self.connection.compute.get_server_console_output(server.id)
                log.info('Provider %s: console of server %s:\n%s', self.provider.name,
                         server.id, (output or {}).get('output', ''))
            except API_ERRORS as e:
                log.info('Provider %s: no console log of server %s: %s', self.provider.name,
                         server.id, e)
        raise LaunchError(message)

    def _forget(self, external_id: str) -> None:
        with self._lock:
            self._launches.pop(external_id, None)

    def _instance(self, server) -> Instance:
        public_v4, private_v4, public_v6 = self._addresses(server)
        metadata = server.metadata or {}
        return Instance(
            external_id=server.id, node_id=metadata.get('nodepool_node_id'),
            interface_ip=public_v4 or public_v6 or private_v4,
            public_ipv4=public_v4, private_ipv4=private_v4 or public_v4,
            public_ipv6=public_v6, hostname=server.name,
            region=self.settings.get('region-name') or self.connection.config.region_name,
            az=server.availability_zone or None, cloud=self.settings.get('cloud'),
            host_id=server.host_id or None)

    def _addresses(self, server) -> tuple[str | None, str | None, str | None]:
        """(public v4, private v4, public v6): floating addresses and those
        on networks that route externally are public."""
        addresses = server.addresses or {}
        try:
            networks = self._network_index(refresh=any(
                name not in (self._networks or {}) for name in addresses))
        except ProviderError:
            networks = {}
        public_v4 = private_v4 = public_v6 = None
        for net_name, entries in addresses.items():
            net = networks.get(net_name)
            external = getattr(net, 'is_router_external', None) if net is not None else None
            for entry in entries:
                addr = entry.get('addr')
                if not addr:
                    continue
                floating = entry.get('OS-EXT-IPS:type') == 'floating'
                ip = ipaddress.ip_address(addr)
                public = floating or bool(external) or (external is None and ip.is_global)
                if ip.version == 6:
                    if public_v6 is None and (public or ip.is_global):
                        public_v6 = addr
                elif public:
                    public_v4 = public_v4 or addr
                else:
                    private_v4 = private_v4 or addr
        return public_v4, private_v4, public_v6

    # -- deleting and listing ------------------------------------------------------------

    def delete(self, external_id: str) -> None:
        self._forget(external_id)
        self.neutron.release(external_id, look_up=any(
            p.settings.get('auto-floating-ip', True) for p in self.provider.pools.values()))
        compute = self._proxy('compute')
        self._api(f'deleting server {external_id}', compute.delete_server, external_id,
                  ignore_missing=True)
        deadline = time.monotonic() + self.delete_timeout
        delay = 0.05
        while True:
            try:
                server = compute.get_server(external_id)
            except os_exc.NotFoundException:
                return
            except API_ERRORS as e:
                server = None
                log.warning('Provider %s: checking deleted server %s: %s', self.provider.name,
                            external_id, e)
            if server is not None and server.status in ('DELETED', 'SOFT_DELETED'):
                return
            if time.monotonic() + delay > deadline:
                status = server.status if server is not None else 'unknown'
                raise ProviderError(f'server {external_id} still exists (status {status}) '
                                    f'{self.delete_timeout}s after deleting it')
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def list(self) -> list[Instance]:
        servers = self._api('listing servers',
                            lambda: list(self._proxy('compute').servers(details=True)))
        out = []
        for server in servers:
            metadata = server.metadata or {}
            if metadata.get('nodepool_provider_name') != self.provider.name:
                continue
            out.append(Instance(external_id=server.id,
                                node_id=metadata.get('nodepool_node_id'),
                                az=server.availability_zone or None, hostname=server.name))
        return out

    def cleanup_leaks(self) -> None:
        """``clean-floating-ips`` and ``port-cleanup-interval``."""
        if self.settings.get('clean-floating-ips'):
            self.neutron.clean_floating_ips()
        interval = self.settings.get('port-cleanup-interval') or 0
        if interval > 0:
            self.neutron.clean_ports(interval)

    # -- quota and availability zones ------------------------------------------------------

    def _fetch_quota(self) -> Quota:
        """The absolute limits less what servers of others use (this
        provider's own servers are counted by the framework, from its
        node records)."""
        compute = self._proxy('compute')
        limits = self._api('reading limits', compute.get_limits).absolute
        servers = self._api('listing servers', lambda: list(compute.servers(details=True)))
        others = [s for s in servers
                  if (s.metadata or {}).get('nodepool_provider_name') != self.provider.name]
        used = Quota(instances=len(others), cores=0, ram=0)
        for server in others:
            flavor = server.flavor
            used.cores += getattr(flavor, 'vcpus', None) or 0
            used.ram += getattr(flavor, 'ram', None) or 0

        def left(maximum, taken):
            return None if maximum is None or maximum == UNLIMITED else maximum - taken
        return Quota(instances=left(limits.instances, used.instances),
                     cores=left(limits.total_cores, used.cores),
                     ram=left(limits.total_ram, used.ram))

    def choose_az(self, pool: PoolConfig) -> str | None:
        zones = list(pool.settings.get('availability-zones') or [])
        if not zones:
            zones = self._cloud_azs()
        return random.choice(zones) if zones else None

    def _cloud_azs(self) -> list[str]:
        with self._lock:
            zones = self._azs
        if zones is None:
            found = self._api('listing availability zones',
                              lambda: list(self._proxy('compute').availability_zones()))
            zones = sorted(az.name for az in found if (az.state or {}).get('available'))
            with self._lock:
                self._azs = zones
        return zones

    # -- images -------------------------------------------------------------------------

    def image_formats(self) -> list[str]:
        try:
            preferred = self.connection.config.config.get('image_format') or 'qcow2'
        except ProviderError:
            preferred = 'qcow2'
        return [preferred] + [f for f in ('qcow2', 'raw', 'vhd') if f != preferred]

    def upload_image(self, spec: UploadSpec) -> str:
        fmt = next((f for f in self.image_formats() if f in spec.files), None)
        if fmt is None:
            raise ProviderError(f'provider {self.provider.name} takes '
                                f'{", ".join(self.image_formats())}; the build has '
                                f'{", ".join(sorted(spec.files)) or "no files"}')
        name = spec.upload_name
        name_format = self.settings.get('image-name-format')
        if name_format:
            name = name_format.format(image_name=spec.image_name, timestamp=int(time.time()))
        properties = {str(k): str(val) for k, val in spec.meta.items()}
        image = self._api(f'uploading {name}', self._proxy('image').create_image, name,
                          filename=spec.files[fmt], disk_format=fmt, container_format='bare',
                          allow_duplicates=True, **properties)
        try:
            self._wait_image_active(image.id, name)
            self._post_upload_hook(image.id, spec.files[fmt])
        except ProviderError:
            self._api(f'deleting failed upload {image.id}', self._proxy('image').delete_image,
                      image.id, ignore_missing=True)
            raise
        log.info('Provider %s: uploaded %s as image %s (%s)', self.provider.name,
                 spec.files[fmt], image.id, name)
        return image.id

    def _post_upload_hook(self, image_id: str, path: str) -> None:
        """Released Nodepool's ``post-upload-hook``: called as ``HOOK
        PROVIDER IMAGE_ID FILE`` once the image is active; a non-zero exit
        fails the upload (and the image is deleted)."""
        hook = self.settings.get('post-upload-hook')
        if not hook:
            return
        try:
            proc = subprocess.run([hook, self.provider.name, image_id, path],
                                  capture_output=True, text=True, timeout=self.image_timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ProviderError(f'post-upload-hook {hook}: {e}') from None
        if proc.returncode:
            raise ProviderError(f'post-upload-hook {hook} exited {proc.returncode}: '
                                f'{(proc.stderr or proc.stdout).strip()[-500:]}')

    def _wait_image_active(self, image_id: str, name: str) -> None:
        deadline = time.monotonic() + self.image_timeout
        delay = 0.05
        while True:
            image = self._api(f'reading image {image_id}', self._proxy('image').get_image,
                              image_id)
            if image.status == 'active':
                return
            if image.status in ('killed', 'deleted', 'deactivated'):
                raise ProviderError(f'upload of {name} failed: the image is {image.status}')
            if time.monotonic() + delay > deadline:
                raise ProviderError(f'upload of {name} not active within '
                                    f'{self.image_timeout}s (status {image.status})')
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

    def delete_image(self, external_id: str) -> None:
        self._api(f'deleting image {external_id}', self._proxy('image').delete_image,
                  external_id, ignore_missing=True)
