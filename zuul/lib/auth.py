"""zuul.conf's ``[auth <name>]`` sections: authenticators that check the
bearer tokens (JWT) given to zuul-web, and sign the ones ``zuul-admin
create-auth-token`` prints.

Drivers, as released Zuul documents them:

- ``HS256``: a shared ``secret`` checks and signs tokens.
- ``RS256``: ``public_key`` (a PEM file) checks tokens; the optional
  ``private_key`` signs them.
- ``OpenIDConnect``: the identity provider at ``issuer_id`` (a URL) is
  asked for ``<issuer_id>/.well-known/openid-configuration``, whose
  ``jwks_uri`` (or ``keys_url`` when set) gives the key set; a token's
  ``kid`` picks the key. An unknown ``kid`` fetches the key set again
  once (the provider rotated its keys).
- ``RS256withJWKS`` (deprecated in released Zuul): the key set at
  ``keys_url``.

Every token must carry ``iss`` equal to ``issuer_id`` (``authority`` for
OpenIDConnect when set), ``aud`` equal to (or, as a list, containing)
``client_id`` (``audience`` when set), the ``uid_claim`` (``sub``
by default) and must not be expired (``skew`` seconds of leeway). With
``max_validity_time`` it must also carry ``iat`` and be younger than
that.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from zuul.lib import jwt

log = logging.getLogger('zuul.auth')

DRIVERS = ('HS256', 'RS256', 'RS256withJWKS', 'OpenIDConnect')
_BOOL = {'1': True, 'true': True, 'yes': True, 'on': True,
         '0': False, 'false': False, 'no': False, 'off': False}
_KNOWN_KEYS = {'driver', 'realm', 'default', 'allow_authz_override', 'client_id',
               'issuer_id', 'uid_claim', 'max_validity_time', 'skew', 'secret',
               'public_key', 'private_key', 'keys_url', 'scope', 'authority', 'audience',
               'load_user_info'}
HTTP_TIMEOUT = 10


class AuthConfigError(ValueError):
    """A bad ``[auth <name>]`` section; the message names section and key."""


class AuthenticationError(Exception):
    """A token that cannot be accepted; ``str()`` says why (it goes into
    the 401 answer's ``error_description``)."""


@dataclass(frozen=True)
class AuthenticatorConfig:
    name: str
    driver: str
    realm: str | None = None
    default: bool = False
    allow_authz_override: bool = False
    client_id: str | None = None
    issuer_id: str | None = None
    uid_claim: str = 'sub'
    max_validity_time: int | None = None
    skew: int = 0
    secret: str | None = None
    public_key: str | None = None
    private_key: str | None = None
    keys_url: str | None = None
    scope: str = 'openid profile'
    authority: str | None = None
    audience: str | None = None
    load_user_info: bool = True


def _where(section: str, key: str) -> str:
    return f'[{section}] {key}'


def _int(section, key, raw) -> int:
    try:
        return int(raw)
    except ValueError:
        raise AuthConfigError(f'{_where(section, key)}: "{raw}" is not an integer') from None


def _bool(section, key, raw) -> bool:
    value = _BOOL.get(str(raw).strip().lower())
    if value is None:
        raise AuthConfigError(f'{_where(section, key)}: "{raw}" is not a boolean '
                              '(true/false)')
    return value


def _path(raw: str, base_dir: str | None) -> str:
    raw = os.path.expanduser(raw)
    if base_dir and not os.path.isabs(raw):
        raw = os.path.join(base_dir, raw)
    return raw


def _section_config(section: str, name: str, options: dict,
                    base_dir: str | None) -> AuthenticatorConfig:
    driver = options.get('driver')
    if driver not in DRIVERS:
        raise AuthConfigError(f'{_where(section, "driver")}: "{driver}" is not one of '
                              f'{", ".join(DRIVERS)}')
    for key in sorted(set(options) - _KNOWN_KEYS):
        log.warning('[%s] %s is not a known key; ignored', section, key)
    kw = {k: v for k, v in options.items() if k in _KNOWN_KEYS and k != 'driver'}
    for key in ('default', 'allow_authz_override', 'load_user_info'):
        if key in kw:
            kw[key] = _bool(section, key, kw[key])
    for key in ('max_validity_time', 'skew'):
        if key in kw:
            kw[key] = _int(section, key, kw[key])
    for key in ('public_key', 'private_key'):
        if kw.get(key):
            kw[key] = _path(kw[key], base_dir)
    config = AuthenticatorConfig(name=name, driver=driver, **kw)
    _check_required(section, config)
    return config


def _check_required(section: str, c: AuthenticatorConfig) -> None:
    needed = {'HS256': ('secret',), 'RS256': ('public_key',),
              'RS256withJWKS': ('keys_url',), 'OpenIDConnect': ()}[c.driver]
    for key in ('issuer_id', 'client_id') + needed:
        if not getattr(c, key):
            raise AuthConfigError(f'[{section}] driver {c.driver} needs "{key}"')
    for key in ('public_key', 'private_key'):
        path = getattr(c, key)
        if path and not os.path.isfile(path):
            raise AuthConfigError(f'{_where(section, key)}: {path} does not exist')


def parse_auth_sections(cp, base_dir: str | None = None) -> dict[str, AuthenticatorConfig]:
    """Every ``[auth <name>]`` (or ``[auth "<name>"]``) section of the
    ConfigParser ``cp``, by name, in file order. Relative key paths are
    resolved against ``base_dir`` (the directory of zuul.conf)."""
    out = {}
    for section in cp.sections():
        if not section.startswith('auth '):
            continue
        name = section[len('auth '):].strip().strip('"\'')
        if not name:
            raise AuthConfigError(f'[{section}] needs a name: [auth <name>]')
        out[name] = _section_config(section, name, dict(cp.items(section)), base_dir)
    defaults = [n for n, c in out.items() if c.default]
    if len(defaults) > 1:
        raise AuthConfigError(f'more than one [auth] section has default=true: '
                              f'{", ".join(defaults)}')
    return out


# -- checking tokens ----------------------------------------------------------


def _http_json(url: str) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT) as response:
            return json.load(response)
    except (OSError, ValueError) as e:
        raise AuthenticationError(f'cannot read {url}: {e}') from None


