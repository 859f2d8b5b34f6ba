"""exclude-unprotected-branches and exclude-locked-branches on a GitHub
connection: only protected (or only unlocked) branches' configuration is
loaded (branch protection read from the fake GitHub's REST API); without
the keys every branch is."""

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
    (False, {'main-job', 'stable-job', 'wip-job'}),
    ('exclude-locked-branches: true', {'main-job', 'wip-job'}),
    ('exclude-locked-branches: false', {'main-job', 'stable-job', 'wip-job'}),
    ('the documented tenant', {'main-job'})])
def test_only_protected_branches_are_loaded(tmp_path, github, exclude, jobs):
    connection, fake = github
    fake.repo('acme/widget')['protected']['stable'] = {'contexts': [], 'lock': True}
    repos = {'org/config': {'master': CONFIG},
             'acme/widget': {'main': _branch_config('main-job'),
                             'stable': _branch_config('stable-job'),
                             'wip-feature': _branch_config('wip-job')}}
    if exclude == 'the documented tenant':
        from tests.harness.docs import code_blocks
        (main,) = [b for b in code_blocks('doc/source/reference/drivers.rst', 'yaml')
                   if 'exclude-locked-branches' in b]
        import yaml
        doc = yaml.safe_load(main)
        doc[0]['tenant']['name'] = 't1'
        doc[0]['tenant']['source']['gerrit'] = {'config-projects': ['org/config']}
        main = yaml.safe_dump(doc)
    else:
        key = 'exclude-unprotected-branches: true' if exclude is True else exclude or ''
        main = MAIN.format(tenant_key=key)
    scheduler, _ = start_system(tmp_path, main, repos, connections=[connection])
    try:
        layout = scheduler.tenants['t1'].layout
        assert set(layout.jobs) - {'base'} == jobs
    finally:
        scheduler.stop()
    asked = [path for _, path, _ in fake.requests if path.endswith('/branches')]
    assert bool(asked) == (exclude not in (False, 'exclude-locked-branches: false'))


def test_no_warning_for_github_connections(tmp_path):
    path = tmp_path / 'main.yaml'
    path.write_text(MAIN.format(tenant_key='exclude-unprotected-branches: true'))
    result = load_tenant_config(str(path), {'gerrit', 'github'})
    assert not result.errors
    warned = unprotected_branch_warnings(result, {'gerrit': 'gerrit', 'github': 'github'})
    # Only the Gerrit connection (no branch protection) is warned about.
    assert [w for w in warned if '"gerrit"' in str(w)]
    assert not [w for w in warned if '"github"' in str(w)]
