"""A Kubernetes API server stand-in, run as its own process:

    python -m tests.fakes.kubernetes_api --state-dir DIR --kubeconfig OUT \
        [--backing netns|process] [--max-pods N]

It serves the REST API the kubernetes driver and the kubectl connection
use, in the API's documented JSON shapes: namespaces, pods, secrets,
service accounts, config maps, roles and role bindings (``/api/v1``,
``/apis/rbac.authorization.k8s.io/v1``), OpenShift projects and project
requests (``/apis/project.openshift.io/v1``), list label selectors,
watches (``?watch=true``: JSON lines of ADDED/MODIFIED/DELETED events),
``Status`` errors (401, 403, 404, 409, 422), and ``pods/exec`` over the
websocket subprotocols ``v5.channel.k8s.io`` and ``v4.channel.k8s.io``.

Like a cluster, it fills service-account token secrets in (the token
controller), authorizes every request by its bearer token (the admin
token of the kubeconfig it writes, or a service account's token through
the roles bound to it in its own namespace), deletes a namespace with
everything in it, and refuses pods over its ``--max-pods`` with
``403 exceeded quota``.  Pods really run: each is a network namespace
(``--backing netns``) in which exec runs its commands.

Faults (admin only): ``POST /_standin/faults`` with ``{"verb", "plural",
"code", "reason", "message", "count"}`` answers that many matching
requests with the error; ``{"pending": true}`` keeps new pods Pending;
``DELETE /_standin/faults`` clears them.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import yaml

from tests.fakes.kubernetes_pods import PodBacking, run_exec
from tests.fakes.kubernetes_store import (
    RESOURCES,
    SA_TOKEN_TYPE,
    ApiError,
    Store,
)
from tests.fakes.standin_process import serve_until_signalled
from tests.fakes.websocket_server import WebSocket, handshake

EXEC_PROTOCOLS = ('v5.channel.k8s.io', 'v4.channel.k8s.io')


def merge(target: dict, patch: dict) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = value


class Cluster:
    """The API's behaviour behind the HTTP layer."""

    def __init__(self, state_dir: str, backing: str, max_pods: int | None,
                 subnet: str = '10.224.0.0/24', bridge: str = 'k8sbr0'):
        self.store = Store(admin_token=secrets.token_urlsafe(24))
        self.pods = PodBacking(state_dir, backing, subnet=subnet, bridge=bridge)
        self.max_pods = max_pods
        self.faults: list[dict] = []
        self.pending = False
        self.requests = 0
        self._lock = threading.Lock()

    # -- faults ------------------------------------------------------------------------

    def injected(self, verb: str, plural: str) -> ApiError | None:
        with self._lock:
            for fault in self.faults:
                if fault.get('verb', verb) == verb and fault.get('plural', plural) == plural \
                        and fault.get('count', 1) > 0:
                    fault['count'] = fault.get('count', 1) - 1
                    return ApiError(fault.get('code', 500), fault.get('reason', 'InternalError'),
                                    fault.get('message', 'injected fault'))
        return None

    # -- verbs -------------------------------------------------------------------------

    def create(self, group: str, plural: str, ns: str, body: dict) -> dict:
        if plural == 'projectrequests':
            name = body.get('metadata', {}).get('name', '')
            self.store.create('namespaces', '', {'apiVersion': 'v1', 'kind': 'Namespace',
                                                 'metadata': {'name': name, 'annotations': {
                                                     'openshift.io/requester': 'admin'}},
                                                 'status': {'phase': 'Active'}})
            return _project(self.store.get('namespaces', '', name))
        if plural == 'pods' and self.max_pods is not None:
            used = len(self.store.list('pods', None))
            if used >= self.max_pods:
                raise ApiError(403, 'Forbidden', f'pods "{body.get("metadata", {}).get("name")}" '
                               f'is forbidden: exceeded quota: pods, requested: pods=1, used: '
                               f'pods={used}, limited: pods={self.max_pods}')
        kind = RESOURCES[(group, plural)][0]
        body.setdefault('kind', kind)
        body.setdefault('apiVersion', f'{group}/v1' if group else 'v1')
        if plural == 'namespaces':
            body['status'] = {'phase': 'Active'}
        if plural == 'pods':
            body['status'] = {'phase': 'Pending'}
        created = self.store.create(plural, ns, body)
        if plural == 'secrets' and body.get('type') == SA_TOKEN_TYPE:
            threading.Timer(0.01, self.store.fill_token,
                            (ns, created['metadata']['name'])).start()
        if plural == 'pods' and not self.pending:
            threading.Thread(target=self._start_pod, args=(ns, created), daemon=True).start()
        return created

    def _start_pod(self, ns: str, pod: dict) -> None:
        name = pod['metadata']['name']
        container = (pod.get('spec', {}).get('containers') or [{}])[0]
        image = str(container.get('image') or '')
        if 'doesnotexist' in image:
            self._set_pod(ns, name, {'phase': 'Pending', 'containerStatuses': [{
                'name': container.get('name'), 'ready': False, 'image': image, 'imageID': '',
                'restartCount': 0,
                'state': {'waiting': {'reason': 'ErrImagePull',
                                      'message': f'pull access denied for {image}'}}}]})
            return
        env = {e['name']: str(e.get('value', '')) for e in container.get('env') or []
               if 'name' in e}
        try:
            address = self.pods.start(pod['metadata']['uid'][:12], env)
        except Exception as e:
            self._set_pod(ns, name, {'phase': 'Failed', 'message': str(e)})
            return
        status = {'phase': 'Running', 'podIP': address, 'startTime': _now(),
                  'containerStatuses': [{'name': container.get('name'), 'ready': True,
                                         'image': image, 'restartCount': 0,
                                         'imageID': f'standin://{image}',
                                         'state': {'running': {'startedAt': _now()}}}]}
        if not self._set_pod(ns, name, status):
            self.pods.stop(pod['metadata']['uid'][:12])

    def _set_pod(self, ns: str, name: str, status: dict) -> bool:
        try:
            self.store.update('pods', ns, name, lambda o: o.__setitem__('status', status))
            return True
        except ApiError:
            return False

    def delete(self, group: str, plural: str, ns: str, name: str) -> dict:
        if plural in ('namespaces', 'projects'):
            obj = self.store.update('namespaces', '', name,
                                    lambda o: o['status'].__setitem__('phase', 'Terminating'))
            threading.Timer(0.02, self._finish_namespace, (name,)).start()
            return obj
        obj = self.store.remove(plural, ns, name)
        if obj is None:
            raise ApiError(404, 'NotFound', f'{plural} "{name}" not found')
        if plural == 'pods':
            self.pods.stop(obj['metadata']['uid'][:12])
        return obj

    def _finish_namespace(self, name: str) -> None:
        for plural, ns, obj_name in self.store.namespaced(name):
            removed = self.store.remove(plural, ns, obj_name)
            if plural == 'pods' and removed is not None:
                self.pods.stop(removed['metadata']['uid'][:12])
        self.store.remove('namespaces', '', name)

    def patch(self, group: str, plural: str, ns: str, name: str, body: dict) -> dict:
        stored = 'namespaces' if plural == 'projects' else plural
        return self.store.update(stored, ns, name, lambda o: merge(o, body))

    def get(self, group: str, plural: str, ns: str, name: str) -> dict:
        if plural == 'projects':
            return _project(self.store.get('namespaces', '', name))
        return self.store.get(plural, ns, name)

    def list(self, group: str, plural: str, ns: str | None, selector: str | None) -> dict:
        if plural == 'projects':
            items = [_project(o) for o in self.store.list('namespaces', None, selector)]
            kind = 'ProjectList'
        else:
            items = self.store.list(plural, ns, selector)
            kind = RESOURCES[(group, plural)][0] + 'List'
        return {'kind': kind, 'apiVersion': f'{group}/v1' if group else 'v1',
                'metadata': {'resourceVersion': str(self.store.version)}, 'items': items}


