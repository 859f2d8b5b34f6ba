"""The ``fail-fast`` and ``debug`` keys of a project-pipeline reach the
build set when the scheduler freezes an item's jobs (fail-fast's effect on
the manager is in test_pipeline_managers; debug's is the report)."""

from __future__ import annotations

import pytest

from tests.security.speculative import SpeculativeTenant

APP = """
- job:
    name: app-unit
    run: playbooks/unit.yaml
- job:
    name: app-lint
    run: playbooks/lint.yaml
- project:
    check:
      fail-fast: {check}
      jobs: [app-unit, app-lint]
    gate:
      jobs: [app-unit]
"""


@pytest.mark.parametrize('setting,expected', [('true', True), ('false', False)])
def test_fail_fast_is_frozen_into_the_build_set(tmp_path, setting, expected):
    tenant = SpeculativeTenant(tmp_path, {'org/app': {'zuul.yaml': APP.format(check=setting)},
                                          'org/lib': {}})
    item = tenant.propose('org/app', 1)
    jobs, errors = tenant.freeze('check', item)
    assert not errors and [j.name for j in jobs] == ['app-unit', 'app-lint']
    assert item.current_build_set.fail_fast is expected
    gate_item = tenant.propose('org/app', 2)
    tenant.freeze('gate', gate_item)
    assert gate_item.current_build_set.fail_fast is False      # not set for gate


DEBUG_APP = """
- job:
    name: app-unit
    run: playbooks/unit.yaml
- job:
    name: app-docs
    run: playbooks/docs.yaml
    files: ['^doc/.*$']
- project:
    check:
      debug: true
      jobs: [app-unit, app-docs]
    gate:
      jobs: [app-unit]
"""


def test_debug_explains_which_jobs_run_in_the_report(tmp_path):
    from zuul.scheduler.reporting import format_report
    tenant = SpeculativeTenant(tmp_path, {'org/app': {'zuul.yaml': DEBUG_APP},
                                          'org/lib': {}})
    item = tenant.propose('org/app', 1)
    jobs, errors = tenant.freeze('check', item)
    assert not errors and [j.name for j in jobs] == ['app-unit']
    notes = item.current_build_set.debug_messages
    assert notes[0].startswith('Job app-unit runs, frozen from: ')
    assert 'app-unit@' in notes[0]
    assert notes[1] == ('Job app-docs does not run: the files changed do not match its '
                        'files/irrelevant-files')
    item.current_build_set.jobs = jobs
    report = format_report(tenant.pipeline('check'), item, 'failure')
    assert 'Debug information:\n  Job app-unit runs' in report
    gate_item = tenant.propose('org/app', 2)
    tenant.freeze('gate', gate_item)
    assert gate_item.current_build_set.debug_messages is None
    assert 'Debug information' not in format_report(tenant.pipeline('gate'), gate_item,
                                                    'failure')


def test_a_triggers_debug_asks_the_same_for_the_items_it_enqueues(tmp_path):
    """``debug: true`` on a trigger (GitHub's, released Zuul documents it):
    the event it matched carries it to the item's frozen jobs."""
    from types import SimpleNamespace

    from zuul.driver.github.filters import GithubEventFilter
    from zuul.model.events import TriggerEvent
    from zuul.scheduler.context import SchedulerContext
    tenant = SpeculativeTenant(tmp_path, {'org/app': {'zuul.yaml': DEBUG_APP},
                                          'org/lib': {}})
    event = TriggerEvent(type='pull_request', connection='github', project='org/app',
                         action='opened')
    plain = TriggerEvent(type='pull_request', connection='github', project='org/app',
                         action='opened')
    filters = {True: [GithubEventFilter({'event': 'pull_request', 'debug': True})],
               False: [GithubEventFilter({'event': 'pull_request'})]}
    for debug, ev in ((True, event), (False, plain)):
        layouts = SimpleNamespace(trigger_filters=lambda p, d=debug: filters[d],
                                  requirements=lambda p: [])
        ctx = SchedulerContext(SimpleNamespace(layouts=layouts), SimpleNamespace())
        assert ctx.event_matches_pipeline(SimpleNamespace(name='gate'), ev, object())
    assert event.debug is True and not getattr(plain, 'debug', False)
    item = tenant.propose('org/app', 3)
    item.event = event
    tenant.freeze('gate', item)
    assert item.current_build_set.debug_messages[0].startswith('Job app-unit runs')
    other = tenant.propose('org/app', 4)
    other.event = plain
    tenant.freeze('gate', other)
    assert other.current_build_set.debug_messages is None
