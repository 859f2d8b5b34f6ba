"""A real headless Chromium driven by Selenium for the web pages' tests.

Debian's ``chromium`` and ``chromium-driver`` (tools/install-deps.sh) and
the ``selenium`` package (test extras); ``needs_webdriver`` skips a test
module with the reason when one is absent.  The driver is Debian's, by
path, so Selenium never tries to download one.  One browser serves a
whole test module (``browser`` fixture)."""

from __future__ import annotations

import shutil

import pytest

CHROMIUM = shutil.which('chromium') or shutil.which('chromium-browser')
CHROMEDRIVER = shutil.which('chromedriver')

try:
    import selenium  # noqa: F401 - presence check
    HAVE_SELENIUM = True
except ImportError:
    HAVE_SELENIUM = False

needs_webdriver = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None or not HAVE_SELENIUM,
    reason='chromium and chromium-driver (Debian packages) and selenium (test extras) '
           'are needed for browser tests')

CHROMIUM_ARGS = ('--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
                 '--disable-background-networking', '--disable-component-update',
                 '--no-first-run', '--window-size=1280,900')


@pytest.fixture(scope='module')
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (*CHROMIUM_ARGS, f'--user-data-dir={tmp_path_factory.mktemp("chromium")}'):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
