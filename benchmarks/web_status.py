"""zuul-web status with 500 items in 10 pipelines: the status JSON and the
status page.

The scheduler side is real model objects (queue items, build sets,
builds) turned into the status JSON by zuul/scheduler/status.py; zuul-web
asks for it over the real RPC (Gearman) and serves it; Debian's headless
Chromium (driven by Selenium through chromium-driver) loads the page.

    .venv/bin/python -m benchmarks.web_status [--items 500] [--pipelines 10]

Prints a table: building the JSON, serialising it, fetching it through
zuul-web, the page's time to loaded (navigation start to the first full
render), and one re-render as the page's periodic refresh does it. The
status is fetched with gzip, as browsers do, once asking the scheduler
each time and once within zuul-web's one-second status cache.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
import urllib.request
from types import SimpleNamespace

from benchmarks.nodepool import print_table
from nodepool.zk.localserver import free_port
from zuul.lib import rpc_protocol as p
from zuul.lib.gearlib import GearServer
from zuul.lib.rpc import RPCClient, RPCListener
from zuul.model import item as m
from zuul.model.change import Change
from zuul.scheduler import status
from zuul.web.server import ZuulWeb

TENANT = 'bench'
JOBS = ('merge', 'lint', 'unit', 'functional', 'docs', 'integration')
ESTIMATES = {'merge': 40.0, 'lint': 90.0, 'unit': 600.0, 'functional': 1200.0,
             'docs': 200.0}   # integration: never succeeded yet


def _item(number: int, project: str, now: float) -> m.QueueItem:
    change = Change('gerrit', project, f'refs/changes/{number % 100:02d}/{number}/1',
                    number=number, patchset=1, branch_name='master',
                    url=f'https://review.example.com/c/{project}/+/{number}',
                    subject=f'Change {number}')
    item = m.QueueItem(change=change, enqueue_time=now - 60 * (number % 90))
    bs = item.current_build_set
    bs.merge_state = m.MERGE_COMPLETE
    bs.jobs = [m.JobRef(name, voting=name != 'docs',
                        hard_dependencies=('merge',) if name != 'merge' else ())
               for name in JOBS]
    for i, name in enumerate(JOBS[:number % len(JOBS) + 1]):
        build = m.Build(bs.job(name), bs, start_time=now - 30 * (i + 1),
                        url=f'finger://executor/{number}-{name}')
        if i < number % 3:
            build.end_time, build.result = now - 5, 'SUCCESS' if number % 17 else 'FAILURE'
        bs.builds[name] = build
    return item


def model(n_items: int, n_pipelines: int, now: float) -> SimpleNamespace:
    """A scheduler's tenant as status.tenant_status reads it: half the
    pipelines dependent (one shared queue each), half independent (a
    queue per change)."""
    managers = {}
    per = n_items // n_pipelines
    number = 1000
    for k in range(n_pipelines):
        name = f'pipeline-{k}'
        dependent = k % 2 == 1
        queues = [m.ChangeQueue(name, name='integrated', window=20)] if dependent else []
        for _ in range(per):
            number += 1
            item = _item(number, f'org/project-{number % 25}', now)
            if not dependent:
                queues.append(m.ChangeQueue(name, projects=[item.change.project]))
            queues[-1].enqueue_item(item)
        managers[name] = SimpleNamespace(
            pipeline=SimpleNamespace(name=name, description=f'Pipeline {k}.',
                                     manager='dependent' if dependent else 'independent'),
            queues=queues)
    state = SimpleNamespace(managers=managers, loaded_at=now)
    return SimpleNamespace(get_tenant=lambda _: state,
                           loop=SimpleNamespace(triggers=[], management=[], results=[]))


def timed(fn, repeat: int) -> tuple[float, object]:
    """(median ms, the last result)."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), result


def estimates(item, job_name):
    return ESTIMATES.get(job_name)


def json_rows(scheduler, repeat: int) -> tuple[list[list[str]], dict]:
    build_ms, data = timed(lambda: status.tenant_status(scheduler, TENANT, estimates), repeat)
    dump_ms, text = timed(lambda: json.dumps(data), repeat)
    size = f'{len(text) / 1024:.0f} KiB'
    return [['status JSON: build (status.py)', f'{build_ms:.1f}', size],
            ['status JSON: serialise (json.dumps)', f'{dump_ms:.1f}', size]], data


