"""Gerrit's checks plugin end to end: a zuul-scheduler process whose Gerrit
connection has an HTTP password polls the development Gerrit's pending
checks, a check pipeline triggered by ``pending-check`` (``scheme``) runs
real ansible-playbook jobs through the in-process merger and executor,
and reports each step back through ``checks-api`` (the check's state,
message and times) beside its vote."""

from __future__ import annotations

import pytest

from tests.fakes.gerrit import GerritFixture
from tests.functional.system_support import zuul_system  # noqa: F401 - fixture
from tests.harness.waiting import wait_for
from zuul.devtools.gerrit.checks import checks_for

CHECKS_PIPELINES = """
- pipeline:
    name: check
    manager: independent
    trigger:
      gerrit:
        - event: pending-check
          scheme: zuul-check
    enqueue:
      gerrit:
        comment: false
        checks-api:
          scheme: zuul-check
          state: SCHEDULED
          message: Change has been enqueued in check
    start:
      gerrit:
        comment: false
        checks-api:
          scheme: zuul-check
          state: RUNNING
          message: Jobs have started running
    success:
      gerrit:
        Verified: 1
        checks-api:
          scheme: zuul-check
          state: SUCCESSFUL
          message: Change passed all voting jobs
    failure:
      gerrit:
        Verified: -1
        checks-api:
          scheme: zuul-check
          state: FAILED
          message: Change failed
- job:
    name: base
    parent: null
    timeout: 300
- job:
    name: check-marker
    run: playbooks/check-marker.yaml
"""

APP_CONFIG = """
- project:
    check:
      jobs:
        - check-marker
"""


@pytest.fixture
def dev_gerrit(tmp_path):
    """The development Gerrit with its HTTP side (overrides the SSH-only
    fixture zuul_system builds on)."""
    fixture = GerritFixture(str(tmp_path / 'gerrit'), http=True)
    try:
        yield fixture
    finally:
        fixture.server.stop()


def _states(plugin, change) -> list[tuple[str, str]]:
    return [(h['checker_uuid'], h['state']) for h in plugin.history
            if h['change_number'] == change.number]


def test_pending_check_runs_the_check_pipeline_and_reports_through_checks_api(
        zuul_system, dev_gerrit):  # noqa: F811
    system, store = zuul_system, zuul_system.store
    system.create_projects(app_config=APP_CONFIG, pipelines=CHECKS_PIPELINES)
    plugin = checks_for(store)
    plugin.create_checker('zuul-check:app', 'org/app')
    plugin.create_checker('other-ci:app', 'org/app')   # not Zuul's: left alone
    system.start(scheduler=False)
    system.start_daemon('scheduler', sections={'connection gerrit': {
        'baseurl': dev_gerrit.http_url, 'password': dev_gerrit.http_password,
        'auth_type': 'basic', 'poll_interval': '2'}})
    good = store.create_change('org/app', 'master', 'Good change', {'app.py': 'ok\n'})
    bad = store.create_change('org/app', 'master', 'Bad change', {'FAIL': 'yes\n'})
    wait_for(lambda: ('zuul-check:app', 'SUCCESSFUL') in _states(plugin, good) and
             ('zuul-check:app', 'FAILED') in _states(plugin, bad),
             timeout=300, what='final check states')
    assert _states(plugin, good) == [('zuul-check:app', 'SCHEDULED'),
                                     ('zuul-check:app', 'RUNNING'),
                                     ('zuul-check:app', 'SUCCESSFUL')]
    assert _states(plugin, bad)[-1] == ('zuul-check:app', 'FAILED')
    final = [h for h in plugin.history if h['change_number'] == good.number][-1]
    assert final['message'] == 'Change passed all voting jobs'
    assert final['started'] and final['finished']
    # The votes and the one review message of each change (enqueue and
    # start reported only the check state). The vote follows the final
    # check state in the same report, on the connection's report worker.
    wait_for(lambda: system.verified(good) == 1 and system.verified(bad) == -1,
             timeout=60, what='the votes')
    (message,) = system.messages(good)
    assert 'Build succeeded' in message and 'check-marker' in message
    assert 'Build failed' in system.messages(bad)[0]
    # The other CI system's check is still pending; Zuul's are not.
    pending = plugin.pending('scheme:other-ci')
    assert sorted(p['patch_set']['change_number'] for p in pending) == \
        sorted([good.number, bad.number])
    assert plugin.pending('scheme:zuul-check') == []
