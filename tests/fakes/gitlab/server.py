"""The stand-in's HTTP server: ``/api/v4`` (REST), ``/<project>.git``
(git over smart HTTP through ``git http-backend``: clones and fetches
need Reporter access, pushes Developer, a protected branch its push
level), and its own controls under ``/-/standin/`` (no GitLab has
them): the request log (``GET``, ``DELETE`` to clear), faults to inject
(``POST /-/standin/faults`` with ``match`` (a regex on ``METHOD /path``),
``status``, ``count`` and optional ``retry_after``), holds
(``POST /-/standin/holds`` with ``match``: a matching API request waits,
unanswered, until ``DELETE /-/standin/holds`` releases them all;
``GET`` says how many wait now: a GitLab that is slow for one project,
without timing), and the webhook deliveries made."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from tests.fakes.git_http import send_cgi_output
from tests.fakes.gitlab.api import Api, Request, page
from tests.fakes.gitlab.hooks import Deliverer
from tests.fakes.gitlab.store import DEVELOPER, REPORTER, ZERO_SHA, ApiError, Store

PRE_RECEIVE = """#!{python}
import json, os, sys
allowed = json.load(open(os.path.join(os.environ['GIT_DIR'], 'standin-protected.json')))
level = int(os.environ.get('STANDIN_ACCESS_LEVEL', '0'))
for line in sys.stdin:
    old, new, ref = line.split()
    need = allowed.get(ref)
    if need is not None and level < need:
        print(f'GitLab: You are not allowed to push code to protected branches on this '
              f'project ({{ref}}).')
        sys.exit(1)
