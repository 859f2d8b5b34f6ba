"""Azure virtual machines as a provider, through Azure Resource Manager
(``arm.py``).

``create`` puts (in the provider's resource group, made once at start) a
public IP unless ``use-internal-ip``, a network interface in the
provider's subnet, and the VM (the label's VM size, the cloud image's
reference or id, the image's user and SSH key, ``custom-data`` and
``user-data``); each carries the tags ``nodepool_node_id``,
``nodepool_provider_name``, ``nodepool_pool_name``.  ``poll`` waits for
the VM's ``provisioningState`` ``Succeeded`` within ``launch-timeout``
(``Failed`` fails the launch with Azure's reason), then for SSH and its
host keys within ``boot-timeout``.  ``delete`` removes the VM, its
interface, address and OS disk.  ``list`` finds VMs by tag;
``cleanup_leaks`` removes tagged interfaces and addresses no VM uses.
``quota`` is the location's ``cores`` and ``virtualMachines`` usage
limits less what VMs that are not the provider's use.
"""

from __future__ import annotations

import base64
import logging
import threading
import time

from nodepool.driver import (
    CachedQuota,
    Instance,
    InstanceSpec,
    LaunchError,
    ProviderAdapter,
    ProviderError,
    Quota,
    resource_name,
)
from nodepool.driver.azure.arm import ArmClient
from nodepool.driver.settings import PoolConfig
from nodepool.driver.sshutil import reachability_problem

log = logging.getLogger('nodepool.driver.azure')


