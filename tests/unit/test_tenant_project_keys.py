"""Per-project keys of the tenant file that change what the scheduler
loads: ``always-dynamic-branches``, ``configure-projects``,
``allow-base-jobs`` and ``include-provider-config``; and the tenant's
``default-ansible-version`` reaching the executor. The real Scheduler,
managers and Layouts run (tests/unit/scheduler_support.py)."""

from __future__ import annotations

import pytest

from tests.unit.scheduler_support import enqueue_ref, start_system

CONFIG = """
- pipeline:
    name: check
    manager: independent
    trigger: {}
- job:
    name: base
    parent: null
"""

MASTER = """
- job:
    name: master-job
- project:
    check:
      jobs: [master-job]
"""

FEATURE = """
- job:
    name: feature-job
- project:
    check:
      jobs: [feature-job]
"""

DYNAMIC_MAIN = """
- tenant:
    name: t1
    source:
      gerrit:
        config-projects: [org/config]
        untrusted-projects:
          - org/proj:
              always-dynamic-branches: ['feature/.*']
"""


@pytest.fixture
def systems():
    started = []
    yield started
    for scheduler, _ in started:
        scheduler.stop()


def _start(systems, tmp_path, main, repos):
    system = start_system(tmp_path, main, repos)
    systems.append(system)
    return system


def _jobs(executor):
    return sorted(r.job.name for r in executor.requests)


def test_always_dynamic_branch_config_applies_only_to_changes_on_it(systems, tmp_path):
    repos = {'org/config': {'master': CONFIG},
             'org/proj': {'master': MASTER, 'feature/one': FEATURE}}
    scheduler, executor = _start(systems, tmp_path, DYNAMIC_MAIN, repos)
    layout = scheduler.tenants['t1'].layout
    # Not in the tenant's layout ...
    assert 'feature-job' not in layout.jobs and 'master-job' in layout.jobs
    assert scheduler.layouts.project_branches(layout.tenant.projects[1]) == ['master']
    # ... but a change on the branch runs with the branch's configuration
    # (and the implied branch matchers of a project with two branches).
    enqueue_ref(scheduler, 't1', 'check', 'org/proj', 'feature/one')
    assert _jobs(executor) == ['feature-job']
    enqueue_ref(scheduler, 't1', 'check', 'org/proj', 'master')
    assert _jobs(executor) == ['feature-job', 'master-job']
    executor.finish_all()
    assert scheduler.wait_until_settled(60)


def test_broken_config_on_an_always_dynamic_branch_does_not_break_the_tenant(
        systems, tmp_path):
    repos = {'org/config': {'master': CONFIG},
             'org/proj': {'master': MASTER, 'feature/bad': '- job: {nam: x}\n'}}
    scheduler, executor = _start(systems, tmp_path, DYNAMIC_MAIN, repos)
    assert [e for e in scheduler.tenants['t1'].layout.errors
            if e.severity == 'error'] == []
    enqueue_ref(scheduler, 't1', 'check', 'org/proj', 'feature/bad')
    assert scheduler.wait_until_settled(60)
    # The change on the branch gets the error; nothing runs for it.
    assert executor.requests == []


def test_without_always_dynamic_branches_every_branch_is_static(systems, tmp_path):
    repos = {'org/config': {'master': CONFIG},
             'org/proj': {'master': MASTER, 'feature/one': FEATURE}}
    main = DYNAMIC_MAIN.replace("""          - org/proj:
              always-dynamic-branches: ['feature/.*']""", '          - org/proj')
    scheduler, _ = _start(systems, tmp_path, main, repos)
    assert 'feature-job' in scheduler.tenants['t1'].layout.jobs
