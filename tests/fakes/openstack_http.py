"""HTTP plumbing of the fake OpenStack cloud (see openstack_cloud.py):
the request handler, what a route sees of a request, error answers in
each service's shape, and compute microversion negotiation."""

from __future__ import annotations

import datetime
import json
import uuid
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

MAX_MICROVERSION = (2, 96)
MIN_MICROVERSION = (2, 1)


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')


def later(seconds: float) -> str:
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



class Context:
    """One request as a route sees it."""

    def __init__(self, cloud, headers, query: dict, body: bytes):
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


class Handler(BaseHTTPRequestHandler):
    cloud = None   # the FakeOpenStackCloud (set by a subclass)
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
        headers = Headers(self.headers, self.command)
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


class Headers:
    """Request headers, case-insensitive, with the method for routes
    shared between methods."""

    def __init__(self, headers, method: str):
        self._headers = headers
        self._method = method

    def get(self, name: str, default=None):
        if name == 'X-Fake-Method':
            return self._method
        return self._headers.get(name, default)
