"""The status page in a real headless Chromium driven by Selenium: it
updates without a reload when the scheduler's status changes; an admin
logs in with a token and dequeues a change from a real scheduler through
the page's button; anyone else sees no such control and cannot act.

Needs Debian's ``chromium`` and ``chromium-driver`` (tools/install-deps.sh)
and the ``selenium`` package; skipped with the reason when one is absent.
One browser serves the whole module.
"""

from __future__ import annotations

import os

import pytest

from tests.fakes.scheduler_rpc import _item, _job
from tests.harness.browser import needs_webdriver
from tests.unit import web_auth_support as s

selenium = pytest.importorskip('selenium', reason='selenium is not installed (test extras)')
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = needs_webdriver

ARTIFACTS = os.path.join(os.path.dirname(__file__), '..', '..', 'test-artifacts')
# The page polls every 5 s; a change must show within a few polls.
WAIT = 20


@pytest.fixture
def system(tmp_path, gearman_server):
    system = s.start(tmp_path, gearman_server)
    try:
        yield system
    finally:
        system.stop()


def _open(browser, url):
    browser.get(url)
    browser.execute_script('sessionStorage.clear()')
    browser.refresh()
    _until(browser, lambda b: b.find_element(By.TAG_NAME, 'body')
           .get_attribute('data-loaded') == 'yes')
    # set once: a reload would lose it
    browser.execute_script('window.zuulMarker = "same page"')


def _until(browser, condition, timeout=WAIT):
    return WebDriverWait(browser, timeout).until(condition)


def _changes(browser, pipeline):
    return [e.get_attribute('data-change') for e in browser.find_elements(
        By.CSS_SELECTOR, f'section[data-pipeline="{pipeline}"] li.change')]


def _same_page(browser):
    return browser.execute_script('return window.zuulMarker') == 'same page'


def _enqueue(system, number):
    system.scheduler.management('enqueue', tenant='t1', pipeline='gate', project='org/app',
                                change=f'{number},1')
    assert system.scheduler.loop.wait_idle(60)


def test_status_page_updates_without_a_reload(browser, zuul_web, fake_scheduler):
    _open(browser, f'{zuul_web.base}/t/tenant-one/status')
    assert _changes(browser, 'check') == ['3,1']
    bar = browser.find_element(By.CSS_SELECTOR, '[data-change="1,2"] [data-job="project-test1"] '
                                                '[role="progressbar"]')
    assert bar.get_attribute('aria-valuenow') == '50'
    assert bar.get_attribute('aria-label') == 'project-test1 progress'
    # the scheduler's status changes: a new change in check, the running
    # job of 1,2 further along (90 of 120 s)
    check = fake_scheduler.tenants['tenant-one']['status']['pipelines'][0]
    check['change_queues'].append({'name': 'org/project', 'window': None, 'heads': [
        [_item('5,1', 'org/project', None, [], [_job('project-test1', None, 'a' * 32, None,
                                                     30, 60)], 10)]]})
    gate_item = fake_scheduler.tenants['tenant-one']['status']['pipelines'][1][
        'change_queues'][0]['heads'][0][0]
    gate_item['jobs'][1].update(elapsed_time=90_000, remaining_time=30_000)
    _until(browser, lambda b: _changes(b, 'check') == ['3,1', '5,1'])
    assert _same_page(browser)
    bar = '[data-change="1,2"] [data-job="project-test1"] [role="progressbar"]'
    _until(browser, lambda b: b.find_element(By.CSS_SELECTOR, bar)
           .get_attribute('aria-valuenow') == '75')
    new_bar = browser.find_element(By.CSS_SELECTOR, '[data-change="5,1"] [role="progressbar"]')
    assert new_bar.get_attribute('aria-valuenow') == '50'


