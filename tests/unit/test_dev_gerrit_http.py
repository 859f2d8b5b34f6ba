"""The development Gerrit's read-only HTTP pages: the change links Zuul's
status page builds from the connection's baseurl lead somewhere."""

from __future__ import annotations

import http.client
import os
import urllib.request
from urllib.parse import urlsplit

import pytest

from zuul.devtools.gerrit import DevGerritServer, ReviewStore, hooks


@pytest.fixture
def web_gerrit(tmp_path):
    store = ReviewStore(str(tmp_path / 'review'))
    server = DevGerritServer(store, str(tmp_path / 'host_key'), http_port=0)
    server.start()
    store.set_canonical_url(server.http_url)
    store.create_project('org/project')
    try:
        yield server
    finally:
        server.stop()


def _get(server, path, method='GET'):
    """(status, headers, body) without following redirects."""
    conn = http.client.HTTPConnection('127.0.0.1', server.http_port, timeout=30)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def test_http_is_off_unless_asked(tmp_path):
    server = DevGerritServer(ReviewStore(str(tmp_path / 'r')), str(tmp_path / 'k'))
    server.start()
    server.stop()
    assert server.http_port is None and server.http_url is None


def test_change_page_at_the_canonical_url(web_gerrit):
    store = web_gerrit.store
    assert web_gerrit.http_url == f'http://127.0.0.1:{web_gerrit.http_port}'
    a = store.create_change('org/project', 'master', 'Add a file', {'a.txt': 'a\n'})
    b = store.create_change('org/project', 'master', 'Use the file', {'b.txt': 'b\n'},
                            parent=a, footer='Depends-On: https://other.example.com/c/x/+/9')
    store.add_patchset(b, {'b.txt': 'b2\n'})
    store.review(b, 2, 'ci', 'Build succeeded & all is well', {'Verified': 1})
    url = store.change_url(b)
    assert url == f'{web_gerrit.http_url}/c/org/project/+/{b.number}'
    with urllib.request.urlopen(url, timeout=30) as resp:
        assert resp.status == 200
        assert resp.headers['Content-Type'].startswith('text/html')
        page = resp.read().decode()
    assert 'Use the file' in page and 'org/project' in page and 'master' in page
    assert 'NEW' in page and 'developer@example.com' in page
    for ps in b.patchsets:
        assert ps.ref in page and ps.revision in page
    assert 'Verified +1 by ci' in page
    assert 'Build succeeded &amp; all is well' in page
    assert 'href="https://other.example.com/c/x/+/9"' in page
    assert f'href="/c/org/project/+/{a.number}"' in page
    # and the parent shows what needs it
    _, _, parent = _get(web_gerrit, f'/c/org/project/+/{a.number}')
    assert f'href="/c/org/project/+/{b.number}"' in parent.decode()
    # a patch set suffix, a trailing slash and an encoded project name
    for path in (f'/c/org/project/+/{b.number}/1', f'/c/org%2Fproject/+/{b.number}/'):
        assert _get(web_gerrit, path)[0] == 200


def test_number_redirects_to_the_change_page(web_gerrit):
    change = web_gerrit.store.create_change('org/project', 'master', 'A', {'a': '1'})
    status, headers, _ = _get(web_gerrit, f'/{change.number}')
    assert status == 302
    assert headers['Location'] == f'/c/org/project/+/{change.number}'
    with urllib.request.urlopen(f'{web_gerrit.http_url}/{change.number}',
                                timeout=30) as resp:
        assert urlsplit(resp.url).path == f'/c/org/project/+/{change.number}'
        assert resp.status == 200


def test_index_lists_open_changes(web_gerrit):
    store = web_gerrit.store
    open_change = store.create_change('org/project', 'master', 'Still open', {'a': '1'})
    gone = store.create_change('org/project', 'master', 'Given up', {'b': '1'})
    store.abandon(gone)
    status, _, body = _get(web_gerrit, '/')
    page = body.decode()
    assert status == 200
    assert 'Still open' in page and f'href="/c/org/project/+/{open_change.number}"' in page
    assert 'Given up' not in page


def test_commit_msg_hook_is_the_one_scp_serves(web_gerrit, tmp_path):
    status, headers, body = _get(web_gerrit, '/tools/hooks/commit-msg')
    assert status == 200
    assert body == hooks.lookup('hooks/commit-msg')[1]
    dest = tmp_path / 'commit-msg'
    urllib.request.urlretrieve(f'{web_gerrit.http_url}/tools/hooks/commit-msg', dest)
    assert dest.read_bytes() == hooks.COMMIT_MSG_HOOK.encode()
    assert os.path.getsize(dest) == int(headers['Content-Length'])


@pytest.mark.parametrize('path', ['/nope', '/999', '/c/org/project/+/999',
                                  '/c/other/project/+/1', '/tools/hooks/other',
                                  '/c/org/project/+/x'])
def test_unknown_paths_are_404(web_gerrit, path):
    web_gerrit.store.create_change('org/project', 'master', 'A', {'a': '1'})
    status, _, body = _get(web_gerrit, path)
    assert status == 404
    assert b'Not found' in body


def test_head_has_no_body(web_gerrit):
    status, headers, body = _get(web_gerrit, '/', method='HEAD')
    assert status == 200 and body == b'' and int(headers['Content-Length']) > 0


def test_everything_is_escaped(web_gerrit):
    store = web_gerrit.store
    evil = '<script>alert("x")</script>'
    change = store.create_change('org/project', 'master', evil, {'<b>.txt': '1'},
                                 owner='mallory', topic='"><i>t</i>')
    store.comment(change, f'{evil} & more')
    _, _, body = _get(web_gerrit, f'/c/org/project/+/{change.number}')
    page = body.decode()
    assert '<script>' not in page and '<b>' not in page and '<i>' not in page
    assert '&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;' in page
    assert '&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; more' in page
    _, _, index = _get(web_gerrit, '/')
    assert '<script>' not in index.decode()
    _, _, missing = _get(web_gerrit, '/%3Cscript%3E')
    assert b'<script>' not in missing


def test_stop_closes_the_http_port(tmp_path):
    store = ReviewStore(str(tmp_path / 'review'))
    server = DevGerritServer(store, str(tmp_path / 'host_key'), http_port=0)
    server.start()
    port = server.http_port
    assert _get(server, '/')[0] == 200
    server.stop()
    with pytest.raises(OSError):
        http.client.HTTPConnection('127.0.0.1', port, timeout=5).request('GET', '/')
