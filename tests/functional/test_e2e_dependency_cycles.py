"""Dependency cycles end to end: the development Gerrit over SSH,
ZooKeeper, Gearman, zuul-merger, zuul-executor running real
ansible-playbook and the scheduler daemon's service. Changes name each
other in ``Depends-On:`` footers (or share a topic); what Zuul reports
and merges is read back from Gerrit."""

from __future__ import annotations

from tests.functional.system_support import PIPELINES, zuul_system  # noqa: F401 - fixture
from tests.harness.waiting import wait_for

CYCLE_QUEUE = """
- queue:
    name: integrated
    allow-circular-dependencies: true
"""

TOPIC_QUEUE = """
- queue:
    name: integrated
    allow-circular-dependencies: true
    dependencies-by-topic: true
"""


def _cycle_of_three(store, fail_in=None):
    """app 1 -> lib -> app 2 -> app 1 (Depends-On footers in a ring);
    ``fail_in`` (0..2) puts a FAIL marker into that change."""
    files = [{'a1.txt': '1\n'}, {'lib.txt': '2\n'}, {'a2.txt': '3\n'}]
    if fail_in is not None:
        files[fail_in]['FAIL'] = 'yes\n'
    first = store.create_change('org/app', 'master', 'App one', files[0])
    lib = store.create_change('org/lib', 'master', 'Lib', files[1],
                              footer=f'Depends-On: {first.change_id}')
    second = store.create_change('org/app', 'master', 'App two', files[2],
                                 footer=f'Depends-On: {lib.change_id}')
    # A new patchset of the first change closes the ring.
    store.add_patchset(first, {}, footer=f'Depends-On: {second.change_id}')
    return [first, lib, second]


def _approve_all(system, changes):
    for change in changes:
        system.store.approve(change, 'Workflow', 1, who='core')


def test_cycle_of_three_is_gated_and_merged_together(zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects(pipelines=PIPELINES + CYCLE_QUEUE)
    system.start()
    store = system.store
    changes = _cycle_of_three(store)
    wait_for(lambda: all(system.verified(c) == 1 for c in changes), timeout=300,
             what='check votes on the cycle')
    numbers = {c.number for c in changes}
    check = [e for e in system.launches if e['pipeline'] == 'check'
             and set(e['ahead']) | {e['change']} == numbers]
    assert check, 'the cycle was tested as one in check'
    _approve_all(system, changes)
    wait_for(lambda: all(store.get_change(c.number).status == 'MERGED' for c in changes),
             timeout=300, what='the cycle merged')
    gate = [e for e in system.launches if e['pipeline'] == 'gate']
    # Every item was tested with all three changes.
    assert gate and all(set(e['ahead']) | {e['change']} == numbers for e in gate)
    # check-marker is frozen alike for both app changes (same project):
    # deduplicated, it ran once for them; the lib change ran its own.
    launched = sorted(e['change'] for e in gate)
    assert len(launched) == 2 and changes[1].number in launched
    assert len({changes[0].number, changes[2].number} & set(launched)) == 1
    for change in changes:
        assert 'Build succeeded (gate pipeline)' in system.messages(change)[-1]
    head = store.branch_head('org/app', 'master')
    files = store.repos.git('org/app', 'ls-tree', '--name-only', head).split()
    assert 'a1.txt' in files and 'a2.txt' in files


def test_cycle_with_a_failing_change_merges_nothing_and_all_are_told(
        zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects(pipelines=PIPELINES + CYCLE_QUEUE)
    system.start()
    store = system.store
    changes = _cycle_of_three(store, fail_in=1)
    wait_for(lambda: all(system.verified(c) == -1 for c in changes), timeout=300,
             what='check votes on the cycle')
    _approve_all(system, changes)
    wait_for(lambda: all(system.verified(c) == -2 for c in changes), timeout=300,
             what='gate failure on every change')
    system.settle()
    for change in changes:
        assert store.get_change(change.number).status == 'NEW'
        report = system.messages(change)[-1]
        assert 'Build failed' in report and 'part of a dependency cycle that failed' in report
    # Every item tests the lib change's FAIL marker: whichever ran its job
    # first reports it; the others name the failed changes of the cycle.
    last = [system.messages(c)[-1] for c in changes]
    assert any('check-marker' in m and 'FAILURE' in m for m in last)
    for project in ('org/app', 'org/lib'):
        head = store.branch_head(project, 'master')
        files = store.repos.git(project, 'ls-tree', '--name-only', head).split()
        assert not {'a1.txt', 'a2.txt', 'lib.txt', 'FAIL'} & set(files)


def test_cycle_without_allow_circular_dependencies_is_refused(zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects()
    system.start()
    store = system.store
    app = store.create_change('org/app', 'master', 'App', {'a.txt': '1\n'})
    lib = store.create_change('org/lib', 'master', 'Lib', {'l.txt': '1\n'},
                              footer=f'Depends-On: {app.change_id}')
    wait_for(lambda: system.verified(lib) == 1, timeout=240, what='lib check vote')
    store.add_patchset(app, {}, footer=f'Depends-On: {lib.change_id}')
    wait_for(lambda: system.verified(app) == -1, timeout=240, what='the refusal')
    system.settle()
    refusal = system.messages(app)[-1]
    assert 'Build failed' in refusal
    assert "Dependency cycle detected and project org/app doesn't allow circular " \
           "dependencies" in refusal
    after_cycle = [e for e in system.launches if e['change'] == app.number]
    assert len(after_cycle) == 1        # only patchset 1, before the cycle closed
    # The gate refuses it too: nothing merges.
    store.approve(app, 'Workflow', 1, who='core')
    store.approve(lib, 'Workflow', 1, who='core')
    wait_for(lambda: system.verified(app) == -2 or system.verified(lib) == -2, timeout=240,
             what='the gate refusal')
    system.settle()
    assert store.get_change(app.number).status == 'NEW'
    assert store.get_change(lib.number).status == 'NEW'


def test_changes_sharing_a_topic_are_gated_as_one(zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects(pipelines=PIPELINES + TOPIC_QUEUE)
    system.start()
    store = system.store
    app = store.create_change('org/app', 'master', 'App side', {'t-app.txt': '1\n'},
                              topic='feature-x')
    lib = store.create_change('org/lib', 'master', 'Lib side', {'t-lib.txt': '1\n'},
                              topic='feature-x')
    wait_for(lambda: system.verified(app) == 1 and system.verified(lib) == 1, timeout=300,
             what='check votes')
    _approve_all(system, [app])
    system.settle()
    assert store.get_change(app.number).status == 'NEW'   # lib is not approved yet
    _approve_all(system, [lib])
    wait_for(lambda: store.get_change(app.number).status == 'MERGED' and
             store.get_change(lib.number).status == 'MERGED', timeout=300,
             what='both merged')
    gate = [e for e in system.launches if e['pipeline'] == 'gate']
    assert sorted(e['change'] for e in gate) == sorted([app.number, lib.number])
    assert all(set(e['ahead']) | {e['change']} == {app.number, lib.number} for e in gate)
