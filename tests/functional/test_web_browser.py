"""The status and builds pages rendered by a real headless Chromium.

Needs Debian's ``chromium``; skipped with a reason when it is absent.
The screenshots are kept under test-artifacts/ for people to look at.
"""

import os
import re
import shutil
import subprocess

import pytest

from tests.fakes.scheduler_rpc import RUNNING_UUID

CHROMIUM = shutil.which('chromium') or shutil.which('chromium-browser')
ARTIFACTS = os.path.join(os.path.dirname(__file__), '..', '..', 'test-artifacts')

pytestmark = pytest.mark.skipif(CHROMIUM is None,
                                reason='chromium is not installed (Debian package chromium)')



def chromium(tmp_path, *args):
    """Run headless Chromium; the virtual time budget lets the page's
    fetches finish before the DOM is dumped or the screenshot taken."""
    command = [CHROMIUM, '--headless', '--no-sandbox', '--disable-gpu',
               '--disable-background-networking', '--disable-component-update',
               '--disable-sync', '--no-first-run', '--disable-dev-shm-usage',
               f'--user-data-dir={tmp_path / "chromium-profile"}',
               '--virtual-time-budget=4000', '--window-size=1280,900', *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def _section(dom, pipeline):
    start = dom.index(f'data-pipeline="{pipeline}"')
    end = dom.find('<section', start)
    return dom[start:end if end != -1 else len(dom)]


def test_status_page_shows_a_running_gate(zuul_web, fake_scheduler, tmp_path):
    fake_scheduler.set_stream_url(f'http://127.0.0.1:1/{RUNNING_UUID}')
    url = f'{zuul_web.base}/t/tenant-one/status'
    dom = chromium(tmp_path, '--dump-dom', url)
    assert 'data-loaded="yes"' in dom
    gate = _section(dom, 'gate')
    assert 'data-queue="integrated"' in gate
    # the shared queue, in order, with positions
    assert re.findall(r'data-change="([\d,]+)" data-position="(\d+)"', gate) == [
        ('1,2', '1'), ('2,1', '2'), ('4,1', '3')]
    # finished job links to its build page; the running one to its live log
    assert '/t/tenant-one/build/' in gate
    assert f'href="/t/tenant-one/stream/{RUNNING_UUID}"' in gate
    # the running job's progress bar comes from its expected duration (60 of 120 s)
    assert 'bar-running" style="width: 50%"' in gate
    # the item's ETA is its longest-running job's remaining time (60 s)
    # and its age is how long it has been queued (5 minutes)
    first = gate[gate.index('data-change="1,2"'):gate.index('data-change="2,1"')]
    assert 'class="change-eta" title="expected time to finish">ETA ~1 min<' in first
    assert re.search(r'class="change-age" datetime="[\d\-T:.]+Z" title="enqueued [^"]+">'
                     r'queued 5m \d\ds<', first)
    assert re.findall(r'style="width: (\d+)%"', first) == ['100', '50']
    # the check pipeline's per-change queue has a name
    check = _section(dom, 'check')
    assert 'data-queue="org/project"' in check and 'Queue: org/project' in check
    assert 'tenant-two' not in dom and 'org/project2' not in dom
    os.makedirs(ARTIFACTS, exist_ok=True)
    shot = os.path.abspath(os.path.join(ARTIFACTS, 'web-status.png'))
    chromium(tmp_path, f'--screenshot={shot}', url)
    with open(shot, 'rb') as f:
        assert f.read(8) == b'\x89PNG\r\n\x1a\n'


def test_builds_page_shows_history_from_the_database(zuul_web, build_history, tmp_path):
    dom = chromium(tmp_path, '--dump-dom', f'{zuul_web.base}/t/tenant-one/builds')
    assert 'data-loaded="yes"' in dom
    uuids = re.findall(r'class="build" data-uuid="(\w+)"', dom)
    assert len(uuids) == 5
    assert 'null' not in dom.split('<main', 1)[1]  # no placeholder leaks into the page
    assert build_history.uuids[('tenant-one', '1,1', 'project-test1')] in uuids
    assert build_history.uuids[('tenant-two', '10,1', 'secret-job')] not in uuids
    failed = build_history.uuids[('tenant-one', '1,1', 'project-test1')]
    dom = chromium(tmp_path, '--dump-dom', f'{zuul_web.base}/t/tenant-one/build/{failed}')
    assert 'class="field-result">FAILURE<' in dom and 'test report' in dom
    os.makedirs(ARTIFACTS, exist_ok=True)
    chromium(tmp_path, f'--screenshot={os.path.abspath(os.path.join(ARTIFACTS, "web-builds.png"))}',
             f'{zuul_web.base}/t/tenant-one/builds?project=org/project')


def test_status_page_reports_an_unknown_tenant(zuul_web, tmp_path):
    dom = chromium(tmp_path, '--dump-dom', f'{zuul_web.base}/t/nope/status')
    assert 'Unknown tenant nope' in dom
