"""The Gerrit connection's ``auth_type`` against the development Gerrit's
REST API: each mechanism authenticates where the server speaks it and is
refused where it does not, and the values that cannot be honoured are
clear errors."""

from __future__ import annotations

import base64
import http.client
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import voluptuous as vs

from tests.harness.tls import TestCA
from zuul.devtools.gerrit.checks import checks_for
from zuul.devtools.gerrit.rest import http_auth_for
from zuul.driver.gerrit import GerritDriver
from zuul.driver.gerrit.gerrit_connection import GerritConnection
from zuul.driver.gerrit.rest import GerritAuthError, GerritHTTPError, GerritRESTClient


def _client(gerrit, auth_type, password=None):
    return GerritRESTClient(gerrit.http_url, 'zuul', password or gerrit.http_password,
                            auth_type)


@pytest.mark.parametrize('auth_type', ['basic', 'digest', 'form'])
def test_each_auth_type_authenticates_where_the_server_speaks_it(dev_gerrit_http,
                                                                 auth_type):
    auth = http_auth_for(dev_gerrit_http.store)
    auth.schemes = {auth_type}
    assert _client(dev_gerrit_http, auth_type).get('accounts/self')['username'] == 'zuul'
    for other in {'basic', 'digest', 'form'} - {auth_type}:
        with pytest.raises(GerritAuthError) as e:
            _client(dev_gerrit_http, other).get('accounts/self')
        assert f'auth_type {other}' in str(e.value)


@pytest.mark.parametrize('auth_type', ['basic', 'digest', 'form'])
def test_a_wrong_password_is_refused(dev_gerrit_http, auth_type):
    with pytest.raises(GerritAuthError) as e:
        _client(dev_gerrit_http, auth_type, password='wrong').get('accounts/self')
    assert e.value.status == 401 and "user 'zuul'" in str(e.value)


def test_the_connection_uses_its_auth_type(dev_gerrit_http):
    http_auth_for(dev_gerrit_http.store).schemes = {'digest'}
    options = {'server': '127.0.0.1', 'baseurl': dev_gerrit_http.http_url,
               'password': dev_gerrit_http.http_password}
    digest = GerritConnection('review', dict(options, auth_type='digest'))
    assert digest.rest.get('accounts/self')['username'] == 'zuul'
    basic = GerritConnection('review', options)  # the default: basic
    assert basic.auth_type == 'basic'
    with pytest.raises(GerritAuthError):
        basic.rest.get('accounts/self')
    assert GerritConnection('review', {'server': 'x'}).rest is None  # no password: no HTTP


def test_form_login_session_and_xsrf_token(dev_gerrit_http):
    gerrit = dev_gerrit_http
    gerrit.store.create_project('org/a')
    change = gerrit.store.create_change('org/a', 'master', 'A', {'a': '1'})
    client = _client(gerrit, 'form')
    assert client.get('accounts/self')['username'] == 'zuul'
    auth = http_auth_for(gerrit.store)
    session = client._cookie('GerritAccount')
    assert session in auth.sessions
    # A change request carries the XSRF token (the server refuses one without).
    checks_for(gerrit.store).create_checker('zuul:a', 'org/a')
    client.post(f'changes/{change.number}/revisions/1/checks/',
                {'checker_uuid': 'zuul:a', 'state': 'RUNNING'})
    conn = http.client.HTTPConnection('127.0.0.1', gerrit.server.http_port, timeout=30)
    conn.request('POST', f'/a/changes/{change.number}/revisions/1/checks/',
                 body=b'{"checker_uuid": "zuul:a", "state": "FAILED"}',
                 headers={'Cookie': f'GerritAccount={session}',
                          'Content-Type': 'application/json'})
    assert conn.getresponse().status == 403
    # An expired session is renewed.
    auth.sessions.clear()
    assert client.get('accounts/self')['username'] == 'zuul'
    assert client._cookie('GerritAccount') != session


def test_gcloud_service_and_unknown_auth_types_are_clear_errors():
    with pytest.raises(ValueError, match='gcloud_service needs the Google Cloud metadata'):
        GerritConnection('review', {'server': 'x', 'password': 'p',
                                    'auth_type': 'gcloud_service'})
    with pytest.raises(ValueError, match="Unknown auth_type 'kerberos'"):
        GerritConnection('review', {'server': 'x', 'auth_type': 'kerberos'})
    schema = GerritDriver().connection_schema()
    schema({'server': 'x', 'auth_type': 'digest'})
    with pytest.raises(vs.Invalid):
        schema({'server': 'x', 'auth_type': 'kerberos'})


def test_rest_answers_carry_gerrits_guard_line(dev_gerrit_http):
    conn = http.client.HTTPConnection('127.0.0.1', dev_gerrit_http.server.http_port,
                                      timeout=30)
    token = base64.b64encode(f'zuul:{dev_gerrit_http.http_password}'.encode()).decode()
    conn.request('GET', '/a/accounts/self', headers={'Authorization': f'Basic {token}'})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.read().startswith(b")]}'\n")
    conn.request('GET', '/a/accounts/self')  # anonymous: challenged
    resp = conn.getresponse()
    resp.read()
    assert resp.status == 401 and resp.getheader('WWW-Authenticate').startswith('Digest')


class _SelfHandler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server API
        data = b")]}'\n{\"username\": \"zuul\"}"
        self.send_response(200)
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_verify_ssl_false_accepts_a_certificate_nobody_vouches_for(tmp_path):
    files = TestCA(str(tmp_path)).issue('gerrit.example.com')
    server = ThreadingHTTPServer(('127.0.0.1', 0), _SelfHandler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(files.cert, files.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        options = {'server': '127.0.0.1', 'password': 'p',
                   'baseurl': f'https://127.0.0.1:{server.server_address[1]}'}
        with pytest.raises(GerritHTTPError, match='CERTIFICATE_VERIFY_FAILED'):
            GerritConnection('review', options).rest.get('accounts/self')
        unchecked = GerritConnection('review', dict(options, verify_ssl='false'))
        assert unchecked.rest.get('accounts/self') == {'username': 'zuul'}
    finally:
        server.shutdown()
        server.server_close()
