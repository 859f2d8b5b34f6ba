"""Live log latency: from a line printed on a node to the browser.

N builds (default 10) run at once on one executor, each on its own node
(sshd in a network namespace) whose base pre-run starts ``zuul_console``.
Each build's run playbook waits until every watcher is connected, then
prints ``LAT <time>`` lines (the node's clock, which is this machine's)
every ``--interval`` seconds.  Two kinds of watcher follow every build:

* a headless Chromium window on zuul-web's live log page
  (``/t/<tenant>/stream/<uuid>``): the time each websocket message
  reaches the page's JavaScript;
* a websocket client in this process on the same zuul-web endpoint (what
  zuul-web relays, without the browser);
* a finger client on the executor's log stream port (``echo UUID | nc``):
  the time each chunk arrives.

zuul-web runs as its own process (``zuul-web -c``), as in production; the
executor runs in this one.

The latency of a line is its arrival time minus the time in it.  zuul-web
finds the builds in the status a small RPC server answers (as the
scheduler's would).

    .venv/bin/python -m benchmarks.console_latency [--builds 10] [--lines 50]
        [--interval 0.2]

Needs root (network namespaces), bwrap, Debian's chromium and
chromium-driver, and selenium.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from benchmarks.nodepool import print_table
from nodepool.zk.localserver import free_port
from tests.functional.test_executor_support import (
    NetnsNodeFactory,
    UpstreamRepos,
    execute_request,
    item,
    make_merger,
    node_spec,
    playbook,
)
from zuul.executor.client import ExecutorClient
from zuul.executor.protocol import JobSpec
from zuul.executor.server import ExecutorServer
from zuul.executor.settings import ExecutorSettings
from zuul.lib import rpc_protocol as p
from zuul.lib.gearlib import GearServer
from zuul.lib.rpc import RPCListener

TENANT = 'bench'
START_CONSOLE = '- hosts: all\n  gather_facts: false\n  tasks:\n    - zuul_console:\n'
RUN = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Print timestamped lines
      shell: |
        while [ ! -e {go} ]; do sleep 0.05; done
        for i in $(seq {lines}); do echo "LAT $(date +%s.%N)"; sleep {interval}; done
"""
LAT_RE = re.compile(r'LAT (\d+\.\d+)')

# Every websocket message the page receives, with when (epoch ms).
PROBE = """
window.benchArrivals = [];
const Native = window.WebSocket;
window.WebSocket = function (...args) {
  const ws = new Native(...args);
  ws.addEventListener('message', (event) => {
    window.benchArrivals.push([performance.timeOrigin + performance.now(), event.data]);
  });
  return ws;
};
window.WebSocket.prototype = Native.prototype;
"""


def status_of(builds: dict) -> dict:
    jobs = [{'name': f'job-{i}', 'uuid': uuid, 'url': url, 'result': None,
             'start_time': time.time()} for i, (uuid, url) in enumerate(builds.items())]
    item_ = {'id': '1,1', 'project': 'org/project', 'live': True, 'jobs': jobs}
    return {'pipelines': [{'name': 'check', 'change_queues': [
        {'name': 'org/project', 'heads': [[item_]]}]}]}


class WebSocketWatcher(threading.Thread):
    """Follows one build through zuul-web's console-stream websocket."""

    def __init__(self, port: int, uuid: str):
        super().__init__(daemon=True)
        from zuul.web.websocket import connect
        self.ws = connect('127.0.0.1', port, f'/api/tenant/{TENANT}/console-stream',
                          timeout=None)
        self.ws.send_text(json.dumps({'uuid': uuid, 'logfile': 'console.log'}))
        self.arrivals: list[tuple[float, str]] = []
        self.start()

    def run(self) -> None:
        from zuul.web.websocket import ConnectionClosedError
        try:
            while True:
                text = self.ws.receive().text
                self.arrivals.append((time.time() * 1000, text))
        except (ConnectionClosedError, OSError):
            return


class Finger(threading.Thread):
    """Reads one build's console over the finger protocol."""

    def __init__(self, url: str, uuid: str):
        super().__init__(daemon=True)
        host, port = re.match(r'http://([^:/]+):(\d+)/', url).groups()
        self.sock = socket.create_connection((host, int(port)), 10)
        self.sock.settimeout(None)      # quiet while the builds wait to start
        self.sock.sendall(f'{uuid}\n'.encode())
        self.arrivals: list[tuple[float, str]] = []
        self.start()

    def run(self) -> None:
        while True:
            data = self.sock.recv(65536)
            if not data:
                return
            self.arrivals.append((time.time() * 1000, data.decode('utf-8', 'replace')))


def latencies(arrivals) -> list[float]:
    """ms from each LAT line's time to the arrival of the chunk holding it."""
    out = []
    for at, text in arrivals:
        out += [at - float(t) * 1000 for t in LAT_RE.findall(text)]
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def row(name: str, values: list[float], expected: int) -> list[str]:
    if not values:
        return [name, '0', '-', '-', '-', '-']
    return [name, f'{len(values)}/{expected}', f'{statistics.median(values):.0f}',
            f'{percentile(values, 0.9):.0f}', f'{percentile(values, 0.99):.0f}',
            f'{max(values):.0f}']


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which('chromium')
    profile = tempfile.mkdtemp(prefix='bench-chromium-')
    for arg in ('--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
                '--no-first-run', '--window-size=1280,900', f'--user-data-dir={profile}',
                '--disable-background-timer-throttling', '--disable-renderer-backgrounding',
                '--disable-backgrounding-occluded-windows'):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=shutil.which('chromedriver')),
                              options=options)
    return driver, profile


