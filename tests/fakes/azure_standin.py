"""Azure for tests, as its own process: the Azure Resource Manager REST
API (resource groups; public IP addresses, network interfaces and
virtual machines; VM sizes and usages of a location) and Azure AD's
client-credentials token endpoint, in their documented JSON shapes.

    python -m tests.fakes.azure_standin --state-dir DIR --auth-file OUT.json \
        [--subnet 10.224.2.0/24 --bridge azbr0 --cores-quota 8]

It writes a service principal file (``auth-path``) naming itself as the
endpoints.  Every ARM request needs ``api-version`` and a token it
issued.  A VM is ``Creating`` until a netns host with sshd (the VM's SSH
public key) runs at its interface's address, then ``Succeeded``.  VMs
over ``--cores-quota`` cores are refused with ``OperationNotAllowed``.

Faults: ``POST /_standin/faults`` with ``{"kind": "virtualMachines",
"status": 500, "code": "InternalServerError", "message": ..., "count": 1}``
(``"async": true``: accepted, then ``provisioningState: Failed``).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import re
import secrets
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from nodepool.driver.netns.host import NetnsError, NetnsHostManager, available
from tests.fakes.standin_process import serve_until_signalled

SIZES = {'Standard_B1ls': (1, 512), 'Standard_B2s': (2, 4096), 'Standard_D4s_v5': (4, 16384)}
KINDS = {'publicIPAddresses': 'Microsoft.Network', 'networkInterfaces': 'Microsoft.Network',
         'virtualMachines': 'Microsoft.Compute'}


class ArmError(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class Cloud:
    def __init__(self, state_dir: str, subnet: str, bridge: str, cores_quota: int):
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.tokens: set[str] = set()
        self.groups: dict[str, dict] = {}
        self.resources: dict[str, dict] = {}       # lower-cased id -> resource
        self.faults: list[dict] = []
        self.cores_quota = cores_quota
        self.network = ipaddress.ip_network(subnet)
        self.used: set[int] = set()
        self.hosts = NetnsHostManager(os.path.join(state_dir, 'netns'), subnet, bridge) \
            if available() is None else None

    def fault(self, kind: str) -> dict | None:
        with self.lock:
            for f in self.faults:
                if f.get('kind') == kind and f.get('count', 1) > 0:
                    f['count'] = f.get('count', 1) - 1
                    return f
        return None

    def _address(self) -> str:
        for index in range(4, self.network.num_addresses - 1):
            if index not in self.used:
                self.used.add(index)
                return str(self.network.network_address + index)
        raise ArmError(400, 'SubnetIsFull', 'the subnet has no free address')

    def put(self, rid: str, kind: str, name: str, body: dict) -> tuple[int, dict]:
        with self.lock:
            existing = self.resources.get(rid.lower())
        if existing is not None:
            return 200, existing
        props = dict(body.get('properties') or {})
        res = {'id': rid, 'name': name, 'type': f'{KINDS[kind]}/{kind}',
               'location': body.get('location'), 'tags': dict(body.get('tags') or {}),
               'properties': props}
        if kind == 'publicIPAddresses':
            props['provisioningState'] = 'Succeeded'
        elif kind == 'networkInterfaces':
            self._nic(props)
        else:
            self._vm(rid, name, props)
        with self.lock:
            self.resources[rid.lower()] = res
        if kind == 'virtualMachines':
            self._start(self._boot, res)
        return 201, res

    def _nic(self, props: dict) -> None:
        with self.lock:
            address = self._address()
        props['provisioningState'] = 'Succeeded'
        for config in props.get('ipConfigurations') or []:
            cp = config.setdefault('properties', {})
            cp['privateIPAddress'] = address
            pip_ref = cp.get('publicIPAddress')
            if pip_ref:
                pip = self.resources.get(pip_ref['id'].lower())
                if pip is None:
                    raise ArmError(400, 'InvalidResourceReference',
                                   f"Resource {pip_ref['id']} referenced by resource was not "
                                   'found.')
                # No NAT here: the "public" address reaches the same host.
                pip['properties']['ipAddress'] = address

    def _vm(self, rid: str, name: str, props: dict) -> None:
        size = props.get('hardwareProfile', {}).get('vmSize')
        if size not in SIZES:
            raise ArmError(400, 'InvalidParameter', f"The value {size} provided for the VM "
                           "size is not valid.")
        for ref in props.get('networkProfile', {}).get('networkInterfaces') or []:
            if ref['id'].lower() not in self.resources:
                raise ArmError(400, 'InvalidResourceReference',
                               f"Resource {ref['id']} referenced by resource {rid} was not "
                               'found.')
        with self.lock:
            cores = sum(SIZES[r['properties']['hardwareProfile']['vmSize']][0]
                        for r in self.resources.values() if r['type'].endswith('Machines'))
        if cores + SIZES[size][0] > self.cores_quota:
            raise ArmError(409, 'OperationNotAllowed', 'Operation could not be completed as '
                           'it results in exceeding approved standardBSFamily Cores quota. '
                           f'Current Limit: {self.cores_quota}, Current Usage: {cores}.')
        fault = self.fault('virtualMachines')
        if fault is not None and not fault.get('async'):
            raise ArmError(fault.get('status', 500), fault.get('code', 'InternalServerError'),
                           fault.get('message', 'An internal error occurred.'))
        props['provisioningState'] = 'Creating'
        props['vmId'] = str(uuid.uuid4())
        if fault is not None:
            props['provisioningState'] = 'Failed'
            props['instanceView'] = {'statuses': [{'code': 'ProvisioningState/failed/'
                                                   + fault.get('code', 'InternalError'),
                                                   'level': 'Error',
                                                   'message': fault.get('message', '')}]}

    def _boot(self, vm: dict) -> None:
        props = vm['properties']
        if props['provisioningState'] == 'Failed':
            return
        keys = [k['keyData'] for k in props.get('osProfile', {}).get(
            'linuxConfiguration', {}).get('ssh', {}).get('publicKeys') or []]
        nic = self.resources[props['networkProfile']['networkInterfaces'][0]['id'].lower()]
        address = nic['properties']['ipConfigurations'][0]['properties']['privateIPAddress']
        if self.hosts is not None and keys:
            try:
                self.hosts.create(f'az-{props["vmId"][:8]}', keys, timeout=30, address=address)
            except NetnsError as e:
                print(f'VM {vm["name"]}: no netns host: {e}', file=sys.stderr, flush=True)
        props['provisioningState'] = 'Succeeded'
        nic['properties']['virtualMachine'] = {'id': vm['id']}

    def delete(self, rid: str, kind: str) -> int:
        with self.lock:
            res = self.resources.get(rid.lower())
        if res is None:
            return 204
        if kind == 'networkInterfaces' and res['properties'].get('virtualMachine') and \
                res['properties']['virtualMachine']['id'].lower() in self.resources:
            raise ArmError(400, 'NicInUse', f'Network Interface {rid} is used by existing '
                           'resource. In order to delete the network interface, it must be '
                           'dissociated from the resource.')
        if kind == 'virtualMachines':
            res['properties']['provisioningState'] = 'Deleting'
            self._start(self._remove_vm, res)
            return 202
        with self.lock:
            self.resources.pop(rid.lower(), None)
            if kind == 'networkInterfaces':
                for config in res['properties'].get('ipConfigurations') or []:
                    address = config['properties'].get('privateIPAddress')
                    if address:
                        self.used.discard(int(ipaddress.ip_address(address)) -
                                          int(self.network.network_address))
        return 200

    def _remove_vm(self, vm: dict) -> None:
        if self.hosts is not None:
            self.hosts.delete(f'az-{vm["properties"]["vmId"][:8]}')
        with self.lock:
            self.resources.pop(vm['id'].lower(), None)

    def _start(self, fn, *args) -> None:
        thread = threading.Thread(target=fn, args=args, daemon=True)
        with self.lock:
            self.threads.append(thread)
        thread.start()

    def stop(self) -> None:
        # Hosts still being made or removed finish first: none outlives us.
        for thread in list(self.threads):
            thread.join(60)
        if self.hosts is not None:
            self.hosts.cleanup_all('az-')


class Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    cloud: Cloud = None

    def log_message(self, *args):
        pass

    def _send(self, status: int, body: dict | None) -> None:
        data = json.dumps(body).encode() if body is not None else b''
        self.send_response(status)
        self.send_header('Content-Type', 'application/json; charset=utf-8')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._handle('GET')

    def do_PUT(self):
        self._handle('PUT')

    def do_POST(self):
        self._handle('POST')

    def do_DELETE(self):
        self._handle('DELETE')

    def _handle(self, method: str) -> None:
        n = int(self.headers.get('Content-Length') or 0)
        raw = self.rfile.read(n) if n else b''
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        try:
            if url.path.endswith('/oauth2/token'):
                return self._token(raw)
            if url.path == '/_standin/faults':
                with self.cloud.lock:
                    self.cloud.faults.append(json.loads(raw or b'{}'))
                return self._send(200, {})
            if self.headers.get('Authorization', '')[7:] not in self.cloud.tokens:
                raise ArmError(401, 'AuthenticationFailed', 'Authentication failed. The '
                               "'Authorization' header is missing or invalid.")
            if 'api-version' not in query:
                raise ArmError(400, 'MissingApiVersionParameter', "The api-version query "
                               'parameter (?api-version=) is required for all requests.')
            body = json.loads(raw) if raw else {}
            status, answer = self._route(method, url.path, body)
            self._send(status, answer)
        except ArmError as e:
            self._send(e.status, {'error': {'code': e.code, 'message': e.message}})

    def _token(self, raw: bytes) -> None:
        form = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
        if form.get('grant_type') != 'client_credentials' or \
                form.get('client_secret') != 'standin-secret':
            return self._send(401, {'error': 'invalid_client',
                                    'error_description': 'AADSTS7000215: Invalid client '
                                    'secret provided.'})
        token = secrets.token_urlsafe(24)
        self.cloud.tokens.add(token)
        self._send(200, {'token_type': 'Bearer', 'expires_in': '3599', 'access_token': token,
                         'resource': form.get('resource')})

    def _route(self, method: str, path: str, body: dict):
        cloud = self.cloud
        m = re.match(r'^/subscriptions/[^/]+/providers/Microsoft\.Compute/locations/[^/]+/'
                     r'(vmSizes|usages)$', path)
        if m and method == 'GET':
            if m.group(1) == 'vmSizes':
                return 200, {'value': [{'name': n, 'numberOfCores': c, 'memoryInMB': mem}
                                       for n, (c, mem) in SIZES.items()]}
            with cloud.lock:
                vms = [r for r in cloud.resources.values() if r['type'].endswith('Machines')]
            cores = sum(SIZES[v['properties']['hardwareProfile']['vmSize']][0] for v in vms)
            return 200, {'value': [
                {'name': {'value': 'cores', 'localizedValue': 'Total Regional vCPUs'},
                 'currentValue': cores, 'limit': cloud.cores_quota, 'unit': 'Count'},
                {'name': {'value': 'virtualMachines', 'localizedValue': 'Virtual Machines'},
                 'currentValue': len(vms), 'limit': 25000, 'unit': 'Count'}]}
        m = re.match(r'^(/subscriptions/[^/]+/resourceGroups/([^/]+))(/providers/'
                     r'(Microsoft\.\w+)/(\w+)(?:/([^/]+))?)?$', path)
        if m is None:
            raise ArmError(404, 'InvalidResourceType', f'{path} is not served')
        group_id, group, rest, _, kind, name = m.groups()
        if rest is None:
            if method == 'PUT':
                cloud.groups[group.lower()] = {'id': group_id, 'name': group,
                                               'location': body.get('location'),
                                               'tags': body.get('tags') or {},
                                               'properties': {'provisioningState':
                                                              'Succeeded'}}
                return 201, cloud.groups[group.lower()]
            if group.lower() not in cloud.groups:
                raise ArmError(404, 'ResourceGroupNotFound', f"Resource group '{group}' "
                               'could not be found.')
            return 200, cloud.groups[group.lower()]
        if group.lower() not in cloud.groups:
            raise ArmError(404, 'ResourceGroupNotFound', f"Resource group '{group}' could "
                           'not be found.')
        if kind not in KINDS:
            raise ArmError(404, 'InvalidResourceType', f'{kind} is not served')
        if name is None:
            with cloud.lock:
                items = [r for r in cloud.resources.values()
                         if r['type'].endswith('/' + kind)
                         and r['id'].lower().startswith(group_id.lower() + '/')]
            return 200, {'value': items}
        rid = f'{group_id}/providers/{KINDS[kind]}/{kind}/{name}'
        if method == 'PUT':
            return cloud.put(rid, kind, name, body)
        if method == 'DELETE':
            return cloud.delete(rid, kind), None
        with cloud.lock:
            res = cloud.resources.get(rid.lower())
        if res is None:
            raise ArmError(404, 'ResourceNotFound', f"The Resource '{KINDS[kind]}/{kind}/"
                           f"{name}' under resource group '{group}' was not found.")
        return 200, res


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description='Azure ARM stand-in backed by netns hosts')
    parser.add_argument('--state-dir', required=True)
    parser.add_argument('--auth-file', required=True)
    parser.add_argument('--port', type=int, default=0)
    parser.add_argument('--subnet', default='10.224.2.0/24')
    parser.add_argument('--bridge', default='azbr0')
    parser.add_argument('--cores-quota', type=int, default=8)
    args = parser.parse_args(argv)
    cloud = Cloud(args.state_dir, args.subnet, args.bridge, args.cores_quota)
    server = ThreadingHTTPServer(('127.0.0.1', args.port),
                                 type('Bound', (Handler,), {'cloud': cloud}))
    server.daemon_threads = True
    url = f'http://127.0.0.1:{server.server_address[1]}'
    auth = {'clientId': str(uuid.uuid4()), 'clientSecret': 'standin-secret',
            'subscriptionId': str(uuid.uuid4()), 'tenantId': str(uuid.uuid4()),
            'activeDirectoryEndpointUrl': url, 'resourceManagerEndpointUrl': url + '/'}
    fd = os.open(args.auth_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, 'w') as f:
        json.dump(auth, f)
    serve_until_signalled(server, server.server_address[1])
    cloud.stop()
    return 0


if __name__ == '__main__':
    sys.exit(main())
