"""Bearer tokens: zuul.conf's ``[auth]`` sections, the HS256/RS256/
OpenIDConnect authenticators (discovery and key set over real HTTP from a
small local server), authorization rule matching, and ``zuul-admin
create-auth-token`` round trips."""

from __future__ import annotations

import http.server
import io
import json
import threading
import time

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from zuul.cmd import admin
from zuul.configloader.zuulconf import ZuulConfError, load_zuul_conf
from zuul.lib import authz, jwt
from zuul.lib.auth import AuthenticationError, AuthenticatorConfig, Authenticators

_KEYS: list = []


def rsa_key():
    if not _KEYS:
        _KEYS.extend(rsa.generate_private_key(public_exponent=65537, key_size=2048)
                     for _ in range(2))
    return _KEYS


def _claims(**extra):
    now = int(time.time())
    return {'iss': 'https://idp.example.com/realms/zuul', 'aud': 'zuul', 'sub': 'alice',
            'iat': now, 'exp': now + 300, **extra}


# -- an OpenID Connect identity provider on 127.0.0.1 ------------------------------


class IdentityProvider:
    """Serves /.well-known/openid-configuration and the key set; counts
    the requests for each path."""

    def __init__(self):
        self.keys = {}
        self.hits: dict[str, int] = {}
        provider = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server API
                provider.hits[self.path] = provider.hits.get(self.path, 0) + 1
                if self.path == '/.well-known/openid-configuration':
                    body = {'issuer': provider.issuer, 'jwks_uri': provider.issuer + '/certs'}
                elif self.path == '/certs':
                    body = {'keys': [jwt.public_jwk(k.public_key(), kid)
                                     for kid, k in provider.keys.items()]}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.issuer = f'http://127.0.0.1:{self.server.server_address[1]}'
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def token(self, kid, **claims):
        return jwt.encode(_claims(iss=self.issuer, **claims), self.keys[kid], 'RS256',
                          headers={'kid': kid})


@pytest.fixture
def idp():
    provider = IdentityProvider()
    yield provider
    provider.stop()


def test_openid_connect_discovery_and_key_rotation(idp):
    first, second = rsa_key()
    idp.keys = {'k1': first}
    auth = Authenticators({'oidc': AuthenticatorConfig(
        name='oidc', driver='OpenIDConnect', realm='idp', issuer_id=idp.issuer,
        client_id='zuul')})
    claims, authenticator = auth.authenticate(f'Bearer {idp.token("k1")}')
    assert (claims['sub'], authenticator.name) == ('alice', 'oidc')
    assert idp.hits == {'/.well-known/openid-configuration': 1, '/certs': 1}
    auth.authenticate(f'Bearer {idp.token("k1")}')          # keys are kept
    assert idp.hits['/certs'] == 1
    idp.keys = {'k2': second}                                  # the provider rotated
    assert auth.authenticate(f'Bearer {idp.token("k2")}')[0]['sub'] == 'alice'
    assert idp.hits['/certs'] == 2
    forged = jwt.encode(_claims(iss=idp.issuer), first, 'RS256', headers={'kid': 'k2'})
    with pytest.raises(AuthenticationError, match='Bad signature'):
        auth.authenticate(f'Bearer {forged}')
    idp.keys['k1'] = first
    with pytest.raises(AuthenticationError, match='No key "k9"'):
        auth.authenticate('Bearer ' + jwt.encode(_claims(iss=idp.issuer), first, 'RS256',
                                                 headers={'kid': 'k9'}))
    # an HS256 token from the same issuer is not accepted by an RS256 driver
    with pytest.raises(AuthenticationError, match='not accepted'):
        auth.authenticate('Bearer ' + jwt.encode(_claims(iss=idp.issuer), 'x', 'HS256'))


def test_openid_connect_unreachable_provider_is_a_clear_refusal():
    auth = Authenticators({'oidc': AuthenticatorConfig(
        name='oidc', driver='OpenIDConnect', issuer_id='http://127.0.0.1:9/nothing',
        client_id='zuul')})
    token = jwt.encode(_claims(iss='http://127.0.0.1:9/nothing'), rsa_key()[0], 'RS256',
                       headers={'kid': 'k1'})
    with pytest.raises(AuthenticationError, match='cannot read http://127.0.0.1:9/nothing/'
                       r'\.well-known/openid-configuration'):
        auth.authenticate(f'Bearer {token}')


