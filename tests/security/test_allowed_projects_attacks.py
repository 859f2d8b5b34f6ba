"""allowed-projects and allowed-branches only ever narrow.

A job of org/app holding a secret may run only for org/app (on master).
An unreviewed change to org/lib tries to widen that with a child job, a
later variant or a project-pipeline variant, so that the secret job runs
in org/lib's gate after org/lib's own pre-run.  The effective value is
the intersection over every variant and parent: each attempt is refused.
"""

from __future__ import annotations

import pytest

from tests.security.speculative import SpeculativeTenant

APP_JOBS = """
- secret:
    name: deploy-key
    data:
      key: hunter2
- job:
    name: deploy
    secrets: [deploy-key]
    allowed-projects: [org/app]
    allowed-branches: [master]
    run: playbooks/deploy.yaml
- project:
    gate:
      jobs: [deploy]
"""

LIB_JOBS = """
- job:
    name: lib-unit
    run: playbooks/unit.yaml
- project:
    gate:
      jobs: [lib-unit]
"""

ATTACK = 'zuul.d/zz-attack.yaml'


@pytest.fixture
def tenant(tmp_path):
    return SpeculativeTenant(tmp_path, {'org/app': {'zuul.d/jobs.yaml': APP_JOBS},
                                        'org/lib': {'zuul.d/jobs.yaml': LIB_JOBS}})


def _refused(tenant, item, job, reason=None):
    jobs, errors = tenant.freeze('gate', item)
    assert job not in [j.name for j in jobs]
    reason = reason or f'Project org/lib is not allowed to run job {job}.'
    assert any(reason in str(e) for e in errors), errors


@pytest.mark.parametrize('attack,job', [
    pytest.param("""
    - job:
        name: steal
        parent: deploy
        allowed-projects: [org/lib]
    - project:
        gate:
          jobs: [steal]
    """, 'steal', id='child-job-in-another-project'),
    pytest.param("""
    - job:
        name: steal
        parent: deploy
        allowed-projects: !override [org/lib, org/app]
    - project:
        gate:
          jobs: [steal]
    """, 'steal', id='child-job-with-override'),  # refused: !override is no list
    pytest.param("""
    - project:
        gate:
          jobs:
            - deploy:
                allowed-projects: [org/lib]
    """, 'deploy', id='project-pipeline-variant'),
])
def test_allowed_projects_cannot_be_widened(tenant, attack, job):
    item = tenant.propose('org/lib', 1, {ATTACK: attack})
    _refused(tenant, item, job,
             'expected str for "allowed-projects"' if '!override' in attack else None)


def test_allowed_projects_narrow_across_variants(tenant):
    """The owner's own jobs run; a variant narrowing further still applies."""
    item = tenant.propose('org/app', 2, {ATTACK: """
        - job:
            name: deploy
            allowed-projects: [org/app, org/lib]
        """})
    jobs, errors = tenant.freeze('gate', item)
    assert errors == [] and [j.name for j in jobs] == ['deploy']
    frozen = jobs[0].frozen
    # Both constraints are kept: widening by the second did not happen.
    assert frozen.get('allowed_projects') == (('org/app',), ('org/app', 'org/lib'))


def test_allowed_branches_cannot_be_widened(tenant):
    from zuul.model import item as m
    from zuul.model.change import Change
    change = Change('gerrit', 'org/app', 'refs/changes/03/3/1', number=3, patchset=1,
                    branch_name='stable/1')
    change.files = [ATTACK]
    item = m.QueueItem(change=change)
    tenant.merged(item, {ATTACK: """
        - job:
            name: deploy
            allowed-branches: ['.*']
        """})
    jobs, errors = tenant.freeze('gate', item)
    assert 'deploy' not in [j.name for j in jobs]
    assert any('Job "deploy" is not allowed to run on branch stable/1 of org/app' in str(e)
               for e in errors), errors