class Authenticator:
    """Checks tokens for one ``[auth]`` section (HS256 and RS256)."""

    algorithm = 'HS256'

    def __init__(self, config: AuthenticatorConfig):
        self.config = config
        self.name = config.name

    @property
    def issuer(self) -> str:
        return self.config.issuer_id

    @property
    def audience(self) -> str:
        return self.config.client_id

    def _key(self):
        if self.config.driver == 'HS256':
            return self.config.secret
        with open(self.config.public_key, 'rb') as f:
            return f.read()

    def decode(self, token: str, now: float | None = None) -> dict:
        """The claims of a token this authenticator accepts, with
        ``zuul_uid`` (the ``uid_claim``'s value) added; else
        AuthenticationError."""
        now = time.time() if now is None else now
        try:
            claims = jwt.decode(token, self._key(), algorithms=(self.algorithm,),
                                leeway=self.config.skew, now=now)
        except jwt.TokenError as e:
            raise AuthenticationError(_sentence(str(e))) from None
        except (OSError, ValueError) as e:
            raise AuthenticationError(f'cannot check the token: {e}') from None
        self._check_claims(claims, now)
        return claims

    def _check_claims(self, claims: dict, now: float) -> None:
        if claims.get('iss') != self.issuer:
            raise AuthenticationError('Token issuer is not accepted')
        aud = claims.get('aud')
        if not (aud == self.audience or (isinstance(aud, list) and self.audience in aud)):
            raise AuthenticationError('Incorrect audience')
        if 'exp' not in claims:
            raise AuthenticationError('Token has no expiry ("exp" claim)')
        uid = claims.get(self.config.uid_claim)
        if not isinstance(uid, str) or not uid:
            raise AuthenticationError(f'Token is missing id claim "{self.config.uid_claim}"')
        limit = self.config.max_validity_time
        if limit:
            iat = claims.get('iat')
            if not isinstance(iat, (int, float)):
                raise AuthenticationError('Token has no issue time ("iat" claim)')
            if now - iat > limit + self.config.skew:
                raise AuthenticationError('Token is older than max_validity_time')

    def uid(self, claims: dict) -> str:
        return claims[self.config.uid_claim]

    def create_token(self, user: str, tenant: str | None, expires_in: int,
                     now: float | None = None) -> str:
        """A token for ``user`` (with ``zuul.admin: [tenant]`` when a
        tenant is given), valid ``expires_in`` seconds."""
        now = int(time.time() if now is None else now)
        claims = {'iss': self.issuer, 'aud': self.audience, 'iat': now,
                  'exp': now + int(expires_in), 'sub': user}
        if self.config.uid_claim != 'sub':
            claims[self.config.uid_claim] = user
        if tenant:
            claims['zuul'] = {'admin': [tenant]}
        if self.config.driver == 'HS256':
            return jwt.encode(claims, self.config.secret, 'HS256')
        if self.config.driver == 'RS256' and self.config.private_key:
            with open(self.config.private_key, 'rb') as f:
                return jwt.encode(claims, f.read(), 'RS256')
        raise AuthenticationError(
            f'authenticator "{self.name}" (driver {self.config.driver}) cannot sign tokens: '
            'only HS256, or RS256 with a private_key, can')


class RS256Authenticator(Authenticator):
    algorithm = 'RS256'