def test_changes_fold_and_only_changes_under_test_are_counted(browser, zuul_web,
                                                             fake_scheduler):
    """Each change's jobs fold away and back (its toggle, or Collapse all /
    Expand all, kept across refreshes); a line joins a change to the one
    it is tested behind; a change that is only there as another's
    dependency (not live) is drawn but not counted."""
    check = fake_scheduler.tenants['tenant-one']['status']['pipelines'][0]
    check['change_queues'].append({'name': 'org/project', 'window': None, 'heads': [[
        _item('7,1', 'org/project', None, ['8,1'], [], 40, live=False),
        _item('8,1', 'org/project', '7,1', [], [_job('project-test1')], 40)]]})
    _open(browser, f'{zuul_web.base}/t/tenant-one/status')
    counts = {p: browser.find_element(By.CSS_SELECTOR,
                                      f'section[data-pipeline="{p}"] .count').text
              for p in ('check', 'gate')}
    assert counts == {'check': '2', 'gate': '3'}     # 3,1 and 8,1; not 7,1
    # the gate's changes each hang off the one ahead; 8,1 off its dependency
    joined = [e.get_attribute('data-change') for e in browser.find_elements(
        By.CSS_SELECTOR, 'li.change.joined')]
    assert joined == ['8,1', '2,1', '4,1']
    assert browser.find_element(By.CSS_SELECTOR, '[data-change="7,1"] .position').text == \
        'dependency'

    def jobs_shown(change):
        return browser.find_element(By.CSS_SELECTOR,
                                    f'[data-change="{change}"] ul.jobs').is_displayed()
    toggle = browser.find_element(By.CSS_SELECTOR, '[data-change="2,1"] button.toggle-jobs')
    assert toggle.get_attribute('aria-expanded') == 'true' and jobs_shown('2,1')
    toggle.click()
    _until(browser, lambda b: not jobs_shown('2,1'))
    toggle = browser.find_element(By.CSS_SELECTOR, '[data-change="2,1"] button.toggle-jobs')
    assert toggle.get_attribute('aria-expanded') == 'false'
    assert browser.find_element(By.CSS_SELECTOR, '[data-change="2,1"] .jobs-summary').text \
        == '1/2 jobs done'
    assert jobs_shown('1,2')
    # folded stays folded when the page refreshes itself
    renders = int(browser.find_element(By.TAG_NAME, 'body').get_attribute('data-renders'))
    _until(browser, lambda b: int(b.find_element(By.TAG_NAME, 'body')
                                  .get_attribute('data-renders')) > renders)
    assert not jobs_shown('2,1') and jobs_shown('1,2')
    browser.find_element(By.ID, 'collapse-all').click()
    _until(browser, lambda b: not any(jobs_shown(c) for c in ('1,2', '2,1', '4,1', '3,1')))
    os.makedirs(ARTIFACTS, exist_ok=True)
    browser.save_screenshot(os.path.join(ARTIFACTS, 'web-status-collapsed.png'))
    browser.find_element(By.ID, 'expand-all').click()
    _until(browser, lambda b: all(jobs_shown(c) for c in ('1,2', '2,1', '4,1', '3,1')))
    browser.save_screenshot(os.path.join(ARTIFACTS, 'web-status-expanded.png'))
    assert _same_page(browser)


def test_filter_is_kept_in_the_url_and_per_change_page(browser, zuul_web, fake_scheduler):
    _open(browser, f'{zuul_web.base}/t/tenant-one/status?filter=org/project1')
    assert _changes(browser, 'gate') == ['4,1']
    assert browser.find_elements(By.CSS_SELECTOR, 'section[data-pipeline="check"]') == []
    box = browser.find_element(By.ID, 'filter')
    assert box.get_attribute('value') == 'org/project1'
    box.clear()
    box.send_keys('2,1')
    _until(browser, lambda b: _changes(b, 'gate') == ['2,1'])
    assert browser.current_url.endswith('/t/tenant-one/status?filter=2%2C1')
    assert _same_page(browser)
    # the per-change page, from the change's "status" link
    browser.find_element(By.CSS_SELECTOR, '[data-change="2,1"] a.change-status-link').click()
    _until(browser, lambda b: b.current_url.endswith('/t/tenant-one/status/change/2,1'))
    _until(browser, lambda b: b.find_elements(By.CSS_SELECTOR, 'li.change'))
    assert [e.get_attribute('data-change') for e in
            browser.find_elements(By.CSS_SELECTOR, 'li.change')] == ['2,1']
    link = browser.find_element(By.CSS_SELECTOR, 'li.change a.review-link')
    assert link.get_attribute('href') == 'https://review.example.com/2'


def _log_in(browser, token):
    browser.find_element(By.ID, 'login-button').click()
    field = browser.find_element(By.ID, 'login-token')
    assert browser.switch_to.active_element == field   # keyboard focus moved to it
    field.send_keys(token)
    browser.find_element(By.ID, 'login-submit').click()


