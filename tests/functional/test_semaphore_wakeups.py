"""Two changes on a max-1 semaphore, black box (issue 29): real
``zuul-scheduler``, ``zuul-executor`` and ``zuul-merger`` processes, the
development Gerrit, ZooKeeper and Gearman.  The second change's build
starts once the first one's ends and both are reported with nothing
else happening: no wait for unrelated work to wake anything.

The executor takes one build at a time, so its governor re-registers
its functions while it cannot take another, which is where queued work
was left beside an idle worker."""

from __future__ import annotations

from tests.functional.system_support import (  # noqa: F401 - fixture
    BASE_PIPELINES,
    zuul_system,
)
from tests.harness.daemons import gear_jobs
from tests.harness.waiting import wait_for

JOBS = """
- semaphore:
    name: single
    max: 1
- job:
    name: serial
    semaphore: single
    run: playbooks/noop.yaml
"""

APP = """
- project:
    check:
      jobs:
        - serial
"""


def test_second_change_on_a_max_1_semaphore_is_reported_without_other_work(
        zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects(app_config=APP, pipelines=BASE_PIPELINES + JOBS)
    system.start_daemon('merger', name='m1')
    # One build at a time: the executor stops and starts taking builds
    # (its governor re-registers its functions).
    system.start_daemon('executor', name='ex1', disable_merger='true',
                        max_builds='1')
    system.start_daemon('scheduler')
    first = system.store.create_change('org/app', 'master', 'First', {'a.py': '1\n'})
    second = system.store.create_change('org/app', 'master', 'Second', {'b.py': '2\n'})
    # Nothing else happens from here on: both are reported.
    wait_for(lambda: system.verified(first) and system.verified(second), timeout=150,
             what='both changes reported')
    assert system.verified(first) == 1 and system.verified(second) == 1
    wait_for(lambda: not any(total for total, _ in gear_jobs(system.gear_port).values()),
             timeout=30, what='Gearman idle')
    for change in (first, second):
        (report,) = system.messages(change)
        assert '- serial ' in report and 'SUCCESS' in report
