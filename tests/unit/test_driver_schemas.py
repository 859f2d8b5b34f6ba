"""Driver schemas, composed from the registry (accepted and rejected)."""

import pytest
import voluptuous as vs

from zuul.driver.registry import DriverRegistry, UnknownDriverError, default_registry
from zuul.driver.timer import parse_timespec


@pytest.fixture(scope='module')
def registry():
    return default_registry()


def test_registry_has_the_shipped_drivers_only(registry):
    # netns/openstack/simulated/static: provider connections for
    # zuul-launcher (no source, trigger or reporter).
    assert registry.names() == ['aws', 'azure', 'gce', 'gerrit', 'git', 'github', 'gitlab',
                                'kubernetes', 'metastatic', 'mysql', 'netns', 'openstack',
                                'postgresql', 'simulated', 'smtp', 'sql', 'static', 'timer',
                                'zuul']
    with pytest.raises(UnknownDriverError, match='unknown driver "gitea"'):
        registry.get('gitea')
    with pytest.raises(ValueError, match='twice'):
        DriverRegistry([registry.get('gerrit'), registry.get('gerrit')])


@pytest.mark.parametrize('driver,conf', [
    ('gerrit', [{'event': 'comment-added', 'approval': [{'Workflow': 1}]}]),
    ('gerrit', [{'event': 'comment-added', 'comment': '(?i)recheck',
                 'username': {'regex': '^zuul$', 'negate': True}}]),
    ('gerrit', [{'event': 'ref-updated', 'ref': ['^refs/tags/.*$'], 'ignore-deletes': False}]),
    ('git', [{'event': 'ref-updated', 'ref': '^refs/heads/.*$'}]),
    ('timer', [{'time': '0 6 * * *'}]),
    ('timer', [{'time': '0 * * * * * 120'}]),
    ('zuul', [{'event': 'parent-change-enqueued', 'pipeline': 'gate'}]),
])
def test_accepted_triggers(registry, driver, conf):
    vs.Schema(registry.get(driver).get_trigger_schema())(conf)


@pytest.mark.parametrize('driver,conf,message', [
    ('gerrit', [{'event': 'no-such-event'}], 'event'),
    ('gerrit', [{'branch': 'master'}], 'required key'),
    ('gerrit', [{'event': 'comment-added', 'frobnicate': 1}], 'extra keys'),
    ('timer', [{'time': 'every day'}], 'not a cron time'),
    ('timer', [{'time': '99 * * * *'}], 'not a valid cron time'),
    ('timer', [{'time': '0 * * * * * soon'}], 'jitter'),
    ('zuul', [{'event': 'comment-added'}], 'event'),
])
def test_rejected_triggers(registry, driver, conf, message):
    with pytest.raises(vs.Invalid) as e:
        vs.Schema(registry.get(driver).get_trigger_schema())(conf)
    assert message in str(e.value)


def test_reporters_and_requirements(registry):
    gerrit = registry.get('gerrit')
    vs.Schema(gerrit.get_reporter_schema())({'Verified': 2, 'submit': True})
    vs.Schema(gerrit.get_reporter_schema())(None)
    vs.Schema(gerrit.get_require_schema())({'open': True, 'current-patchset': True,
                                             'approval': [{'Code-Review': 2}]})
    with pytest.raises(vs.Invalid):
        vs.Schema(gerrit.get_require_schema())({'open': 'yes please'})
    smtp = registry.get('smtp')
    vs.Schema(smtp.get_reporter_schema())({'to': 'a@example.com', 'subject': 'x'})
    with pytest.raises(vs.Invalid):
        vs.Schema(smtp.get_reporter_schema())({'cc': 'a@example.com'})


def test_connection_schemas(registry):
    assert registry.get('gerrit').connection_schema()({'server': 'r', 'port': '29418'})[
        'port'] == 29418
    with pytest.raises(vs.Invalid):
        registry.get('gerrit').connection_schema()({'port': '1'})
    with pytest.raises(vs.Invalid):
        registry.get('git').connection_schema()({})


def test_timespec_parsing():
    assert parse_timespec('0 0 * * 0') == ('0 0 * * 0', 0)
    assert parse_timespec('0 * * * * * 120') == ('0 * * * * *', 120)