class Served:
    """zuul-web over a real Gearman RPC whose scheduler side answers
    with the status JSON built from the model each time."""

    def __init__(self, scheduler, status_cache_ttl: float = 1.0):
        port = free_port()
        self.gearman = GearServer(port=port, host='127.0.0.1')
        handlers = {
            p.STATUS_GET: lambda r: status.tenant_status(scheduler, TENANT, estimates),
            p.TENANT_LIST: lambda r: [{'name': TENANT, 'projects': 25, 'queue': 0}]}
        self.listener = RPCListener('127.0.0.1', port, handlers, name='bench-scheduler')
        self.listener.start()
        self.rpc = RPCClient('127.0.0.1', port, timeout=60)
        self.web = ZuulWeb('127.0.0.1', 0, self.rpc, status_cache_ttl=status_cache_ttl)
        self.web.start()
        self.base = f'http://127.0.0.1:{self.web.port}'

    def stop(self):
        self.web.stop()
        self.rpc.shutdown()
        self.listener.stop()
        self.gearman.shutdown()


def api_row(served: Served, repeat: int, what: str) -> list[str]:
    """GET the status as a browser does (gzip accepted)."""
    url = f'{served.base}/api/tenant/{TENANT}/status'

    def get():
        request = urllib.request.Request(url, headers={'Accept-Encoding': 'gzip'})
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.read()
    get()
    ms, body = timed(get, repeat)
    return [f'GET /api/tenant/<t>/status: {what}', f'{ms:.1f}',
            f'{len(body) / 1024:.0f} KiB gzip']


# Set before the page's scripts run: when the page marks itself loaded.
LOADED_PROBE = """
new MutationObserver((records, observer) => {
  if (document.body && document.body.dataset.loaded === 'yes') {
    window.benchLoadedAt = performance.now();
    observer.disconnect();
  }
}).observe(document, {attributes: true, subtree: true, attributeFilter: ['data-loaded']});
"""


def browser_rows(served: Served, repeat: int) -> list[list[str]]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which('chromium')
    profile = tempfile.mkdtemp(prefix='bench-chromium-')
    for arg in ('--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
                '--no-first-run', '--window-size=1280,900', f'--user-data-dir={profile}'):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=shutil.which('chromedriver')),
                              options=options)
    try:
        driver.execute_cdp_cmd('Page.addScriptToEvaluateOnNewDocument',
                               {'source': LOADED_PROBE})
        loaded = []
        for _ in range(repeat):
            driver.get(f'{served.base}/t/{TENANT}/status')
            WebDriverWait(driver, 60).until(
                lambda d: d.execute_script('return window.benchLoadedAt'))
            loaded.append(driver.execute_script('return window.benchLoadedAt'))
        items = driver.execute_script('return document.querySelectorAll("li.change").length')
        rerender = [driver.execute_script(
            'const t = performance.now(); render(); return performance.now() - t;')
            for _ in range(repeat)]
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
    return [[f'page: time to loaded ({items} items drawn)',
             f'{statistics.median(loaded):.0f}', ''],
            ['page: one re-render (periodic refresh)', f'{statistics.median(rerender):.0f}',
             '']]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--items', type=int, default=500)
    parser.add_argument('--pipelines', type=int, default=10)
    parser.add_argument('--repeat', type=int, default=5)
    args = parser.parse_args()
    scheduler = model(args.items, args.pipelines, time.time())
    rows, _ = json_rows(scheduler, args.repeat)
    uncached = Served(scheduler, status_cache_ttl=0)
    try:
        rows.append(api_row(uncached, args.repeat, 'scheduler asked (RPC)'))
    finally:
        uncached.stop()
    served = Served(scheduler)
    try:
        rows.append(api_row(served, args.repeat, 'within 1 s of another poll'))
        if shutil.which('chromium') and shutil.which('chromedriver'):
            rows += browser_rows(served, args.repeat)
        else:
            print('chromium or chromedriver missing: the page is not measured')
    finally:
        served.stop()
    print(f'{args.items} items in {args.pipelines} pipelines, median of {args.repeat}')
    print_table(['what', 'ms', 'size'], rows)


if __name__ == '__main__':
    main()