def _hs256(**kw):
    config = dict(name='op', driver='HS256', issuer_id='zuul_operator', client_id='zuul',
                  secret='s3cret')
    config.update(kw)
    return Authenticators({'op': AuthenticatorConfig(**config)})


@pytest.mark.parametrize('claims, message', [
    ({'aud': 'other'}, 'Incorrect audience'),
    ({'exp': None}, 'no expiry'),
    ({'sub': None}, 'missing id claim "sub"'),
    ({'exp': int(time.time()) - 30}, 'Token expired'),
    ({'iat': int(time.time()) - 4000}, 'older than max_validity_time'),
])
def test_tokens_refused_with_the_reason(claims, message):
    body = {k: v for k, v in {**_claims(iss='zuul_operator'), **claims}.items()
            if v is not None}
    with pytest.raises(AuthenticationError, match=message):
        _hs256(max_validity_time=3600).authenticate(
            'Bearer ' + jwt.encode(body, 's3cret', 'HS256'))


def test_audience_list_skew_and_uid_claim():
    expired_a_little = _claims(iss='zuul_operator', aud=['x', 'zuul'],
                               exp=int(time.time()) - 2, preferred_username='al')
    token = 'Bearer ' + jwt.encode(expired_a_little, 's3cret', 'HS256')
    with pytest.raises(AuthenticationError):
        _hs256().authenticate(token)
    claims, authenticator = _hs256(skew=10, uid_claim='preferred_username').authenticate(token)
    assert authenticator.uid(claims) == 'al'


def test_rs256_with_key_files(tmp_path):
    key = rsa_key()[0]
    private = tmp_path / 'private.pem'
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public = tmp_path / 'public.pem'
    public.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    auth = Authenticators({'rs': AuthenticatorConfig(
        name='rs', driver='RS256', issuer_id='iss', client_id='zuul', public_key=str(public),
        private_key=str(private))})
    signed = auth.by_name['rs'].create_token('bob', 't1', 60)
    claims, _ = auth.authenticate(f'Bearer {signed}')
    assert (claims['sub'], claims['zuul']) == ('bob', {'admin': ['t1']})
    with pytest.raises(AuthenticationError, match='Bad signature'):
        auth.authenticate('Bearer ' + jwt.encode(claims, rsa_key()[1], 'RS256'))


# -- zuul.conf [auth] sections --------------------------------------------------------


def _conf(tmp_path, text):
    path = tmp_path / 'zuul.conf'
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize('section, message', [
    ('[auth x]\ndriver=HS512\n', r'\[auth x\] driver: "HS512" is not one of'),
    ('[auth x]\ndriver=HS256\nissuer_id=i\nclient_id=c\n', r'driver HS256 needs "secret"'),
    ('[auth x]\ndriver=HS256\nsecret=s\nclient_id=c\n', r'needs "issuer_id"'),
    ('[auth x]\ndriver=RS256\nissuer_id=i\nclient_id=c\npublic_key=nope.pem\n',
     r'public_key: .*nope.pem does not exist'),
    ('[auth x]\ndriver=HS256\nissuer_id=i\nclient_id=c\nsecret=s\ndefault=maybe\n',
     r'default: "maybe" is not a boolean'),
    ('[auth x]\ndriver=HS256\nissuer_id=i\nclient_id=c\nsecret=s\nskew=soon\n',
     r'skew: "soon" is not an integer'),
    ('[auth "a"]\ndriver=HS256\nissuer_id=i\nclient_id=c\nsecret=s\ndefault=true\n'
     '[auth b]\ndriver=HS256\nissuer_id=i\nclient_id=c\nsecret=s\ndefault=true\n',
     'more than one'),
])
def test_bad_auth_sections_name_section_and_key(tmp_path, section, message):
    with pytest.raises(ZuulConfError, match=message):
        load_zuul_conf(_conf(tmp_path, section))