"""


class StandIn:
    def __init__(self, state_dir: str, root_token: str, host: str = '127.0.0.1',
                 port: int = 0):
        self.state_dir = state_dir
        os.makedirs(state_dir, exist_ok=True)
        self.httpd = ThreadingHTTPServer((host, port), _handler(self))
        self.httpd.daemon_threads = True
        self.url = f'http://{host}:{self.httpd.server_address[1]}'
        self.store = Store(state_dir, web_url=self.url)
        self.store.add_token(self.store.root_id, root_token)
        self.deliverer = Deliverer(self.url)
        self.api = Api(self.store, self.deliverer)
        self.requests: list[dict] = []
        self.faults: list[dict] = []
        self.holds: list[str] = []
        self.held = 0
        self._released = threading.Condition()
        self._lock = threading.Lock()

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def shutdown(self) -> None:
        self.httpd.shutdown()

    # -- users ----------------------------------------------------------------------
    def user_of(self, headers, query) -> tuple[dict | None, bool]:
        """(user, a token was given)."""
        token = headers.get('PRIVATE-TOKEN') or (query.get('private_token') or [None])[0]
        auth = headers.get('Authorization') or ''
        if auth.startswith('Bearer '):
            token = auth[7:]
        elif auth.startswith('Basic '):
            try:
                _, _, token = base64.b64decode(auth[6:]).decode().partition(':')
            except ValueError:
                token = ''
        if token is None:
            return None, False
        return self.store.user_for_token(token), True

    def fault_for(self, method: str, path: str) -> dict | None:
        with self._lock:
            for fault in self.faults:
                if fault['count'] > 0 and re.search(fault['match'], f'{method} {path}'):
                    fault['count'] -= 1
                    return fault
        return None

    def wait_if_held(self, method: str, path: str) -> None:
        with self._released:
            if not any(re.search(m, f'{method} {path}') for m in self.holds):
                return
            self.held += 1
            try:
                while any(re.search(m, f'{method} {path}') for m in self.holds):
                    self._released.wait()
            finally:
                self.held -= 1

    def _holds(self, method: str, body) -> tuple[int, object]:
        with self._released:
            if method == 'POST':
                self.holds.append(body['match'])
            elif method == 'DELETE':
                self.holds.clear()
                self._released.notify_all()
            return 200, {'holds': list(self.holds), 'held': self.held}

    def control(self, method: str, path: str, body) -> tuple[int, object]:
        if path == '/-/standin/holds':
            return self._holds(method, body)
        if path == '/-/standin/requests':
            if method == 'DELETE':
                with self._lock:
                    self.requests.clear()
                return 200, []
            return 200, list(self.requests)
        if path == '/-/standin/faults' and method == 'POST':
            fault = {'match': body['match'], 'status': int(body.get('status', 500)),
                     'count': int(body.get('count', 1)),
                     'retry_after': body.get('retry_after')}
            with self._lock:
                self.faults.append(fault)
            return 201, fault
        if path == '/-/standin/deliveries':
            return 200, {'pending': self.deliverer.pending(),
                         'deliveries': list(self.deliverer.log)}
        if path == '/-/standin/health':
            return 200, {'ok': True}
        return 404, {'message': '404 Not Found'}

    # -- git -------------------------------------------------------------------------
    def write_protection(self, project) -> None:
        allowed = {f'refs/heads/{name}': levels['push']
                   for name, levels in project.protected.items()}
        with open(os.path.join(project.bare, 'standin-protected.json'), 'w') as f:
            json.dump(allowed, f)
        hook = os.path.join(project.bare, 'hooks', 'pre-receive')
        if not os.path.exists(hook):
            with open(hook, 'w') as f:
                f.write(PRE_RECEIVE.format(python=sys.executable))
            os.chmod(hook, 0o755)


class Handler(BaseHTTPRequestHandler):
    """The stand-in's HTTP side: the REST API v4, its control routes and
    git over HTTP (git http-backend); bound to a StandIn by _handler."""

    standin: StandIn
    protocol_version = 'HTTP/1.1'

    def log_message(self, *args):
        pass

    def do_any(self):
        url = urlsplit(self.path)
        raw = self._body()
        if url.path.startswith('/api/v4/'):
            return self._api(url, raw)
        if url.path.startswith('/-/standin/'):
            status, body = self.standin.control(self.command, url.path,
                                           json.loads(raw) if raw else {})
            return self._json(status, body)
        m = re.match(r'^/(.+?)\.git(/.*)$', url.path)
        if m:
            return self._git(m.group(1), m.group(2), url.query, raw)
        return self._json(404, {'message': '404 Not Found'})

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_any  # noqa: N815

    def _body(self) -> bytes:
        if 'chunked' in (self.headers.get('Transfer-Encoding') or '').lower():
            data = b''
            while True:
                size = int(self.rfile.readline().split(b';')[0].strip() or b'0', 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get('Content-Length') or 0)
        return self.rfile.read(length) if length else b''

    def _json(self, status, body, headers=None):
        data = b'' if body is None else json.dumps(body).encode()
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, str(value))
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _api(self, url, raw):
        path = url.path[len('/api/v4'):]
        query = parse_qs(url.query)
        user, token_given = self.standin.user_of(self.headers, query)
        self.standin.requests.append({'method': self.command, 'path': path,
                                 'user': (user or {}).get('username'),
                                 'time': time.time()})
        if token_given and user is None:
            return self._json(401, {'message': '401 Unauthorized'})
        self.standin.wait_if_held(self.command, path)
        fault = self.standin.fault_for(self.command, path)
        if fault is not None:
            headers = {}
            if fault.get('retry_after') is not None:
                headers['Retry-After'] = fault['retry_after']
            if fault['status'] == 429:
                headers.update({'RateLimit-Limit': '600', 'RateLimit-Remaining': '0'})
                return self._json(429, {'message': 'Retry later'}, headers)
            return self._json(fault['status'], {'message': f'{fault["status"]} Error'},
                              headers)
        try:
            body = json.loads(raw) if raw else {}
            if not isinstance(body, dict):
                raise ValueError('not an object')
        except ValueError:
            return self._json(400, {'error': 'body is not valid JSON'})
        try:
            status, payload = self.standin.api.handle(Request(self.command, path, query, body,
                                                         user))
        except ApiError as exc:
            return self._json(exc.status, {'message': exc.message}, exc.headers)
        headers = {}
        if isinstance(payload, list) and self.command == 'GET':
            payload, headers = page(payload, query)
        if path == '/projects' and self.command == 'POST':
            self.standin.write_protection(self.standin.store.find_project(str(payload['id'])))
        elif '/protected_branches' in path and self.command in ('POST', 'DELETE'):
            self.standin.write_protection(self.standin.store.find_project(
                unquote(path.split('/')[2])))
        return self._json(status, payload, headers)

    def _git(self, name, rest, query, raw):
        store = self.standin.store
        user, _ = self.standin.user_of(self.headers, {})
        try:
            project = store.find_project(name)
        except ApiError:
            project = None
        push = 'git-receive-pack' in rest or 'service=git-receive-pack' in query
        level = store.access(project, user) if project else 0
        need = DEVELOPER if push else REPORTER
        if project is None or level < need:
            if user is None:
                self.send_response(401)
                self.send_header('WWW-Authenticate', 'Basic realm="GitLab"')
            else:
                self.send_response(404 if level == 0 else 403)
            self.send_header('Content-Length', '0')
            self.end_headers()
            return
        self.standin.requests.append({'method': 'GIT', 'path': f'/{name}.git{rest}',
                                 'user': user['username'], 'time': time.time()})
        with store.lock if push else contextlib.nullcontext():
            before = store.refs(project) if push and rest.endswith('receive-pack') \
                else None
            out = self._backend(rest, query, raw, level)
            if before is not None:
                after = store.refs(project)
                for ref in sorted(set(before) | set(after)):
                    old, new = before.get(ref, ZERO_SHA), after.get(ref, ZERO_SHA)
                    if old != new:
                        self.standin.api.mrs.pushed(project, user, ref, old, new)
        self._cgi(out)

    def _backend(self, rest, query, raw, level) -> bytes:
        root = os.path.join(self.standin.state_dir, 'repos')
        env = dict(os.environ, GIT_PROJECT_ROOT=root, GIT_HTTP_EXPORT_ALL='1',
                   PATH_INFO=self.path.split('?')[0], QUERY_STRING=query,
                   REQUEST_METHOD=self.command,
                   CONTENT_TYPE=self.headers.get('Content-Type') or '',
                   CONTENT_LENGTH=str(len(raw)), REMOTE_USER='git',
                   REMOTE_ADDR='127.0.0.1', STANDIN_ACCESS_LEVEL=str(level),
                   HTTP_CONTENT_ENCODING=self.headers.get('Content-Encoding') or '',
                   GIT_PROTOCOL=self.headers.get('Git-Protocol') or '')
        return subprocess.run(['git', 'http-backend'], input=raw, env=env,
                              capture_output=True).stdout

    def _cgi(self, out: bytes) -> None:
        send_cgi_output(self, out)


def _handler(standin: StandIn):
    return type('BoundHandler', (Handler,), {'standin': standin})

