"""post-review cannot be switched off by an unreviewed change.

Every attack is an unreviewed change to an untrusted project, frozen the
way the scheduler freezes it (speculative layout, then the job graph for
the item's pipeline). ``check`` is a pre-review pipeline; ``gate`` is
post-review. A job that is post-review, or has a secret, must not be
frozen for ``check`` whatever the change says.
"""

from __future__ import annotations

import pytest

from tests.security.speculative import SpeculativeTenant
from zuul.model.freeze import JobFreezer, freeze_job_graph

APP_JOBS = """
- secret:
    name: creds
    data:
      password: hunter2
- job:
    name: deploy
    secrets: [creds]
    run: playbooks/deploy.yaml
- job:
    name: publish
    post-review: true
    run: playbooks/publish.yaml
- project:
    gate:
      jobs: [deploy, publish]
"""

LIB_JOBS = """
- job:
    name: lib-unit
    run: playbooks/unit.yaml
- project:
    check:
      jobs: [lib-unit]
"""

# Config files are read in path order: "zz-" makes the attacker's stanzas
# the later variants.
ATTACK = 'zuul.d/zz-attack.yaml'

# deploy is post-review because it has a secret, publish because it says so.
GUARDED = ['deploy', 'publish']


@pytest.fixture
def tenant(tmp_path):
    return SpeculativeTenant(tmp_path, {'org/app': {'zuul.d/jobs.yaml': APP_JOBS},
                                        'org/lib': {'zuul.d/jobs.yaml': LIB_JOBS}})


def _refused(tenant, item, job):
    jobs, errors = tenant.freeze('check', item)
    assert jobs == []
    assert any(f'Pre-review pipeline check does not allow post-review job "{job}"' in
               str(e) for e in errors), errors
    return item.current_build_set.layout


def _frozen(layout, name, project_variants=()):
    return JobFreezer(layout, 'master', None, 'base').freeze(name, project_variants)


@pytest.mark.parametrize('job', GUARDED)
def test_a_later_variant_cannot_turn_post_review_off(tenant, job):
    item = tenant.propose('org/app', 1, {ATTACK: f"""
        - job:
            name: {job}
            post-review: false
        - project:
            check:
              jobs: [{job}]
        """})
    layout = _refused(tenant, item, job)
    frozen = _frozen(layout, job)
    assert frozen.post_review is True
    assert frozen.inheritance_path[-1].startswith(f'variant job {job}@org/app:master:'
                                                  f'{ATTACK}')


@pytest.mark.parametrize('job', GUARDED)
def test_a_project_pipeline_variant_cannot_turn_post_review_off(tenant, job):
    item = tenant.propose('org/app', 1, {ATTACK: f"""
        - project:
            check:
              jobs:
                - {job}:
                    post-review: false
        """})
    layout = _refused(tenant, item, job)
    ppc = layout.get_project_pipeline_config('org/app', 'check', 'master')
    assert _frozen(layout, job, ppc.job_list).post_review is True


@pytest.mark.parametrize('job', GUARDED)
def test_a_child_job_in_another_project_cannot_turn_post_review_off(tenant, job):
    item = tenant.propose('org/lib', 2, {ATTACK: f"""
        - job:
            name: sneaky
            parent: {job}
            post-review: false
            run: playbooks/sneaky.yaml
        - project:
            check:
              jobs: [sneaky]
        """})
    layout = _refused(tenant, item, 'sneaky')
    assert _frozen(layout, 'sneaky').post_review is True


@pytest.mark.parametrize('stanza', [
    pytest.param("""
    - job:
        name: leak
        secrets: [creds]
        post-review: false
        run: playbooks/leak.yaml
    """, id='own-stanza-says-post-review-false'),
    pytest.param("""
    - job:
        name: leak
        secrets:
          - name: creds
            secret: creds
            pass-to-parent: true
        post-review: false
    """, id='pass-to-parent-secret'),
    pytest.param("""
    - job:
        name: leak
        parent: deploy
        run: playbooks/leak.yaml
    """, id='secret-inherited-from-parent'),
])
def test_a_job_with_secrets_never_runs_in_a_pre_review_pipeline(tenant, stanza):
    item = tenant.propose('org/app', 1, {ATTACK: stanza + """
    - project:
        check:
          jobs: [leak]
    """})
    jobs, errors = tenant.freeze('check', item)
    assert jobs == []
    assert any('does not allow post-review job "leak" (the job has secrets)' in str(e)
               for e in errors), errors


def test_a_job_with_secrets_still_freezes_in_a_post_review_pipeline(tenant):
    item = tenant.propose('org/app', 1)
    jobs, errors = tenant.freeze('gate', item)
    assert errors == []
    by_name = {j.name: j.frozen for j in jobs}
    assert set(by_name) == {'deploy', 'publish'}
    assert by_name['deploy'].secrets == {'creds': ('creds', 'org/app')}
    assert by_name['deploy'].post_review and by_name['publish'].post_review


def test_a_pipeline_given_by_name_fails_closed(tenant):
    """A pipeline passed by name is looked up; an unknown one allows
    neither post-review jobs nor secrets."""
    layout = tenant.layout
    job_list = layout.get_project_pipeline_config('org/app', 'gate', 'master').job_list
    graph, errors = freeze_job_graph(layout, 'org/app', 'gate', 'master', job_list=job_list)
    assert errors == [] and set(graph.jobs) == {'deploy', 'publish'}
    graph, errors = freeze_job_graph(layout, 'org/app', 'no-such-pipeline', 'master',
                                     job_list=job_list)
    assert graph.jobs == {}
    assert sorted(errors) == [
        'deploy: Pre-review pipeline no-such-pipeline does not allow post-review job "deploy" '
        '(the job has secrets)',
        'publish: Pre-review pipeline no-such-pipeline does not allow post-review job "publish" '
        '(the job is post-review)']
