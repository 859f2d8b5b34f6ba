"""Project gating end to end: the development Gerrit over SSH, ZooKeeper,
Gearman, zuul-merger, zuul-executor running real ansible-playbook, and the
scheduler daemon's service. Changes are proposed and approved in Gerrit;
what Zuul reports and merges is read back from Gerrit."""

from __future__ import annotations

import textwrap

from tests.functional.system_support import zuul_system  # noqa: F401 - fixture
from tests.harness.waiting import wait_for


def test_check_reports_success_and_failure(zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects()
    system.start()
    good = system.store.create_change('org/app', 'master', 'Good change', {'app.py': 'ok\n'})
    bad = system.store.create_change('org/app', 'master', 'Bad change', {'FAIL': 'yes\n'})
    wait_for(lambda: system.verified(good) == 1 and system.verified(bad) == -1,
             timeout=240, what='check votes')
    (ok_message,) = system.messages(good)
    assert 'Build succeeded' in ok_message and 'check-marker' in ok_message
    assert 'SUCCESS' in ok_message
    (fail_message,) = system.messages(bad)
    assert 'Build failed' in fail_message and 'check-marker' in fail_message
    assert 'FAILURE' in fail_message


def test_gate_of_three_with_a_failing_middle_change(zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects()
    system.start()
    store = system.store
    changes = [store.create_change('org/app', 'master', 'First', {'one.txt': '1\n'}),
               store.create_change('org/app', 'master', 'Second', {'FAIL': 'yes\n'}),
               store.create_change('org/app', 'master', 'Third', {'three.txt': '3\n'})]
    wait_for(lambda: all(system.verified(c) for c in changes), timeout=240,
             what='check votes')
    for change in changes:
        store.approve(change, 'Workflow', 1, who='core')
    first, second, third = changes
    wait_for(lambda: store.get_change(first.number).status == 'MERGED' and
             store.get_change(third.number).status == 'MERGED' and
             system.verified(second) == -2, timeout=300, what='gate results')
    assert store.get_change(second.number).status == 'NEW'
    assert 'Build failed' in system.messages(second)[-1]
    # The third change was re-tested without the second: it merged, and
    # the second's FAIL file is not on the branch.
    head = store.branch_head('org/app', 'master')
    files = store.repos.git('org/app', 'ls-tree', '--name-only', head).split()
    assert 'one.txt' in files and 'three.txt' in files and 'FAIL' not in files


def test_change_to_zuul_yaml_runs_its_new_job_and_a_broken_one_is_reported(
        zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects()
    system.start()
    store = system.store
    new_job = textwrap.dedent("""
        - job:
            name: app-extra
            parent: check-marker
        - project:
            check:
              jobs:
                - check-marker
                - app-extra
        """)
    added = store.create_change('org/app', 'master', 'Add a job', {'.zuul.yaml': new_job})
    broken = store.create_change('org/app', 'master', 'Break config', {
        '.zuul.yaml': '- project:\n    check:\n      jobs:\n        - check-marker\n'
                      '- job:\n    name: x\n    timeout: soon\n'})
    wait_for(lambda: system.verified(added) == 1 and system.verified(broken) == -1,
             timeout=240, what='votes')
    assert 'app-extra' in system.messages(added)[-1]
    message = system.messages(broken)[-1]
    assert '.zuul.yaml' in message and ':5' in message and 'timeout' in message
