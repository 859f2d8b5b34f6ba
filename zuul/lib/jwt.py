"""JSON Web Tokens (RFC 7519) in compact form, RS256 and HS256 only.

Used to sign GitHub App tokens (RS256 with the app's private key) and to
check bearer tokens given to zuul-web. Algorithms are never taken from the
token alone: the caller says which it accepts.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa


class TokenError(ValueError):
    """A token that is malformed, badly signed, expired or not yet valid."""


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b'=').decode('ascii')


def _b64decode(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + '=' * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise TokenError(f'bad base64 in token: {exc}') from None


def load_private_key(pem: bytes | str):
    if isinstance(pem, str):
        pem = pem.encode('utf8')
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise TokenError('only RSA private keys sign RS256 tokens')
    return key


def encode(claims: dict, key, algorithm: str = 'RS256', headers: dict | None = None) -> str:
    """Sign ``claims``: ``key`` is an RSA private key (object or PEM) for
    RS256, the shared secret (str or bytes) for HS256."""
    header = {'alg': algorithm, 'typ': 'JWT', **(headers or {})}
    signing_input = '.'.join(_b64encode(json.dumps(part, separators=(',', ':'),
                                                   sort_keys=True).encode('utf8'))
                             for part in (header, claims)).encode('ascii')
    if algorithm == 'RS256':
        if not hasattr(key, 'sign'):
            key = load_private_key(key)
        signature = key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
    elif algorithm == 'HS256':
        secret = key.encode('utf8') if isinstance(key, str) else key
        signature = hmac.new(secret, signing_input, hashlib.sha256).digest()
    else:
        raise TokenError(f'unsupported algorithm {algorithm}')
    return signing_input.decode('ascii') + '.' + _b64encode(signature)


def unverified(token: str) -> tuple[dict, dict]:
    """(header, claims) of ``token`` WITHOUT checking its signature: only
    to choose how to check it (which issuer, which key id)."""
    parts = str(token).split('.')
    if len(parts) != 3:
        raise TokenError('a token has three dot-separated parts')
    try:
        header = json.loads(_b64decode(parts[0]))
        claims = json.loads(_b64decode(parts[1]))
    except ValueError as exc:
        raise TokenError(f'token is not JSON: {exc}') from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise TokenError('token header and claims must be objects')
    return header, claims


def decode(token: str, key, algorithms=('RS256',), leeway: float = 0,
           now: float | None = None) -> dict:
    """The claims of ``token`` once its signature (by one of ``algorithms``)
    and its ``exp``/``nbf`` times are checked. ``key``: an RSA public key
    (object or PEM) for RS256, the shared secret for HS256, or a callable
    given the token's header that returns one of those (a key set chosen
    by ``kid``)."""
    header, claims = unverified(token)
    parts = str(token).split('.')
    algorithm = header.get('alg')
    if algorithm not in algorithms:
        raise TokenError(f'algorithm {algorithm!r} not accepted')
    if callable(key):
        key = key(header)
    _verify(algorithm, f'{parts[0]}.{parts[1]}'.encode('ascii'), _b64decode(parts[2]), key)
    _check_times(claims, leeway, time.time() if now is None else now)
    return claims


def _verify(algorithm: str, signing_input: bytes, signature: bytes, key) -> None:
    if algorithm == 'HS256':
        secret = key.encode('utf8') if isinstance(key, str) else key
        expected = hmac.new(secret, signing_input, hashlib.sha256).digest()
        if not hmac.compare_digest(expected, signature):
            raise TokenError('bad signature')
        return
    if isinstance(key, (str, bytes)):
        key = serialization.load_pem_public_key(key.encode('utf8') if isinstance(key, str)
                                                else key)
    try:
        key.verify(signature, signing_input, padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        raise TokenError('bad signature') from None


def _check_times(claims: dict, leeway: float, now: float) -> None:
    exp = claims.get('exp')
    if exp is not None and now > float(exp) + leeway:
        raise TokenError('token expired')
    nbf = claims.get('nbf')
    if nbf is not None and now + leeway < float(nbf):
        raise TokenError('token not valid yet')


def _b64_int(text) -> int:
    if not isinstance(text, str) or not text:
        raise TokenError('a JWK modulus and exponent are base64url strings')
    return int.from_bytes(_b64decode(text), 'big')


def jwk_public_key(jwk: dict):
    """The RSA public key of one JSON Web Key (RFC 7517, ``kty: RSA``)."""
    if not isinstance(jwk, dict) or jwk.get('kty') != 'RSA':
        raise TokenError('only RSA keys (kty "RSA") of a key set are usable')
    numbers = rsa.RSAPublicNumbers(_b64_int(jwk.get('e')), _b64_int(jwk.get('n')))
    return numbers.public_key()


def public_jwk(public_key, kid: str) -> dict:
    """The JSON Web Key of an RSA public key (what an identity provider
    publishes at its ``jwks_uri``)."""
    numbers = public_key.public_numbers()

    def b64_int(value: int) -> str:
        return _b64encode(value.to_bytes((value.bit_length() + 7) // 8, 'big'))
    return {'kty': 'RSA', 'alg': 'RS256', 'use': 'sig', 'kid': kid,
            'n': b64_int(numbers.n), 'e': b64_int(numbers.e)}


def select_jwk(keys: list, kid: str | None):
    """The public key for ``kid`` from a key set's ``keys`` (the only RSA
    signing key when the token names none); None when absent."""
    usable = [k for k in keys or () if isinstance(k, dict) and k.get('kty') == 'RSA' and
              k.get('use', 'sig') == 'sig']
    if kid is None:
        return jwk_public_key(usable[0]) if len(usable) == 1 else None
    for k in usable:
        if k.get('kid') == kid:
            return jwk_public_key(k)
    return None
