"""The daily loop in a real browser, on real daemons: the scheduler, a
merger and an executor (in this process, over Gearman and ZooKeeper),
nodepool-launcher booting netns nodes, zuul-web, the development Gerrit,
and headless Chromium driven by Selenium.

One change runs two jobs on nodes whose base job starts ``zuul_console``
(as zuul-jobs' ``start-zuul-console`` role does):

- ``live`` prints a line, waits for the test, prints another: its live
  log page shows each line while the task still runs (and the finger
  port gives the same), says which task runs and how long it has been
  quiet, and links to the build page once it ended;
- ``broken`` fails at its second task: its build page's Console view
  opens at that task, with the passed tasks folded.

Then the builds list's Logs link opens the build's logs, and the Labels
page lists the label the launcher serves.  Screenshots go to
test-artifacts/.
"""

from __future__ import annotations

import os
import re
import socket

import pytest

from tests.functional.system_support import BASE_PIPELINES, zuul_system  # noqa: F401
from tests.functional.test_e2e_zuul_launcher import (  # noqa: F401 - fixture
    NP_PROVIDER,
    needs_netns,
    nodepool_launcher,
)
from tests.harness.browser import needs_webdriver
from tests.harness.docs import code_blocks
from tests.harness.waiting import wait_for

selenium = pytest.importorskip('selenium', reason='selenium is not installed (test extras)')
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = [needs_webdriver, needs_netns]

ARTIFACTS = os.path.join(os.path.dirname(__file__), '..', '..', 'test-artifacts')
WAIT = 120

JOBS = """
- job:
    name: base
    parent: null
    timeout: 300
    pre-run: playbooks/base-pre.yaml
    nodeset:
      nodes:
        - name: node
          label: ubuntu-jammy
- job:
    name: live
    run: playbooks/live.yaml
    vars:
      gate_dir: {gates}
- job:
    name: broken
    run: playbooks/broken.yaml
"""

# The base job's pre-run and the artifact play as the user guide prints them.
(BASE_PRE,) = code_blocks('doc/source/user/live-log.rst', 'yaml')
(RETURN_ARTIFACT,) = code_blocks('doc/source/user/build-page.rst', 'yaml')

LIVE = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Run the long tests
      shell: |
        echo "first test passed"
        while [ ! -e {{ gate_dir }}/second ]; do sleep 0.1; done
        echo "second test passed"
        while [ ! -e {{ gate_dir }}/done ]; do sleep 0.1; done
        echo "all tests passed"
""" + RETURN_ARTIFACT

BROKEN = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Prepare
      command: echo prepared
    - name: Run the unit tests
      shell: |
        echo "test_one ok"
        echo "test_two FAILED: expected 2, got 3"
        exit 1
    - name: Never reached
      command: echo never
"""

PROJECT = """
- project:
    check:
      jobs:
        - live
        - broken
"""


@pytest.fixture
def system(zuul_system, nodepool_launcher, tmp_path):  # noqa: F811
    from zuul.driver.sql.history import BuildHistory
    from zuul.lib.rpc import RPCClient
    from zuul.web.server import ZuulWeb
    system = zuul_system
    gates = os.path.join(system.root, 'gates')
    os.makedirs(gates)
    system.gates = gates
    system.create_projects(app_config=PROJECT, pipelines=BASE_PIPELINES.replace(
        '- job:\n    name: base\n    parent: null\n    timeout: 300\n', '')
        + JOBS.format(gates=gates), config_files={
            'playbooks/base-pre.yaml': BASE_PRE, 'playbooks/live.yaml': LIVE,
            'playbooks/broken.yaml': BROKEN})
    log_root = os.path.join(system.root, 'logs')
    history = BuildHistory(system.conf.database.dburi)
    history.migrate()
    rpc = RPCClient('127.0.0.1', system.gear_port, timeout=60, name='zuul-web')
    web = ZuulWeb('127.0.0.1', 0, rpc, history, log_root=log_root)
    web.start()
    system.web = f'http://127.0.0.1:{web.port}'
    system.executor.settings.log_root = log_root
    system.executor.settings.log_url = system.web + '/logs/{build}/'
    system.start()
    try:
        yield system
    finally:
        web.stop()
        rpc.shutdown()


