"""Failure classification end to end (doc/source/reference/waste.rst): real
Gerrit, merger, executor running ansible-playbook and the scheduler. A
failure whose console matches the tenant's ``infra-failure-patterns`` runs
again and succeeds; a pre-run failure runs again until ``attempts`` and
ends RETRY_LIMIT; a test failure runs once. The build history keeps every
attempt with its class."""

from __future__ import annotations

import os
import textwrap

from tests.functional.system_support import PIPELINES, zuul_system  # noqa: F401
from tests.harness.waiting import wait_for

TENANT = """
- tenant:
    name: example
    infra-failure-patterns:
      - 'never printed'
      - 'MIRROR-FLAKE [0-9]+'
    source:
      gerrit:
        config-projects:
          - org/project-config
        untrusted-projects:
          - org/app
          - org/lib
"""

JOBS = """
- job:
    name: flaky-mirror
    run: playbooks/flaky.yaml
    vars:
      marker: {marker}
- job:
    name: pre-broken
    attempts: 2
    pre-run: playbooks/fail.yaml
    run: playbooks/noop.yaml
- job:
    name: test-fails
    run: playbooks/check-marker.yaml
"""

FLAKY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - stat:
        path: "{{ marker }}"
      register: seen
    - file:
        path: "{{ marker }}"
        state: touch
    - fail:
        msg: "MIRROR-FLAKE 503 from the package mirror"
      when: not seen.stat.exists
"""

FAIL = """
- hosts: localhost
  gather_facts: false
  tasks:
    - fail:
        msg: "pre-run could not prepare the node"
"""

APP = """
- project:
    check:
      jobs:
        - flaky-mirror
        - pre-broken
        - test-fails
"""


def test_infra_failures_retry_with_their_class_and_test_failures_do_not(
        zuul_system):  # noqa: F811
    system = zuul_system
    marker = os.path.join(system.root, 'mirror-flaked')
    with open(os.path.join(system.root, 'main.yaml'), 'w') as f:
        f.write(textwrap.dedent(TENANT))
    system.create_projects(app_config=APP,
                           pipelines=PIPELINES + textwrap.dedent(JOBS.format(marker=marker)),
                           config_files={'playbooks/flaky.yaml': FLAKY,
                                         'playbooks/fail.yaml': FAIL})
    system.start()
    change = system.store.create_change('org/app', 'master', 'Fails its test',
                                        {'FAIL': 'yes\n'})
    wait_for(lambda: system.verified(change) == -1, timeout=300, what='the check report')
    system.settle()
    launched = [launch['job'] for launch in system.launches]
    assert launched.count('flaky-mirror') == 2
    assert launched.count('pre-broken') == 2          # its attempts
    assert launched.count('test-fails') == 1          # never retried
    report = [m for m in system.messages(change) if 'Build failed' in m][-1]
    lines = {line.split()[1]: line for line in report.splitlines() if line.startswith('- ')}
    assert 'SUCCESS' in lines['flaky-mirror']
    assert 'RETRY_LIMIT' in lines['pre-broken'] and '(infra:pre-run)' in lines['pre-broken']
    assert 'FAILURE' in lines['test-fails']

    def attempts(job):
        rows = system.build_history(job_name=job)
        return sorted((r['result'], r['failure_class'], r['final']) for r in rows)
    wait_for(lambda: attempts('test-fails'), timeout=30, what='the history')
    assert attempts('flaky-mirror') == [
        ('RETRY', 'infra:pattern:MIRROR-FLAKE [0-9]+', False), ('SUCCESS', None, True)]
    assert attempts('pre-broken') == [('RETRY', 'infra:pre-run', False),
                                      ('RETRY_LIMIT', 'infra:pre-run', True)]
    assert attempts('test-fails') == [('FAILURE', 'test', True)]