OPERATOR = """
[auth "zuul_operator"]
driver=HS256
allow_authz_override=true
realm=zuul.example.com
client_id=zuul.example.com
issuer_id=zuul_operator
secret=exampleSecret

[auth keycloak]
driver=OpenIDConnect
realm=my_realm
issuer_id=https://keycloak/realms/my_realm
client_id=zuul
"""


def test_create_auth_token_round_trip(tmp_path):
    conf = _conf(tmp_path, OPERATOR)
    out = io.StringIO()
    assert admin.main(['-c', conf, 'create-auth-token', '--auth-config', 'zuul_operator',
                       '--tenant', 'tenant-one', '--user', 'alice', '--expires-in', '1800'],
                      out=out) == 0
    printed = out.getvalue().strip()
    assert printed.startswith('Bearer ') and printed.count(' ') == 1
    auth = Authenticators(load_zuul_conf(conf).auth)
    claims, authenticator = auth.authenticate(printed)
    assert authenticator.name == 'zuul_operator'
    assert (claims['sub'], claims['zuul'], claims['aud']) == (
        'alice', {'admin': ['tenant-one']}, 'zuul.example.com')
    assert 1790 <= claims['exp'] - time.time() <= 1800
    from zuul.web.access import AccessPolicy
    policy = AccessPolicy(auth, lambda: {})
    caller = policy.authenticate(printed, 'zuul.example.com')
    assert policy.is_admin({'tenants': {'tenant-one': {}}}, 'tenant-one', caller)
    assert not policy.is_admin({'tenants': {'tenant-two': {}}}, 'tenant-two', caller)


def test_create_auth_token_failures(tmp_path, capsys):
    conf = _conf(tmp_path, OPERATOR)
    base = ['-c', conf, 'create-auth-token', '--user', 'alice']
    assert admin.main(base + ['--auth-config', 'nope']) == 1
    assert 'no [auth nope] section' in capsys.readouterr().err
    assert admin.main(base + ['--auth-config', 'keycloak']) == 1
    assert 'cannot sign tokens' in capsys.readouterr().err
    assert admin.main(base + ['--auth-config', 'zuul_operator', '--expires-in', '0']) == 1
    assert admin.main(['-c', str(tmp_path / 'missing.conf'), 'create-auth-token',
                       '--auth-config', 'zuul_operator', '--user', 'a']) == 2


# -- authorization rules ----------------------------------------------------------------


TOKEN = {'iss': 'external_institution', 'sub': 'alice', 'groups': ['tenant-one', 'dev'],
         'resources_access': {'account': {'roles': ['affiliate', 'other_role']}},
         'email_verified': True}


@pytest.mark.parametrize('condition, tenant, matches', [
    ({'resources_access': {'account': {'roles': 'affiliate'}}}, None, True),
    ({'resources_access.account.roles': 'affiliate'}, None, True),
    ({'resources_access.account.roles': 'admin'}, None, False),
    ({'resources_access.account.roles': 'affiliate', 'iss': 'external_institution'},
     None, True),
    ({'resources_access.account.roles': 'affiliate', 'iss': 'elsewhere'}, None, False),
    ({'zuul_uid': 'alice'}, None, True),
    ({'sub': 'bob'}, None, False),
    ({'groups': '{tenant.name}'}, 'tenant-one', True),
    ({'groups': '{tenant.name}'}, 'tenant-two', False),
    ({'groups': ['dev', 'tenant-one']}, None, True),
    ({'groups': ['dev', 'ops']}, None, False),
    ({'sub': ['bob', 'alice']}, None, True),
    ({'email_verified': True}, None, True),
    ({'missing.claim': 'x'}, None, False),
    ({'iss': 'external_.*'}, None, False),   # values are exact, never patterns
])
def test_condition_matching(condition, tenant, matches):
    conditions = authz.check_conditions([condition])
    assert authz.rule_matches(conditions, TOKEN, 'alice', tenant) is matches


def test_unusable_conditions_are_refused():
    for bad in ([], 'sub: alice', [{'sub': None}], [{'sub': [{'a': 1}]}], [3]):
        with pytest.raises(authz.RuleError):
            authz.check_conditions(bad)
