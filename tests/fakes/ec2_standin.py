"""EC2 for tests: moto's server (its own process), the real EC2 Query API
and Service Quotas JSON API at the process boundary, with what moto
lacks added in front of it:

- every instance moto runs is backed by a netns host with sshd at the
  private address moto gave it (the subnet must be the netns subnet), so
  jobs really run on it; terminating the instance removes the host;
- ``GetServiceQuota`` for EC2's "Running On-Demand Standard instances"
  vCPU quota (``L-1216C47A``; ``--vcpu-quota``);
- fault injection: ``POST /_standin/faults`` with ``{"action":
  "RunInstances", "status": 400, "code": "VcpuLimitExceeded", "message":
  ..., "count": 1}`` answers that many such requests with that EC2 error.

    python -m tests.fakes.ec2_standin --port 0 --state-dir DIR \
        --subnet 10.224.3.0/24 --bridge ec2br0 --authorized-keys-file KEY.pub
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
import threading
import uuid
from urllib.parse import parse_qs
from xml.etree import ElementTree

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server

from nodepool.driver.netns.host import NetnsError, NetnsHostManager, available
from tests.fakes.standin_process import read_keys, serve_until_signalled

VCPU_QUOTA_CODE = 'L-1216C47A'


class EC2StandIn:
    """WSGI middleware around moto's dispatcher."""

    def __init__(self, state_dir: str, subnet: str, bridge: str, keys: list[str],
                 vcpu_quota: float):
        self.app = DomainDispatcherApplication(create_backend_app)
        self.keys = keys
        self.vcpu_quota = vcpu_quota
        self.faults: list[dict] = []
        self.requests: dict[str, int] = {}
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.hosts = NetnsHostManager(os.path.join(state_dir, 'netns'), subnet, bridge) \
            if available() is None and keys else None
        self.subnet = subnet

    def __call__(self, environ, start_response):
        length = int(environ.get('CONTENT_LENGTH') or 0)
        body = environ['wsgi.input'].read(length) if length else b''
        environ['wsgi.input'] = io.BytesIO(body)
        path = environ.get('PATH_INFO', '')
        if path.startswith('/_standin/'):
            return self._control(environ, body, start_response)
        target = environ.get('HTTP_X_AMZ_TARGET', '')
        if target.endswith('.GetServiceQuota'):
            return self._quota(body, start_response)
        params = {k: v[0] for k, v in parse_qs(body.decode(errors='replace')).items()}
        params.update({k: v[0] for k, v in parse_qs(environ.get('QUERY_STRING', '')).items()})
        action = params.get('Action', target.rsplit('.', 1)[-1])
        with self.lock:
            self.requests[action] = self.requests.get(action, 0) + 1
        fault = self._fault(action)
        if fault is not None:
            return _ec2_error(start_response, fault)
        captured = {}

        def capture(status, headers, exc_info=None):
            captured['status'] = status
            return start_response(status, headers, exc_info)
        chunks = list(self.app(environ, capture))
        if captured.get('status', '').startswith('200') and self.hosts is not None:
            text = b''.join(chunks).decode(errors='replace')
            if action == 'RunInstances':
                self._boot(text)
            elif action == 'TerminateInstances':
                for instance_id in re.findall(r'<instanceId>(i-[0-9a-f]+)</instanceId>', text):
                    self._start(self.hosts.delete, instance_id)
        return chunks

    # -- instances --------------------------------------------------------------------

    def _boot(self, text: str) -> None:
        ns = {'ec2': 'http://ec2.amazonaws.com/doc/2016-11-15'}
        root = ElementTree.fromstring(text)
        for item in root.findall('ec2:instancesSet/ec2:item', ns):
            instance_id = item.findtext('ec2:instanceId', namespaces=ns)
            address = item.findtext('ec2:privateIpAddress', namespaces=ns)
            if instance_id and address:
                self._start(self._make_host, instance_id, address)

    def _make_host(self, instance_id: str, address: str) -> None:
        try:
            self.hosts.create(instance_id, self.keys, timeout=30, address=address)
        except (NetnsError, ValueError) as e:
            print(f'instance {instance_id}: no netns host at {address}: {e}', file=sys.stderr,
                  flush=True)

    # -- quota and faults ---------------------------------------------------------------

    def _quota(self, body: bytes, start_response):
        request = json.loads(body or b'{}')
        if request.get('ServiceCode') != 'ec2' or request.get('QuotaCode') != VCPU_QUOTA_CODE:
            return _json(start_response, '400 Bad Request', {
                '__type': 'NoSuchResourceException', 'Message': 'The quota does not exist'})
        return _json(start_response, '200 OK', {'Quota': {
            'ServiceCode': 'ec2', 'ServiceName': 'Amazon Elastic Compute Cloud (Amazon EC2)',
            'QuotaCode': VCPU_QUOTA_CODE,
            'QuotaName': 'Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances',
            'Value': float(self.vcpu_quota), 'Unit': 'None', 'Adjustable': True,
            'GlobalQuota': False}})

    def _fault(self, action: str) -> dict | None:
        with self.lock:
            for fault in self.faults:
                if fault.get('action') == action and fault.get('count', 1) > 0:
                    fault['count'] = fault.get('count', 1) - 1
                    return fault
        return None

    def _control(self, environ, body: bytes, start_response):
        path = environ.get('PATH_INFO')
        if path == '/_standin/faults' and environ['REQUEST_METHOD'] == 'POST':
            with self.lock:
                self.faults.append(json.loads(body or b'{}'))
        elif path == '/_standin/faults' and environ['REQUEST_METHOD'] == 'DELETE':
            with self.lock:
                self.faults.clear()
        elif path == '/_standin/quota':
            self.vcpu_quota = float(json.loads(body or b'{}')['vcpus'])
        elif path != '/_standin/state':
            return _json(start_response, '404 Not Found', {'error': path})
        with self.lock:
            return _json(start_response, '200 OK', {'requests': dict(self.requests)})

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
            self.hosts.cleanup_all('i-')


