"""zuul-web serves finished builds' logs from [web] log_root at /logs/."""

from __future__ import annotations

import gzip
import http.client
import json
import os

import pytest

from zuul.web.logs import content_type
from zuul.web.server import ZuulWeb

UUID = 'f' * 32


@pytest.fixture
def log_root(tmp_path):
    root = tmp_path / 'logs'
    build = root / UUID
    (build / 'node' / 'sub dir').mkdir(parents=True)
    (build / 'job-output.txt').write_text('hello ✓\n')
    (build / 'job-output.json').write_text('[{"plays": []}]')
    (build / 'report.html').write_text('<p>hi</p>')
    (build / 'node' / 'syslog.txt.gz').write_bytes(gzip.compress(b'zipped\n'))
    (build / 'node' / 'bundle.tar.gz').write_bytes(b'\x1f\x8b not really')
    (build / 'node' / 'sub dir' / '<b>&.log').write_text('odd name\n')
    (tmp_path / 'secret').write_text('SECRET\n')
    (build / 'leak.txt').symlink_to(tmp_path / 'secret')
    (build / 'leakdir').symlink_to(tmp_path)
    os.mkfifo(build / 'pipe')
    # Beside the builds: a half-archived build (logarchive writes
    # .<uuid>.tmp-<pid>/ then renames it) and files of the root itself.
    partial = root / f'.{"e" * 32}.tmp-4242'
    partial.mkdir()
    (partial / 'job-output.txt').write_text('SECRET half-written\n')
    (root / 'README').write_text('SECRET operator notes\n')
    (root / '.htpasswd').write_text('SECRET admin:x\n')
    return root


@pytest.fixture
def web(rpc_client, build_history, log_root):
    web = ZuulWeb('127.0.0.1', 0, rpc_client, build_history, log_root=str(log_root))
    web.start()
    try:
        yield web
    finally:
        web.stop()


def fetch(web, path, method='GET'):
    """(status, headers, body); ``path`` is sent as is (no normalising)."""
    conn = http.client.HTTPConnection('127.0.0.1', web.port, timeout=30)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, response.headers, response.read()
    finally:
        conn.close()


@pytest.mark.parametrize('name, expected', [
    ('job-output.txt', ('text/plain; charset=utf-8', None)),
    ('console.LOG', ('text/plain; charset=utf-8', None)),
    ('job-output.json', ('application/json', None)),
    ('index.html', ('text/html; charset=utf-8', None)),
    ('syslog.txt.gz', ('text/plain; charset=utf-8', 'gzip')),
    ('bundle.tar.gz', ('application/gzip', None)),
    ('dmesg', ('text/plain; charset=utf-8', None)),
    ('image.png', ('image/png', None)),
    ('blob.weird-ext', ('application/octet-stream', None)),
])
def test_content_types(name, expected):
    assert content_type(name) == expected


def test_files_are_served_with_their_type(web):
    status, headers, body = fetch(web, f'/logs/{UUID}/job-output.txt')
    assert (status, headers['Content-Type'], body) == (
        200, 'text/plain; charset=utf-8', 'hello ✓\n'.encode())
    assert headers['Content-Security-Policy'] == 'sandbox'
    assert headers['X-Content-Type-Options'] == 'nosniff'
    status, headers, body = fetch(web, f'/logs/{UUID}/job-output.json')
    assert (status, headers['Content-Type']) == (200, 'application/json')
    assert json.loads(body) == [{'plays': []}]
    status, headers, body = fetch(web, f'/logs/{UUID}/report.html')
    assert (status, headers['Content-Type'], body) == (200, 'text/html; charset=utf-8',
                                                       b'<p>hi</p>')
    status, headers, body = fetch(web, f'/logs/{UUID}/node/syslog.txt.gz')
    assert (status, headers['Content-Type'], headers['Content-Encoding']) == (
        200, 'text/plain; charset=utf-8', 'gzip')
    assert gzip.decompress(body) == b'zipped\n'
    status, headers, _ = fetch(web, f'/logs/{UUID}/node/bundle.tar.gz')
    assert (status, headers['Content-Type'], headers['Content-Encoding']) == (
        200, 'application/gzip', None)
    status, headers, body = fetch(web, f'/logs/{UUID}/node/sub%20dir/%3Cb%3E%26.log')
    assert (status, body) == (200, b'odd name\n')
    status, headers, body = fetch(web, f'/logs/{UUID}/job-output.txt', method='HEAD')
    assert (status, headers['Content-Length'], body) == (200, str(len('hello ✓\n'.encode())),
                                                         b'')


