"""Which jobs run, where, and what a refusal says, as released Zuul does it,
end to end (the development Gerrit, ZooKeeper, Gearman, zuul-merger,
zuul-executor running ansible-playbook, the scheduler service):

- a soft dependency that ran and failed skips its dependent;
- a child job without file matchers inherits its parent variants' (the
  later variant's replacing the earlier's);
- ``per-branch: true`` gives each branch its own shared gate queue;
- a project refused by a job's ``allowed-projects`` is told so in
  released Zuul's words."""

from __future__ import annotations

import pathlib
import textwrap

from tests.functional.system_support import zuul_system  # noqa: F401 - fixture
from tests.harness.waiting import wait_for


def _jobs_run(system, change) -> list[str]:
    return sorted({b.job.name for b in system.builds
                   if b.build_set.item.change.number == change.number})


SOFT_JOBS = """
- job:
    name: soft-build
    files: ['^build/.*']
    run: playbooks/check-marker.yaml
- job:
    name: dependent
    dependencies:
      - name: soft-build
        soft: true
    run: playbooks/noop.yaml
"""

SOFT_APP = """
- project:
    check:
      jobs:
        - soft-build
        - dependent
"""


def test_soft_dependency_that_fails_skips_its_dependent(zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects(app_config=SOFT_APP, config_files={'zuul.d/soft.yaml': SOFT_JOBS})
    system.start()
    store = system.store
    # soft-build's file matcher leaves it out: the dependent runs alone
    alone = store.create_change('org/app', 'master', 'Docs only', {'README': 'more\n'})
    # soft-build runs and fails (a FAIL marker): the dependent is skipped
    failing = store.create_change('org/app', 'master', 'Broken build',
                                  {'build/FAIL': 'x\n'})
    wait_for(lambda: system.verified(alone) != 0 and system.verified(failing) != 0,
             timeout=240, what='both check votes')
    system.settle()
    assert system.verified(alone) == 1, system.messages(alone)
    assert _jobs_run(system, alone) == ['dependent']
    assert system.verified(failing) == -1, system.messages(failing)
    assert _jobs_run(system, failing) == ['soft-build']
    report = system.messages(failing)[-1]
    assert '- dependent : SKIPPED Skipped due to failed job soft-build' in report, report
    assert ': FAILURE' in report.split('- soft-build', 1)[1].splitlines()[0]


MATCHER_JOBS = """
- job:
    name: docs-base
    files: ['^doc/.*']
    run: playbooks/noop.yaml
- job:
    name: docs-base
    files: ['^api/.*']
- job:
    name: docs-child
    parent: docs-base
"""

MATCHER_APP = """
- project:
    check:
      jobs:
        - noop-ok
        - docs-child
"""


def test_a_child_inherits_the_file_matchers_of_its_parent_variants(zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects(app_config=MATCHER_APP,
                           config_files={'zuul.d/matchers.yaml': MATCHER_JOBS})
    system.start()
    store = system.store
    other = store.create_change('org/app', 'master', 'Source', {'src/a.c': 'int a;\n'})
    doc = store.create_change('org/app', 'master', 'Doc', {'doc/index.rst': 'Doc\n'})
    api = store.create_change('org/app', 'master', 'API', {'api/v1.yaml': 'v: 1\n'})
    wait_for(lambda: all(system.verified(c) != 0 for c in (other, doc, api)),
             timeout=240, what='three check votes')
    system.settle()
    assert [system.verified(c) for c in (other, doc, api)] == [1, 1, 1]
    assert _jobs_run(system, other) == ['noop-ok']
    # the later parent variant's files (^api/) replaced the earlier (^doc/)
    assert _jobs_run(system, doc) == ['noop-ok']
    assert _jobs_run(system, api) == ['docs-child', 'noop-ok']


PER_BRANCH_CONFIG = {
    'zuul.d/queues.yaml': """
        - queue:
            name: integrated
            per-branch: true
        - job:
            name: gate-waits
            run: playbooks/gate-waits.yaml
        """,
}

PER_BRANCH_APP = """
- project:
    queue: integrated
    check:
      jobs: [noop-ok]
    gate:
      jobs: [gate-waits]
"""


def test_per_branch_queue_merges_a_stable_change_past_a_running_master_one(
        zuul_system, tmp_path):  # noqa: F811
    """The master change is approved first and its gate job runs until the
    test releases it; the stable change, approved after, is tested alone
    in its branch's queue and merges meanwhile."""
    system = zuul_system
    marker = pathlib.Path(system.root) / 'release-master'   # trusted playbooks see it
    files = dict(PER_BRANCH_CONFIG)
    files['playbooks/gate-waits.yaml'] = f"""
        - hosts: localhost
          gather_facts: false
          tasks:
            - name: The master change waits for the test
              wait_for:
                path: {marker}
                timeout: 240
              when: zuul.branch == 'master'
        """
    system.create_projects(app_config=PER_BRANCH_APP, config_files=files)
    store = system.store
    store.push_branch('org/app', 'stable/1', {'.zuul.yaml': textwrap.dedent(PER_BRANCH_APP),
                                              'README': 'app 1.x\n'})
    system.start()
    master = store.create_change('org/app', 'master', 'Master fix', {'m.txt': '1\n'})
    stable = store.create_change('org/app', 'stable/1', 'Stable fix', {'s.txt': '1\n'})
    wait_for(lambda: system.verified(master) == 1 and system.verified(stable) == 1,
             timeout=240, what='check votes')
    store.approve(master, 'Workflow', 1, who='core')
    gate = system.scheduler.tenants['example'].managers['gate']

    def gate_build(change):
        return next((b for b in system.builds if b.job.name == 'gate-waits' and
                     b.build_set.item.change.number == change.number), None)
    wait_for(lambda: gate_build(master) is not None and
             gate_build(master).uuid in system.executor.builds, timeout=240,
             what='the master gate build running')
    store.approve(stable, 'Workflow', 1, who='core')
    wait_for(lambda: store.get_change(stable.number).status == 'MERGED', timeout=240,
             what='the stable change to merge')
    assert not gate_build(master).finished
    assert store.get_change(master.number).status == 'NEW'

    def queues():
        return {q.name: [i.change.number for i in q.queue] for q in gate.queues if q.queue}
    wait_for(lambda: queues() == {'integrated:master': [master.number]}, timeout=30,
             what='only the master change left in the gate')
    # the stable change was tested on its own: never behind the master one
    stable_builds = [b for b in system.builds if b.job.name == 'gate-waits' and
                     b.build_set.item.change.number == stable.number]
    assert [b.build_set.dependent_items for b in stable_builds] == [()]
    marker.write_text('go\n')
    wait_for(lambda: store.get_change(master.number).status == 'MERGED', timeout=240,
             what='the master change to merge')


ALLOWED_CONFIG = {
    'zuul.d/allowed.yaml': """
        - job:
            name: lib-only
            allowed-projects: [org/lib]
            run: playbooks/noop.yaml
        """,
}

ALLOWED_APP = """
- project:
    check:
      jobs: [lib-only]
"""


def test_a_project_refused_by_allowed_projects_is_told_in_released_words(
        zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects(app_config=ALLOWED_APP, config_files=ALLOWED_CONFIG)
    system.start()
    change = system.store.create_change('org/app', 'master', 'Use lib-only', {'x': '1\n'})
    wait_for(lambda: system.verified(change) != 0, timeout=240, what='the check vote')
    system.settle()
    assert system.verified(change) == -1
    assert system.messages(change)[-1] == \
        'Project org/app is not allowed to run job lib-only.'
    assert _jobs_run(system, change) == []
