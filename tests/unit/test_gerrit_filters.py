"""Gerrit trigger filters and pipeline require/reject."""

import time

import pytest

from zuul.driver.gerrit.filters import GerritEventFilter, GerritRequirement
from zuul.model.change import Change
from zuul.model.events import TriggerEvent


def _event(**kw):
    defaults = dict(type='comment-added', connection='gerrit', project='org/p',
                    branch='master', change_number=1, patchset=1,
                    account={'username': 'alice', 'email': 'alice@example.com'})
    defaults.update(kw)
    return TriggerEvent(**defaults)


def _change(approvals=(), **kw):
    return Change('gerrit', 'org/p', 'refs/changes/01/1/1', number=1, patchset=1,
                  branch_name='master', approvals=list(approvals), **kw)


def test_gate_trigger_on_workflow_approval():
    f = GerritEventFilter({'event': 'comment-added', 'approval': [{'Workflow': 1}]},
                          'gerrit')
    approved = _event(approvals=[{'type': 'Workflow', 'value': '1'}])
    assert f.matches(approved)
    assert not f.matches(_event(approvals=[{'type': 'Workflow', 'value': '0'}]))
    assert not f.matches(_event(approvals=[{'type': 'Code-Review', 'value': '2'}]))
    assert not f.matches(approved.__class__(**{**approved.__dict__, 'connection': 'other'}))


def test_recheck_comment_regex_is_re2():
    f = GerritEventFilter({'event': ['comment-added'], 'comment': r'(?i)^(Patch Set [0-9]+:)?'
                           r'\s*recheck\s*$'})
    assert f.matches(_event(comment='Patch Set 1:\n\nrecheck'))
    assert not f.matches(_event(comment='please do not recheck this'))


def test_event_type_branch_and_username_filters():
    f = GerritEventFilter({'event': ['patchset-created', 'change-restored'],
                           'branch': '^stable/.*', 'username': '^ali'})
    assert f.matches(_event(type='patchset-created', branch='stable/1.0'))
    assert not f.matches(_event(type='patchset-created', branch='master'))
    assert not f.matches(_event(type='change-merged', branch='stable/1.0'))
    assert not f.matches(_event(type='patchset-created', branch='stable/1.0',
                                account={'username': 'bob'}))


def test_ref_updated_ignores_deletes_by_default():
    f = GerritEventFilter({'event': 'ref-updated', 'ref': '^refs/heads/.*$'})
    ev = _event(type='ref-updated', change_number=None, ref='refs/heads/master',
                newrev='0' * 40)
    assert not f.matches(ev)
    ev.newrev = 'a' * 40
    assert f.matches(ev)
    assert GerritEventFilter({'event': 'ref-updated', 'ignore-deletes': False}).matches(
        _event(type='ref-updated', ref='refs/heads/x', newrev='0' * 40))


def test_require_approval_on_the_change():
    f = GerritEventFilter({'event': 'comment-added',
                           'require-approval': [{'Verified': [1, 2], 'username': 'zuul'}]})
    ok = _change([{'type': 'Verified', 'value': '1', 'by': {'username': 'zuul'}}])
    bad = _change([{'type': 'Verified', 'value': '1', 'by': {'username': 'mallory'}}])
    assert f.matches(_event(), ok)
    assert not f.matches(_event(), bad)


def test_pipeline_require_and_reject():
    require = GerritRequirement({'open': True, 'current-patchset': True,
                                 'approval': [{'Code-Review': 2}, {'Workflow': 1}]})
    reject = GerritRequirement({'approval': [{'Code-Review': [-2]}]}, reject=True)
    good = _change([{'type': 'Code-Review', 'value': '2'}, {'type': 'Workflow', 'value': '1'}])
    assert require.matches(good) and not reject.matches(good)
    missing = _change([{'type': 'Code-Review', 'value': '2'}])
    assert not require.matches(missing)
    vetoed = _change([{'type': 'Code-Review', 'value': '2'}, {'type': 'Workflow', 'value': '1'},
                      {'type': 'Code-Review', 'value': '-2'}])
    assert reject.matches(vetoed)
    closed = _change([{'type': 'Code-Review', 'value': '2'}, {'type': 'Workflow', 'value': '1'}],
                     status='MERGED')
    assert not require.matches(closed)


def test_approval_age():
    now = time.time()
    fresh = {'type': 'Verified', 'value': '1', 'grantedOn': now - 60}
    old = {'type': 'Verified', 'value': '1', 'grantedOn': now - 3 * 86400}
    req = GerritRequirement({'approval': [{'Verified': 1, 'newer-than': '2d'}]})
    assert req.matches(_change([fresh])) and not req.matches(_change([old]))


def test_invalid_regex_is_an_error():
    from zuul.lib.regex import RegexError
    with pytest.raises(RegexError, match='unclosed'):
        GerritEventFilter({'event': 'comment-added', 'comment': '(unclosed'})


def test_released_lookahead_username_filter():
    # project-config's "^(?!^zuul$)\S+$": RE2 lacks lookahead; pipelines are
    # trusted, so the released behaviour (Python's re) applies.
    f = GerritEventFilter({'event': 'comment-added', 'username': r'^(?!^zuul$)\S+$'})
    assert f.usernames[0].search('alice')
    assert not f.usernames[0].search('zuul')


def test_released_username_filter_spellings_in_approvals():
    for key in ('username-filter', 'username_filter', 'username'):
        f = GerritEventFilter({'event': 'comment-added',
                               'approval': [{'Workflow': 1, key: '^core$'}]})
        event = TriggerEvent(type='comment-added', connection='gerrit', project='p',
                             approvals=[{'type': 'Workflow', 'value': '1',
                                         'by': {'username': 'core'}}])
        assert f.matches(event), key
        event.approvals[0]['by']['username'] = 'someone'
        assert not f.matches(event), key


def test_matches_event_decides_without_the_change():
    """The scheduler skips the change lookup when no trigger can match the
    event itself; what depends on the change stays for ``matches``."""
    gate = GerritEventFilter({'event': 'comment-added', 'approval': [{'Workflow': 1}],
                              'require-approval': [{'Code-Review': 2}]}, 'gerrit')
    zuul_vote = _event(approvals=[{'type': 'Verified', 'value': '1'}],
                       account={'username': 'zuul'})
    approval = _event(approvals=[{'type': 'Workflow', 'value': '1'}])
    assert not gate.matches_event(zuul_vote)
    assert gate.matches_event(approval)
    # the change's own approvals are not part of matches_event ...
    assert not gate.matches(approval, _change())
    assert gate.matches(approval, _change([{'type': 'Code-Review', 'value': '2'}]))
    recheck = GerritEventFilter({'event': 'comment-added', 'comment': '(?i)^recheck$'})
    assert not recheck.matches_event(_event(comment='Build succeeded.'))
    assert recheck.matches_event(_event(comment='recheck'))