def _until(browser, condition, timeout=WAIT):
    return WebDriverWait(browser, timeout).until(condition)


def _shot(browser, name):
    os.makedirs(ARTIFACTS, exist_ok=True)
    browser.save_screenshot(os.path.join(ARTIFACTS, name))


def _lines(browser) -> list[str]:
    return [e.text for e in browser.find_elements(By.CSS_SELECTOR, '#log-text .line')]


def _with(lines, text):
    return [line for line in lines if line.endswith(text)]


def _running_job(system, name):
    for pipeline in system.status()['pipelines']:
        for queue in pipeline['change_queues']:
            for head in queue['heads']:
                for item in head:
                    for job in item['jobs']:
                        if job['name'] == name and job.get('url') and not job.get('result'):
                            return job
    return None


def _finger(url: str, uuid: str) -> socket.socket:
    host, port = re.match(r'http://([^:/]+):(\d+)/', url).groups()
    sock = socket.create_connection((host, int(port)), 10)
    sock.sendall(f'{uuid}\n'.encode())
    return sock


def _read_until(sock, text: str) -> str:
    data = b''
    sock.settimeout(WAIT)
    while text.encode() not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data.decode('utf-8', 'replace')


def test_the_daily_loop_in_a_browser(system, browser):
    change = system.store.create_change('org/app', 'master', 'Long tests', {'a.py': 'x\n'})
    job = wait_for(lambda: _running_job(system, 'live'), timeout=WAIT,
                   what='the live job running') and _running_job(system, 'live')
    uuid = job['uuid']
    finger = _finger(job['url'], uuid)

    # the status page: the running job's name opens its live log
    browser.get(f'{system.web}/t/example/status')
    _until(browser, lambda b: b.find_elements(By.CSS_SELECTOR, 'a.live-log'))
    browser.find_element(By.CSS_SELECTOR, f'a.live-log[href$="{uuid}"]').click()
    _until(browser, lambda b: _with(_lines(b), '| node | first test passed'))
    browser.execute_script('window.zuulMarker = "same page"')
    lines = _lines(browser)
    assert not _with(lines, 'second test passed')
    # the first line carries the time the node printed it
    assert re.search(r'\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} \| node \| first test passed$',
                     _with(lines, '| node | first test passed')[0])
    # a quiet task still shows it runs, and for how long
    _until(browser, lambda b: 'no output for' in b.find_element(By.ID, 'stream-activity').text)
    activity = browser.find_element(By.ID, 'stream-activity').text
    assert activity.startswith('Running: TASK [Run the long tests] for'), activity
    _shot(browser, 'web-live-log-running.png')
    # finger gives the same line, now
    assert 'node | first test passed' in _read_until(finger, 'first test passed')

    # the next line arrives on the same page, without a reload
    open(os.path.join(system.gates, 'second'), 'w').close()
    _until(browser, lambda b: _with(_lines(b), '| node | second test passed'))
    assert browser.execute_script('return window.zuulMarker') == 'same page'
    assert 'second test passed' in _read_until(finger, 'second test passed')
    open(os.path.join(system.gates, 'done'), 'w').close()
    _until(browser, lambda b: b.find_element(By.TAG_NAME, 'body').get_attribute(
        'data-closed') == '1000')
    link = browser.find_element(By.ID, 'build-link')
    assert link.get_attribute('href').endswith(f'/t/example/build/{uuid}')
    _shot(browser, 'web-live-log-ended.png')
    finger.close()

    wait_for(lambda: system.verified(change), timeout=WAIT, what='the check vote')
    system.settle()
    # the live log of a build that has ended links to its build page
    browser.get(f'{system.web}/t/example/stream/{uuid}')
    _until(browser, lambda b: b.find_elements(By.ID, 'build-link'))
    assert 'This build has finished (SUCCESS)' in browser.find_element(
        By.ID, 'stream-state').text
    assert 'error' not in browser.find_element(By.ID, 'stream-state').get_attribute('class')
    assert system.verified(change) == -1
    builds = {b['job_name']: b for b in system.build_history(project='org/app')}
    assert builds['live']['result'] == 'SUCCESS' and builds['broken']['result'] == 'FAILURE'
    # the nodeset each ran on is recorded
    assert [n['label'] for n in builds['live']['nodes']] == ['ubuntu-jammy']
    assert builds['live']['nodes'][0]['provider'] == NP_PROVIDER

    # the build page's Console: the failed task open, the others folded
    broken = builds['broken']['uuid']
    browser.get(f'{system.web}/t/example/build/{broken}?tab=console')
    _until(browser, lambda b: b.find_element(By.TAG_NAME, 'body').get_attribute(
        'data-loaded') == 'yes')
    tasks = browser.find_elements(By.CSS_SELECTOR, 'details.console-task')
    states = [(t.get_attribute('data-task'), t.get_attribute('data-status'),
               t.get_attribute('open') is not None)
              for t in tasks if t.get_attribute('data-task') != 'Start zuul_console daemon.']
    assert states == [('Prepare', 'changed', False), ('Run the unit tests', 'FAILED', True)]
    failed = tasks[[t.get_attribute('data-task') for t in tasks].index('Run the unit tests')]
    output = failed.find_element(By.CSS_SELECTOR, 'pre.task-output').text
    assert 'test_two FAILED: expected 2, got 3' in output
    assert failed.find_element(By.CSS_SELECTOR, '.task-duration').text
    assert browser.execute_script(
        'const r = arguments[0].getBoundingClientRect();'
        'return r.top >= 0 && r.top < window.innerHeight;', failed)   # scrolled to it
    _shot(browser, 'web-build-console-failed.png')
    # the live build's console lists the artifact it returned, linked
    browser.get(f'{system.web}/t/example/build/{uuid}?tab=console')
    _until(browser, lambda b: b.find_elements(By.CSS_SELECTOR, '#artifacts a'))
    artifact = browser.find_element(By.CSS_SELECTOR, '#artifacts a')
    assert (artifact.text, artifact.get_attribute('href')) == (
        'Test report', 'https://logs.example.com/report.html')
    streamed = browser.find_element(
        By.CSS_SELECTOR, 'details.console-task[data-task="Run the long tests"]')
    assert streamed.get_attribute('open') is None      # passed: folded
    # the summary shows the nodeset it ran on
    browser.get(f'{system.web}/t/example/build/{broken}')
    _until(browser, lambda b: b.find_elements(By.CSS_SELECTOR, 'td.field-nodeset'))
    assert 'node (ubuntu-jammy on ' in browser.find_element(
        By.CSS_SELECTOR, 'td.field-nodeset').text

    # the builds list: each row's Logs link opens the build's logs
    browser.get(f'{system.web}/t/example/builds')
    _until(browser, lambda b: b.find_elements(By.CSS_SELECTOR, 'a.logs-link'))
    browser.find_element(By.CSS_SELECTOR,
                         f'tr[data-uuid="{uuid}"] a.logs-link').click()
    _until(browser, lambda b: b.find_elements(By.ID, 'log-tree'))
    assert 'job-output.txt' in browser.find_element(By.ID, 'log-tree').text
    _shot(browser, 'web-build-logs.png')

    # the Labels page lists what the launcher serves
    browser.get(f'{system.web}/t/example/labels')
    _until(browser, lambda b: b.find_elements(By.CSS_SELECTOR, 'tr.label-row'))
    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-label="ubuntu-jammy"]')
    assert f'{NP_PROVIDER}/main' in row.text
    _shot(browser, 'web-labels.png')
