"""``failure-output`` end to end in a gate: the development Gerrit,
ZooKeeper, Gearman, the merger, the executor running real playbooks and
the scheduler.  Change A's job prints a line matching its
``failure-output`` and keeps running; the change behind it is re-tested
without A at once, to the end, while A's build still runs; A is reported
failed although its playbook succeeds, and B merges."""

from __future__ import annotations

import os
import textwrap

from tests.functional.system_support import PIPELINES, zuul_system  # noqa: F401 - fixture
from tests.harness.waiting import wait_for

WATCHED_JOB = """
- job:
    name: watched
    run: playbooks/watched.yaml
    failure-output:
      - '^BROKEN-NOW '
    vars:
      release_file: {release}
"""

# Prints the marker and waits when a project under test has an EARLY file.
WATCHED = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Look for the early marker
      find:
        paths: "{{ zuul.executor.work_root }}/src"
        patterns: EARLY
        recurse: true
      register: markers
    - name: Say what is wrong
      command: echo BROKEN-NOW the early marker is there
      when: markers.matched > 0
    - name: Keep running until the test lets the build end
      wait_for:
        path: "{{ release_file }}"
        timeout: 300
      when: markers.matched > 0
"""

APP = """
- project:
    queue: integrated
    gate:
      jobs:
        - watched
"""


def _launches(system, change) -> list[dict]:
    return [launch for launch in system.launches
            if launch['job'] == 'watched' and launch['change'] == change.number]


def _builds(system, change, ahead=None) -> list:
    """The scheduler's builds of ``watched`` for ``change`` (tested on top
    of the changes ``ahead``, if given)."""
    return [build for launch, build in zip(system.launches, system.builds)
            if launch['job'] == 'watched' and launch['change'] == change.number
            and (ahead is None or launch['ahead'] == ahead)]


def test_matching_output_resets_the_gate_before_the_build_ends(zuul_system):  # noqa: F811
    system = zuul_system
    release = os.path.join(system.root, 'release')
    system.create_projects(app_config=APP,
                           pipelines=PIPELINES + textwrap.dedent(
                               WATCHED_JOB.format(release=release)),
                           config_files={'playbooks/watched.yaml': WATCHED})
    system.start()
    store = system.store
    first = store.create_change('org/app', 'master', 'Breaks early', {'EARLY': '1\n'})
    second = store.create_change('org/app', 'master', 'Fine', {'fine.txt': '2\n'})
    store.approve(first, 'Workflow', 1, who='core')
    wait_for(lambda: _launches(system, first), timeout=120, what="A's build")
    store.approve(second, 'Workflow', 1, who='core')
    # B is first tested on top of A, then -- once A's console matched --
    # again without A, to the end, while A's build still waits.
    wait_for(lambda: _builds(system, second, ahead=[]), timeout=180,
             what='B re-tested without A')
    (b_alone,) = _builds(system, second, ahead=[])
    wait_for(lambda: b_alone.result is not None, timeout=180, what="B's build")
    assert b_alone.result == 'SUCCESS'
    (a_build,) = _builds(system, first)
    assert a_build.result is None and a_build.pre_fail
    assert not os.path.exists(release)
    (b_on_a,) = _builds(system, second, ahead=[first.number])
    assert b_on_a.result == 'CANCELED'
    # Let A's playbook end: it succeeds, and A is reported failed.
    with open(release, 'w'):
        pass
    wait_for(lambda: system.verified(first) == -2, timeout=120, what="A's report")
    wait_for(lambda: store.get_change(second.number).status == 'MERGED', timeout=180,
             what='B merged')
    assert store.get_change(first.number).status == 'NEW'
    assert a_build.result == 'FAILURE'
    report = [m for m in system.messages(first) if 'watched' in m][-1]
    assert 'FAILURE' in report
    head = store.branch_head('org/app', 'master')
    files = store.repos.git('org/app', 'ls-tree', '--name-only', head).split()
    assert 'fine.txt' in files and 'EARLY' not in files
