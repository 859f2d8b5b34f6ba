"""The build, builds, buildsets and live log pages in a real headless
Chromium (Debian ``chromium``; skipped with a reason when absent), over
the fake scheduler, a filled SQLite history and a [web] log_root."""

import json
import re
import subprocess
import threading
import urllib.request

import pytest

from tests.fakes.scheduler_rpc import RUNNING_UUID, _history_item
from tests.functional.test_web_browser import CHROMIUM, chromium
from zuul.executor.logstream import LogStreamServer
from zuul.web import websocket
from zuul.web.server import ZuulWeb

pytestmark = pytest.mark.skipif(CHROMIUM is None,
                                reason='chromium is not installed (Debian package chromium)')

JOB_OUTPUT = ('2026-01-01 00:00:00 | plain first line\n'
              '2026-01-01 00:00:01 | \x1b[31mred failure\x1b[0m then plain\n'
              '2026-01-01 00:00:02 | \x1b[1;32mbold green\x1b[0m\n' +
              ''.join(f'2026-01-01 00:00:03 | line {n}\n' for n in range(4, 40)))
TASKS = [{'phase': 'run', 'playbook': 'playbooks/test.yaml', 'plays': [
    {'play': {'name': 'Run the tests'}, 'tasks': [
        {'task': {'name': 'unit tests'}, 'hosts': {
            'ubuntu': {'status': 'FAILED', 'msg': 'tests failed'}}},
        {'task': {'name': 'collect'}, 'hosts': {'ubuntu': {'status': 'ok'}}}]}]}]
INVENTORY = """all:
  hosts:
    ubuntu:
      ansible_host: 192.0.2.10
      nodepool: {label: ubuntu-jammy}
  vars:
    favourite_colour: blue
    db_password: hunter2
    deploy_key: |
      -----BEGIN OPENSSH PRIVATE KEY-----
      abc
      -----END OPENSSH PRIVATE KEY-----
    zuul: {job: project-test1}
"""


@pytest.fixture
def web(rpc_client, build_history, tmp_path):
    failed = build_history.uuids[('tenant-one', '1,1', 'project-test1')]
    logs = tmp_path / 'logs' / failed
    (logs / 'zuul-info').mkdir(parents=True)
    (logs / 'job-output.txt').write_text(JOB_OUTPUT)
    (logs / 'job-output.json').write_text(json.dumps(TASKS))
    (logs / 'zuul-info' / 'inventory.yaml').write_text(INVENTORY)
    server = ZuulWeb('127.0.0.1', 0, rpc_client, build_history, log_root=str(tmp_path / 'logs'))
    server.start()
    server.base = f'http://127.0.0.1:{server.port}'
    server.failed = failed
    try:
        yield server
    finally:
        server.stop()


def _main(dom):
    assert 'data-loaded="yes"' in dom, dom[-3000:]
    return dom.split('<main', 1)[1]


def test_build_page_summary_inputs_and_log_tree(web, tmp_path):
    main = _main(chromium(tmp_path, '--dump-dom', f'{web.base}/t/tenant-one/build/{web.failed}'))
    assert 'class="field-result">FAILURE<' in main
    assert re.search(r'href="/t/tenant-one/buildset/\w+" id="buildset-link"', main)
    # inputs from zuul-info/inventory.yaml, secrets redacted by the server
    assert 'ubuntu: ubuntu-jammy' in main and '"favourite_colour": "blue"' in main
    assert 'hunter2' not in main and 'PRIVATE KEY' not in main
    assert '"db_password": "&lt;redacted&gt;"' in main
    # the command that reproduces it, copy-paste ready (zuul reproduce)
    assert (f'>zuul --zuul-url {web.base} reproduce --tenant tenant-one {web.failed}</pre>'
            in main) and 'id="reproduce-command"' in main
    # the log directory, browsable in place, in the Logs view
    assert 'id="log-tree"' not in main
    main = _main(chromium(tmp_path, '--dump-dom',
                          f'{web.base}/t/tenant-one/build/{web.failed}?tab=logs'))
    tree = main[main.index('id="log-tree"'):]
    assert re.findall(r'href="[^"?]*\?tab=logs&amp;path=([^"]+)"', tree) == [
        'zuul-info', 'job-output.json', 'job-output.txt']


