"""Variables from an unreviewed change to an untrusted project.

The change is loaded the way the scheduler loads it (speculative layout,
freezing, the executor payload built by ``Layouts.job_spec_for``).  What
it writes must reach the executor as unsafe text, and it may not set a
variable that chooses how or where Ansible executes: refused with the
file and line that say it.  tests/security/test_trusted_attacks.py shows
the executor's side with real playbooks.
"""

from __future__ import annotations

import pytest

from tests.security.speculative import SpeculativeTenant
from zuul.lib.yamlutil import UNSAFE_MARKER

TEMPLATE = "{{ lookup('pipe', 'id') }}"

CONFIG_JOBS = """
- job:
    name: trusted-vars
    vars:
      site_path: "{{ zuul.executor.work_root }}/site"
      site_interpreter_ok: /usr/bin/python3
"""

LIB_JOBS = """
- job:
    name: lib-unit
    run: playbooks/unit.yaml
- project:
    check:
      jobs: [lib-unit]
"""

ATTACK = 'zuul.d/zz-attack.yaml'


@pytest.fixture
def tenant(tmp_path):
    t = SpeculativeTenant(tmp_path, {'org/lib': {'zuul.d/jobs.yaml': LIB_JOBS}})
    return t


def _spec(tenant, item, name):
    jobs, errors = tenant.freeze('check', item)
    assert errors == [], errors
    job = next(j for j in jobs if j.name == name)
    return tenant.layouts.job_spec_for(job, item)


def test_untrusted_job_variables_reach_the_executor_as_unsafe_text(tenant):
    item = tenant.propose('org/lib', 1, {ATTACK: f"""
        - job:
            name: attacker
            parent: lib-unit
            vars:
              message: "{TEMPLATE}"
              nested: {{list: ["{TEMPLATE}"], number: 3}}
            extra-vars:
              extra: "{TEMPLATE}"
            host-vars:
              controller: {{hv: "{TEMPLATE}"}}
            group-vars:
              g: {{gv: "{TEMPLATE}"}}
        - project:
            vars:
              project_var: "{TEMPLATE}"
            check:
              jobs: [attacker]
        """})
    spec = _spec(tenant, item, 'attacker')
    unsafe = {UNSAFE_MARKER: TEMPLATE}
    assert spec.vars['message'] == unsafe
    assert spec.vars['nested'] == {'list': [unsafe], 'number': 3}
    assert spec.vars['project_var'] == unsafe
    assert spec.extra_vars == {'extra': unsafe}
    assert spec.host_vars == {'controller': {'hv': unsafe}}
    assert spec.group_vars == {'g': {'gv': unsafe}}


def test_config_project_variables_stay_templates(tmp_path):
    """Trusted configuration may template its own variables (released
    behaviour); only untrusted text is marked."""
    tenant = SpeculativeTenant(tmp_path, {'org/lib': {'zuul.d/jobs.yaml': LIB_JOBS}})
    tenant.repos['org/project-config']['zuul.yaml'] += CONFIG_JOBS
    tenant.layout = tenant.layouts.load()['t1']
    item = tenant.propose('org/lib', 1, {ATTACK: """
        - project:
            check:
              jobs: [trusted-vars]
        """})
    spec = _spec(tenant, item, 'trusted-vars')
    assert spec.vars['site_path'] == '{{ zuul.executor.work_root }}/site'


@pytest.mark.parametrize('stanza,where', [
    ("""
    - job:
        name: attacker
        parent: lib-unit
        extra-vars:
          ansible_python_interpreter: /tmp/evil.sh
    """, 'extra-vars of job attacker'),
    ("""
    - job:
        name: attacker
        parent: lib-unit
        vars:
          ansible_become_exe: /tmp/evil.sh
    """, 'vars of job attacker'),
    ("""
    - job:
        name: attacker
        parent: lib-unit
        host-vars:
          controller:
            ansible_interpreter_python_fallback: [/tmp/evil.sh]
    """, 'host-vars controller of job attacker'),
    ("""
    - job:
        name: attacker
        parent: lib-unit
        group-vars:
          all:
            ansible_paramiko_proxy_command: touch /tmp/x
    """, 'group-vars all of job attacker'),
    ("""
    - job:
        name: attacker
        parent: lib-unit
        vars:
          ansible_host_key_checking: false
    """, 'vars of job attacker'),
    ("""
    - secret:
        name: interp
        data:
          path: /tmp/evil.sh
    - job:
        name: attacker
        parent: lib-unit
        secrets:
          - name: ansible_python_interpreter
            secret: interp
            pass-to-parent: true
    """, 'secret "ansible_python_interpreter" of job attacker'),
    ("""
    - project:
        vars:
          ansible_shell_executable: /tmp/evil.sh
    """, 'vars of org/lib'),
], ids=['extra-vars-interpreter', 'vars-become-exe', 'host-vars-fallback',
        'group-vars-paramiko', 'host-key-checking', 'secret-pass-to-parent',
        'project-vars-shell'])
def test_untrusted_execution_variables_refused_with_file_and_line(tenant, stanza, where):
    item = tenant.propose('org/lib', 1, {ATTACK: stanza + """
    - project:
        check:
          jobs: [lib-unit]
    """})
    jobs, errors = tenant.freeze('check', item)
    layout = item.current_build_set.layout
    found = [e for e in (layout.errors if layout else []) if e.path == ATTACK]
    assert found, errors
    error = found[0]
    assert where in error.reason and 'is not allowed' in error.reason, error
    assert error.project == 'org/lib' and error.line is not None and error.line >= 2


def test_config_project_may_set_interpreters_for_its_nodes(tmp_path):
    tenant = SpeculativeTenant(tmp_path, {'org/lib': {'zuul.d/jobs.yaml': LIB_JOBS}})
    tenant.repos['org/project-config']['zuul.yaml'] += """
- job:
    name: py3
    vars:
      ansible_python_interpreter: /usr/bin/python3
"""
    layout = tenant.layouts.load()['t1']
    assert [e for e in layout.errors if e.severity == 'error'] == []
