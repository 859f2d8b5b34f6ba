"""Google Compute Engine for tests, as its own process: the Compute v1
REST API (JSON) the Google API client uses, and the OAuth 2.0 token
endpoint a service account key's ``token_uri`` names.

    python -m tests.fakes.gce_standin --state-dir DIR --credentials OUT.json \
        [--subnet 10.224.1.0/24 --bridge gcebr0 --authorized-keys-file KEY.pub]

Served: instances (insert, get, list with ``labels.KEY = VALUE``
filters, delete), zone operations, machine types, images (by name and
``getFromFamily``), regions with ``CPUS``/``INSTANCES`` quotas; errors in
Google's JSON error shape; every request needs a bearer token this
server issued (to the key in the credentials file it writes).  Each
running instance is a netns host with sshd (the ``ssh-keys`` metadata,
or ``--authorized-keys-file``), so jobs really run on it.

Faults: ``POST /_standin/faults`` with ``{"op": "insert", "code": 403,
"reason": "quotaExceeded", "message": ..., "count": 1, "async": false}``
(``async``: the insert is accepted and its operation fails).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import secrets
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from nodepool.driver.netns.host import NetnsError, NetnsHostManager, available
from tests.fakes.standin_process import read_keys, serve_until_signalled

MACHINE_TYPES = {'e2-small': (2, 2048), 'e2-medium': (2, 4096), 'n2-standard-4': (4, 16384)}
PREFIX = '/compute/v1/projects/'


class GceError(Exception):
    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def body(self) -> dict:
        return {'error': {'code': self.code, 'message': self.message, 'errors': [
            {'domain': 'global', 'reason': self.reason, 'message': self.message}]}}


class Cloud:
    def __init__(self, state_dir: str, subnet: str, bridge: str, keys: list[str],
                 cpus_quota: int):
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.tokens: set[str] = set()
        self.instances: dict[tuple, dict] = {}       # (project, zone, name)
        self.operations: dict[str, dict] = {}
        self.images: dict[tuple, dict] = {}          # (project, name)
        self.faults: list[dict] = []
        self.cpus_quota = cpus_quota
        self.keys = keys
        self.ids = itertools.count(1000)
        self.hosts = NetnsHostManager(os.path.join(state_dir, 'netns'), subnet, bridge) \
            if available() is None else None

    def fault(self, op: str) -> dict | None:
        with self.lock:
            for f in self.faults:
                if f.get('op') == op and f.get('count', 1) > 0:
                    f['count'] = f.get('count', 1) - 1
                    return f
        return None

    # -- instances ---------------------------------------------------------------------

    def insert(self, base: str, project: str, zone: str, body: dict) -> dict:
        name = body.get('name', '')
        if not re.match(r'^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$', name):
            raise GceError(400, 'invalid', f"Invalid value for field 'resource.name': "
                           f"'{name}'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{{0,61}}"
                           "[a-z0-9])?)'")
        mtype = body.get('machineType', '').rsplit('/', 1)[-1]
        if mtype not in MACHINE_TYPES:
            raise GceError(400, 'invalid', f"Invalid value for field 'resource.machineType': "
                           f"'{body.get('machineType')}'.")
        fault = self.fault('insert')
        if fault is not None and not fault.get('async'):
            raise GceError(fault.get('code', 500), fault.get('reason', 'backendError'),
                           fault.get('message', 'Internal error'))
        op = self._operation(base, project, zone, 'insert', name)
        if fault is not None:
            op.update(status='DONE', httpErrorStatusCode=fault.get('code', 403), error={
                'errors': [{'code': fault.get('reason', 'QUOTA_EXCEEDED'),
                            'message': fault.get('message', 'Quota exceeded')}]})
            return op
        with self.lock:
            key = (project, zone, name)
            if key in self.instances:
                raise GceError(409, 'alreadyExists', f"The resource 'projects/{project}/"
                               f"zones/{zone}/instances/{name}' already exists")
            used = sum(MACHINE_TYPES[i['machineType'].rsplit('/', 1)[-1]][0]
                       for i in self.instances.values())
            if used + MACHINE_TYPES[mtype][0] > self.cpus_quota:
                op.update(status='DONE', httpErrorStatusCode=403, error={'errors': [{
                    'code': 'QUOTA_EXCEEDED', 'message': f"Quota 'CPUS' exceeded.  Limit: "
                    f"{self.cpus_quota}.0 in region {zone.rsplit('-', 1)[0]}."}]})
                return op
            inst = {**body, 'kind': 'compute#instance', 'id': str(next(self.ids)),
                    'status': 'PROVISIONING', 'zone': f'{base}{project}/zones/{zone}',
                    'selfLink': f'{base}{project}/zones/{zone}/instances/{name}',
                    'machineType': f'{base}{project}/zones/{zone}/machineTypes/{mtype}',
                    'creationTimestamp': time.strftime('%Y-%m-%dT%H:%M:%S.000-00:00')}
            self.instances[key] = inst
        self._start(self._boot, key, op)
        return op

    def _boot(self, key: tuple, op: dict) -> None:
        inst = self.instances.get(key)
        keys = list(self.keys)
        for item in (inst.get('metadata') or {}).get('items') or []:
            if item.get('key') == 'ssh-keys':
                keys += [line.split(':', 1)[1] for line in item['value'].splitlines()
                         if ':' in line]
        address = None
        if self.hosts is not None and keys:
            try:
                address = self.hosts.create(f'gce-{inst["id"]}', keys, timeout=30).address
            except NetnsError as e:
                print(f'instance {key}: no netns host: {e}', file=sys.stderr, flush=True)
        with self.lock:
            if key not in self.instances:
                return
            interface = inst['networkInterfaces'][0]
            interface['networkIP'] = address or f'10.128.0.{int(inst["id"]) % 250}'
            for config in interface.get('accessConfigs') or []:
                config['natIP'] = address or f'203.0.113.{int(inst["id"]) % 250}'
            inst['status'] = 'RUNNING'
            op['status'] = 'DONE'

    def delete(self, base: str, project: str, zone: str, name: str) -> dict:
        with self.lock:
            inst = self.instances.get((project, zone, name))
            if inst is None:
                raise GceError(404, 'notFound', f"The resource 'projects/{project}/zones/"
                               f"{zone}/instances/{name}' was not found")
            inst['status'] = 'STOPPING'
        op = self._operation(base, project, zone, 'delete', name)
        self._start(self._remove, (project, zone, name), op)
        return op

    def _remove(self, key: tuple, op: dict) -> None:
        inst = self.instances.get(key)
        if inst is not None and self.hosts is not None:
            self.hosts.delete(f'gce-{inst["id"]}')
        with self.lock:
            self.instances.pop(key, None)
            op['status'] = 'DONE'

    def _operation(self, base, project, zone, kind, name) -> dict:
        op = {'kind': 'compute#operation', 'name': f'operation-{secrets.token_hex(8)}',
              'operationType': kind, 'status': 'RUNNING', 'progress': 0,
              'zone': f'{base}{project}/zones/{zone}',
              'targetLink': f'{base}{project}/zones/{zone}/instances/{name}'}
        with self.lock:
            self.operations[op['name']] = op
        return op

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
            self.hosts.cleanup_all('gce-')


def _matches(inst: dict, expression: str | None) -> bool:
    for term in filter(None, (expression or '').split(' AND ')):
        m = re.match(r'^\(?\s*labels\.([\w-]+)\s*=\s*"?([^")]*)"?\s*\)?$', term.strip())
        if m is None:
            raise GceError(400, 'invalid', f'Invalid list filter expression {term!r}')
        if (inst.get('labels') or {}).get(m.group(1)) != m.group(2).strip():
            return False
    return True


class Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    cloud: Cloud = None

    def log_message(self, *args):
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header('Content-Type', 'application/json; charset=UTF-8')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._handle('GET')

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
            if url.path == '/token':
                return self._token(raw)
            if url.path == '/_standin/faults':
                with self.cloud.lock:
                    self.cloud.faults.append(json.loads(raw or b'{}'))
                return self._send(200, {})
            if self.headers.get('Authorization', '')[7:] not in self.cloud.tokens:
                raise GceError(401, 'authError', 'Request had invalid authentication '
                               'credentials.')
            if not url.path.startswith(PREFIX):
                raise GceError(404, 'notFound', f'{url.path} not found')
            base = f'http://{self.headers.get("Host")}{PREFIX}'
            body = json.loads(raw or b'{}') if raw else {}
            self._send(200, self._route(method, url.path[len(PREFIX):].split('/'), query,
                                        body, base))
        except GceError as e:
            self._send(e.code, e.body())

    def _token(self, raw: bytes) -> None:
        form = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
        if form.get('grant_type') != 'urn:ietf:params:oauth:grant-type:jwt-bearer' or \
                form.get('assertion', '').count('.') != 2:
            return self._send(400, {'error': 'invalid_grant'})
        token = secrets.token_urlsafe(24)
        self.cloud.tokens.add(token)
        self._send(200, {'access_token': token, 'expires_in': 3600, 'token_type': 'Bearer'})

    def _route(self, method, parts, query, body, base):
        cloud = self.cloud
        project, rest = parts[0], parts[1:]
        if rest[:1] == ['zones'] and len(rest) >= 3:
            zone, kind, tail = rest[1], rest[2], rest[3:]
            if kind == 'instances' and not tail and method == 'POST':
                return cloud.insert(base, project, zone, body)
            if kind == 'instances' and not tail:
                with cloud.lock:
                    items = [i for (p, z, _), i in sorted(cloud.instances.items())
                             if p == project and z == zone and _matches(i, query.get('filter'))]
                return {'kind': 'compute#instanceList', 'items': items}
            if kind == 'instances' and method == 'DELETE':
                return cloud.delete(base, project, zone, tail[0])
            if kind == 'instances':
                with cloud.lock:
                    inst = cloud.instances.get((project, zone, tail[0]))
                    if inst is None:
                        raise GceError(404, 'notFound', f"The resource 'projects/{project}/"
                                       f"zones/{zone}/instances/{tail[0]}' was not found")
                    return json.loads(json.dumps(inst))
            if kind == 'operations':
                op = cloud.operations.get(tail[0])
                if op is None:
                    raise GceError(404, 'notFound', f'operation {tail[0]} was not found')
                return op
            if kind == 'machineTypes' and tail and tail[0] in MACHINE_TYPES:
                cpus, mem = MACHINE_TYPES[tail[0]]
                return {'kind': 'compute#machineType', 'name': tail[0], 'guestCpus': cpus,
                        'memoryMb': mem, 'zone': zone}
        if rest[:1] == ['regions'] and len(rest) == 2:
            with cloud.lock:
                used = sum(MACHINE_TYPES[i['machineType'].rsplit('/', 1)[-1]][0]
                           for i in cloud.instances.values())
                count = len(cloud.instances)
            return {'kind': 'compute#region', 'name': rest[1], 'status': 'UP', 'quotas': [
                {'metric': 'CPUS', 'limit': float(cloud.cpus_quota), 'usage': float(used)},
                {'metric': 'INSTANCES', 'limit': 100.0, 'usage': float(count)}]}
        if rest[:2] == ['global', 'images']:
            if rest[2:3] == ['family']:
                return {'kind': 'compute#image', 'name': f'{rest[3]}-v20260101',
                        'family': rest[3], 'status': 'READY',
                        'selfLink': f'{base}{project}/global/images/{rest[3]}-v20260101'}
            return {'kind': 'compute#image', 'name': rest[2], 'status': 'READY',
                    'selfLink': f'{base}{project}/global/images/{rest[2]}'}
        raise GceError(404, 'notFound', f'{"/".join(parts)} is not served by this stand-in')


def write_credentials(path: str, port: int) -> None:
    """A service account key whose token_uri is this server."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    doc = {'type': 'service_account', 'project_id': 'standin-project',
           'private_key_id': secrets.token_hex(20), 'private_key': pem,
           'client_email': 'nodepool@standin-project.iam.gserviceaccount.com',
           'client_id': '1', 'token_uri': f'http://127.0.0.1:{port}/token'}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, 'w') as f:
        json.dump(doc, f)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description='GCE stand-in backed by netns hosts')
    parser.add_argument('--state-dir', required=True)
    parser.add_argument('--credentials', required=True)
    parser.add_argument('--port', type=int, default=0)
    parser.add_argument('--subnet', default='10.224.1.0/24')
    parser.add_argument('--bridge', default='gcebr0')
    parser.add_argument('--authorized-keys-file')
    parser.add_argument('--cpus-quota', type=int, default=64)
    args = parser.parse_args(argv)
    cloud = Cloud(args.state_dir, args.subnet, args.bridge, read_keys(args.authorized_keys_file),
                  args.cpus_quota)
    server = ThreadingHTTPServer(('127.0.0.1', args.port),
                                 type('Bound', (Handler,), {'cloud': cloud}))
    server.daemon_threads = True
    write_credentials(args.credentials, server.server_address[1])
    serve_until_signalled(server, server.server_address[1])
    cloud.stop()
    return 0


if __name__ == '__main__':
    sys.exit(main())
