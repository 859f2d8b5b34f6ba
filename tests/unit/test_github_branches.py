"""exclude-unprotected-branches on a GitHub connection: only protected
branches' configuration is loaded (branch protection read from the fake
GitHub's REST API); without the key every branch is."""

from __future__ import annotations

import pytest

from tests.fakes.github import FakeGithub
from tests.unit.scheduler_support import start_system
from zuul.configloader.tenant import load_tenant_config, unprotected_branch_warnings
from zuul.driver.github.connection import GithubConnection

CONFIG = """
- pipeline:
    name: check
    manager: independent
    trigger: {}
- job:
    name: base
    parent: null
"""


def _branch_config(job):
    return f"""
- job:
    name: {job}
- project:
    check:
      jobs: [{job}]
"""


MAIN = """
- tenant:
    name: t1
    {tenant_key}
    source:
      gerrit:
        config-projects: [org/config]
      github:
        untrusted-projects:
          - acme/widget
"""


@pytest.fixture
def github():
    fake = FakeGithub()
    url = fake.start()
    repo = fake.repo('acme/widget')
    repo['branches'] = ['main', 'stable', 'wip-feature']
    repo['protected'] = {'main': [], 'stable': []}
    fake.personal_tokens.add('t0ken')
    yield GithubConnection('github', {'api_token': 't0ken', 'api_url': url}), fake
    fake.stop()


@pytest.mark.parametrize('exclude,jobs', [
    (True, {'main-job', 'stable-job'}),
    (False, {'main-job', 'stable-job', 'wip-job'})])
def test_only_protected_branches_are_loaded(tmp_path, github, exclude, jobs):
    connection, fake = github
    repos = {'org/config': {'master': CONFIG},
             'acme/widget': {'main': _branch_config('main-job'),
                             'stable': _branch_config('stable-job'),
                             'wip-feature': _branch_config('wip-job')}}
    main = MAIN.format(tenant_key='exclude-unprotected-branches: true' if exclude else '')
    scheduler, _ = start_system(tmp_path, main, repos, connections=[connection])
    try:
        layout = scheduler.tenants['t1'].layout
        assert set(layout.jobs) - {'base'} == jobs
    finally:
        scheduler.stop()
    asked = [path for _, path, _ in fake.requests if path.endswith('/branches')]
    assert bool(asked) == exclude


def test_no_warning_for_github_connections(tmp_path):
    path = tmp_path / 'main.yaml'
    path.write_text(MAIN.format(tenant_key='exclude-unprotected-branches: true'))
    result = load_tenant_config(str(path), {'gerrit', 'github'})
    assert not result.errors
    warned = unprotected_branch_warnings(result, {'gerrit': 'gerrit', 'github': 'github'})
    # Only the Gerrit connection (no branch protection) is warned about.
    assert [w for w in warned if '"gerrit"' in str(w)]
    assert not [w for w in warned if '"github"' in str(w)]
