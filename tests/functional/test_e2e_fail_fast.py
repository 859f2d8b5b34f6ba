"""``fail-fast`` end to end: real playbooks on the executor. One job fails
while another still runs: the running build is aborted on the executor and
the change is reported at once, with the aborted job as CANCELED."""

from __future__ import annotations

import os
import textwrap

from tests.functional.system_support import PIPELINES, zuul_system  # noqa: F401
from tests.functional.test_scheduler_restart import HOLD, HOLDING_JOB
from tests.harness.waiting import wait_for

APP = """
- project:
    check:
      fail-fast: true
      jobs:
        - check-marker
        - held
"""


def test_failing_job_cancels_the_running_one_and_reports_at_once(zuul_system):  # noqa: F811
    system = zuul_system
    release = os.path.join(system.root, 'release')     # never created
    system.create_projects(app_config=APP,
                           pipelines=PIPELINES + textwrap.dedent(
                               HOLDING_JOB.format(release=release)),
                           config_files={'playbooks/hold.yaml': HOLD})
    system.start()
    store = system.store
    change = store.create_change('org/app', 'master', 'Fails fast', {'FAIL': '1\n'})
    wait_for(lambda: system.verified(change) == -1, timeout=120, what='the early failure')
    system.settle()
    report = [m for m in system.messages(change) if 'Build failed' in m][-1]
    assert 'check-marker' in report and 'FAILURE' in report
    assert 'held' in report and 'CANCELED' in report
    held = [b for b in system.builds if b.job.name == 'held']
    assert len(held) == 1 and held[0].result == 'CANCELED'
    # The executor aborted it (its playbook waits up to 300 s otherwise).
    wait_for(lambda: not system.executor.builds, timeout=60, what='the build aborted')
    assert not os.path.exists(release)


PRE_FAIL_APP = """
- project:
    check:
      fail-fast: true
      jobs:
        - watched
        - held
"""


def test_a_failure_output_match_cancels_the_others_before_its_build_ends(
        zuul_system):  # noqa: F811
    from tests.functional.test_e2e_failure_output import WATCHED, WATCHED_JOB
    system = zuul_system
    release = os.path.join(system.root, 'release')
    never = os.path.join(system.root, 'never')
    system.create_projects(app_config=PRE_FAIL_APP,
                           pipelines=PIPELINES + textwrap.dedent(
                               WATCHED_JOB.format(release=release))
                           + textwrap.dedent(HOLDING_JOB.format(release=never)),
                           config_files={'playbooks/hold.yaml': HOLD,
                                         'playbooks/watched.yaml': WATCHED})
    system.start()
    change = system.store.create_change('org/app', 'master', 'Breaks early',
                                        {'EARLY': '1\n'})
    # The watched build printed its failure line and still runs: the held
    # one is canceled now, not when the watched build ends.
    wait_for(lambda: [b for b in system.builds if b.job.name == 'held' and b.result],
             timeout=120, what='the held build canceled')
    (held,) = [b for b in system.builds if b.job.name == 'held']
    (watched,) = [b for b in system.builds if b.job.name == 'watched']
    assert held.result == 'CANCELED' and watched.result is None and watched.pre_fail
    assert system.verified(change) == 0
    open(release, 'w').close()
    wait_for(lambda: system.verified(change) == -1, timeout=120, what='the failure report')
    report = [m for m in system.messages(change) if 'Build failed' in m][-1]
    assert 'watched' in report and 'FAILURE' in report
    assert 'held' in report and 'CANCELED' in report
