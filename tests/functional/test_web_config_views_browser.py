"""The configuration pages rendered by a real headless Chromium over a
real scheduler (tests/functional/web_config_views_support.py): the job
page shows every variant with its playbooks, the project page draws
each pipeline's job graph with the right edges, the list pages show
what the API lists. Skipped when Debian's ``chromium`` is absent."""

from __future__ import annotations

import os
import re

import pytest

from tests.functional import web_config_views_support as support
from tests.functional.test_web_browser import ARTIFACTS, CHROMIUM, chromium
from zuul.scheduler.autohold import AutoholdRequest

pytestmark = pytest.mark.skipif(CHROMIUM is None,
                                reason='chromium is not installed (Debian package chromium)')


@pytest.fixture
def system(tmp_path, gearman_server, zk_client):
    system = support.start(tmp_path, gearman_server, zk_client)
    try:
        yield system
    finally:
        system.stop()


def page(system, tmp_path, path) -> str:
    dom = chromium(tmp_path, '--dump-dom', f'{system.base}/t/example/{path}')
    assert 'data-loaded="yes"' in dom, dom[-3000:]
    return dom.split('<main', 1)[1]


def test_job_page_shows_variants_and_playbooks(system, tmp_path):
    dom = page(system, tmp_path, 'job/integration')
    variants = re.findall(r'<h2 id="variant-\d">([^<]*)</h2>', dom)
    assert variants == ['Variant 1: all branches', 'Variant 2: ^stable/.*$']
    first = dom[dom.index('data-variant="0"'):dom.index('data-variant="1"')]
    assert 'playbooks/integration.yaml' in first
    assert re.search(r'data-field="Nodeset"><th scope="row">Nodeset</th><td>single<', first)
    assert '<li>org/lib</li>' in first and '<li>db-lock</li>' in first
    assert re.search(r'Parent</th><td><a href="/t/example/job/build">build</a>', first)
    second = dom[dom.index('data-variant="1"'):]
    assert 'Timeout</th><td>600 s<' in second
    # the parents, linked: base -> build -> integration
    parents = dom[dom.index('class="parents"'):dom.index('</nav>')]
    assert re.findall(r'>(\w+)</(?:a|strong)>', parents) == ['base', 'build', 'integration']
    os.makedirs(ARTIFACTS, exist_ok=True)
    chromium(tmp_path, '--screenshot=' + os.path.abspath(os.path.join(
        ARTIFACTS, 'web-job.png')), f'{system.base}/t/example/job/integration')


def test_job_page_frozen_for_a_project(system, tmp_path):
    dom = page(system, tmp_path, 'job/integration?project=org/app&branch=stable/1')
    frozen = dom[dom.index('id="frozen"'):]
    assert 'As frozen for org/app@stable/1' in frozen
    assert re.findall(r'<li>variant job (\w+)@', frozen) == ['base', 'build', 'integration',
                                                              'integration']
    # inherited playbooks and vars show in the frozen job
    assert 'playbooks/base-pre.yaml' in frozen and 'playbooks/base-post.yaml' in frozen
    assert '"flavor": "fast"' in frozen


def test_project_page_draws_the_job_graphs(system, tmp_path):
    dom = page(system, tmp_path, 'project/org/app')

    def section(name):
        start = dom.index(f'data-pipeline="{name}"')
        end = dom.find('<section', start)
        return dom[start:end if end != -1 else len(dom)]
    check, gate = section('check'), section('gate')
    edges = re.compile(r'class="graph-edge( soft)?"[^>]*data-from="([\w-]+)" '
                       r'data-to="([\w-]+)"')
    assert sorted(edges.findall(check)) == [('', 'build', 'unit'), (' soft', 'lint', 'docs')]
    assert edges.findall(gate) == [('', 'build', 'integration')]
    assert re.findall(r'class="graph-job" data-job="([\w-]+)"', check) == [
        'build', 'lint', 'unit', 'docs']
    # the dependency columns: build and lint first, unit and docs right of them
    x = {m[0]: int(m[1]) for m in re.findall(
        r'data-job="([\w-]+)"><title>[\w-]+</title><rect x="(\d+)"', check)}
    assert x['build'] == x['lint'] < x['unit'] == x['docs']
    assert 'aria-label="Job graph of the check pipeline"' in check
    os.makedirs(ARTIFACTS, exist_ok=True)
    chromium(tmp_path, '--screenshot=' + os.path.abspath(os.path.join(
        ARTIFACTS, 'web-project-graph.png')), f'{system.base}/t/example/project/org/app')
    # another branch: a job graph of its own (a project without jobs: none)
    dom = page(system, tmp_path, 'project/org/lib?branch=stable/1')
    assert 'value="stable/1"' in dom and 'graph-edge' not in dom


def test_jobs_page_filters(system, tmp_path):
    dom = page(system, tmp_path, 'jobs')
    assert re.findall(r'class="job-row" data-job="([\w-]+)"', dom) == [
        'base', 'build', 'docs', 'integration', 'lint', 'unit']
    dom = page(system, tmp_path, 'jobs?filter=integ')
    shown = re.findall(r'class="job-row" data-job="([\w-]+)"[^>]*?(hidden="")?>', dom)
    assert [name for name, hidden in shown if not hidden] == ['integration']
    assert '1 of 6 jobs' in dom


def test_semaphores_nodes_and_errors_pages(system, tmp_path):
    support.run_check(system)
    support.add_nodes(system)
    dom = page(system, tmp_path, 'semaphores')
    assert 'data-semaphore="db-lock" data-held="1"' in dom
    assert '<a href="/t/example/job/lint">lint</a>' in dom
    dom = page(system, tmp_path, 'nodes')
    assert re.findall(r'class="node-row state-(\w+)"', dom) == ['ready', 'hold']
    assert 'server-ubuntu-in-use' not in dom
    dom = page(system, tmp_path, 'config-errors')
    assert re.findall(r'class="config-error-project" data-project="([\w/]+)"', dom) == [
        'org/broken', 'org/config']
    assert 'data-where="zuul.yaml:2"' in dom and 'no-such-key' in dom
    dom = page(system, tmp_path, 'labels')
    assert re.findall(r'class="label-row" data-label="([\w-]+)"', dom) == ['fedora-large']
    system.scheduler.autoholds.add(AutoholdRequest(
        tenant='example', project='org/app', job='lint', ref_filter='.*', reason='debug',
        max_count=2, node_hold_expiration=3600))
    dom = page(system, tmp_path, 'autoholds')
    assert '<a href="/t/example/job/lint">lint</a>' in dom and '0 of 2' in dom
    assert 'No autohold requests.' in page(system, tmp_path, 'autoholds?project=org/lib')
    dom = page(system, tmp_path, 'projects')
    assert '<a href="/t/example/project/org/app">org/app</a>' in dom
    dom = page(system, tmp_path, 'info')
    assert re.search(r'data-field="Tenant"><th scope="row">Tenant</th><td>example<', dom)


def test_unknown_names_and_private_tenant(system, tmp_path):
    dom = chromium(tmp_path, '--dump-dom', f'{system.base}/t/example/job/nope')
    assert 'data-loaded="error"' in dom and 'Unknown job' in dom
    # a private tenant's page loads (the token is sent by its API calls,
    # login.js), but shows an anonymous visitor nothing of the tenant
    dom = chromium(tmp_path, '--dump-dom', f'{system.base}/t/private/jobs')
    assert 'data-loaded="error"' in dom and 'Missing "Authorization" header' in dom
    assert 'job-row' not in dom and 'build' not in dom.split('<main', 1)[1]