def _dequeue_buttons(browser):
    return [b.get_attribute('aria-label')
            for b in browser.find_elements(By.CSS_SELECTOR, 'button.action-dequeue')]


def test_an_admin_logs_in_and_dequeues_a_change(browser, system):
    _enqueue(system, 1)
    _enqueue(system, 2)
    _open(browser, f'{system.base}/t/t1/status')
    assert _changes(browser, 'gate') == ['1,1', '2,1']
    assert _dequeue_buttons(browser) == []
    _log_in(browser, s.token(groups=['t1']))
    _until(browser, lambda b: b.find_element(By.ID, 'login-user').text ==
           'Logged in as bob (admin)')
    assert _dequeue_buttons(browser) == ['Dequeue 1,1', 'Dequeue 2,1']
    os.makedirs(ARTIFACTS, exist_ok=True)
    browser.save_screenshot(os.path.join(ARTIFACTS, 'web-status-admin.png'))
    assert browser.execute_script('return sessionStorage.getItem("zuul.token")')
    browser.find_element(By.CSS_SELECTOR, '[data-change="2,1"] button.action-dequeue').click()
    alert = _until(browser, ec.alert_is_present())
    assert alert.text == 'Dequeue 2,1 from gate?'
    alert.accept()
    _until(browser, lambda b: b.find_element(By.ID, 'action-message').text == 'Dequeued 2,1.')
    assert s.queue(system) == [1]
    _until(browser, lambda b: _changes(b, 'gate') == ['1,1'])
    assert _same_page(browser)
    # the token is no longer an admin's (another one was pasted in this
    # tab's storage): the server's 403 is shown and nothing changes
    browser.execute_script('sessionStorage.setItem("zuul.token", arguments[0])',
                           s.token(sub='carol', groups=['other']))
    browser.find_element(By.CSS_SELECTOR, '[data-change="1,1"] button.action-dequeue').click()
    _until(browser, ec.alert_is_present()).accept()
    _until(browser, lambda b: b.find_element(By.ID, 'action-message').text.startswith(
        'Dequeue of 1,1 failed (403): User carol is not allowed'))
    assert browser.find_element(By.ID, 'action-message').get_attribute('role') == 'alert'
    assert s.queue(system) == [1]
    browser.find_element(By.ID, 'logout-button').click()
    _until(browser, lambda b: _dequeue_buttons(b) == [])
    assert browser.execute_script('return sessionStorage.getItem("zuul.token")') is None


def test_others_see_no_control_and_cannot_act(browser, system):
    _enqueue(system, 1)
    _open(browser, f'{system.base}/t/t1/status')
    assert _dequeue_buttons(browser) == []
    assert browser.find_element(By.TAG_NAME, 'body').get_attribute('data-auth') == 'anonymous'
    # a token that is not accepted: refused and dropped, still anonymous
    _log_in(browser, s.token(groups=['t1'], secret='wrong'))
    error = _until(browser, lambda b: b.find_element(By.ID, 'login-error'))
    os.makedirs(ARTIFACTS, exist_ok=True)
    browser.save_screenshot(os.path.join(ARTIFACTS, 'web-login-refused.png'))
    assert error.text.startswith('Login refused (401)')
    assert browser.execute_script('return sessionStorage.getItem("zuul.token")') is None
    # Escape closes the form and gives the focus back to "Log in"
    browser.find_element(By.ID, 'login-token').send_keys(Keys.ESCAPE)
    assert browser.find_elements(By.ID, 'login-form') == []
    assert browser.switch_to.active_element.get_attribute('id') == 'login-button'
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    _until(browser, lambda b: b.switch_to.active_element.get_attribute('id') == 'login-token')
    # an accepted token without admin rights: logged in, no controls
    browser.find_element(By.ID, 'login-token').clear()
    browser.find_element(By.ID, 'login-token').send_keys(s.token(sub='carol', groups=['x']))
    browser.find_element(By.ID, 'login-submit').click()
    _until(browser, lambda b: b.find_element(By.ID, 'login-user').text ==
           'Logged in as carol (no admin rights on this tenant)')
    assert _dequeue_buttons(browser) == []
    # and the API itself refuses a request without a token
    status, answer, headers = s.call(system, 'POST', '/api/tenant/t1/project/org/app/dequeue',
                                     {'pipeline': 'gate', 'change': '1,1'})
    assert status == 401 and headers['WWW-Authenticate'].startswith('Bearer realm=')
    assert s.queue(system) == [1]


