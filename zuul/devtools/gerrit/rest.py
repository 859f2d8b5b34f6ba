"""The development Gerrit's authenticated REST API (``/a/...``) and its
login form, as web.py routes them:

- ``POST /login`` (form fields ``username``, ``password``) sets the
  ``GerritAccount`` session cookie and an ``XSRF_TOKEN`` cookie, whose
  value a cookie-authenticated change request must carry in
  ``X-Gerrit-Auth``;
- ``/a/...`` accepts HTTP Basic or Digest credentials (the account's HTTP
  password) or that session, per ``HTTPAuth.schemes`` (a Gerrit before
  2.15 speaks Digest only; one with ``gitBasicAuth`` Basic only);
- endpoints: ``GET accounts/self``; the checks plugin's
  ``GET|POST plugins/checks/checkers/``, ``GET plugins/checks/checks.pending/``,
  ``GET|POST changes/<id>/revisions/<id>/checks/`` (checks.py holds the
  state).

Answers are JSON behind Gerrit's ``)]}'`` line; errors are plain text.
HTTP passwords live beside the store (``http_auth_for(store)``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import threading
import weakref
from urllib.parse import parse_qs, unquote

from zuul.devtools.gerrit.checks import checks_for
from zuul.devtools.gerrit.store import ReviewError, ReviewStore

REALM = 'Gerrit Code Review'
SCHEMES = ('basic', 'digest', 'form')
_REVISION_CHECKS = re.compile(r'^changes/(?P<change>[^/]+)/revisions/(?P<rev>[^/]+)/checks/?'
                              r'(?P<checker>[^/]+)?/?$')


class HTTPError(Exception):
    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


class HTTPAuth:
    """HTTP passwords and login sessions of the development Gerrit."""

    def __init__(self):
        self.lock = threading.Lock()
        self.passwords: dict[str, str] = {}
        self.schemes: set[str] = set(SCHEMES)
        self.sessions: dict[str, tuple[str, str]] = {}  # cookie -> (user, xsrf)
        self._nonces: set[str] = set()

    def set_password(self, username: str, password: str) -> None:
        with self.lock:
            self.passwords[username] = password

    def login(self, username: str, password: str) -> tuple[str, str]:
        if 'form' not in self.schemes or not self._valid(username, password):
            raise HTTPError(401, 'Invalid username or password')
        session, xsrf = secrets.token_hex(16), secrets.token_hex(16)
        with self.lock:
            self.sessions[session] = (username, xsrf)
        return session, xsrf

    def _valid(self, username: str, password: str) -> bool:
        with self.lock:
            known = self.passwords.get(username)
        return known is not None and secrets.compare_digest(known, password)

    def challenge(self) -> dict:
        if 'digest' in self.schemes:
            nonce = secrets.token_hex(16)
            with self.lock:
                self._nonces.add(nonce)
            return {'WWW-Authenticate': f'Digest realm="{REALM}", nonce="{nonce}", '
                                        f'qop="auth", algorithm=MD5'}
        if 'basic' in self.schemes:
            return {'WWW-Authenticate': f'Basic realm="{REALM}"'}
        return {}

    def user_of(self, method: str, uri: str, headers, cookies: dict) -> str:
        """The account a request authenticates as, or HTTPError 401."""
        header = headers.get('Authorization') or ''
        kind, _, value = header.partition(' ')
        kind = kind.lower()
        user = None
        if kind == 'basic' and 'basic' in self.schemes:
            user = self._basic(value)
        elif kind == 'digest' and 'digest' in self.schemes:
            user = self._digest(method, value)
        elif not header and 'form' in self.schemes and cookies.get('GerritAccount'):
            user = self._session(method, headers, cookies['GerritAccount'])
        if user is None:
            raise HTTPError(401, 'Unauthorized', self.challenge())
        return user

    def _basic(self, value: str) -> str | None:
        try:
            username, _, password = base64.b64decode(value).decode().partition(':')
        except (ValueError, UnicodeDecodeError):
            return None
        return username if self._valid(username, password) else None

    def _digest(self, method: str, value: str) -> str | None:
        fields = dict(re.findall(r'(\w+)="?([^",]*)"?', value))
        username, nonce = fields.get('username', ''), fields.get('nonce', '')
        with self.lock:
            password = self.passwords.get(username)
            fresh = nonce in self._nonces
        if password is None or not fresh:
            return None

        def md5(text: str) -> str:
            return hashlib.md5(text.encode()).hexdigest()  # noqa: S324 - RFC 2617

        ha1 = md5(f'{username}:{REALM}:{password}')
        ha2 = md5(f'{method}:{fields.get("uri", "")}')
        if fields.get('qop'):
            expected = md5(f'{ha1}:{nonce}:{fields.get("nc")}:{fields.get("cnonce")}:'
                           f'{fields["qop"]}:{ha2}')
        else:
            expected = md5(f'{ha1}:{nonce}:{ha2}')
        return username if secrets.compare_digest(expected, fields.get('response', '')) \
            else None

    def _session(self, method: str, headers, session: str) -> str | None:
        with self.lock:
            found = self.sessions.get(session)
        if found is None:
            return None
        user, xsrf = found
        if method != 'GET' and headers.get('X-Gerrit-Auth') != xsrf:
            raise HTTPError(403, 'Invalid authentication method. XSRF token missing')
        return user


_AUTH: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_AUTH_LOCK = threading.Lock()


def http_auth_for(store: ReviewStore) -> HTTPAuth:
    with _AUTH_LOCK:
        auth = _AUTH.get(store)
        if auth is None:
            auth = _AUTH[store] = HTTPAuth()
        return auth


def parse_cookies(header: str | None) -> dict:
    out = {}
    for part in (header or '').split(';'):
        name, _, value = part.strip().partition('=')
        if name:
            out[name] = value
    return out


# -- endpoints ------------------------------------------------------------------

def handle(store: ReviewStore, method: str, path: str, query: str, headers,
           body: bytes) -> tuple[int, object, dict]:
    """One request to ``/login`` or ``/a/...``: (status, JSON value or
    error text, extra headers)."""
    auth = http_auth_for(store)
    try:
        if path == '/login':
            return _login(auth, method, body)
        user = auth.user_of(method, path + (f'?{query}' if query else ''), headers,
                            parse_cookies(headers.get('Cookie')))
        data = _json_body(body) if method == 'POST' else None
        return 200, _route(store, user, method, path[len('/a/'):], parse_qs(query), data), {}
    except HTTPError as e:
        return e.status, str(e), e.headers
    except ReviewError as e:
        status = 404 if 'not found' in str(e) else 400
        return status, str(e), {}


def _login(auth: HTTPAuth, method: str, body: bytes):
    if method != 'POST':
        raise HTTPError(405, 'POST the username and password')
    form = parse_qs(body.decode('utf-8', 'replace'))
    session, xsrf = auth.login(form.get('username', [''])[0], form.get('password', [''])[0])
    return 204, None, {'Set-Cookie': [f'GerritAccount={session}; Path=/; HttpOnly',
                                      f'XSRF_TOKEN={xsrf}; Path=/']}


def _json_body(body: bytes):
    try:
        return json.loads(body.decode('utf-8') or 'null')
    except ValueError:
        raise HTTPError(400, 'Malformed JSON in the request body') from None


def _route(store: ReviewStore, user: str, method: str, path: str, query: dict, data):
    checks = checks_for(store)
    if path.rstrip('/') == 'accounts/self' and method == 'GET':
        return store.account(user).to_dict()
    if path.rstrip('/') == 'plugins/checks/checkers':
        if method == 'GET':
            return [c.to_dict() for c in sorted(checks.checkers.values(),
                                                 key=lambda c: c.uuid)]
        data = data or {}
        return checks.create_checker(data.get('uuid', ''), data.get('repository', ''),
                                     data.get('name', ''), data.get('status', 'ENABLED'),
                                     data.get('description', ''), data.get('url', '')
                                     ).to_dict()
    if path.rstrip('/') == 'plugins/checks/checks.pending' and method == 'GET':
        return checks.pending(' '.join(query.get('query', [])))
    m = _REVISION_CHECKS.match(path)
    if m:
        change, patchset = _revision(store, unquote(m['change']), unquote(m['rev']))
        if method == 'POST':
            return checks.post_check(change, patchset, data or {}).to_dict()
        found = [c.to_dict() for c in checks.checks_of(change, patchset)]
        if m['checker']:
            uuid = unquote(m['checker'])
            match = [c for c in found if c['checker_uuid'] == uuid]
            if not match:
                raise HTTPError(404, f'check {uuid} not found')
            return match[0]
        return found
    raise HTTPError(404, 'Not found')


def _revision(store: ReviewStore, change_id: str, revision: str):
    """A change by ``<number>``, ``<project>~<number>``,
    ``<project>~<branch>~<Change-Id>`` or Change-Id; a revision by patch
    set number, sha or ``current``."""
    parts = change_id.split('~')
    if len(parts) == 3:
        change = store.find_change(parts[0], parts[1], parts[2])
        if change is None:
            raise ReviewError(f'change {change_id} not found')
    else:
        change = store.get_change(parts[-1])
        if len(parts) == 2 and change.project != parts[0]:
            raise ReviewError(f'change {change_id} not found')
    if revision == 'current':
        return change, change.current.number
    for ps in change.patchsets:
        if revision == str(ps.number) or revision == ps.revision:
            return change, ps.number
    raise ReviewError(f'revision {revision} of change {change.number} not found')
