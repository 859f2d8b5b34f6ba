"""The daily loop the quickstart teaches, done exactly as it prints it.

One quickstart (tools/quickstart.py, left running after its scenario) for
the module. The commands it prints at the end are run as printed, with
real git, ssh and scp, in a shell of their own: clone the demo project,
install the commit-msg hook, commit, push for review (check runs and
reports), recheck (check runs again), approve (the gate runs and the
branch advances), the build's Logs link (job-output.txt), the status page
and the nodepool commands. Then Ctrl-C stops it, saying what it stops,
and nothing it started is left running.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from nodepool.zk.localserver import free_port

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUICKSTART = os.path.join(TOP, 'tools', 'quickstart.py')
SUBJECT = 'Say hello from the tests'
TIMEOUT = 400  # a loaded 2-core machine runs a check in well under this


def load_quickstart_module():
    spec = importlib.util.spec_from_file_location('quickstart_tool', QUICKSTART)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


qs_module = load_quickstart_module()


def parse_steps(text: str) -> list[tuple[str, list[str]]]:
    """``# heading`` lines open a step; the lines after it are its shell
    commands (what ``next_steps`` promises)."""
    steps: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith('#'):
            steps.append((line.lstrip('# ').strip(), []))
        else:
            assert steps, f'a command before any heading: {line}'
            steps[-1][1].append(line)
    return steps


class Running:
    """The quickstart process and what it has printed so far."""

    def __init__(self, state: str, web_port: int):
        self.state = state
        self.web_port = web_port
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.proc = subprocess.Popen(
            [sys.executable, QUICKSTART, '--state-dir', state, '--web-port', str(web_port)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.rstrip('\n') == qs_module.NEXT_STEPS_END:
                self.ready.set()
        self.ready.set()

    def output(self) -> str:
        return ''.join(self.lines)

    def printed_steps(self) -> str:
        out = self.output()
        begin = out.index(qs_module.NEXT_STEPS_BEGIN + '\n') + len(qs_module.NEXT_STEPS_BEGIN) + 1
        return out[begin:out.index(qs_module.NEXT_STEPS_END, begin)]

    def build_dir(self) -> str | None:
        with open(os.path.join(self.state, 'zuul.conf')) as f:
            found = re.search(r'^job_dir = (\S+)$', f.read(), re.M)
        return found.group(1) if found else None


@pytest.fixture(scope='module')
def quickstart(tmp_path_factory):
    state = str(tmp_path_factory.mktemp('qs') / 'state')
    running = Running(state, free_port())
    try:
        assert running.ready.wait(900), running.output()
        assert running.proc.poll() is None, running.output()
        yield running
    finally:
        if running.proc.poll() is None:
            running.proc.send_signal(signal.SIGINT)
            try:
                running.proc.wait(120)
            except subprocess.TimeoutExpired:
                running.proc.kill()


class Shell:
    """Runs printed steps in order as one interactive shell would: the
    working directory and exported variables carry over."""

    def __init__(self, root):
        self.root = str(root)
        self.cwd = self.root
        self.exports: list[str] = []
        self.env = dict(os.environ, HOME=self.root, GIT_CONFIG_NOSYSTEM='1',
                        GIT_TERMINAL_PROMPT='0')

    def run(self, commands: list[str], check: bool = True) -> subprocess.CompletedProcess:
        where = os.path.join(self.root, '.cwd')
        script = '\n'.join(['set -e', f'cd {shlex.quote(self.cwd)}', *self.exports,
                            *commands, f'pwd > {shlex.quote(where)}'])
        proc = subprocess.run(['bash', '-c', script], env=self.env, capture_output=True,
                              text=True, timeout=120)
        if check:
            assert proc.returncode == 0, f'{commands}\n{proc.stdout}\n{proc.stderr}'
        with open(where) as f:
            self.cwd = f.read().strip()
        self.exports += [c for c in commands if c.startswith('export ')]
        return proc


def gerrit_query(running: Running, port: int, *terms: str) -> list[dict]:
    proc = subprocess.run(
        ['ssh', '-p', str(port), '-i', os.path.join(running.state, 'zuul_id'),
         '-o', f'UserKnownHostsFile={os.path.join(running.state, "known_hosts")}',
         '-o', 'BatchMode=yes', 'dev@127.0.0.1',
         'gerrit query --format JSON --comments --current-patch-set ' +
         ' '.join(shlex.quote(t) for t in terms)],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    return [r for r in rows if 'number' in r]


def wait_until(what: str, check, running: Running, timeout: float = TIMEOUT):
    deadline = time.time() + timeout
    while time.time() < deadline:
        result = check()
        if result:
            return result
        assert running.proc.poll() is None, running.output()
        time.sleep(1.0)
    raise AssertionError(f'timed out waiting for {what}\n{running.output()[-4000:]}')


def fetch(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.status, r.read().decode('utf-8', 'replace')


def step(steps, prefix: str) -> list[str]:
    found = [cmds for heading, cmds in steps if heading.startswith(prefix)]
    assert len(found) == 1, (prefix, steps)
    return found[0]


def reports(change: dict) -> list[str]:
    return [c['message'] for c in change.get('comments', [])
            if c['message'].startswith(('Build succeeded.', 'Build failed.'))]


# -- without the system ------------------------------------------------------------


def test_the_next_steps_are_complete_commands():
    text = qs_module.next_steps('/st', 29418, 9000, 'nodepool')
    steps = parse_steps(text)
    headings = [h for h, _ in steps]
    for prefix in ('Clone', 'Commit', 'Push', 'Run check again', 'Approve',
                   'Watch it on the status page: http://127.0.0.1:9000/t/example/status',
                   'See the build logs', 'Act as an admin', 'Look at the nodes'):
        assert any(h.startswith(prefix) for h in headings), (prefix, headings)
    assert '...' not in text
    assert 'ssh://dev@127.0.0.1:29418/demo/app' in text
    assert '-i /st/zuul_id -o UserKnownHostsFile=/st/known_hosts' in text
    assert 'git push origin HEAD:refs/for/master' in text
    assert 'nodepool -c /st/nodepool.yaml list' in text
    assert 'nodepool -c /st/nodepool.yaml request-list' in text
    assert 'zuul-admin -c /st/zuul.conf create-auth-token --auth-config quickstart ' \
        '--user admin --tenant example' in text
    for _, commands in steps:       # every command line is whole shell
        for command in commands:
            shlex.split(command)


def test_progress_lines_count_the_changes_under_test_only():
    """A change enqueued only as the dependency of the one behind it (not
    live) is not a line of progress of its own."""
    def item(change, live, ahead=None):
        return {'id': change, 'live': live, 'item_ahead': ahead,
                'jobs': [{'name': 'app-unit', 'start_time': 1}]}
    qs = qs_module.Quickstart('/nonexistent', 0)
    qs.status = lambda: {'pipelines': [{'name': 'check', 'change_queues': [{'heads': [
        [item('1,1', False), item('2,1', True, '1,1')]]}]}]}
    assert qs.progress_line() == 'check: 2,1 on top of 1,1 [app-unit=running]'


# -- the running system --------------------------------------------------------------


def test_the_printed_daily_loop(quickstart, tmp_path):
    steps = parse_steps(quickstart.printed_steps())
    clone = step(steps, 'Clone')
    port = int(re.search(r'ssh://\w+@127\.0\.0\.1:(\d+)/', '\n'.join(clone)).group(1))
    shell = Shell(tmp_path)

    # clone, hook, commit, push: the change appears and check reports
    shell.run(clone)
    assert os.path.isfile(os.path.join(shell.cwd, '.git', 'hooks', 'commit-msg'))
    shell.run(step(steps, 'Commit'))
    message = shell.run(['git log -1 --format=%B']).stdout
    assert 'Change-Id: I' in message, message
    master_before = shell.run(['git rev-parse origin/master']).stdout.strip()
    pushed = shell.run(step(steps, 'Push'))
    assert 'refs/for/master' in pushed.stderr, pushed.stderr

    def change():
        rows = [r for r in gerrit_query(quickstart, port, 'project:demo/app')
                if r['subject'] == SUBJECT]
        return rows[0] if rows else None
    found = wait_until('the pushed change', change, quickstart)
    number = found['number']
    # its link (in the push output, and on the status page through the
    # connection's baseurl) opens the dev server's page for it
    page = found['url']
    assert re.fullmatch(rf'http://127\.0\.0\.1:\d+/c/demo/app/\+/{number}', page), page
    assert page in pushed.stderr, pushed.stderr
    status, html = fetch(page)
    assert status == 200 and SUBJECT in html
    first = wait_until('the check report', lambda: reports(change()), quickstart)
    assert first[0].startswith('Build succeeded.'), first

    # recheck runs check again
    shell.run(step(steps, 'Run check again'))
    wait_until('the recheck report', lambda: len(reports(change())) >= 2, quickstart)

    # approval: the gate runs and the branch advances
    shell.run(step(steps, 'Approve'))
    merged = wait_until('the merge', lambda: (lambda c: c if c['status'] == 'MERGED'
                                              else None)(change()), quickstart)
    shell.run(['git fetch -q origin'])
    master_after = shell.run(['git rev-parse origin/master']).stdout.strip()
    assert master_after != master_before
    assert SUBJECT in shell.run(['git log -3 --format=%s origin/master']).stdout
    gate_report = reports(merged)[-1]
    assert gate_report.startswith('Build succeeded.'), reports(merged)

    # the build's Logs link from the report
    log_url = re.search(r'- app-unit (http://\S+) : SUCCESS', gate_report).group(1)
    status, index = fetch(log_url)
    assert status == 200 and 'job-output.txt' in index
    status, job_output = fetch(log_url.rstrip('/') + '/job-output.txt')
    assert status == 200 and 'PLAY RECAP' in job_output

    builds = json.loads(fetch(f'http://127.0.0.1:{quickstart.web_port}/api/tenant/'
                              f'example/builds?change={number}')[1])
    assert builds and all(b.get('ref_url', b.get('buildset', {}).get('ref_url')) == page
                          for b in builds), builds[:1]

    # the pages the steps name
    for heading, _ in steps:
        for url in re.findall(r'http://\S+', heading):
            assert fetch(url)[0] == 200, url

    # the nodepool commands, as printed
    listing = shell.run(step(steps, 'Look at the nodes')[:1]).stdout
    assert 'quickstart-netns' in listing and 'ubuntu-jammy' in listing, listing
    assert 'Request ID' in shell.run(step(steps, 'Look at the nodes')[1:]).stdout

    # and the quickstart told it as it happened
    told = wait_until('the merge in the output', lambda: (
        f'review: change {number},1 "{SUBJECT}" MERGED into master' in quickstart.output()),
        quickstart, timeout=30)
    assert told
    out = quickstart.output()
    assert f'review: change {number},1 "{SUBJECT}" uploaded by dev' in out
    assert f'review: dev on change {number},1 "{SUBJECT}": recheck' in out
    assert re.search(rf'gate: {number},1 \[app-unit=', out), out[-3000:]


# A change of the admin test whose check build holds (its tests wait for a
# file never made) until Ctrl-C: the next test checks it gets no vote.
HELD: dict = {}


def _status_items(running: Running) -> list[tuple[str, str, list]]:
    status = json.loads(fetch(f'http://127.0.0.1:{running.web_port}/api/tenant/example/'
                              'status')[1])
    return [(p['name'], i['id'], i['jobs']) for p in status['pipelines']
            for q in p['change_queues'] for h in q['heads'] for i in h if i.get('live')]


def _running_in_check(running: Running, change: str) -> bool:
    return any(p == 'check' and i == change and any(j.get('start_time') for j in jobs)
               for p, i, jobs in _status_items(running))


def test_an_admin_logs_in_and_acts_from_the_status_page(quickstart, browser, tmp_path):
    """The printed token step, Log in on the quickstart's status page, then
    Dequeue a running change and Enqueue it again from the page."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait
    steps = parse_steps(quickstart.printed_steps())
    shell = Shell(tmp_path)
    shell.run(step(steps, 'Clone'))
    shell.run(["git config user.name 'Admin Test' && git config user.email a@example.com",
               "printf 'while [ ! -e /nonexistent-release ]; do sleep 0.2; done\\n' "
               '> run_tests.sh',
               "git commit -q -a -m 'Tests that wait'", 'git push -q origin HEAD:refs/for/master'])
    port = int(re.search(r'ssh://\w+@127\.0\.0\.1:(\d+)/', '\n'.join(step(steps, 'Clone')))
               .group(1))
    number = wait_until('the pushed change', lambda: next(
        (r['number'] for r in gerrit_query(quickstart, port, 'project:demo/app')
         if r['subject'] == 'Tests that wait'), None), quickstart)
    change = f'{number},1'
    HELD['change'] = change
    wait_until('its check running', lambda: _running_in_check(quickstart, change), quickstart)

    token = shell.run(step(steps, 'Act as an admin')).stdout.strip()
    assert token.startswith('Bearer '), token
    wait = WebDriverWait(browser, 60)
    browser.get(f'http://127.0.0.1:{quickstart.web_port}/t/example/status')
    wait.until(lambda b: b.find_element(By.TAG_NAME, 'body').get_attribute('data-loaded') ==
               'yes')
    browser.find_element(By.ID, 'login-button').click()
    browser.find_element(By.ID, 'login-token').send_keys(token)
    browser.find_element(By.ID, 'login-submit').click()
    wait.until(lambda b: b.find_element(By.ID, 'login-user').text ==
               'Logged in as admin (admin)')
    # Dequeue the running change from the page
    button = f'[data-change="{change}"] button.action-dequeue'
    wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, button))
    browser.find_element(By.CSS_SELECTOR, button).click()
    wait.until(ec.alert_is_present()).accept()
    wait.until(lambda b: b.find_element(By.ID, 'action-message').text == f'Dequeued {change}.')
    wait_until('the change dequeued', lambda: change not in
               [i for _, i, _ in _status_items(quickstart)], quickstart)
    # and Enqueue it again into check with the page's form
    wait.until(lambda b: b.find_elements(By.ID, 'enqueue-form'))
    browser.find_element(By.ID, 'enqueue-project').send_keys('demo/app')
    browser.find_element(By.ID, 'enqueue-change').send_keys(change)
    browser.find_element(By.ID, 'enqueue-submit').click()
    wait.until(lambda b: b.find_element(By.ID, 'action-message').text ==
               f'Enqueued {change} of demo/app into check.')
    os.makedirs(os.path.join(TOP, 'test-artifacts'), exist_ok=True)
    browser.save_screenshot(os.path.join(TOP, 'test-artifacts', 'quickstart-admin.png'))
    wait_until('its check running again', lambda: _running_in_check(quickstart, change),
               quickstart)
    # a dequeue reports nothing
    assert f'review: zuul on change {change} ' not in quickstart.output()