def _now() -> str:
    return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())


def _project(ns_obj: dict) -> dict:
    return {**ns_obj, 'kind': 'Project', 'apiVersion': 'project.openshift.io/v1'}


def parse_path(path: str):
    """(group, plural, namespace, name, subresource) of an API path, or None."""
    parts = [p for p in path.split('/') if p]
    if parts[:2] == ['api', 'v1']:
        group, rest = '', parts[2:]
    elif len(parts) >= 3 and parts[0] == 'apis':
        group, rest = parts[1], parts[3:]
    else:
        return None
    ns = ''
    if len(rest) >= 3 and rest[0] == 'namespaces':
        ns, rest = rest[1], rest[2:]
    if not rest or (group, rest[0]) not in RESOURCES:
        return None
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else ''
    sub = rest[2] if len(rest) > 2 else ''
    return group, plural, ns, name, sub


class Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    cluster: Cluster = None  # set on the subclass the server uses

    def log_message(self, *args):
        pass

    # -- plumbing -----------------------------------------------------------------------

    def _token(self) -> str | None:
        auth = self.headers.get('Authorization', '')
        return auth[7:].strip() if auth.startswith('Bearer ') else None

    def _read_body(self) -> bytes:
        n = int(self.headers.get('Content-Length') or 0)
        return self.rfile.read(n) if n else b''

    def _body(self) -> dict:
        if not self._raw:
            return {}
        try:
            data = json.loads(self._raw)
        except ValueError:
            raise ApiError(400, 'BadRequest', 'the body is not JSON') from None
        if not isinstance(data, dict):
            raise ApiError(400, 'BadRequest', 'the body is not a JSON object')
        return data

    def _send(self, code: int, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._handle('GET')

    def do_POST(self):
        self._handle('POST')

    def do_DELETE(self):
        self._handle('DELETE')

    def do_PATCH(self):
        self._handle('PATCH')

    def do_PUT(self):
        self._handle('PUT')

    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v for k, v in parse_qs(url.query).items()}
        # Read whatever the answer: the connection is kept alive.
        self._raw = self._read_body()
        self.cluster.requests += 1
        try:
            if url.path.startswith('/_standin/'):
                return self._control(method, url.path)
            if method == 'GET' and url.path in ('/api', '/apis', '/version'):
                return self._send(200, _discovery(url.path))
            route = parse_path(url.path)
            if route is None:
                raise ApiError(404, 'NotFound', f'the server could not find the requested '
                               f'resource ({url.path})')
            self._api(method, route, query)
        except ApiError as e:
            self._send(e.code, e.status())

    def _control(self, method: str, path: str) -> None:
        if self._token() != self.cluster.store.admin_token:
            raise ApiError(401, 'Unauthorized', 'Unauthorized')
        if path == '/_standin/faults' and method == 'POST':
            body = self._body()
            if 'pending' in body:
                self.cluster.pending = bool(body['pending'])
            else:
                self.cluster.faults.append(body)
            return self._send(200, {'ok': True})
        if path == '/_standin/faults' and method == 'DELETE':
            self.cluster.faults.clear()
            self.cluster.pending = False
            return self._send(200, {'ok': True})
        if path == '/_standin/state':
            return self._send(200, {'requests': self.cluster.requests,
                                    'pods': len(self.cluster.store.list('pods', None))})
        raise ApiError(404, 'NotFound', path)

    def _api(self, method: str, route, query: dict) -> None:
        group, plural, ns, name, sub = route
        cluster = self.cluster
        if sub == 'exec' and plural == 'pods':
            cluster.store.authorize(self._token(), group, 'pods/exec', ns, name, 'create')
            return self._exec(ns, name, query)
        if sub:
            raise ApiError(404, 'NotFound', f'subresource {sub} is not served')
        watch = query.get('watch', ['false'])[0] in ('1', 'true')
        verb = {'GET': 'watch' if watch else ('get' if name else 'list'), 'POST': 'create',
                'DELETE': 'delete', 'PATCH': 'patch', 'PUT': 'update'}[method]
        cluster.store.authorize(self._token(), group, plural, ns, name, verb)
        fault = cluster.injected(verb, plural)
        if fault is not None:
            raise fault
        selector = query.get('labelSelector', [None])[0]
        if verb == 'create':
            return self._send(201, cluster.create(group, plural, ns, self._body()))
        if verb == 'get':
            return self._send(200, cluster.get(group, plural, ns, name))
        if verb == 'list':
            return self._send(200, cluster.list(group, plural, ns or None, selector))
        if verb == 'delete':
            return self._send(200, cluster.delete(group, plural, ns, name))
        if verb == 'patch':
            return self._send(200, cluster.patch(group, plural, ns, name, self._body()))
        if verb == 'watch':
            return self._watch(plural, ns, selector, query)
        raise ApiError(405, 'MethodNotAllowed', f'{method} is not served here')

    def _watch(self, plural: str, ns: str, selector: str | None, query: dict) -> None:
        from tests.fakes.kubernetes_store import matches_selector
        store = self.cluster.store
        since = int(query.get('resourceVersion', ['0'])[0] or 0)
        timeout = float(query.get('timeoutSeconds', ['30'])[0])
        deadline = time.monotonic() + min(timeout, 300)
        self.send_response(200)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Transfer-Encoding', 'chunked')
        self.end_headers()
        if since == 0:
            with store.lock:
                since = store.version
            for obj in store.list(plural, ns or None, selector):
                self._chunk({'type': 'ADDED', 'object': obj})
        try:
            while time.monotonic() < deadline:
                with store.changed:
                    events = [e for e in store.events if e[0] > since and e[1] == plural]
                    if not events:
                        store.changed.wait(max(0.0, min(1.0, deadline - time.monotonic())))
                        continue
                for rv, _, kind, obj in events:
                    since = rv
                    if (not ns or obj['metadata'].get('namespace') == ns) and \
                            matches_selector(obj, selector):
                        self._chunk({'type': kind, 'object': obj})
            self.wfile.write(b'0\r\n\r\n')
        except OSError:
            pass
        self.close_connection = True

    def _chunk(self, event: dict) -> None:
        data = json.dumps(event).encode() + b'\n'
        self.wfile.write(f'{len(data):x}\r\n'.encode() + data + b'\r\n')
        self.wfile.flush()

    def _exec(self, ns: str, name: str, query: dict) -> None:
        pod = self.cluster.store.get('pods', ns, name)
        if pod['status'].get('phase') != 'Running':
            raise ApiError(400, 'BadRequest', f'pod {name} is not running '
                           f'(phase {pod["status"].get("phase")})')
        argv = query.get('command') or []
        if not argv:
            raise ApiError(400, 'BadRequest', 'you must specify at least one command')
        if self.headers.get('Upgrade', '').lower() != 'websocket':
            raise ApiError(400, 'BadRequest', 'exec needs a websocket upgrade '
                           '(SPDY is not served by this stand-in)')
        offered = [p.strip() for p in self.headers.get('Sec-WebSocket-Protocol', '').split(',')]
        protocol = next((p for p in EXEC_PROTOCOLS if p in offered), None)
        if protocol is None:
            raise ApiError(400, 'BadRequest', f'none of the offered subprotocols {offered} '
                           f'is served ({", ".join(EXEC_PROTOCOLS)})')
        try:
            cmd, env, cwd = self.cluster.pods.command(pod['metadata']['uid'][:12], argv)
        except KeyError:
            raise ApiError(500, 'InternalError', f'pod {name} has no backing') from None
        handshake(self, protocol)
        ws = WebSocket(self.rfile, self.wfile)
        run_exec(ws, protocol, cmd, env, cwd,
                 want_stdin=query.get('stdin', ['false'])[0] in ('1', 'true'))
        self.close_connection = True


