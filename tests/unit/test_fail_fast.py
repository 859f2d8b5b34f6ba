"""``fail-fast`` of a project-pipeline reaches the build set when the
scheduler freezes an item's jobs (the manager's reaction is in
test_pipeline_managers)."""

from __future__ import annotations

import pytest

from tests.security.speculative import SpeculativeTenant

APP = """
- job:
    name: app-unit
    run: playbooks/unit.yaml
- job:
    name: app-lint
    run: playbooks/lint.yaml
- project:
    check:
      fail-fast: {check}
      jobs: [app-unit, app-lint]
    gate:
      jobs: [app-unit]
"""


@pytest.mark.parametrize('setting,expected', [('true', True), ('false', False)])
def test_fail_fast_is_frozen_into_the_build_set(tmp_path, setting, expected):
    tenant = SpeculativeTenant(tmp_path, {'org/app': {'zuul.yaml': APP.format(check=setting)},
                                          'org/lib': {}})
    item = tenant.propose('org/app', 1)
    jobs, errors = tenant.freeze('check', item)
    assert not errors and [j.name for j in jobs] == ['app-unit', 'app-lint']
    assert item.current_build_set.fail_fast is expected
    gate_item = tenant.propose('org/app', 2)
    tenant.freeze('gate', gate_item)
    assert gate_item.current_build_set.fail_fast is False      # not set for gate