def run(args, root: str) -> list[list[str]]:
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', f'{root}/id'],
                   check=True)
    with open(f'{root}/id.pub') as f:
        nodes = NetnsNodeFactory(f.read(), f'{root}/nodes')
    go = f'{root}/go'
    port = free_port()
    gear = GearServer(port=port, host='127.0.0.1')
    upstream = UpstreamRepos(f'{root}/up')
    upstream.create('org/config', {'playbooks/pre.yaml': START_CONSOLE})
    upstream.create('org/project', {'playbooks/run.yaml': RUN.format(
        go=go, lines=args.lines, interval=args.interval)})
    settings = ExecutorSettings(hostname='bench-executor', job_dir=f'{root}/b',
                                state_dir=f'{root}/s', private_key_file=f'{root}/id',
                                load_multiplier=0, min_avail_mem=0, log_stream_port=0,
                                log_stream_host='127.0.0.1', max_builds=args.builds + 2)
    executor = ExecutorServer(settings, '127.0.0.1', port, make_merger(upstream, f'{root}/m'))
    builds: dict[str, str] = {}
    listener = RPCListener('127.0.0.1', port, {
        p.STATUS_GET: lambda r: status_of(builds),
        p.TENANT_LIST: lambda r: [{'name': TENANT, 'projects': 1, 'queue': 0}],
        # no access rules: every tenant is public
        p.AUTH_RULES: lambda r: {'tenants': {TENANT: {'admin_rules': [], 'access_rules': [],
                                                      'authentication_realm': None}},
                                 'rules': {}, 'api_root': None}},
        name='bench-scheduler')
    web_port = free_port()
    with open(f'{root}/zuul.conf', 'w') as f:
        f.write(f'[gearman]\nserver = 127.0.0.1\nport = {port}\n\n'
                f'[web]\nlisten_address = 127.0.0.1\nport = {web_port}\n'
                f'command_socket = {root}/web.socket\n')
    web = None
    client = ExecutorClient('127.0.0.1', port)
    driver = profile = None
    try:
        executor.start()
        listener.start()
        web = subprocess.Popen([sys.executable, '-m', 'zuul.cmd.web', '-c', f'{root}/zuul.conf',
                                '-d'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_listening(web_port)
        job = JobSpec(name='latency', pre_run=[playbook('org/config', 'playbooks/pre.yaml',
                                                         trusted=True)],
                      run=[playbook('org/project', 'playbooks/run.yaml')])
        handles = []
        lock = threading.Lock()
        for n in range(args.builds):
            node = nodes.make()
            uuid = f'{n:02d}' + 'b' * 30

            def on_progress(handle, progress, uuid=uuid):
                if progress.url:
                    with lock:
                        builds.setdefault(uuid, progress.url)
            handles.append(client.execute(execute_request(uuid, job, [node_spec(node, 'node')],
                                                          [item('org/project')]),
                                          on_progress=on_progress))
        deadline = time.time() + 600
        while len(builds) < args.builds and time.time() < deadline:
            time.sleep(0.2)
        driver, profile = browser()
        windows = []
        for uuid in sorted(builds):
            if windows:
                driver.switch_to.new_window('window')
            # each window is a target of its own: install the probe in each
            driver.execute_cdp_cmd('Page.addScriptToEvaluateOnNewDocument', {'source': PROBE})
            driver.get(f'http://127.0.0.1:{web_port}/t/{TENANT}/stream/{uuid}')
            windows.append((uuid, driver.current_window_handle))
        fingers = [Finger(builds[uuid], uuid) for uuid in sorted(builds)]
        sockets = [WebSocketWatcher(web_port, uuid) for uuid in sorted(builds)]

        def all_waiting():
            for _, window in windows:
                driver.switch_to.window(window)
                text = ''.join(t for _, t in driver.execute_script(
                    'return window.benchArrivals || []'))
                if 'TASK [Print timestamped lines]' not in text:
                    return False
            return True
        while not all_waiting() and time.time() < deadline:
            time.sleep(0.5)
        open(go, 'w').close()
        results = [h.wait(600) for h in handles]
        page = []
        for _, window in windows:
            driver.switch_to.window(window)
            page += latencies(driver.execute_script('return window.benchArrivals'))
        finger = []
        for f in fingers:
            f.join(30)
            finger += latencies(f.arrivals)
        websocket = []
        for w in sockets:
            w.join(30)
            websocket += latencies(w.arrivals)
        expected = args.builds * args.lines
        failed = [r.result for r in results if r.result != 'SUCCESS']
        if failed:
            print(f'builds that did not succeed: {failed}')
        return [row('node stdout -> executor finger port', finger, expected),
                row('node stdout -> zuul-web websocket (Python client)', websocket, expected),
                row('node stdout -> browser (live log page, Chromium)', page, expected)]
    finally:
        if driver is not None:
            driver.quit()
            shutil.rmtree(profile, ignore_errors=True)
        client.stop()
        if web is not None:
            web.terminate()
            try:
                web.wait(30)
            except subprocess.TimeoutExpired:
                web.kill()
                web.wait(10)
        listener.stop()
        executor.stop()
        gear.shutdown()
        nodes.cleanup()


def _wait_listening(port: int, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(('127.0.0.1', port), 1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f'zuul-web did not listen on {port}')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--builds', type=int, default=10)
    parser.add_argument('--lines', type=int, default=50)
    parser.add_argument('--interval', type=float, default=0.2)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix='zcl', dir='/tmp')
    load_before = os.getloadavg()[0]
    try:
        rows = run(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f'{args.builds} builds streaming at once, {args.lines} lines each, one every '
          f'{args.interval} s (latency in ms); {os.cpu_count()} CPUs, load average '
          f'{load_before:.1f} before, {os.getloadavg()[0]:.1f} after')
    print_table(['path', 'lines', 'p50', 'p90', 'p99', 'max'], rows)


if __name__ == '__main__':
    main()