def _our_processes(paths: list[str]) -> list[str]:
    found = []
    for pid in os.listdir('/proc'):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f'/proc/{pid}/cmdline', 'rb') as f:
                cmdline = f.read().replace(b'\0', b' ').decode('utf-8', 'replace')
        except OSError:
            continue
        if any(p in cmdline for p in paths):
            found.append(f'{pid}: {cmdline[:200]}')
    return found


def test_ctrl_c_stops_everything(quickstart):
    """... and leaves no vote: the change whose check build still runs
    (the admin test's) gets no report when the quickstart stops."""
    build_dir = quickstart.build_dir()
    paths = [quickstart.state] + ([build_dir] if build_dir else [])
    assert _our_processes([quickstart.state]), 'the quickstart runs nothing to stop?'
    quickstart.proc.send_signal(signal.SIGINT)
    assert quickstart.proc.wait(120) == 0, quickstart.output()[-4000:]
    out = quickstart.output()
    stopping = re.search(r'stopping: (.*)', out)
    assert stopping, out[-3000:]
    for name in ('zuul-executor', 'zuul-merger', 'zuul-web', 'scheduler',
                 'nodepool-launcher', 'code-review server', 'ZooKeeper'):
        assert name in stopping.group(1)
    assert 'nothing of the quickstart is left running' in out
    # the scheduler went first: the build the executor aborted was reported
    # nowhere (the quickstart prints every review event until it stops)
    assert stopping.group(1).startswith('scheduler and Gearman server'), stopping.group(1)
    if HELD.get('change'):
        assert f'review: zuul on change {HELD["change"]} ' not in out, out[-3000:]
    assert _our_processes(paths) == []      # sshd nodes, ZooKeeper's java, builds
    namespaces = subprocess.run(['ip', 'netns', 'list'], capture_output=True,
                                text=True).stdout
    assert 'quickstart-netns-' not in namespaces