class AzureAdapter(CachedQuota, ProviderAdapter):
    check_ssh = False
    times_own_launch = True
    delete_timeout = 600.0

    def __init__(self, provider):
        super().__init__(provider)
        self.settings = provider.settings
        self._lock = threading.Lock()
        self._arm: ArmClient | None = None
        self._sizes: dict[str, tuple[int, int]] | None = None
        self._launches: dict[str, dict] = {}

    @property
    def arm(self) -> ArmClient:
        with self._lock:
            if self._arm is None:
                self._arm = ArmClient(self.settings['auth-path'])
            return self._arm

    @property
    def group(self) -> str:
        return f'{self.arm.subscription}/resourceGroups/{self.settings["resource-group"]}'

    def start(self) -> None:
        self.arm.request('PUT', self.group, 'making the resource group',
                         {'location': self.settings['resource-group-location'],
                          'tags': {'nodepool_provider_name': self.provider.name}})

    def _tags(self, spec: InstanceSpec, settings: dict | None = None) -> dict:
        tags = {str(k): str(v) for k, v in ((settings or {}).get('tags') or {}).items()}
        from types import SimpleNamespace
        fields = SimpleNamespace(**(spec.request or {}))
        for key, template in ((settings or {}).get('dynamic-tags') or {}).items():
            try:
                tags[str(key)] = str(template.format(request=fields))
            except (AttributeError, KeyError, IndexError, ValueError):
                continue
        tags.update({'nodepool_node_id': spec.node_id, 'nodepool_provider_name': spec.provider,
                     'nodepool_pool_name': spec.pool, 'nodepool_node_label': spec.label})
        return tags

    def _subnet(self) -> str:
        if self.settings.get('subnet-id'):
            return self.settings['subnet-id']
        network = self.settings['network']
        if isinstance(network, str):
            network = {'network': network}
        group = network.get('resource-group', self.settings['resource-group'])
        return (f'{self.arm.subscription}/resourceGroups/{group}/providers/Microsoft.Network/'
                f'virtualNetworks/{network["network"]}/subnets/{network.get("subnet", "default")}')

    # -- sizes and quota ------------------------------------------------------------------

    def vm_size(self, name: str) -> tuple[int, int]:
        with self._lock:
            sizes = self._sizes
        if sizes is None:
            found = self.arm.request('GET', f'{self.arm.subscription}/providers/'
                                     f'Microsoft.Compute/locations/{self.settings["location"]}'
                                     '/vmSizes', 'listing VM sizes')
            sizes = {s['name']: (s['numberOfCores'], s['memoryInMB'])
                     for s in found.get('value') or []}
            with self._lock:
                self._sizes = sizes
        if name not in sizes:
            raise LaunchError(f'provider {self.provider.name}: no VM size {name!r} in '
                              f'{self.settings["location"]}')
        return sizes[name]

    def label_quota(self, pool: PoolConfig, label: str) -> Quota:
        cores, ram = self.vm_size(pool.labels[label].settings['hardware-profile']['vm-size'])
        return Quota(instances=1, cores=cores, ram=ram)

    def _fetch_quota(self) -> Quota:
        usages = self.arm.request('GET', f'{self.arm.subscription}/providers/'
                                  f'Microsoft.Compute/locations/'
                                  f'{self.settings["location"]}/usages', 'reading usages')
        ours = self._vms()
        own_cores = sum(self.vm_size(vm['properties']['hardwareProfile']['vmSize'])[0]
                        for vm in ours)
        by_name = {u['name']['value']: u for u in usages.get('value') or []}

        def left(name, own):
            u = by_name.get(name)
            return None if u is None else u['limit'] - (u['currentValue'] - own)
        return Quota(instances=left('virtualMachines', len(ours)),
                     cores=left('cores', own_cores))

    # -- launching ------------------------------------------------------------------------

    def create(self, spec: InstanceSpec) -> str:
        pool = self.provider.pools[spec.pool]
        settings = pool.labels[spec.label].settings
        image = self.settings['cloud-images'][settings['cloud-image']]
        name = resource_name(spec.provider, spec.node_id)
        location = self.settings['location']
        tags = self._tags(spec, settings)
        net = f'{self.group}/providers/Microsoft.Network'
        ip_config: dict = {'subnet': {'id': self._subnet()},
                           'privateIPAllocationMethod': 'Dynamic'}
        if not pool.settings.get('use-internal-ip'):
            pip = self.arm.request('PUT', f'{net}/publicIPAddresses/{name}-pip',
                                   f'making the address of {name}', {
                                       'location': location, 'tags': tags,
                                       'sku': {'name': 'Standard'},
                                       'properties': {'publicIPAllocationMethod': 'Static'}})
            ip_config['publicIPAddress'] = {'id': pip['id']}
        nic = self.arm.request('PUT', f'{net}/networkInterfaces/{name}-nic',
                               f'making the interface of {name}', {
                                   'location': location, 'tags': tags, 'properties': {
                                       'ipConfigurations': [{'name': 'ipconfig',
                                                             'properties': ip_config}]}})
        self.arm.request('PUT', self._vm_path(name), f'making VM {name}',
                         self._vm_body(name, location, tags, settings, image, nic['id']))
        with self._lock:
            self._launches[name] = {'started': time.monotonic(), 'image': image,
                                    'host-key-checking': settings.get('host-key-checking',
                                                                      True)}
        return name

    def _vm_path(self, name: str) -> str:
        return f'{self.group}/providers/Microsoft.Compute/virtualMachines/{name}'

    def _vm_body(self, name, location, tags, settings, image, nic_id) -> dict:
        username = image.get('username', 'zuul')
        os_profile: dict = {'computerName': name, 'adminUsername': username}
        if image.get('key'):
            os_profile['linuxConfiguration'] = {
                'disablePasswordAuthentication': True,
                'ssh': {'publicKeys': [{'path': f'/home/{username}/.ssh/authorized_keys',
                                        'keyData': image['key']}]}}
        if settings.get('custom-data'):
            os_profile['customData'] = base64.b64encode(
                settings['custom-data'].encode()).decode()
        reference = dict(image.get('image-reference') or {}) or {'id': image.get('image-id')}
        os_disk: dict = {'createOption': 'FromImage', 'deleteOption': 'Delete'}
        if settings.get('volume-size'):
            os_disk['diskSizeGB'] = settings['volume-size']
        body = {'location': location, 'tags': tags, 'properties': {
            'hardwareProfile': {'vmSize': settings['hardware-profile']['vm-size']},
            'storageProfile': {'imageReference': reference, 'osDisk': os_disk},
            'osProfile': os_profile,
            'networkProfile': {'networkInterfaces': [
                {'id': nic_id, 'properties': {'deleteOption': 'Delete'}}]}}}
        if settings.get('user-data'):
            body['properties']['userData'] = base64.b64encode(
                settings['user-data'].encode()).decode()
        return body

    def poll(self, external_id: str) -> Instance | None:
        with self._lock:
            launch = self._launches.get(external_id)
        vm = self.arm.request('GET', self._vm_path(external_id), f'reading VM {external_id}',
                              ok404=True)
        if vm is None:
            self._forget(external_id)
            raise LaunchError(f'VM {external_id} vanished')
        state = vm['properties'].get('provisioningState')
        now = time.monotonic()
        if state == 'Failed':
            self._forget(external_id)
            status = (vm['properties'].get('instanceView') or {}).get('statuses') or []
            why = '; '.join(s.get('message') or s.get('code', '') for s in status) or state
            raise LaunchError(f'VM {external_id} failed: {why}')
        if state != 'Succeeded':
            if launch and now - launch['started'] > self.settings['launch-timeout']:
                self._forget(external_id)
                raise LaunchError(f'VM {external_id} not provisioned within launch-timeout '
                                  f'{self.settings["launch-timeout"]}s')
            return None
        inst = self._instance(vm)
        if launch is None:
            inst.ready = True
            return inst
        launch.setdefault('running', now)
        image = launch['image']
        inst.username = image.get('username', 'zuul')
        inst.connection_type = image.get('connection-type', 'ssh')
        inst.connection_port = image.get('connection-port', 22)
        problem = reachability_problem(inst, launch['host-key-checking'])
        if problem is not None:
            if now - launch['running'] > self.settings['boot-timeout']:
                self._forget(external_id)
                raise LaunchError(f'VM {external_id}: {problem} within boot-timeout '
                                  f'{self.settings["boot-timeout"]}s')
            return None
        inst.ready = True
        self._forget(external_id)
        return inst

    def _forget(self, name: str) -> None:
        with self._lock:
            self._launches.pop(name, None)

    def _instance(self, vm: dict) -> Instance:
        name = vm['name']
        nic = self.arm.request('GET', f'{self.group}/providers/Microsoft.Network/'
                               f'networkInterfaces/{name}-nic', f'reading the interface of '
                               f'{name}')
        config = nic['properties']['ipConfigurations'][0]['properties']
        private, public = config.get('privateIPAddress'), None
        if config.get('publicIPAddress'):
            pip = self.arm.request('GET', config['publicIPAddress']['id'],
                                   f'reading the address of {name}')
            public = pip['properties'].get('ipAddress')
        tags = vm.get('tags') or {}
        pool = self.provider.pools.get(tags.get('nodepool_pool_name', ''))
        internal = bool(pool and pool.settings.get('use-internal-ip'))
        return Instance(external_id=name, node_id=tags.get('nodepool_node_id'),
                        interface_ip=private if internal else (public or private),
                        public_ipv4=public, private_ipv4=private, hostname=name,
                        region=self.settings['location'],
                        host_id=vm['properties'].get('vmId'))

    # -- deleting and listing -----------------------------------------------------------------

    def delete(self, external_id: str) -> None:
        self._forget(external_id)
        net = f'{self.group}/providers/Microsoft.Network'
        for path, what in ((self._vm_path(external_id), 'VM'),
                           (f'{net}/networkInterfaces/{external_id}-nic', 'interface'),
                           (f'{net}/publicIPAddresses/{external_id}-pip', 'address')):
            self.arm.request('DELETE', path, f'deleting the {what} {external_id}', ok404=True)
            self._wait_gone(path, f'{what} {external_id}')

    def _wait_gone(self, path: str, what: str) -> None:
        deadline = time.monotonic() + self.delete_timeout
        delay = 0.05
        while self.arm.request('GET', path, f'reading {what}', ok404=True) is not None:
            if time.monotonic() + delay > deadline:
                raise ProviderError(f'{what} still exists {self.delete_timeout}s after '
                                    'deleting it')
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _vms(self) -> list[dict]:
        found = self.arm.request('GET', f'{self.group}/providers/Microsoft.Compute/'
                                 'virtualMachines', 'listing VMs')
        return [vm for vm in found.get('value') or []
                if (vm.get('tags') or {}).get('nodepool_provider_name') == self.provider.name]

    def list(self) -> list[Instance]:
        return [Instance(external_id=vm['name'],
                         node_id=(vm.get('tags') or {}).get('nodepool_node_id'))
                for vm in self._vms()]

    def cleanup_leaks(self) -> None:
        """Interfaces and addresses of ours that no VM uses."""
        net = f'{self.group}/providers/Microsoft.Network'
        vms = {vm['name'] for vm in self._vms()}
        for kind, suffix in (('networkInterfaces', '-nic'), ('publicIPAddresses', '-pip')):
            found = self.arm.request('GET', f'{net}/{kind}', f'listing {kind}')
            for res in found.get('value') or []:
                if (res.get('tags') or {}).get('nodepool_provider_name') != self.provider.name:
                    continue
                if res['name'][:-len(suffix)] in vms or \
                        (res.get('properties') or {}).get('virtualMachine'):
                    continue
                log.warning('Provider %s: deleting leaked %s %s', self.provider.name, kind,
                            res['name'])
                self.arm.request('DELETE', res['id'], f'deleting {res["name"]}', ok404=True)