def _discovery(path: str) -> dict:
    if path == '/version':
        return {'major': '1', 'minor': '30', 'gitVersion': 'v1.30.0-standin'}
    if path == '/api':
        return {'kind': 'APIVersions', 'versions': ['v1'], 'serverAddressByClientCIDRs': []}
    groups = sorted({g for g, _ in RESOURCES if g})
    return {'kind': 'APIGroupList', 'apiVersion': 'v1', 'groups': [
        {'name': g, 'versions': [{'groupVersion': f'{g}/v1', 'version': 'v1'}],
         'preferredVersion': {'groupVersion': f'{g}/v1', 'version': 'v1'}} for g in groups]}


def write_kubeconfig(path: str, port: int, token: str, context: str = 'standin') -> None:
    doc = {'apiVersion': 'v1', 'kind': 'Config', 'preferences': {},
           'clusters': [{'name': 'standin', 'cluster': {'server': f'http://127.0.0.1:{port}'}}],
           'users': [{'name': 'admin', 'user': {'token': token}}],
           'contexts': [{'name': context, 'context': {'cluster': 'standin', 'user': 'admin',
                                                       'namespace': 'default'}}],
           'current-context': context}
    tmp = path + '.tmp'
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, 'w') as f:
        yaml.safe_dump(doc, f)
    os.replace(tmp, path)


