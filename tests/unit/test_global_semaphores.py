"""Global semaphores (``global-semaphore`` objects of the tenant file,
granted to tenants by ``tenant.semaphores``): the real Scheduler,
pipeline managers and Layouts of two tenants; the merger and the
executor's Gearman client are stand-ins (builds end when the test says).

A global semaphore with ``max: 1`` lets one job of the two tenants run
at a time; the same name defined per tenant in-repo lets each tenant run
its own."""

from __future__ import annotations

import textwrap

import pytest

from tests.unit.scheduler_support import enqueue_ref, start_system
from zuul.configloader.tenant import load_tenant_config, tenant_conf_check

GLOBAL_MAIN = """
- global-semaphore:
    name: license
    max: 1
- tenant:
    name: t1
    semaphores: [license]
    source:
      gerrit:
        config-projects: [org/config1]
- tenant:
    name: t2
    semaphores: license
    source:
      gerrit:
        config-projects: [org/config2]
"""

LOCAL_MAIN = """
- tenant:
    name: t1
    source:
      gerrit:
        config-projects: [org/config1]
- tenant:
    name: t2
    source:
      gerrit:
        config-projects: [org/config2]
"""

CONFIG = """
- pipeline:
    name: post
    manager: independent
    trigger: {}
- job:
    name: base
    parent: null
- job:
    name: licensed
    semaphore: license
- project:
    post:
      jobs: [licensed]
"""

LOCAL_SEMAPHORE = """
- semaphore:
    name: license
    max: 1
"""


def _repos(extra=''):
    return {p: {'master': CONFIG + extra} for p in ('org/config1', 'org/config2')}


@pytest.fixture
def make_system(tmp_path):
    started = []

    def make(main, extra=''):
        system = start_system(tmp_path, main, _repos(extra))
        started.append(system[0])
        return system
    yield make
    for scheduler in started:
        scheduler.stop()


def _enqueue_both(scheduler):
    for tenant, project in (('t1', 'org/config1'), ('t2', 'org/config2')):
        enqueue_ref(scheduler, tenant, 'post', project)


def _tenants(executor):
    return sorted(request.zuul.tenant for request, _, _ in executor.running)


def test_global_semaphore_is_counted_across_tenants(make_system):
    scheduler, executor = make_system(GLOBAL_MAIN)
    for name in ('t1', 't2'):
        sem = scheduler.tenants[name].layout.semaphores['license']
        assert (sem.is_global, sem.max) == (True, 1)
    _enqueue_both(scheduler)
    # One build in all: the other tenant's job waits for the semaphore.
    [(first, _, _)] = executor.running
    waiting = {'t1': 't2', 't2': 't1'}[first.zuul.tenant]
    executor.finish(first)
    assert scheduler.loop.wait_idle(60)
    assert _tenants(executor) == [waiting]
    executor.finish(executor.running[0][0])
    assert scheduler.wait_until_settled(60)
    assert scheduler.layouts.global_semaphore_holders.holders == {}


def test_tenant_semaphores_of_the_same_name_are_counted_per_tenant(make_system):
    scheduler, executor = make_system(LOCAL_MAIN, LOCAL_SEMAPHORE)
    _enqueue_both(scheduler)
    assert _tenants(executor) == ['t1', 't2']
    executor.finish_all()
    assert scheduler.wait_until_settled(60)


def test_in_repo_semaphore_shadowing_a_global_one_is_an_error_and_ignored(make_system):
    scheduler, executor = make_system(GLOBAL_MAIN, LOCAL_SEMAPHORE.replace('1', '5'))
    layout = scheduler.tenants['t1'].layout
    assert layout.semaphores['license'].is_global
    assert layout.semaphores['license'].max == 1
    [error] = [e for e in layout.errors if e.object_type == 'semaphore']
    assert 'global semaphore' in error.reason and error.path == 'zuul.yaml'
    _enqueue_both(scheduler)
    assert len(executor.running) == 1


def test_global_semaphore_not_granted_to_a_tenant_is_unknown(tmp_path):
    path = tmp_path / 'main.yaml'
    path.write_text(textwrap.dedent(GLOBAL_MAIN).replace('    semaphores: license\n', ''))
    config = load_tenant_config(str(path))
    assert config.errors == []
    assert list(config.tenants['t1'].global_semaphores) == ['license']
    assert config.tenants['t2'].global_semaphores == {}


def test_global_semaphore_errors_name_file_and_line(tmp_path, capsys):
    path = tmp_path / 'main.yaml'
    path.write_text(textwrap.dedent("""
        - global-semaphore:
            name: license
            max: 0
        - global-semaphore:
            max: 2
        - global-semaphore:
            name: seats
        - global-semaphore:
            name: seats
        - tenant:
            name: t1
            semaphores: [nope]
            source:
              gerrit:
                config-projects: [org/config1]
        """))
    config = load_tenant_config(str(path))
    reasons = [(e.line, e.reason) for e in config.errors]
    assert reasons == [
        (3, 'global-semaphore: max must be at least 1'),
        (6, 'global-semaphore: required key not provided "name"'),
        (10, 'global-semaphore "seats" defined twice'),
        (12, 'semaphores: unknown global-semaphore "nope"'),
    ]
    assert list(config.global_semaphores) == ['seats']
    conf = tmp_path / 'zuul.conf'
    conf.write_text(f'[scheduler]\ntenant_config={path}\n[connection gerrit]\n'
                    'driver=gerrit\nserver=review.example.org\n')
    assert tenant_conf_check(str(conf)) == 1
    assert 'unknown global-semaphore "nope"' in capsys.readouterr().out
