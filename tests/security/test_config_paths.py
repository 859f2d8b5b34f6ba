"""Paths taken from untrusted config never leave their place.

A role ``name:`` becomes a link name in the executor's job dir and a
playbook path a file below the project's checkout: an unreviewed change
that sets either to ``../`` or an absolute path gets a config error on the
change (file, line, reason) and the job is not frozen.  The executor
refuses them again on its own (tests/security/test_executor_attacks.py).
"""

from __future__ import annotations

import pytest

from tests.security.speculative import SpeculativeTenant

APP_JOBS = """
- job:
    name: app-unit
    run: playbooks/unit.yaml
- project:
    check:
      jobs: [app-unit]
"""

ATTACK = 'zuul.d/zz-attack.yaml'


@pytest.fixture
def tenant(tmp_path):
    return SpeculativeTenant(tmp_path, {'org/app': {'zuul.d/jobs.yaml': APP_JOBS},
                                        'org/roles': {}})


def _attack(stanza: str) -> str:
    return f"""
- job:
    name: escape
{stanza}
- project:
    check:
      jobs: [escape]
"""


@pytest.mark.parametrize('stanza, reason', [
    ('    run: playbooks/x.yaml\n    roles:\n      - zuul: org/roles\n'
     '        name: ../../../../../../tmp/escape', 'a role name is one path component'),
    ('    run: playbooks/x.yaml\n    roles:\n      - zuul: org/roles\n'
     '        name: /tmp/escape', 'a role name is one path component'),
    ('    run: ../../../../etc/evil.yaml', 'may not contain ".."'),
    ('    run: /etc/evil.yaml', 'must be relative to its project'),
    ('    pre-run:\n      - name: ../x.yaml', 'may not contain ".."'),
], ids=['role-dotdot', 'role-absolute', 'run-dotdot', 'run-absolute', 'pre-run-dotdot'])
def test_config_paths_cannot_leave_their_place(tenant, stanza, reason):
    item = tenant.propose('org/app', 1, {ATTACK: _attack(stanza)})
    jobs, errors = tenant.freeze('check', item)
    assert jobs == []
    job_errors = [e for e in errors if e.object_type == 'job']
    assert job_errors, errors
    error = job_errors[0]
    assert (error.path, error.line, error.project) == (ATTACK, 2, 'org/app')
    assert error.object_name == 'escape'
    assert reason in error.reason, error.reason


def test_plain_role_names_and_paths_still_load(tenant):
    stanza = ('    run: playbooks/run.yaml\n    roles:\n      - zuul: org/roles\n'
              '        name: my_role.v2-x\n')
    item = tenant.propose('org/app', 1, {ATTACK: _attack(stanza)})
    jobs, errors = tenant.freeze('check', item)
    assert errors == [] and not item.current_build_set.config_errors
    assert sorted(getattr(j, 'name', j) for j in jobs) == ['app-unit', 'escape']