def test_a_private_tenant_is_shown_after_logging_in(browser, system):
    browser.get(f'{system.base}/t/t2/status')
    browser.execute_script('sessionStorage.clear()')
    browser.refresh()
    error = _until(browser, lambda b: b.find_element(By.CSS_SELECTOR, '#status-error .error'))
    assert error.text.endswith('(this tenant is private: log in to see it)'), error.text
    assert browser.find_elements(By.CSS_SELECTOR, 'section.pipeline') == []
    reader = s.token(sub='dana', groups=['x'], resources_access={'account': {'roles': 'reader'}})
    _log_in(browser, reader)
    _until(browser, lambda b: b.find_elements(By.CSS_SELECTOR, 'section[data-pipeline="gate"]'))
    assert browser.find_element(By.ID, 'status-error').text == ''
    assert _dequeue_buttons(browser) == []   # a reader, no admin


DOC = 'doc/source/operations/web-ui.rst'


def test_the_doc_s_token_logs_an_admin_in(browser, system, tmp_path):
    """doc/source/operations/web-ui.rst as printed: its zuul.conf section
    and its create-auth-token command give a token the page logs in with."""
    import shlex
    import subprocess
    import sys

    from tests.harness.docs import code_blocks
    from zuul.configloader.zuulconf import load_zuul_conf
    from zuul.lib.auth import Authenticators
    (ini,) = code_blocks(DOC, 'ini')
    conf = tmp_path / 'zuul.conf'
    conf.write_text(ini)
    system.web.api.authenticators = Authenticators(load_zuul_conf(str(conf)).auth)
    (console,) = code_blocks(DOC, 'console')
    command, shown = console.splitlines()[:2]
    argv = shlex.split(command.removeprefix('$ '))
    assert argv[0] == 'zuul-admin'
    argv = [os.path.join(os.path.dirname(sys.executable), 'zuul-admin')] + [
        {'/etc/zuul/zuul.conf': str(conf), 'tenant-one': 't1'}.get(a, a) for a in argv[1:]]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    printed = result.stdout.strip()
    assert printed.startswith(shown.rstrip('.').split('.')[0])   # "Bearer eyJ..."
    _enqueue(system, 1)
    _open(browser, f'{system.base}/t/t1/status')
    _log_in(browser, printed)   # pasted with the "Bearer" word
    _until(browser, lambda b: b.find_element(By.ID, 'login-user').text ==
           'Logged in as alice (admin)')
    assert _dequeue_buttons(browser) == ['Dequeue 1,1']
    # the change's own page names its pipeline (from the real scheduler)
    # and keeps the login of this tab
    browser.find_element(By.CSS_SELECTOR, '[data-change="1,1"] a.change-status-link').click()
    _until(browser, lambda b: b.find_elements(By.CSS_SELECTOR, 'section[data-pipeline="gate"]'))
    assert browser.current_url.endswith('/t/t1/status/change/1,1')
    _until(browser, lambda b: _dequeue_buttons(b) == ['Dequeue 1,1'])
    assert browser.find_element(By.CSS_SELECTOR, 'section h2').text == 'Gate'


def _renders(browser) -> int:
    return int(browser.find_element(By.TAG_NAME, 'body').get_attribute('data-renders'))


def test_an_admin_promotes_by_keyboard_and_focus_survives_refreshes(browser, system):
    for number in (1, 2, 3):
        _enqueue(system, number)
    _open(browser, f'{system.base}/t/t1/status')
    _log_in(browser, s.token(groups=['t1']))
    _until(browser, lambda b: b.find_elements(By.CSS_SELECTOR, 'button.action-promote'))
    # the head cannot be promoted; the others can
    assert [b.get_attribute('aria-label') for b in browser.find_elements(
        By.CSS_SELECTOR, 'button.action-promote')] == ['Promote 2,1', 'Promote 3,1']
    button = browser.find_element(By.CSS_SELECTOR, '[data-change="3,1"] button.action-promote')
    browser.execute_script('arguments[0].focus()', button)
    # the page redraws every few seconds; the keyboard focus stays put
    seen = _renders(browser)
    _until(browser, lambda b: _renders(b) > seen)
    active = browser.switch_to.active_element
    assert active.get_attribute('aria-label') == 'Promote 3,1'
    active.send_keys(Keys.ENTER)   # as a keyboard user
    _until(browser, ec.alert_is_present()).accept()
    _until(browser, lambda b: b.find_element(By.ID, 'action-message').text == 'Promoted 3,1.')
    assert s.queue(system) == [3, 1, 2]
    _until(browser, lambda b: _changes(b, 'gate') == ['3,1', '1,1', '2,1'])