def _json(start_response, status: str, body: dict):
    data = json.dumps(body).encode()
    start_response(status, [('Content-Type', 'application/x-amz-json-1.1'),
                            ('Content-Length', str(len(data)))])
    return [data]


def _ec2_error(start_response, fault: dict):
    data = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
            f'<Code>{fault.get("code", "InternalError")}</Code>'
            f'<Message>{fault.get("message", "An internal error has occurred")}</Message>'
            f'</Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>').encode()
    status = int(fault.get('status', 500))
    start_response(f'{status} Error', [('Content-Type', 'text/xml'),
                                       ('Content-Length', str(len(data)))])
    return [data]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description='EC2 stand-in (moto) backed by netns hosts')
    parser.add_argument('--port', type=int, default=0)
    parser.add_argument('--state-dir', required=True)
    parser.add_argument('--subnet', default='10.224.3.0/24')
    parser.add_argument('--bridge', default='ec2br0')
    parser.add_argument('--authorized-keys-file')
    parser.add_argument('--vcpu-quota', type=float, default=256)
    parser.add_argument('--default-amis', action='store_true',
                        help="load moto's catalogue of public AMIs (slow)")
    args = parser.parse_args(argv)
    if not args.default_amis:
        os.environ['MOTO_EC2_LOAD_DEFAULT_AMIS'] = 'false'
    standin = EC2StandIn(args.state_dir, args.subnet, args.bridge,
                         read_keys(args.authorized_keys_file), args.vcpu_quota)
    import logging
    logging.getLogger('werkzeug').setLevel(logging.WARNING)
    server = make_server('127.0.0.1', args.port, standin, threaded=True)
    serve_until_signalled(server, server.server_port)
    standin.stop()
    return 0


if __name__ == '__main__':
    sys.exit(main())