def test_directories_are_listed(web):
    status, headers, body = fetch(web, f'/logs/{UUID}/')
    assert (status, headers['Content-Type']) == (200, 'text/html; charset=utf-8')
    page = body.decode()
    assert f'Index of /logs/{UUID}/' in page
    assert '<a href="node/">node/</a>' in page
    assert '<a href="job-output.txt">job-output.txt</a></td><td>10</td>' in page
    # symlinks and the FIFO are not offered
    for hidden in ('leak.txt', 'leakdir', 'pipe'):
        assert hidden not in page
    assert '../' not in page  # nothing above the build
    page = fetch(web, f'/logs/{UUID}/node/sub%20dir/')[2].decode()
    assert '<a href="%3Cb%3E%26.log">&lt;b&gt;&amp;.log</a>' in page
    assert '<a href="../">../</a>' in page
    # without the trailing slash, a redirect so relative links work
    status, headers, _ = fetch(web, f'/logs/{UUID}/node')
    assert status == 301 and headers['Location'].endswith(f'/logs/{UUID}/node/')


@pytest.mark.parametrize('path', [
    f'/logs/{UUID}/missing.txt',
    '/logs/' + 'e' * 32 + '/',
    '/logs/',
    '/logs',
    f'/logs/{UUID}/leak.txt',                 # symlink to a file outside
    f'/logs/{UUID}/leakdir/secret',           # through a symlinked directory
    f'/logs/{UUID}/pipe',                     # a FIFO must not hang the server
    f'/logs/{UUID}/../secret',
    f'/logs/{UUID}/%2e%2e/secret',
    f'/logs/{UUID}/%2e%2e%2fsecret',
    f'/logs/{UUID}/%2e%2e%2Fsecret',
    f'/logs/{UUID}/node/..%2f..%2f..%2fsecret',
    '/logs/%2Fetc%2Fpasswd',
    '/logs//etc/passwd',
    '/logs/..',
    '/logs/%2e%2e/secret',
    f'/logs/.{"e" * 32}.tmp-4242/job-output.txt',     # an archive being written
    f'/logs/.{"e" * 32}.tmp-4242/',
    f'/logs/.{"e" * 32}.tmp-4242/?format=listing',
    '/logs/README',                                   # files of the log root itself
    '/logs/README?format=json',
    '/logs/.htpasswd',
])
def test_missing_and_escaping_paths_are_404(web, path):
    status, _, body = fetch(web, path)
    assert status == 404, (path, body)
    assert b'SECRET' not in body


def test_without_a_log_root_everything_is_404(rpc_client, build_history):
    web = ZuulWeb('127.0.0.1', 0, rpc_client, build_history)
    web.start()
    try:
        assert fetch(web, f'/logs/{UUID}/job-output.txt')[0] == 404
    finally:
        web.stop()


def test_the_api_still_answers_beside_the_logs(web):
    status, headers, body = fetch(web, '/api/tenants')
    assert status == 200 and headers['Content-Type'].startswith('application/json')
    assert [t['name'] for t in json.loads(body)] == ['tenant-one', 'tenant-two']
    status, _, body = fetch(web, '/api/tenant/tenant-one/status')
    assert status == 200 and 'pipelines' in json.loads(body)