def test_job_output_with_ansi_colours_and_line_anchors(web, tmp_path):
    url = f'{web.base}/t/tenant-one/build/{web.failed}?path=job-output.txt#L2'
    main = _main(chromium(tmp_path, '--dump-dom', url))
    assert '\x1b' not in main and '[31m' not in main
    assert re.search(r'<span class="ansi" style="color: #cc0000">red failure</span> then plain',
                     main)
    assert 'style="color: #4e9a06; font-weight: bold">bold green</span>' in main
    assert len(re.findall(r'<span class="line( highlight)?" id="L\d+"', main)) == 39
    assert re.search(r'class="line highlight" id="L2"', main)  # the #L2 anchor
    assert not re.search(r'class="line highlight" id="L[13]"', main)
    main = _main(chromium(tmp_path, '--dump-dom', url.replace('#L2', '#L5-7')))
    assert re.findall(r'class="line highlight" id="L(\d+)"', main) == ['5', '6', '7']


def test_job_output_json_as_a_task_list(web, tmp_path):
    url = f'{web.base}/t/tenant-one/build/{web.failed}?path=job-output.json'
    main = _main(chromium(tmp_path, '--dump-dom', url))
    rows = re.findall(r'<tr class="task" data-result="(\w+)"><td>run playbooks/test.yaml</td>'
                      r'<td>Run the tests</td><td>([^<]+)</td><td>ubuntu</td>', main)
    assert rows == [('FAILED', 'unit tests'), ('OK', 'collect')]


def test_builds_list_filters_and_sort_in_the_url(web, tmp_path):
    main = _main(chromium(tmp_path, '--dump-dom',
                          f'{web.base}/t/tenant-one/builds?job_name=project-merge&sort=change'))
    changes = re.findall(r'<tr class="build" data-uuid="\w+">(?:<td>.*?</td>){4}<td>(\d+),\d+<',
                         main)
    assert changes == ['1', '1', '4']   # ascending by change, only project-merge
    assert re.search(r'name="job_name" value="project-merge"', main)
    assert 'aria-sort="ascending" data-sort="change"' in main
    # clicking the header again sorts descending
    assert 'href="?job_name=project-merge&amp;sort=-change"' in main
    dom = chromium(tmp_path, '--dump-dom', f'{web.base}/t/tenant-one/builds?result=nope')
    assert 'id="error">Cannot load builds: invalid result "nope"' in dom


def test_buildsets_and_buildset_pages(web, build_history, tmp_path):
    main = _main(chromium(tmp_path, '--dump-dom',
                          f'{web.base}/t/tenant-one/buildsets?project=org/project'))
    assert len(re.findall(r'<tr class="buildset"', main)) == 2
    uuid = build_history.uuids[('tenant-one', '1,1', None)]
    main = _main(chromium(tmp_path, '--dump-dom', f'{web.base}/t/tenant-one/buildset/{uuid}'))
    assert re.findall(r'href="/t/tenant-one/build/\w+">([\w-]+)</a>', main) == [
        'project-merge', 'project-test1']
    assert 'class="field-message">Build failure.<' in main


