"""Batched gating with bisection end to end: the development Gerrit over
SSH, ZooKeeper, Gearman, zuul-merger doing real git merges, zuul-executor
running real ansible-playbook, and the scheduler daemon's service. A gate
with ``batching`` gets 8 approved changes, one of which adds a FAIL file
(the job fails when any checked-out project has one)."""

from __future__ import annotations

from tests.functional.system_support import (  # noqa: F401 - fixture
    gerrit_gate_pipeline,
    zuul_system,
)
from tests.harness.waiting import wait_for

PIPELINES = gerrit_gate_pipeline(
    '    batching:\n      max: 8\n      adaptive: false\n      bisect: halves\n') + """
- job:
    name: check-marker
    run: playbooks/check-marker.yaml
"""

APP_CONFIG = """
- project:
    gate:
      jobs:
        - check-marker
"""

CULPRIT = 6


def merge_order(store, changes) -> list[int]:
    """The changes (1-8) in the order Zuul submitted them: its success
    reports, which submit, in the order Gerrit received them."""
    number = {c.number: n for n, c in enumerate(changes, 1)}
    return [number[r['change']] for r in store.review_log
            if r['user'] == 'zuul' and r['change'] in number and
            'Build succeeded' in r['message']]


def test_bisection_finds_the_culprit_among_8_and_merges_the_rest_tested(
        zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects(app_config=APP_CONFIG, pipelines=PIPELINES)
    system.start()
    store = system.store
    # No merger while the 8 are approved: all are queued before any is
    # tested, so they form one batch whatever the event timing.
    system.merge_server.stop()
    changes = []
    for n in range(1, 9):
        files = {'FAIL': 'yes\n'} if n == CULPRIT else {f'f{n}.txt': f'{n}\n'}
        changes.append(store.create_change('org/app', 'master', f'Change {n}', files))
    for change in changes:
        store.approve(change, 'Workflow', 1, who='core')
    wait_for(lambda: len(system.queued_items()) == 8, timeout=60, what='8 gate items')
    system.merge_server.start()
    number = {c.number: n for n, c in enumerate(changes, 1)}
    culprit = changes[CULPRIT - 1]
    wait_for(lambda: system.verified(culprit) == -2 and all(
        store.get_change(c.number).status == 'MERGED' for c in changes if c is not culprit),
        timeout=400, what='gate results')
    system.wait_idle()

    assert store.get_change(culprit.number).status == 'NEW'
    assert 'Build failed' in system.messages(culprit)[-1]
    merged = merge_order(store, changes)
    assert merged == [1, 2, 3, 4, 5, 7, 8]
    files = store.repos.git('org/app', 'ls-tree', '--name-only',
                            store.branch_head('org/app', 'master')).split()
    assert 'FAIL' not in files and {f'f{n}.txt' for n in merged} <= set(files)

    # What each build tested: the changes of its speculative merge, in
    # merge order, and how it ended.
    runs = [([number[c] for c in launch['ahead']] + [number[launch['change']]], build.result)
            for launch, build in zip(system.launches, system.builds)
            if launch['pipeline'] == 'gate']
    # One run for the batch of 8, then the bisection: 6 runs in all
    # (released Zuul runs one per change and again after each reset).
    # 5-8 is not run once 1-4 passed: it would test the tree that failed.
    assert runs == [([1, 2, 3, 4, 5, 6, 7, 8], 'FAILURE'), ([1, 2, 3, 4], 'SUCCESS'),
                    ([1, 2, 3, 4, 5, 6], 'FAILURE'), ([1, 2, 3, 4, 5], 'SUCCESS'),
                    ([5, 6], 'FAILURE'), ([7, 8], 'SUCCESS')]
    assert ([CULPRIT], 'FAILURE') in [([t[-1]], r) for t, r in runs if t[-1] == CULPRIT]
    # Every merged change passed in a run whose changes are consecutive
    # merges, in the order they merged: it was tested as it merged.
    for change in merged:
        assert any(result == 'SUCCESS' and change in tested and
                   tested == merged[merged.index(tested[0]):][:len(tested)]
                   for tested, result in runs), (change, runs)
    # The changes that merged report the build that tested them.
    for change in changes:
        if change is not culprit:
            assert 'Build succeeded' in system.messages(change)[-1]
            assert 'check-marker' in system.messages(change)[-1]
