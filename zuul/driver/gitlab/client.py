"""GitLab's REST API (v4) over HTTP(S): a personal access token, a small
pool of kept-alive connections, pagination, retries and rate limits.

- Every request carries ``Authorization: Bearer <api_token>``.
- Connections are reused (``disable_connection_pool`` makes one per
  request, closed after it); ``keepalive`` seconds of idleness before TCP
  keepalive probes start (``0`` turns them off).
- A list endpoint is read page by page (``per_page=100``) following
  GitLab's ``X-Next-Page`` header.
- ``429 Too Many Requests`` waits for ``Retry-After`` (or
  ``RateLimit-Reset``), at most ``max_rate_wait`` seconds, and tries
  again; connection errors and 5xx answers are retried ``retries`` times
  with exponential back-off. Other errors raise GitlabError at once.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import ssl
import threading
import time
import urllib.parse
from collections import Counter

from zuul.driver.hosted import ApiError, Response

log = logging.getLogger('zuul.driver.gitlab.client')

_POOL_SIZE = 8
_MAX_RATE_WAITS = 20


class GitlabError(ApiError):
    service = 'GitLab'

    def __init__(self, status: int, message: str, path: str = '', method: str = 'GET'):
        super().__init__(status, message, path, method)


def api_path(template: str, *parts) -> str:
    """``template`` with each ``{}`` filled by a URL-encoded part
    (project paths become ``group%2Fproject``, as GitLab wants)."""
    return template.format(*(urllib.parse.quote(str(p), safe='') for p in parts))


class GitlabClient:
    """Requests to one GitLab (``baseurl``: the web and API root)."""

    def __init__(self, baseurl: str, api_token: str | None = None, keepalive: int = 60,
                 pool: bool = True, timeout: float = 30.0, retries: int = 5,
                 max_rate_wait: float = 600.0, sleep=time.sleep, clock=time.time):
        parsed = urllib.parse.urlsplit(baseurl.rstrip('/'))
        if parsed.scheme not in ('http', 'https') or not parsed.hostname:
            raise ValueError(f'baseurl {baseurl!r} is not an http(s) URL')
        self.scheme = parsed.scheme
        self.host = parsed.hostname
        self.port = parsed.port or (443 if parsed.scheme == 'https' else 80)
        self.prefix = parsed.path.rstrip('/') + '/api/v4'
        self.api_token = api_token
        self.keepalive = int(keepalive)
        self.pool = pool
        self.timeout = timeout
        self.retries = max(0, int(retries))
        self.max_rate_wait = max_rate_wait
        self._sleep = sleep
        self._clock = clock
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self.calls = 0                 # requests sent (benchmarks, logs)
        self.calls_by_route: Counter = Counter()
        self.retried = 0               # requests sent again (errors, rate limits)

    # -- connections --------------------------------------------------------
    def _connect(self) -> http.client.HTTPConnection:
        if self.scheme == 'https':
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout,
                                               context=ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        conn.connect()
        if self.keepalive > 0:
            sock = conn.sock
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            if hasattr(socket, 'TCP_KEEPIDLE'):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, self.keepalive)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL,
                                max(1, self.keepalive // 4))
        return conn

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        """A connection and whether it was reused from the pool."""
        if self.pool:
            with self._lock:
                if self._idle:
                    return self._idle.pop(), True
        return self._connect(), False

    def _give_back(self, conn: http.client.HTTPConnection, reusable: bool) -> None:
        if self.pool and reusable:
            with self._lock:
                if len(self._idle) < _POOL_SIZE:
                    self._idle.append(conn)
                    return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- requests -----------------------------------------------------------
    def get(self, path: str, params: dict | None = None):
        return self.request('GET', path, params=params).body

    def get_all(self, path: str, params: dict | None = None, limit: int = 5000) -> list:
        """Every page of a list endpoint."""
        out: list = []
        page = '1'
        while page and len(out) < limit:
            response = self.request('GET', path, params=dict(params or {}, per_page=100,
                                                             page=page))
            items = response.body if isinstance(response.body, list) else []
            out.extend(items)
            page = response.headers.get('x-next-page') or ''
        return out

    def request(self, method: str, path: str, params: dict | None = None,
                body=None) -> Response:
        url = self.prefix + path
        if params:
            url += '?' + urllib.parse.urlencode(params)
        headers = {'Accept': 'application/json', 'User-Agent': 'gatekeep-ci'}
        if self.api_token:
            headers['Authorization'] = f'Bearer {self.api_token}'
        data = None
        if body is not None:
            data = json.dumps(body).encode('utf8')
            headers['Content-Type'] = 'application/json'
        if not self.pool:
            headers['Connection'] = 'close'
        route = f'{method} {_route(path)}'
        attempt = rate_waits = 0
        while True:
            attempt += 1
            try:
                return self._once(method, url, data, headers, path, route)
            except GitlabError as exc:
                wait = self._rate_wait(exc)
                if wait is not None and rate_waits < _MAX_RATE_WAITS:
                    rate_waits += 1
                    log.warning('GitLab rate limit on %s %s: waiting %.1fs', method, path,
                                wait)
                    self.retried += 1
                    self._sleep(wait)
                    continue
                if exc.status < 500 or attempt > self.retries:
                    raise
                log.warning('GitLab answered %s to %s %s; trying again (%d/%d)',
                            exc.status, method, path, attempt, self.retries)
            except (OSError, http.client.HTTPException) as exc:
                if attempt > self.retries:
                    raise GitlabError(0, str(exc) or type(exc).__name__, path,
                                      method) from None
                log.warning('GitLab unreachable for %s %s (%s); trying again (%d/%d)',
                            method, path, exc, attempt, self.retries)
            self.retried += 1
            self._sleep(min(30.0, 0.5 * 2 ** (attempt - 1)))

    def _once(self, method, url, data, headers, path, route) -> Response:
        conn, reused = self._take()
        try:
            self.calls += 1
            self.calls_by_route[route] += 1
            try:
                conn.request(method, url, body=data, headers=headers)
                answer = conn.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError,
                    BrokenPipeError):
                if not reused:
                    raise
                # A pooled connection the server had closed: once more on
                # a fresh one (not a failure of GitLab).
                conn.close()
                conn = self._connect()
                conn.request(method, url, body=data, headers=headers)
                answer = conn.getresponse()
            raw = answer.read()
        except BaseException:
            conn.close()
            raise
        lowered = {k.lower(): v for k, v in answer.getheaders()}
        self._give_back(conn, not answer.will_close)
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode('utf8', 'replace')
        if answer.status >= 400:
            message = parsed.get('message') or parsed.get('error') \
                if isinstance(parsed, dict) else str(parsed)[:200]
            error = GitlabError(answer.status, str(message), path, method)
            error.headers = lowered
            raise error
        return Response(answer.status, parsed, lowered)

    def _rate_wait(self, exc: GitlabError) -> float | None:
        """Seconds to wait when ``exc`` is GitLab's rate limit."""
        if exc.status != 429:
            return None
        headers = getattr(exc, 'headers', {}) or {}
        retry_after = str(headers.get('retry-after', '')).strip()
        if retry_after.isdigit():
            return min(max(float(retry_after), 0.1), self.max_rate_wait)
        reset = str(headers.get('ratelimit-reset', '')).strip()
        if reset.isdigit():
            return min(max(float(reset) - self._clock(), 0.1), self.max_rate_wait)
        return min(5.0, self.max_rate_wait)


def _route(path: str) -> str:
    """``/projects/acme%2Fwidget/merge_requests/7/notes`` ->
    ``/projects/:id/merge_requests/:iid/notes`` (call counts by endpoint)."""
    parts = path.split('?')[0].split('/')
    out = []
    for i, part in enumerate(parts):
        previous = parts[i - 1] if i else ''
        if previous == 'projects' and part:
            out.append(':id')
        elif previous in ('merge_requests', 'notes', 'hooks', 'users') and part.isdigit():
            out.append(':iid' if previous == 'merge_requests' else ':n')
        else:
            out.append(part)
    return '/'.join(out)
