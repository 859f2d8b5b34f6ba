"""GitHub's REST API over HTTP(S): authentication, retries, rate limits
and conditional requests.

Authentication, as released Zuul documents for a connection:

- ``app_id`` + ``app_key``: a GitHub App. A JWT signed with the app's key
  (RS256, valid 10 minutes) asks for an installation token per
  installation (``POST /app/installations/<id>/access_tokens``); the
  installation of a repository is looked up once
  (``GET /repos/<owner>/<repo>/installation``). Tokens are reused until
  five minutes before they expire. Repositories without the app installed
  fall back to ``api_token`` if there is one.
- ``api_token``: a personal token, for every request.

GETs send ``If-None-Match`` with the ETag of the last answer; a 304 (which
GitHub does not count against the rate limit) returns the cached body.
A 403/429 that says the rate limit is exhausted waits for
``X-RateLimit-Reset`` (or ``Retry-After``), at most ``max_rate_wait``
seconds, and tries again; connection errors and 5xx answers are retried
``retries`` times with backoff.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime

from zuul.driver.hosted import ApiError, Response
from zuul.lib import jwt

log = logging.getLogger('zuul.driver.github.client')

_TOKEN_MARGIN = 300        # renew installation tokens this long before they expire
_ETAG_CACHE_SIZE = 2048
NOT_INSTALLED_TTL = 300.0   # ask again whether the app is installed after this
# Without Retry-After, GitHub asks to wait at least a minute after a
# secondary rate limit.
SECONDARY_WAIT = 60.0


class GithubError(ApiError):
    service = 'GitHub'


def _parse_time(value: str) -> float:
    return datetime.fromisoformat(value.replace('Z', '+00:00')).timestamp()


class AppAuth:
    """Installation tokens of a GitHub App, per installation, refreshed
    before they expire; thread-safe."""

    def __init__(self, app_id: int, private_key_pem: str, clock=time.time):
        self.app_id = int(app_id)
        self._key = jwt.load_private_key(private_key_pem)
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens: dict[int, tuple[str, float]] = {}
        # project -> (installation or None, when asked); "not installed"
        # is asked again after NOT_INSTALLED_TTL, or at once after an
        # ``installation`` event (``forget``).
        self._installations: dict[str, tuple[int | None, float]] = {}

    def forget(self, projects=None, installation: int | None = None) -> None:
        """Drop cached installation answers for ``projects`` (all when
        None) and the token of ``installation``."""
        with self._lock:
            if projects is None:
                self._installations.clear()
            for project in projects or ():
                self._installations.pop(project, None)
            if installation is not None:
                self._tokens.pop(int(installation), None)
                for project in [p for p, (i, _) in self._installations.items()
                                if i == int(installation)]:
                    del self._installations[project]

    def installation_key(self, project: str | None):
        """The installation of ``project`` as far as known (no call)."""
        with self._lock:
            known = self._installations.get(project or '')
        return known[0] if known else None

    def app_jwt(self) -> str:
        now = int(self._clock())
        # Backdated a minute against clock drift, as GitHub recommends.
        return jwt.encode({'iat': now - 60, 'exp': now + 540, 'iss': str(self.app_id)},
                          self._key)

    def installation_for(self, client: GithubClient, project: str) -> int | None:
        with self._lock:
            known = self._installations.get(project)
            if known is not None and (known[0] is not None or
                                      self._clock() - known[1] < NOT_INSTALLED_TTL):
                return known[0]
        try:
            data = client.request('GET', f'/repos/{project}/installation',
                                  auth=f'Bearer {self.app_jwt()}', cache=False).body
            installation = int(data['id'])
        except GithubError as exc:
            if exc.status != 404:
                raise
            installation = None   # the app is not installed there
        with self._lock:
            self._installations[project] = (installation, self._clock())
        return installation

    def token(self, client: GithubClient, installation: int) -> str:
        with self._lock:
            cached = self._tokens.get(installation)
            if cached and cached[1] - _TOKEN_MARGIN > self._clock():
                return cached[0]
        data = client.request('POST', f'/app/installations/{installation}/access_tokens',
                              auth=f'Bearer {self.app_jwt()}', cache=False).body
        token, expires = data['token'], _parse_time(data['expires_at'])
        with self._lock:
            self._tokens[installation] = (token, expires)
        log.debug('New token for installation %s, valid until %s', installation,
                  data['expires_at'])
        return token


class GithubClient:
    """Requests to one GitHub (github.com or an Enterprise server)."""

    def __init__(self, api_url: str, api_token: str | None = None,
                 app: AppAuth | None = None, verify_ssl: bool = True,
                 client_cert: str | None = None, rate_limit_logging: bool = True,
                 timeout: float = 30.0, retries: int = 3, max_rate_wait: float = 3600.0,
                 sleep=time.sleep):
        self.api_url = api_url.rstrip('/')
        self.api_token = api_token
        self.app = app
        self.timeout = timeout
        self.retries = max(0, retries)
        self.max_rate_wait = max_rate_wait
        self._sleep = sleep
        # Set by ``close``: waits (rate limits, backoff) end at once.
        self.closed = threading.Event()
        self._ssl = None if verify_ssl else ssl._create_unverified_context()
        if client_cert:
            # ``sslkey``: a PEM file with the client certificate and key a
            # GitHub Enterprise behind client authentication wants.
            self._ssl = self._ssl or ssl.create_default_context()
            self._ssl.load_cert_chain(client_cert)
        self.rate_limit_logging = rate_limit_logging
        self._etags: dict[tuple, tuple[str, object]] = {}
        self._lock = threading.Lock()
        self.calls = 0            # requests sent (for benchmarks and logs)
        self.not_modified = 0     # 304 answers (free of rate limit)
        self.rate_remaining: int | None = None

    # -- authentication ----------------------------------------------------
    def auth_for(self, project: str | None) -> str | None:
        if self.app is not None and project:
            installation = self.app.installation_for(self, project)
            if installation is not None:
                return f'token {self.app.token(self, installation)}'
        if self.api_token:
            return f'token {self.api_token}'
        return None

    def token_for(self, project: str | None) -> str | None:
        """The bare token a git clone of ``project`` may use."""
        auth = self.auth_for(project)
        return auth.split(' ', 1)[1] if auth else None

    # -- requests ----------------------------------------------------------
    def get(self, path: str, project: str | None = None, params: dict | None = None):
        return self.request('GET', path, project=project, params=params).body

    def get_all(self, path: str, project: str | None = None, params: dict | None = None,
                limit: int = 3000) -> list:
        """Every page of a list endpoint (``per_page=100``)."""
        out: list = []
        page = 1
        while len(out) < limit:
            query = dict(params or {}, per_page=100, page=page)
            body = self.request('GET', path, project=project, params=query).body
            items = body.get('check_runs', []) if isinstance(body, dict) else body
            out.extend(items or [])
            if not items or len(items) < 100:
                break
            page += 1
        return out

    def request(self, method: str, path: str, project: str | None = None,
                body=None, params: dict | None = None, auth: str | None = None,
                cache: bool = True) -> Response:
        url = self.api_url + path
        if params:
            url += '?' + urllib.parse.urlencode(params)
        headers = {'Accept': 'application/vnd.github+json',
                   'X-GitHub-Api-Version': '2022-11-28', 'User-Agent': 'gatekeep-ci'}
        authorization = auth or self.auth_for(project)
        if authorization:
            headers['Authorization'] = authorization
        key = (url, authorization) if method == 'GET' and cache else None
        cached = self._etags.get(key) if key else None
        if cached:
            headers['If-None-Match'] = cached[0]
        data = None
        if body is not None:
            data = json.dumps(body).encode('utf8')
            headers['Content-Type'] = 'application/json'
        response = self._send(method, url, data, headers, path)
        if response.status == 304 and cached:
            self.not_modified += 1
            return Response(200, cached[1], response.headers)
        if key and response.headers.get('etag'):
            self._remember(key, response.headers['etag'], response.body)
        return response

    def _remember(self, key, etag: str, body) -> None:
        with self._lock:
            if len(self._etags) >= _ETAG_CACHE_SIZE:
                self._etags.pop(next(iter(self._etags)))
            self._etags[key] = (etag, body)

    def _send(self, method, url, data, headers, path) -> Response:
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._once(method, url, data, headers, path)
            except GithubError as exc:
                wait = self._rate_wait(exc)
                if wait is not None:
                    if self.rate_limit_logging:
                        log.warning('GitHub rate limit reached (%s): waiting %.0fs', path,
                                    wait)
                    self._wait(wait)
                    if self.closed.is_set():
                        raise
                    continue
                if exc.status < 500 or attempt > self.retries:
                    raise
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                if attempt > self.retries:
                    raise GithubError(0, str(exc), path) from None
            self._wait(min(30.0, 0.5 * 2 ** attempt))

    def _wait(self, seconds: float) -> None:
        if self._sleep is time.sleep:
            self.closed.wait(seconds)
        else:
            self._sleep(seconds)

    def close(self) -> None:
        self.closed.set()

    def _once(self, method, url, data, headers, path) -> Response:
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        self.calls += 1
        try:
            with urllib.request.urlopen(request, timeout=self.timeout,
                                        context=self._ssl) as answer:
                return self._response(answer.status, answer.read(), answer.headers)
        except urllib.error.HTTPError as err:
            response = self._response(err.code, err.read(), err.headers)
            if err.code == 304:
                return response
            message = response.body.get('message', '') if isinstance(response.body, dict) \
                else str(response.body)[:200]
            error = GithubError(err.code, message, path)
            error.headers = response.headers
            raise error from None

    def _response(self, status: int, raw: bytes, headers) -> Response:
        lowered = {k.lower(): v for k, v in (headers or {}).items()}
        remaining = lowered.get('x-ratelimit-remaining')
        if remaining is not None and remaining.isdigit():
            self.rate_remaining = int(remaining)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode('utf8', 'replace')
        return Response(status, body, lowered)

    def _rate_wait(self, exc: GithubError) -> float | None:
        """Seconds to wait when ``exc`` says the rate limit is used up."""
        if exc.status not in (403, 429):
            return None
        headers = getattr(exc, 'headers', {}) or {}
        if headers.get('retry-after', '').isdigit():
            return min(float(headers['retry-after']), self.max_rate_wait)
        if 'secondary rate limit' in exc.message.lower():
            return min(SECONDARY_WAIT, self.max_rate_wait)
        if headers.get('x-ratelimit-remaining') == '0' and headers.get('x-ratelimit-reset'):
            wait = float(headers['x-ratelimit-reset']) - time.time() + 1
            return min(max(wait, 1.0), self.max_rate_wait)
        return None
