"""Stored XSS through links a job returns.

A job's ``zuul_return`` sets ``zuul.log_url`` and artifact URLs; zuul-web
shows them as links on the build page, where an admin's token lives.  A
``javascript:`` link is refused when the result is taken in, again when
the history serves it (rows stored by earlier releases), and once more by
the page itself; every page carries a Content-Security-Policy without
inline script.  The pages are loaded in a real headless Chromium.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from tests.fakes.scheduler_rpc import _history_item
from tests.functional.test_web_browser import CHROMIUM, chromium
from zuul.lib.urls import safe_link, safe_result_data

EVIL = ['javascript:alert(document.domain)', ' javascript:alert(1)', 'java\tscript:alert(1)',
        'JAVASCRIPT:alert(1)', 'data:text/html,<script>alert(1)</script>',
        'vbscript:msgbox(1)', '\x01javascript:alert(1)']
GOOD = ['https://logs.example.org/1/', 'http://logs/x', '/logs/abc/', 'report.html',
        '?path=x', '#L3', '//cdn.example.org/a']


@pytest.mark.parametrize('url', EVIL)
def test_script_links_refused(url):
    assert safe_link(url) is None


@pytest.mark.parametrize('url', GOOD)
def test_web_and_relative_links_kept(url):
    assert safe_link(url) == url


def test_returned_data_loses_script_links_only():
    """A local file stays as data (image builds on a local provider return
    file:// artifacts the launcher reads); it is never shown as a link."""
    from zuul.lib.urls import web_artifacts
    data = {'zuul': {'log_url': 'javascript:alert(1)', 'artifacts': [
        {'name': 'ok', 'url': 'https://x/report.html'},
        {'name': 'image', 'url': 'file:///var/lib/images/x.qcow2'},
        {'name': 'bad', 'url': 'javascript:alert(1)'}], 'child_jobs': ['a']},
        'other': 'kept'}
    kept = safe_result_data(data)
    assert kept == {'zuul': {'artifacts': [
        {'name': 'ok', 'url': 'https://x/report.html'},
        {'name': 'image', 'url': 'file:///var/lib/images/x.qcow2'}], 'child_jobs': ['a']},
        'other': 'kept'}
    assert web_artifacts(kept['zuul']['artifacts']) == [
        {'name': 'ok', 'url': 'https://x/report.html'}]


def test_scheduler_takes_in_no_script_link():
    """The scheduler's build-completed handling keeps the link out of the
    build, and so out of the reports, the status page and the history."""
    from zuul.scheduler.scheduler import Scheduler
    item = _history_item('org/project', 5, 1, {'j': 'SUCCESS'}, 1_700_000_000)
    build = item.current_build_set.builds['j']
    build.log_url = 'https://logs/5/j/'

    class Manager:
        def on_build_completed(self, build, result):
            self.result = result

    class Sched:
        _forget, tenants, stats = [], {}, None

        def _manager_of(self, item):
            return manager
    manager = Manager()
    Scheduler._on_build_completed(Sched(), {
        'build': build, 'result': 'SUCCESS', 'log_url': 'javascript:alert(1)',
        'result_data': {'zuul': {'artifacts': [{'name': 'x', 'url': 'javascript:x'}]}}})
    assert build.log_url == 'https://logs/5/j/'
    assert build.result_data == {'zuul': {'artifacts': []}}
    assert manager.result == 'SUCCESS'


@pytest.fixture
def evil_history(build_history):
    """A build stored the way an earlier release stored it: its links
    unchecked."""
    item = _history_item('org/project', 9, 1, {'evil-job': 'SUCCESS'}, 1_700_100_000)
    item.change.url = 'javascript:alert("change")'
    build = item.current_build_set.builds['evil-job']
    build.log_url = 'javascript:alert("log")'
    build.result_data = {'zuul': {'artifacts': [
        {'name': 'evil artifact', 'url': 'javascript:alert("artifact")'},
        {'name': 'fine artifact', 'url': 'https://logs/9/report.html'}]}}
    build_history.record_buildset('tenant-one', 'check', item, 'success', 'Build success.')
    build_history.evil = (build.uuid, item.current_build_set.uuid)
    return build_history


@pytest.fixture
def web(rpc_client, evil_history):
    from zuul.web.server import ZuulWeb
    server = ZuulWeb('127.0.0.1', 0, rpc_client, evil_history)
    server.start()
    server.base = f'http://127.0.0.1:{server.port}'
    try:
        yield server
    finally:
        server.stop()


def _get(url):
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.headers, response.read()


def test_history_serves_no_script_link(web, evil_history):
    uuid, _ = evil_history.evil
    _, body = _get(f'{web.base}/api/tenant/tenant-one/build/{uuid}')
    build = json.loads(body)
    assert build['log_url'] is None and build['ref_url'] is None
    assert [a['name'] for a in build['artifacts']] == ['fine artifact']
    assert 'javascript:' not in body.decode()


@pytest.mark.parametrize('path', ['/t/tenant-one/status', '/api/tenants',
                                  '/t/tenant-one/builds', '/static/common.js'])
def test_every_answer_carries_a_policy_without_inline_script(web, path):
    headers, _ = _get(web.base + path)
    policy = headers['Content-Security-Policy']
    directives = dict(d.strip().split(' ', 1) for d in policy.split(';'))
    assert directives['script-src'] == "'self'"
    assert "'unsafe-inline'" not in directives['script-src']
    assert directives['object-src'] == "'none'" and directives['base-uri'] == "'none'"
    assert headers['X-Content-Type-Options'] == 'nosniff'


@pytest.mark.skipif(CHROMIUM is None, reason='chromium is not installed')
@pytest.mark.parametrize('page', ['build', 'buildset'])
def test_pages_render_no_script_link(web, evil_history, tmp_path, page):
    build_uuid, buildset_uuid = evil_history.evil
    uuid = build_uuid if page == 'build' else buildset_uuid
    dom = chromium(tmp_path, '--dump-dom', f'{web.base}/t/tenant-one/{page}/{uuid}')
    assert 'data-loaded="yes"' in dom, dom[-2000:]
    assert 'javascript:' not in dom.split('<main', 1)[1].split('</main>')[0].replace(
        'javascript:alert("change")</', '')  # the change URL may be shown as text
    assert 'href="javascript' not in dom
