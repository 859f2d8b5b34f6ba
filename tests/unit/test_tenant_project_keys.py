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


# -- configure-projects ----------------------------------------------------------

CONFIGURE_MAIN = """
- tenant:
    name: t1
    source:
      gerrit:
        config-projects: [org/config]
        untrusted-projects:
          - org/jobs:
              configure-projects: ['org/app[0-9]', org/named]
          - org/app1
          - org/named
          - org/other
"""

JOBS = """
- job:
    name: lint
- project:
    name: %s
    check:
      jobs: [lint]
"""


def _configure_repos(target):
    return {'org/config': {'master': CONFIG}, 'org/jobs': {'master': JOBS % target}}


@pytest.mark.parametrize('target', ['org/app1', 'org/named', 'review.example.org/org/app1'])
def test_configure_projects_lets_a_project_configure_the_projects_it_names(
        systems, tmp_path, target):
    scheduler, executor = _start(systems, tmp_path, CONFIGURE_MAIN,
                                 _configure_repos(target))
    assert [e for e in scheduler.tenants['t1'].layout.errors if e.severity == 'error'] == []
    project = target.split('/', 1)[1] if target.startswith('review') else target
    enqueue_ref(scheduler, 't1', 'check', project)
    assert _jobs(executor) == ['lint']
    executor.finish_all()
    assert scheduler.wait_until_settled(60)


@pytest.mark.parametrize('target', ['org/other', 'org/config'])
def test_configure_projects_does_not_reach_other_or_trusted_projects(
        systems, tmp_path, target):
    scheduler, executor = _start(systems, tmp_path, CONFIGURE_MAIN,
                                 _configure_repos(target))
    [error] = [e for e in scheduler.tenants['t1'].layout.errors if e.severity == 'error']
    assert error.project == 'org/jobs' and 'may not configure another project' in \
        error.reason
    enqueue_ref(scheduler, 't1', 'check', target)
    assert executor.requests == []


def test_configure_projects_regex_must_compile(tmp_path):
    from zuul.configloader.tenant import load_tenant_config
    path = tmp_path / 'main.yaml'
    path.write_text(CONFIGURE_MAIN.replace("'org/app[0-9]'", "'org/app['"))
    [error] = load_tenant_config(str(path)).errors
    assert 'configure-projects: invalid regular expression "org/app["' in error.reason


# -- include-provider-config --------------------------------------------------------

PROVIDER_MAIN = """
- tenant:
    name: t1
    source:
      gerrit:
        config-projects: [org/config]
        untrusted-projects:
          - org/plain
          - org/granted:
              include-provider-config: true
          - org/picky:
              include: [job]
              include-provider-config: true
              exclude: [flavor]
"""


def _label_repo(name):
    return {'master': f"""
        - image: {{name: {name}-img, type: zuul}}
        - flavor: {{name: {name}-flv}}
        - label: {{name: {name}-lbl, image: {name}-img, flavor: {name}-flv}}
        - job: {{name: {name}-job}}
        """}


def test_untrusted_projects_load_provider_config_only_when_included(systems, tmp_path):
    repos = {'org/config': {'master': CONFIG + '- label: {name: cfg-lbl}\n'},
             'org/plain': _label_repo('plain'), 'org/granted': _label_repo('granted'),
             'org/picky': {'master': """
        - image: {name: picky-img, type: zuul}
        - flavor: {name: picky-flv}
        - job: {name: picky-job}
        - nodeset: {name: picky-nodes, nodes: []}
        """}}
    scheduler, _ = _start(systems, tmp_path, PROVIDER_MAIN, repos)
    layout = scheduler.tenants['t1'].layout
    # Config projects always; untrusted ones only with the key (after
    # include, before exclude).
    assert sorted(layout.labels) == ['cfg-lbl', 'granted-lbl']
    assert sorted(layout.images) == ['granted-img', 'picky-img']
    assert sorted(layout.flavors) == ['granted-flv']
    assert {'plain-job', 'granted-job', 'picky-job'} <= set(layout.jobs)
    assert 'picky-nodes' not in layout.nodesets


# -- default-ansible-version ----------------------------------------------------------

ANSIBLE_CONFIG = CONFIG + """
- job:
    name: plain
- job:
    name: pinned
    ansible-version: '9'
- project:
    check:
      jobs: [plain, pinned]
"""


@pytest.mark.parametrize('tenant_default,conf_default,expected', [
    ("\n    default-ansible-version: '8'", '9', '8'),
    ('', '9', '9'),
    ('', None, None),
])
def test_default_ansible_version_reaches_the_job_spec(systems, tmp_path, tenant_default,
                                                      conf_default, expected):
    main = f"""
- tenant:
    name: t1{tenant_default}
    source:
      gerrit:
        config-projects: [org/config]
"""
    scheduler, executor = _start(systems, tmp_path, main,
                                 {'org/config': {'master': ANSIBLE_CONFIG}})
    scheduler.layouts.default_ansible_version = conf_default
    enqueue_ref(scheduler, 't1', 'check', 'org/config')
    versions = {r.job.name: r.job.ansible_version for r in executor.requests}
    # The job's own ansible-version wins over both defaults.
    assert versions == {'plain': expected, 'pinned': '9'}
    executor.finish_all()
    assert scheduler.wait_until_settled(60)