def test_polling_pauses_while_the_tab_is_hidden(browser, zuul_web, fake_scheduler):
    _open(browser, f'{zuul_web.base}/t/tenant-one/status')
    hide = """Object.defineProperty(document, 'hidden', {value: arguments[0],
                                                    configurable: true});
              document.dispatchEvent(new Event('visibilitychange'));"""
    browser.execute_script(hide, True)
    assert browser.execute_script('return state.timer') is None
    # a fetch that ends while hidden schedules no next one
    seen = _renders(browser)
    browser.execute_script('refresh()')
    _until(browser, lambda b: _renders(b) > seen)
    assert browser.execute_script('return state.timer') is None
    seen = _renders(browser)
    browser.execute_script(hide, False)   # shown again: asks at once
    _until(browser, lambda b: _renders(b) > seen)
    assert browser.execute_script('return state.timer !== null')
    assert _same_page(browser)


def test_failing_items_and_those_behind_them_stand_out(browser, zuul_web, fake_scheduler):
    gate = fake_scheduler.tenants['tenant-one']['status']['pipelines'][1]
    first, second, third = gate['change_queues'][0]['heads'][0]
    first['jobs'][0]['result'] = 'FAILURE'
    first['failing_reasons'] = ['at least one job failed']
    second['failing_reasons'] = ['a needed change is failing']
    _open(browser, f'{zuul_web.base}/t/tenant-one/status')

    def item(change):
        return browser.find_element(By.CSS_SELECTOR, f'li.change[data-change="{change}"]')
    assert 'health-failing' in item('1,2').get_attribute('class')
    assert item('1,2').get_attribute('aria-label') == '1,2 org/project: Failing'
    assert item('1,2').find_element(By.CSS_SELECTOR, '.failing-reasons').text == \
        'Failing because at least one job failed'
    assert 'health-behind-failing' in item('2,1').get_attribute('class')
    assert item('2,1').find_element(By.CSS_SELECTOR, '.health-badge').text == \
        'Behind a failing change'
    assert item('2,1').find_element(By.CSS_SELECTOR, '.depends-on').text.endswith(
        'tested behind 1,2')
    assert item('4,1').find_element(By.CSS_SELECTOR, '.health-badge').text == 'Succeeding'
    failed_bar = item('1,2').find_element(By.CSS_SELECTOR, '[data-job="project-merge"] '
                                                           '.progress-bar')
    assert 'bar-failure' in failed_bar.get_attribute('class')
    os.makedirs(ARTIFACTS, exist_ok=True)
    browser.save_screenshot(os.path.join(ARTIFACTS, 'web-status-failing.png'))


def test_a_running_job_opens_its_live_log_from_the_status_page(browser, zuul_web,
                                                               fake_scheduler, tmp_path):
    from tests.fakes.scheduler_rpc import RUNNING_UUID
    from zuul.executor.logstream import LogStreamServer
    stream = LogStreamServer('127.0.0.1', 0)
    stream.start()
    try:
        log = tmp_path / 'job-output.txt'
        log.write_text('first line of the running job\n')
        stream.register(RUNNING_UUID, str(log))
        fake_scheduler.set_stream_url(stream.url(RUNNING_UUID))
        _open(browser, f'{zuul_web.base}/t/tenant-one/status')
        browser.find_element(By.CSS_SELECTOR, '[data-change="1,2"] a.live-log').click()
        _until(browser, lambda b: b.current_url.endswith(f'/t/tenant-one/stream/{RUNNING_UUID}'))
        _until(browser, lambda b: 'first line of the running job' in
               b.find_element(By.ID, 'log-text').text)
        with log.open('a') as f:   # the build writes on: the page follows
            f.write('a line written later\n')
        _until(browser, lambda b: 'a line written later' in
               b.find_element(By.ID, 'log-text').text)
    finally:
        browser.get('about:blank')   # closes the websocket before the stream stops
        stream.stop()
