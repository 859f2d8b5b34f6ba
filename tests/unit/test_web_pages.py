"""zuul-web's pages and their cache headers (zuul/web/server.py): pages
are never served stale, static files are cached but named by a content
hash, the status API may be cached for a second (never by a shared
cache), the rest of the API not at all."""

from __future__ import annotations

import re
import urllib.error
import urllib.request

import pytest


def fetch(web, path, headers=None):
    request = urllib.request.Request(web.base + path, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def test_pages_are_not_cached_and_name_static_files_by_hash(zuul_web):
    status, headers, body = fetch(zuul_web, '/t/tenant-one/status')
    assert status == 200 and headers['Cache-Control'] == 'no-cache'
    versions = set(re.findall(r'/static/[\w.]+\?v=(\w+)"', body))
    assert len(versions) == 1, body
    (version,) = versions
    for name in ('zuul.css', 'common.js', 'login.js', 'status.js'):
        assert f'/static/{name}?v={version}"' in body
    status, headers, _ = fetch(zuul_web, f'/static/status.js?v={version}')
    assert status == 200 and headers['Cache-Control'] == 'public, max-age=3600'
    # landmarks and the login control's place
    assert '<main id="main"' in body and '<nav aria-label="Tenant pages">' in body
    assert 'id="login"' in body


def test_the_status_api_may_be_cached_a_second_by_the_browser_only(zuul_web):
    for path in ('/api/tenant/tenant-one/status',
                 '/api/tenant/tenant-one/status/change/2,1'):
        status, headers, _ = fetch(zuul_web, path)
        assert status == 200 and headers['Cache-Control'] == 'max-age=1', path
        assert headers['Vary'] == 'Authorization, Accept-Encoding'
    for path in ('/api/tenant/tenant-one/jobs', '/api/tenants',
                 '/api/tenant/nope/status'):   # an error is never cached
        status, headers, _ = fetch(zuul_web, path)
        assert headers['Cache-Control'] == 'no-cache', path


def test_the_per_change_status_page(zuul_web):
    status, headers, body = fetch(zuul_web, '/t/tenant-one/status/change/2,1')
    assert status == 200 and 'data-arg="2,1"' in body and 'data-page="status"' in body
    assert headers['Cache-Control'] == 'no-cache'


@pytest.mark.parametrize('path', ['/t/nope/status/change/2,1', '/t/tenant-one/status/change',
                                  '/t/tenant-one/status/change/2,1/x',
                                  '/t/tenant-one/status/other/2,1'])
def test_pages_that_do_not_exist(zuul_web, path):
    assert fetch(zuul_web, path)[0] == 404


def test_api_pages_and_static_files_are_gzipped_for_browsers_that_take_it(zuul_web):
    import gzip
    import json
    for path, kind in (('/api/tenant/tenant-one/status', 'application/json'),
                       ('/t/tenant-one/status', 'text/html'),
                       ('/static/status.js', 'text/javascript')):
        request = urllib.request.Request(zuul_web.base + path,
                                         headers={'Accept-Encoding': 'gzip'})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.headers['Content-Encoding'] == 'gzip', path
            assert response.headers['Content-Type'].startswith(kind), path
            body = gzip.decompress(response.read())
        if kind == 'application/json':
            assert json.loads(body)['tenant'] == 'tenant-one'
    # without Accept-Encoding: plain
    status, headers, body = fetch(zuul_web, '/api/tenant/tenant-one/status')
    assert 'Content-Encoding' not in headers and body.startswith('{')


def test_the_daemon_s_status_cache_spares_the_scheduler(rpc_client, fake_scheduler):
    from zuul.lib import rpc_protocol as p
    from zuul.web.server import ZuulWeb
    web = ZuulWeb('127.0.0.1', 0, rpc_client, status_cache_ttl=60)
    web.start()
    web.base = f'http://127.0.0.1:{web.port}'
    try:
        for path in ('/api/tenant/tenant-one/status', '/api/tenant/tenant-one/status',
                     '/api/tenant/tenant-one/status/change/2,1'):
            assert fetch(web, path)[0] == 200
    finally:
        web.stop()
    assert [f for f, _ in fake_scheduler.calls].count(p.STATUS_GET) == 1


def test_logs_are_never_compressed_twice(tmp_path, rpc_client):
    import gzip
    import json

    from zuul.web.server import ZuulWeb
    uuid = 'a' * 32
    (tmp_path / uuid).mkdir()
    (tmp_path / uuid / 'job-output.json.gz').write_bytes(gzip.compress(b'[{"play": 1}]'))
    web = ZuulWeb('127.0.0.1', 0, rpc_client, log_root=str(tmp_path))
    web.start()
    try:
        request = urllib.request.Request(
            f'http://127.0.0.1:{web.port}/logs/{uuid}/job-output.json.gz',
            headers={'Accept-Encoding': 'gzip'})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.headers['Content-Encoding'] == 'gzip'
            assert json.loads(gzip.decompress(response.read())) == [{'play': 1}]
    finally:
        web.stop()


def test_every_page_has_an_icon(zuul_web):
    """Browsers ask for /favicon.ico on every page (and the pages link the
    SVG icon): both are there, neither is a 404."""
    _, _, body = fetch(zuul_web, '/t/tenant-one/builds')
    link = re.search(r'<link rel="icon" type="image/svg\+xml" href="(/static/favicon\.svg'
                     r'\?v=\w+)">', body)
    assert link, body
    status, headers, svg = fetch(zuul_web, link.group(1))
    assert status == 200 and svg.startswith('<svg')
    request = urllib.request.Request(zuul_web.base + '/favicon.ico')
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        assert response.headers['Content-Type'] == 'image/x-icon'
        data = response.read()
    # an ICO directory of one 32x32 image, which is a PNG
    assert data[:6] == b'\x00\x00\x01\x00\x01\x00' and data[6:8] == b'\x20\x20'
    assert data[22:30] == b'\x89PNG\r\n\x1a\n'
