"""Gerrit's REST API over HTTP(S), as the connection's ``user`` with its
``password`` (the account's HTTP password), authenticated per
``auth_type``:

``basic``
    HTTP Basic credentials sent with every request to ``/a/...``.
``digest``
    HTTP Digest: the request is answered with a challenge (401 with
    ``WWW-Authenticate: Digest``) and repeated with the response.
``form``
    the user name and password are posted to ``<baseurl>/login``; the
    session cookie Gerrit sets authenticates the following requests, and
    its ``XSRF_TOKEN`` cookie is echoed in ``X-Gerrit-Auth`` on changes.
    An expired session is renewed once per request.
``gcloud_service``
    needs the Google Cloud metadata server's service-account token; not
    available here (a clear error when the connection is made).

Responses carry Gerrit's ``)]}'`` guard line, which is stripped before
the JSON is parsed.
"""

from __future__ import annotations

import base64
import http.cookiejar
import json
import logging
import ssl
import urllib.error
import urllib.parse
import urllib.request

log = logging.getLogger('zuul.driver.gerrit.http')

AUTH_TYPES = ('basic', 'digest', 'form', 'gcloud_service')
SUPPORTED_AUTH_TYPES = ('basic', 'digest', 'form')
XSSI_GUARD = ")]}'"


class GerritHTTPError(Exception):
    """A REST call failed; ``status`` is the HTTP status (0: no answer)."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status


class GerritAuthError(GerritHTTPError):
    """Gerrit refused the credentials."""


def check_auth_type(value) -> str:
    """The ``auth_type`` zuul.conf gives, or ValueError saying why it cannot
    be used."""
    auth_type = str(value or 'basic').strip().lower()
    if auth_type == 'gcloud_service':
        raise ValueError('auth_type gcloud_service needs the Google Cloud metadata server '
                         'to obtain a service-account token, which this Gerrit driver '
                         'does not use; use basic, digest or form with an HTTP password')
    if auth_type not in SUPPORTED_AUTH_TYPES:
        raise ValueError(f'Unknown auth_type {value!r}: expected one of '
                         f'{", ".join(AUTH_TYPES)}')
    return auth_type


def parse_json(body: bytes):
    text = body.decode('utf-8')
    if text.startswith(XSSI_GUARD):
        text = text[len(XSSI_GUARD):]
    text = text.strip()
    return json.loads(text) if text else None


class GerritRESTClient:
    """Authenticated REST calls to one Gerrit. Thread-safe for concurrent
    calls (each request builds its own ``Request``)."""

    def __init__(self, baseurl: str, user: str, password: str, auth_type: str = 'basic',
                 verify_ssl: bool = True, timeout: float = 30.0):
        self.baseurl = baseurl.rstrip('/')
        self.user = user
        self.password = password
        self.auth_type = check_auth_type(auth_type)
        self.timeout = timeout
        handlers = []
        if not verify_ssl:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            handlers.append(urllib.request.HTTPSHandler(context=context))
        if self.auth_type == 'digest':
            passwords = urllib.request.HTTPPasswordMgrWithDefaultRealm()
            passwords.add_password(None, self.baseurl, user, password)
            handlers.append(urllib.request.HTTPDigestAuthHandler(passwords))
        self.cookies = http.cookiejar.CookieJar()
        if self.auth_type == 'form':
            handlers.append(urllib.request.HTTPCookieProcessor(self.cookies))
        self._opener = urllib.request.build_opener(*handlers)
        self._logged_in = False

    # -- calls ----------------------------------------------------------------

    def get(self, path: str, query: dict | None = None):
        return self._call('GET', path, query=query)

    def post(self, path: str, data: dict):
        return self._call('POST', path, data=data)

    def _call(self, method: str, path: str, data=None, query=None):
        if self.auth_type == 'form' and not self._logged_in:
            self.login()
        try:
            return self._send(method, path, data, query)
        except GerritAuthError:
            if self.auth_type != 'form':
                raise
            self.login()  # the session may have expired: once more
            return self._send(method, path, data, query)

    def _url(self, path: str, query: dict | None) -> str:
        url = f'{self.baseurl}/a/{path.lstrip("/")}'
        if query:
            url += '?' + urllib.parse.urlencode(query, doseq=True)
        return url

    def _send(self, method: str, path: str, data, query):
        body = None if data is None else json.dumps(data).encode('utf-8')
        request = urllib.request.Request(self._url(path, query), data=body, method=method)
        request.add_header('Accept', 'application/json')
        if body is not None:
            request.add_header('Content-Type', 'application/json; charset=UTF-8')
        if self.auth_type == 'basic':
            token = base64.b64encode(f'{self.user}:{self.password}'.encode()).decode()
            request.add_header('Authorization', f'Basic {token}')
        elif self.auth_type == 'form':
            xsrf = self._cookie('XSRF_TOKEN')
            if xsrf and method != 'GET':
                request.add_header('X-Gerrit-Auth', xsrf)
        return parse_json(self._open(request, f'{method} {path}'))

    def _open(self, request, what: str) -> bytes:
        try:
            with self._opener.open(request, timeout=self.timeout) as resp:
                return resp.read()
        except urllib.error.HTTPError as e:
            detail = e.read().decode('utf-8', 'replace').strip()[:500]
            cls = GerritAuthError if e.code in (401, 403) else GerritHTTPError
            if e.code in (401, 403):
                detail = (f'{detail} (user {self.user!r}, auth_type {self.auth_type}: '
                          f'check the HTTP password and auth_type)')
            raise cls(f'{what} on {self.baseurl}: HTTP {e.code} {detail}', e.code) from None
        except (urllib.error.URLError, OSError) as e:
            raise GerritHTTPError(f'{what} on {self.baseurl}: {e}') from None

    def _cookie(self, name: str) -> str | None:
        for cookie in self.cookies:
            if cookie.name == name:
                return cookie.value
        return None

    # -- form login -------------------------------------------------------------

    def login(self) -> None:
        """``auth_type=form``: post the credentials to ``<baseurl>/login``."""
        form = urllib.parse.urlencode({'username': self.user, 'password': self.password})
        request = urllib.request.Request(f'{self.baseurl}/login', data=form.encode(),
                                         method='POST')
        request.add_header('Content-Type', 'application/x-www-form-urlencoded')
        self._open(request, 'POST /login')
        if self._cookie('GerritAccount') is None:
            raise GerritAuthError(f'Login to {self.baseurl} as {self.user!r} set no session '
                                  f'cookie (auth_type form)', 401)
        self._logged_in = True