class DevTools:
    """Headless Chromium driven over its DevTools websocket (with the
    websocket client of zuul/web/websocket.py): virtual time does not wait
    for a websocket's frames, so the live log page runs in real time and
    the test waits for the page's own signal that the stream closed."""

    def __init__(self, tmp_path):
        self.process = subprocess.Popen(
            [CHROMIUM, '--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
             '--disable-background-networking', '--disable-dev-shm-usage',
             f'--user-data-dir={tmp_path / "chromium-devtools"}',
             '--remote-debugging-port=0', 'about:blank'],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for line in self.process.stderr:
            if line.startswith('DevTools listening on ws://'):
                break
        port = int(line.split('ws://', 1)[1].split('/', 1)[0].rsplit(':', 1)[1])
        with urllib.request.urlopen(f'http://127.0.0.1:{port}/json/list') as r:
            page = next(t for t in json.loads(r.read()) if t['type'] == 'page')
        path = page['webSocketDebuggerUrl'].split(str(port), 1)[1]
        self.ws = websocket.connect('127.0.0.1', port, path)
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send_text(json.dumps({'id': self.next_id, 'method': method,
                                      'params': params}))
        while True:
            answer = json.loads(self.ws.receive().text)
            if answer.get('id') == self.next_id:
                return answer['result']

    def evaluate(self, expression):
        return self.call('Runtime.evaluate', expression=expression,
                         awaitPromise=True, returnByValue=True)['result'].get('value')

    def close(self):
        self.ws.close()
        self.process.terminate()
        self.process.wait(30)


def live_dom(tmp_path, url):
    """The page's DOM once it set ``data-closed`` (the stream ended)."""
    browser = DevTools(tmp_path)
    try:
        browser.call('Page.navigate', url=url)
        # the page's signal, awaited inside the page (60 s at most)
        browser.evaluate('new Promise((resolve) => { const t0 = Date.now(); (function check() {'
                         ' if (document.body && document.body.dataset.closed ||'
                         ' Date.now() - t0 > 60000) resolve(true);'
                         ' else setTimeout(check, 50); })(); })')
        return browser.evaluate('document.documentElement.outerHTML')
    finally:
        browser.close()


class ReaderSignallingStream(LogStreamServer):
    """A real executor log stream that says when a reader has arrived."""

    def __init__(self):
        super().__init__('127.0.0.1', 0)
        self.reader_arrived = threading.Event()

    def get(self, uuid):
        found = super().get(uuid)
        self.reader_arrived.set()
        return found


def test_live_log_page_streams_a_running_build(web, fake_scheduler, tmp_path):
    stream = ReaderSignallingStream()
    stream.start()
    log = tmp_path / 'job-output.txt'
    log.write_text('streamed \x1b[33mwarning\x1b[0m\nsecond line\n')
    stream.register(RUNNING_UUID, str(log))
    fake_scheduler.set_stream_url(stream.url(RUNNING_UUID))

    def end_build_once_followed():  # the build ends while the page watches
        stream.reader_arrived.wait(120)
        stream.finish(RUNNING_UUID)
    ender = threading.Thread(target=end_build_once_followed, daemon=True)
    ender.start()
    try:
        main = _main(live_dom(tmp_path, f'{web.base}/t/tenant-one/stream/{RUNNING_UUID}'))
    finally:
        stream.reader_arrived.set()
        ender.join()
        stream.stop()
    assert 'style="color: #c4a000">warning</span>' in main
    assert 'id="L2"' in main and 'second line' in main
    assert 'The build has finished: end of log.' in main


def test_build_page_shows_failure_class_and_reused_result(web, build_history, tmp_path):
    original = build_history.uuids[('tenant-one', '1,2', 'project-test1')]
    item = _history_item('org/project', 7, 1, {'project-test1': 'SUCCESS',
                                               'project-merge': 'FAILURE'}, 1_700_010_000)
    builds = item.current_build_set.builds
    builds['project-test1'].reused_from = {'uuid': original}
    builds['project-merge'].failure_class = 'infra:unreachable'
    build_history.record_buildset('tenant-one', 'check', item, 'failure', 'Build failed.')
    reused = _main(chromium(tmp_path, '--dump-dom',
                            f'{web.base}/t/tenant-one/build/{builds["project-test1"].uuid}'))
    assert re.search(rf'href="/t/tenant-one/build/{original}" id="reused-from-link"', reused)
    failed = _main(chromium(tmp_path, '--dump-dom',
                            f'{web.base}/t/tenant-one/build/{builds["project-merge"].uuid}'))
    assert 'class="field-failure class">infra:unreachable<' in failed
    assert 'reused-from-link' not in failed