class JWKSAuthenticator(Authenticator):
    """RS256 tokens checked against a key set fetched over HTTP
    (RS256withJWKS at ``keys_url``; OpenIDConnect through discovery)."""

    algorithm = 'RS256'

    def __init__(self, config: AuthenticatorConfig):
        super().__init__(config)
        self._lock = threading.Lock()
        self._keys: list | None = None

    def keys_url(self) -> str:
        return self.config.keys_url

    def _fetch_keys(self) -> list:
        keys = _http_json(self.keys_url()).get('keys')
        if not isinstance(keys, list):
            raise AuthenticationError(f'{self.keys_url()} has no "keys" list')
        return keys

    def _key(self):
        def choose(header):
            kid = header.get('kid')
            with self._lock:
                if self._keys is None:
                    self._keys = self._fetch_keys()
                key = jwt.select_jwk(self._keys, kid)
                if key is None:  # rotated keys: ask once more
                    self._keys = self._fetch_keys()
                    key = jwt.select_jwk(self._keys, kid)
            if key is None:
                raise AuthenticationError(f'No key "{kid}" in the key set of '
                                          f'{self.issuer}')
            return key
        return choose


class OpenIDConnectAuthenticator(JWKSAuthenticator):
    @property
    def issuer(self) -> str:
        return self.config.authority or self.config.issuer_id

    @property
    def audience(self) -> str:
        return self.config.audience or self.config.client_id

    def discovery_url(self) -> str:
        return self.config.issuer_id.rstrip('/') + '/.well-known/openid-configuration'

    def keys_url(self) -> str:
        if self.config.keys_url:
            return self.config.keys_url
        url = _http_json(self.discovery_url()).get('jwks_uri')
        if not isinstance(url, str) or not url:
            raise AuthenticationError(f'{self.discovery_url()} names no "jwks_uri"')
        return url


def _sentence(message: str) -> str:
    return message[:1].upper() + message[1:]


_CLASSES = {'HS256': Authenticator, 'RS256': RS256Authenticator,
            'RS256withJWKS': JWKSAuthenticator, 'OpenIDConnect': OpenIDConnectAuthenticator}


class Authenticators:
    """All of zuul.conf's authenticators. A token is given to the ones
    whose issuer is the token's ``iss``; it is accepted by the first that
    checks it."""

    def __init__(self, configs: dict[str, AuthenticatorConfig] | None = None):
        self.by_name = {name: _CLASSES[c.driver](c) for name, c in (configs or {}).items()}

    def __bool__(self) -> bool:
        return bool(self.by_name)

    def default_realm(self) -> str:
        configs = [a.config for a in self.by_name.values()]
        for c in configs:
            if c.default and c.realm:
                return c.realm
        return next((c.realm for c in configs if c.realm), 'zuul')

    def realms(self) -> list[str]:
        return sorted({a.config.realm for a in self.by_name.values() if a.config.realm})

    def authenticate(self, header: str | None) -> tuple[dict, Authenticator]:
        """(claims, authenticator) of an ``Authorization: Bearer <token>``
        header value; AuthenticationError when missing or not accepted."""
        if not header:
            raise AuthenticationError('Missing "Authorization" header')
        scheme, _, token = header.strip().partition(' ')
        if scheme.lower() != 'bearer' or not token.strip():
            raise AuthenticationError('The Authorization header must be "Bearer <token>"')
        token = token.strip()
        try:
            _, unverified = jwt.unverified(token)
        except jwt.TokenError as e:
            raise AuthenticationError(_sentence(str(e))) from None
        candidates = [a for a in self.by_name.values() if a.issuer == unverified.get('iss')]
        if not candidates:
            raise AuthenticationError('Token issuer is not accepted')
        error = None
        for authenticator in candidates:
            try:
                return authenticator.decode(token), authenticator
            except AuthenticationError as e:
                error = e
        raise error


def create_token_command(args, config: str, auth: dict, out) -> int:
    """``zuul-admin create-auth-token``: print ``Bearer <token>`` signed by
    the ``[auth NAME]`` authenticator (``auth``: the parsed ``[auth ...]``
    sections of ``config``); the exit status."""
    import sys

    authenticator = Authenticators(auth).by_name.get(args.auth_config)
    if authenticator is None:
        print(f'zuul-admin create-auth-token: no [auth {args.auth_config}] section in '
              f'{config} (there are: {", ".join(auth) or "none"})', file=sys.stderr)
        return 1
    if args.expires_in <= 0:
        print('zuul-admin create-auth-token: --expires-in must be a positive number of '
              'seconds', file=sys.stderr)
        return 1
    try:
        token = authenticator.create_token(args.user, args.tenant, args.expires_in)
    except (AuthenticationError, OSError, ValueError) as e:
        print(f'zuul-admin create-auth-token: {e}', file=sys.stderr)
        return 1
    print(f'Bearer {token}', file=out)
    return 0
