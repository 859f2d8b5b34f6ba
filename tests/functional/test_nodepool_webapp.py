"""nodepool-launcher's status web app (``webapp`` in nodepool.yaml): the
daemon listens where the configuration says, and each documented
endpoint answers with the ``nodepool`` command's table, or JSON for the
``.json`` path or an ``Accept: application/json`` request."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from nodepool.config import load_config_text
from nodepool.launcher.webapp import WebApp
from nodepool.zk.records import IN_USE
from tests.functional import test_nodepool_support as support
from tests.functional.test_nodepool_support import sim_config, wait_until
from tests.harness.waiting import wait_for

launchers = support.launchers
requestor = support.requestor
zk = support.zk

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def get(url: str, accept: str | None = None) -> tuple[int, str, str]:
    request = urllib.request.Request(url, headers={'Accept': accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers['Content-Type'], response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers['Content-Type'], e.read().decode()


@pytest.fixture
def webapp(launchers, zk):
    launcher = launchers.make(sim_config())
    config = load_config_text(sim_config() + 'webapp:\n  port: 0\n  listen_address: 127.0.0.1\n')
    app = WebApp(config, zk, launcher)
    app.start()
    try:
        yield app, launcher
    finally:
        app.stop()


def test_endpoints_list_nodes_requests_labels_and_images(webapp, requestor, zk):
    app, launcher = webapp
    base = f'http://127.0.0.1:{app.port}'
    handle = requestor.submit(['small'])
    assert handle.wait(30) and handle.fulfilled
    node = handle.nodes[0]

    status, ctype, body = get(f'{base}/node-list')
    assert status == 200 and ctype.startswith('text/plain')
    assert body.splitlines()[1].split('|')[1].strip() == 'ID' and node.id in body
    status, ctype, body = get(f'{base}/node-list.json')
    assert ctype.startswith('application/json')
    nodes = json.loads(body)
    assert [(n['id'], n['label'], n['state']) for n in nodes] == [(node.id, 'small', IN_USE)]
    _, _, body = get(f'{base}/node-list?node_id=nothing', accept='application/json')
    assert json.loads(body) == []
    _, _, body = get(f'{base}/node-list?node_id={node.id}', accept='application/json')
    assert [n['id'] for n in json.loads(body)] == [node.id]

    labels = json.loads(get(f'{base}/label-list.json')[2])
    assert [(lb['label'], lb['pools']) for lb in labels] == \
        [('large', ['sim/main']), ('small', ['sim/main'])]
    assert 'Min Ready' in get(f'{base}/label-list')[2]
    assert json.loads(get(f'{base}/request-list.json')[2]) == []
    assert json.loads(get(f'{base}/image-list.json')[2]) == []
    assert json.loads(get(f'{base}/dib-image-list.json')[2]) == []
    assert 'Provider Image Name' in get(f'{base}/image-list')[2]
    assert get(f'{base}/ready')[0] == 200
    assert get(f'{base}/no-such-page')[0] == 404

    requestor.release(handle)
    wait_until(launcher, lambda: not zk.get_nodes(), 'used node deleted')


def test_request_list_shows_waiting_requests(webapp, requestor, zk):
    app, launcher = webapp
    launcher.adapters['sim'].hold_boots()
    handle = requestor.submit(['large'])
    wait_until(launcher, lambda: zk.get_nodes(), 'node launching')
    requests = json.loads(get(f'http://127.0.0.1:{app.port}/request-list.json')[2])
    assert [(r['id'], r['node_types']) for r in requests] == [(handle.id, ['large'])]
    launcher.adapters['sim'].release_boots()
    assert handle.wait(30) and handle.fulfilled
    requestor.release(handle)
    wait_until(launcher, lambda: not zk.get_nodes(), 'used node deleted')


def test_launcher_daemon_serves_the_webapp_where_configured(zk_chroot, zk, tmp_path):
    host, _, rest = zk_chroot.hosts.partition(':')
    port, _, chroot = rest.partition('/')
    web_port = free_port()
    path = tmp_path / 'nodepool.yaml'
    path.write_text(f'zookeeper-servers:\n  - host: {host}\n    port: {port}\n'
                    f'    chroot: /{chroot}\n'
                    f'webapp:\n  port: {web_port}\n  listen_address: 127.0.0.1\n'
                    + sim_config())
    log = open(tmp_path / 'launcher.log', 'w')
    proc = subprocess.Popen([sys.executable, '-m', 'nodepool.cmd.launcher', '-c', str(path),
                             '-d'], stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    url = f'http://127.0.0.1:{web_port}'
    try:
        wait_for(lambda: proc.poll() is not None or _answers(f'{url}/ready'), 60,
                 what='the web app ready')
        assert proc.poll() is None, (tmp_path / 'launcher.log').read_text()
        assert json.loads(get(f'{url}/label-list.json')[2])[1]['label'] == 'small'
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def _answers(url: str) -> bool:
    try:
        return get(url)[0] == 200
    except OSError:
        return False
