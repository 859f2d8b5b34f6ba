"""Job ``reuse-results`` end to end (doc/source/reference/waste.rst): real
Gerrit, merger, executor running ansible-playbook and the scheduler. A
recheck with identical inputs reuses the earlier SUCCESS and launches
nothing; a change to a required project or to the change's own tree
runs the job; the gate reuses the check result of the very same merge and
the change merges."""

from __future__ import annotations

from tests.functional.system_support import PIPELINES, zuul_system  # noqa: F401
from tests.harness.waiting import wait_for

JOBS = """
- job:
    name: reusable
    reuse-results: true
    required-projects:
      - org/lib
    run: playbooks/check-marker.yaml
- job:
    name: always
    run: playbooks/noop.yaml
"""

# A recheck comment arrives as "Patch Set 1:\n\nrecheck": match it on its
# own line.
RECHECK_PIPELINES = PIPELINES.replace(r'(?i)^\s*recheck', r'(?im)^\s*recheck')
assert RECHECK_PIPELINES != PIPELINES

APP = """
- project:
    queue: integrated
    check:
      jobs:
        - reusable
        - always
    gate:
      jobs:
        - reusable
"""


def _launched(system, job: str, pipeline: str | None = None) -> int:
    return sum(1 for launch in system.launches if launch['job'] == job and
               (pipeline is None or launch['pipeline'] == pipeline))


def _wait_reports(system, change, count: int) -> list[str]:
    wait_for(lambda: len([m for m in system.messages(change) if 'Build ' in m]) >= count,
             timeout=240, what=f'report {count}')
    system.settle()
    return [m for m in system.messages(change) if 'Build ' in m]


def _reuse_line(report: str) -> str:
    return next(line for line in report.splitlines() if line.startswith('- reusable'))


def test_identical_inputs_reuse_and_any_changed_input_runs(zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects(app_config=APP, pipelines=RECHECK_PIPELINES + JOBS)
    system.start()
    store = system.store
    change = store.create_change('org/app', 'master', 'Reusable', {'app.py': 'v1\n'})
    first = _wait_reports(system, change, 1)[-1]
    assert 'Build succeeded' in first
    assert _launched(system, 'reusable') == 1 and _launched(system, 'always') == 1
    original = next(b for b in system.builds if b.job.name == 'reusable')
    assert original.input_hash and len(original.input_hash) == 64

    # Identical inputs: nothing launched, SUCCESS linking to the original.
    store.comment(change, 'recheck')
    second = _wait_reports(system, change, 2)[-1]
    assert 'Build succeeded' in second
    assert _launched(system, 'reusable') == 1, 'identical inputs must not run again'
    assert _launched(system, 'always') == 2, 'a job without reuse-results runs again'
    line = _reuse_line(second)
    assert 'SUCCESS' in line and f'result reused from build {original.uuid}' in line

    # A required project moves: the job runs (its inputs changed).
    store.push_branch('org/lib', 'master', {'lib.txt': 'moved\n'})
    store.comment(change, 'recheck')
    third = _wait_reports(system, change, 3)[-1]
    assert _launched(system, 'reusable') == 2
    assert 'result reused' not in _reuse_line(third)

    # The change's own tree changes (a new patchset): the job runs; the
    # new FAIL marker proves the run tested the new tree.
    store.add_patchset(change, {'FAIL': 'now\n'})
    fourth = _wait_reports(system, change, 4)[-1]
    assert _launched(system, 'reusable') == 3
    assert 'Build failed' in fourth and 'FAILURE' in _reuse_line(fourth)

    history = system.build_history(job_name='reusable')
    reused = [b for b in history if b['reused_from']]
    assert [b['reused_from'] for b in reused] == [original.uuid]
    ran = [b for b in history if not b['reused_from']]
    assert len(ran) == 3 and len({b['input_hash'] for b in ran}) == 3
    assert reused[0]['input_hash'] == original.input_hash


def test_gate_reuses_the_check_result_of_the_same_merge(zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects(app_config=APP, pipelines=RECHECK_PIPELINES + JOBS)
    system.start()
    store = system.store
    change = store.create_change('org/app', 'master', 'Gate me', {'app.py': 'v2\n'})
    _wait_reports(system, change, 1)
    checked = next(b for b in system.builds if b.job.name == 'reusable')
    store.approve(change, 'Workflow', 1, who='core')
    wait_for(lambda: store.get_change(change.number).status == 'MERGED', timeout=240,
             what='the change merged')
    system.settle()
    assert _launched(system, 'reusable', 'gate') == 0
    gate_report = [m for m in system.messages(change) if 'gate pipeline' in m][-1]
    assert f'result reused from build {checked.uuid}' in _reuse_line(gate_report)
