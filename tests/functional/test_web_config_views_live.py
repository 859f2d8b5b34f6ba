"""The configuration pages used with the keyboard in a real headless
Chromium driven by Selenium, over a real scheduler
(tests/functional/web_config_views_support.py): the Config menu opens
and closes with the keyboard, the jobs filter narrows the list as one
types (no reload), the job graph's boxes are reached with Tab and
followed with Enter, and a private tenant's pages show its data once a
reader's token is stored by the login.

Needs Debian's ``chromium`` and ``chromium-driver`` and the ``selenium``
package; skipped with the reason when one is absent."""

from __future__ import annotations

import pytest

from tests.functional import web_config_views_support as support
from tests.harness.browser import needs_webdriver

selenium = pytest.importorskip('selenium', reason='selenium is not installed (test extras)')
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = needs_webdriver

WAIT = 20
MAX_TABS = 60


@pytest.fixture
def system(tmp_path, gearman_server, zk_client):
    system = support.start(tmp_path, gearman_server, zk_client)
    try:
        yield system
    finally:
        system.stop()


def _open(browser, url, state='yes'):
    browser.get(url)
    WebDriverWait(browser, WAIT).until(
        lambda b: b.find_element(By.TAG_NAME, 'body').get_attribute('data-loaded') == state)


def _tab_to(browser, found):
    """Press Tab until ``found(active element)``; the element."""
    body = browser.find_element(By.TAG_NAME, 'body')
    body.click()
    for _ in range(MAX_TABS):
        browser.switch_to.active_element.send_keys(Keys.TAB)
        active = browser.switch_to.active_element
        if found(active):
            return active
    raise AssertionError('never reached with Tab')


def _visible_jobs(browser):
    return [row.get_attribute('data-job') for row in
            browser.find_elements(By.CSS_SELECTOR, 'tr.job-row') if row.is_displayed()]


def test_config_menu_with_the_keyboard(system, browser):
    _open(browser, f'{system.base}/t/example/jobs')
    summary = _tab_to(browser, lambda e: e.tag_name == 'summary')
    menu = browser.find_element(By.ID, 'nav-config')
    assert menu.get_attribute('open') is None
    summary.send_keys(Keys.ENTER)
    assert menu.get_attribute('open') is not None
    summary.send_keys(Keys.TAB)
    assert browser.switch_to.active_element.text == 'Projects'
    browser.switch_to.active_element.send_keys(Keys.ESCAPE)
    assert menu.get_attribute('open') is None
    assert browser.switch_to.active_element.tag_name == 'summary'


def test_jobs_filter_narrows_as_one_types(system, browser):
    _open(browser, f'{system.base}/t/example/jobs')
    browser.execute_script('window.zuulMarker = "same page"')
    box = _tab_to(browser, lambda e: e.get_attribute('id') == 'filter')
    box.send_keys('integ')
    WebDriverWait(browser, WAIT).until(lambda b: _visible_jobs(b) == ['integration'])
    assert browser.find_element(By.ID, 'jobs-count').text == '1 of 6 jobs'
    assert browser.current_url.endswith('/t/example/jobs?filter=integ')
    assert browser.execute_script('return window.zuulMarker') == 'same page'
    for _ in 'integ':
        box.send_keys(Keys.BACKSPACE)
    WebDriverWait(browser, WAIT).until(lambda b: len(_visible_jobs(b)) == 6)


def test_job_graph_boxes_are_reached_with_tab(system, browser):
    _open(browser, f'{system.base}/t/example/project/org/app')
    unit = _tab_to(browser, lambda e: e.get_attribute('data-job') == 'unit')
    unit.send_keys(Keys.ENTER)
    WebDriverWait(browser, WAIT).until(lambda b: b.current_url.endswith('/job/unit'))
    WebDriverWait(browser, WAIT).until(
        lambda b: b.find_element(By.TAG_NAME, 'h1').text == 'Job unit')


def test_private_tenant_pages_after_login(system, browser):
    _open(browser, f'{system.base}/t/private/jobs', state='error')
    assert browser.find_element(By.ID, 'error').text == 'Missing "Authorization" header'
    browser.execute_script('sessionStorage.setItem("zuul.token", arguments[0])',
                           support.reader_token())
    try:
        _open(browser, f'{system.base}/t/private/jobs')
        assert 'build' in _visible_jobs(browser)
        assert browser.find_element(By.TAG_NAME, 'body').get_attribute('data-auth') == 'user'
        # a token the server refuses is dropped before the page asks: the
        # visitor sees the anonymous answer, not the refusal of the token
        browser.execute_script('sessionStorage.setItem("zuul.token", "not-a-token")')
        _open(browser, f'{system.base}/t/example/jobs')
        assert len(_visible_jobs(browser)) == 6
    finally:
        browser.execute_script('sessionStorage.clear()')