def serve(state_dir: str, kubeconfig: str, backing: str = 'netns', port: int = 0,
          max_pods: int | None = None, subnet: str = '10.224.0.0/24', bridge: str = 'k8sbr0'):
    """Start the server in this process; (server, cluster)."""
    os.makedirs(state_dir, exist_ok=True)
    cluster = Cluster(state_dir, backing, max_pods, subnet, bridge)
    cluster.store.create('namespaces', '', {'metadata': {'name': 'default'}})
    handler = type('BoundHandler', (Handler,), {'cluster': cluster})
    server = ThreadingHTTPServer(('127.0.0.1', port), handler)
    server.daemon_threads = True
    write_kubeconfig(kubeconfig, server.server_address[1], cluster.store.admin_token)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, cluster


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--state-dir', required=True)
    parser.add_argument('--kubeconfig', required=True)
    parser.add_argument('--backing', choices=('netns', 'process'), default='netns')
    parser.add_argument('--port', type=int, default=0)
    parser.add_argument('--max-pods', type=int)
    parser.add_argument('--subnet', default='10.224.0.0/24',
                        help='addresses of the pods (netns backing)')
    parser.add_argument('--bridge', default='k8sbr0')
    args = parser.parse_args(argv)
    server, cluster = serve(args.state_dir, args.kubeconfig, args.backing, args.port,
                            args.max_pods, args.subnet, args.bridge)
    serve_until_signalled(server, server.server_address[1], serving=True)
    cluster.pods.stop_all()
    return 0


if __name__ == '__main__':
    sys.exit(main())
