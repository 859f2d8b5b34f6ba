"""GitLab webhook payloads (the documented formats: merge request, note,
push and tag push events) as trigger events, trigger filters and
requirements with released Zuul's keys, and the driver's schemas."""

from __future__ import annotations

import pytest
import voluptuous as vs

from zuul.driver.gitlab.client import api_path
from zuul.driver.gitlab.events import (
    MalformedEventError,
    parse_delivery,
    signature,
    timestamp,
    token_matches,
)
from zuul.driver.gitlab.filters import GitlabEventFilter, GitlabRequirement
from zuul.driver.gitlab.model import MergeRequest
from zuul.driver.registry import default_registry

SHA = 'a' * 40
PROJECT = {'id': 14, 'name': 'widget', 'path_with_namespace': 'acme/widget',
           'web_url': 'https://gitlab.example.org/acme/widget', 'default_branch': 'main'}
USER = {'id': 1, 'name': 'Administrator', 'username': 'root', 'email': 'admin@example.org'}


def mr_hook(action, **attrs):
    object_attributes = {'id': 99, 'iid': 7, 'target_branch': 'main',
                         'source_branch': 'ms-viewport', 'title': 'MS-Viewport',
                         'state': 'opened', 'action': action,
                         'updated_at': '2013-12-03T17:23:34Z',
                         'url': 'https://gitlab.example.org/acme/widget/-/merge_requests/7',
                         'last_commit': {'id': SHA, 'message': 'fixed readme'}}
    object_attributes.update(attrs.pop('object_attributes', {}))
    return {'object_kind': 'merge_request', 'event_type': 'merge_request', 'user': USER,
            'project': PROJECT, 'object_attributes': object_attributes, **attrs}


def test_merge_request_actions_become_released_zuuls_actions():
    def one(payload):
        (event,) = parse_delivery(payload, 'gitlab', 'd1b2-c3')
        return event
    opened = one(mr_hook('open'))
    assert (opened.type, opened.action, opened.project, opened.change_number) == \
        ('gl_merge_request', 'opened', 'acme/widget', 7)
    assert opened.branch == 'main' and opened.patchset == SHA == opened.newrev
    assert opened.ref == 'refs/merge-requests/7/head'
    assert opened.account == {'username': 'root', 'name': 'Administrator',
                              'email': 'admin@example.org'}
    assert opened.timestamp == timestamp('2013-12-03T17:23:34Z') == 1386091414.0
    assert opened.event_id == 'd1b2c3'
    assert one(mr_hook('reopen')).action == 'opened'
    changed = one(mr_hook('update', object_attributes={'oldrev': 'b' * 40}))
    assert (changed.action, changed.oldrev) == ('changed', 'b' * 40)
    assert one(mr_hook('merge')).action == 'merged'
    assert one(mr_hook('close')).action == 'closed'
    assert one(mr_hook('approved')).action == 'approved'
    assert one(mr_hook('unapproved')).action == 'unapproved'
    # One reviewer's approval that does not change the request's state,
    # and updates that change nothing Zuul acts on, are no events.
    assert parse_delivery(mr_hook('approval'), 'gitlab') == []
    assert parse_delivery(mr_hook('update', changes={'title': {'previous': 'a',
                                                               'current': 'b'}}),
                          'gitlab') == []


def test_label_changes_are_labeled_or_unlabeled_with_what_changed():
    def labels(*names):
        return [{'id': i, 'title': n} for i, n in enumerate(names)]
    (event,) = parse_delivery(mr_hook('update', changes={'labels': {
        'previous': labels('bug'), 'current': labels('bug', 'gate')}}), 'gitlab')
    assert (event.action, event.added, event.removed) == ('labeled', ['gate'], [])
    (event,) = parse_delivery(mr_hook('update', changes={'labels': {
        'previous': labels('gate', 'wip'), 'current': labels()}}), 'gitlab')
    assert (event.action, event.added, event.removed) == ('unlabeled', [], ['gate', 'wip'])
    # New commits and a label in one update: both events.
    events = parse_delivery(mr_hook('update', object_attributes={'oldrev': 'b' * 40},
                                    changes={'labels': {'previous': [],
                                                        'current': labels('x')}}), 'gitlab')
    assert [e.action for e in events] == ['changed', 'labeled']


def test_notes_on_merge_requests_are_comments_others_are_nothing():
    note = {'object_kind': 'note', 'event_type': 'note', 'user': USER, 'project': PROJECT,
            'object_attributes': {'id': 1244, 'note': 'recheck please',
                                  'noteable_type': 'MergeRequest',
                                  'created_at': '2015-05-17 18:21:36 UTC'},
            'merge_request': {'iid': 7, 'target_branch': 'main',
                              'last_commit': {'id': SHA}}}
    (event,) = parse_delivery(note, 'gitlab', 'n1')
    assert (event.action, event.comment, event.change_number) == \
        ('comment', 'recheck please', 7)
    assert event.data['note_id'] == 1244 and event.timestamp == 1431886896.0
    note['object_attributes']['noteable_type'] = 'Commit'
    assert parse_delivery(note, 'gitlab') == []


def test_pushes_and_tag_pushes_are_gl_push_events():
    push = {'object_kind': 'push', 'event_name': 'push', 'before': 'b' * 40, 'after': SHA,
            'ref': 'refs/heads/stable', 'user_username': 'jsmith', 'user_name': 'John',
            'project': PROJECT, 'commits': []}
    (event,) = parse_delivery(push, 'gitlab')
    assert (event.type, event.ref, event.branch, event.oldrev, event.newrev) == \
        ('gl_push', 'refs/heads/stable', 'stable', 'b' * 40, SHA)
    assert event.account['username'] == 'jsmith' and not event.is_change_event
    tag = dict(push, object_kind='tag_push', ref='refs/tags/v1.0.0', before='0' * 40)
    (event,) = parse_delivery(tag, 'gitlab')
    assert (event.ref, event.branch, event.oldrev) == ('refs/tags/v1.0.0', None, '0' * 40)


@pytest.mark.parametrize('payload,reason', [
    (['not', 'an', 'object'], 'not a JSON object'),
    ({'object_kind': 'merge_request', 'project': PROJECT}, 'no object_attributes'),
    ({'object_kind': 'merge_request', 'object_attributes': {'iid': 1, 'action': 'open'}},
     'no project'),
    ({'object_kind': 'merge_request', 'project': {'id': 1},
      'object_attributes': {'iid': 1, 'action': 'open'}}, 'path_with_namespace'),
    ({'object_kind': 'merge_request', 'project': PROJECT,
      'object_attributes': {'iid': 'x', 'action': 'open'}}, 'no iid'),
    ({'object_kind': 'push', 'project': PROJECT}, 'no ref'),
])
def test_malformed_payloads_say_why(payload, reason):
    with pytest.raises(MalformedEventError, match=reason):
        parse_delivery(payload, 'gitlab')


def test_unknown_kinds_are_ignored():
    assert parse_delivery({'object_kind': 'pipeline', 'project': PROJECT}, 'gitlab') == []
    assert parse_delivery({'object_kind': 'issue'}, 'gitlab') == []


def test_the_token_is_compared_whole():
    assert token_matches('s3cret', 's3cret')
    assert not token_matches('s3cret', 's3cret ')
    assert not token_matches('s3cret', 's3cre')
    assert not token_matches('s3cret', None) and not token_matches(None, 'x')


def test_a_webhook_event_and_its_made_up_twin_have_one_signature():
    (hook,) = parse_delivery(mr_hook('update', object_attributes={'oldrev': 'b' * 40}),
                             'gitlab')
    from zuul.model.events import TriggerEvent
    twin = TriggerEvent(type='gl_merge_request', connection='gitlab', project='acme/widget',
                        action='changed', change_number=7, newrev=SHA)
    assert signature(hook) == signature(twin)
    twin.newrev = 'c' * 40
    assert signature(hook) != signature(twin)


def test_hostile_text_stays_text():
    # A template in a comment, a project path climbing out: matched and
    # quoted as data, never evaluated or used as a path.
    note = {'object_kind': 'note', 'project': dict(PROJECT, path_with_namespace='../../etc'),
            'object_attributes': {'id': 1, 'note': "{{ lookup('pipe', 'id') }} recheck",
                                  'noteable_type': 'MergeRequest'},
            'merge_request': {'iid': 3}}
    (event,) = parse_delivery(note, 'gitlab')
    assert event.comment == "{{ lookup('pipe', 'id') }} recheck"
    assert GitlabEventFilter({'event': 'gl_merge_request', 'action': 'comment',
                              'comment': r'(?i)\brecheck\b'}).matches_event(event)
    assert api_path('/projects/{}/merge_requests/{}', event.project, 3) == \
        '/projects/..%2F..%2Fetc/merge_requests/3'


def _event(action, **fields):
    from zuul.model.events import TriggerEvent
    fields = {'connection': 'gitlab', **fields}
    return TriggerEvent(type='gl_merge_request', project='acme/widget', action=action,
                        change_number=1, **fields)


def test_trigger_filters():
    opened = GitlabEventFilter({'event': 'gl_merge_request', 'action': ['opened', 'changed']},
                               'gitlab')
    assert opened.matches_event(_event('opened')) and opened.matches_event(_event('changed'))
    assert not opened.matches_event(_event('merged'))
    assert not opened.matches_event(_event('opened', connection='other'))
    labeled = GitlabEventFilter({'event': 'gl_merge_request', 'action': 'labeled',
                                 'labels': ['gate']})
    assert labeled.matches_event(_event('labeled', added=['gate', 'x']))
    assert not labeled.matches_event(_event('labeled', added=['x']))
    assert not labeled.matches_event(_event('unlabeled', removed=['gate']))
    # released Zuul: ``labeled`` with ``unlabels`` matches a removal.
    unlabels = GitlabEventFilter({'event': 'gl_merge_request', 'action': 'labeled',
                                  'unlabels': 'gate'})
    assert unlabels.matches_event(_event('unlabeled', removed=['gate']))
    only_unlabeled = GitlabEventFilter({'event': 'gl_merge_request', 'action': 'unlabeled'})
    assert not only_unlabeled.matches_event(_event('labeled', added=['gate']))
    comment = GitlabEventFilter({'event': 'gl_merge_request', 'action': 'comment',
                                 'comment': [r'(?i)^\s*recheck\s*$', 'retrigger']})
    assert comment.matches_event(_event('comment', comment=' Recheck '))
    assert comment.matches_event(_event('comment', comment='please retrigger it'))
    assert not comment.matches_event(_event('comment', comment='recheck later'))
    from zuul.model.events import TriggerEvent
    push = GitlabEventFilter({'event': 'gl_push', 'ref': '^refs/tags/.*$'})
    assert push.matches_event(TriggerEvent(type='gl_push', ref='refs/tags/v1'))
    assert not push.matches_event(TriggerEvent(type='gl_push', ref='refs/heads/main'))
    assert not push.matches_event(_event('opened'))


def test_requirements_and_rejections():
    mr = MergeRequest(connection='gitlab', project='acme/widget', ref='r', number=1,
                      state='opened', approved=True, labels=['gate', 'bug'])
    assert GitlabRequirement({'open': True, 'approved': True, 'labels': ['gate']}).matches(mr)
    assert not GitlabRequirement({'labels': ['gate', 'other']}).matches(mr)
    assert not GitlabRequirement({'merged': True}).matches(mr)
    assert GitlabRequirement({'labels': 'do-not-merge'}, reject=True).matches(mr) is False
    mr.labels.append('do-not-merge')
    assert GitlabRequirement({'labels': ['do-not-merge']}, reject=True).matches(mr)
    mr.approved = False
    assert not GitlabRequirement({'approved': True}).matches(mr)
    mr.state = 'merged'
    assert GitlabRequirement({'merged': True, 'open': False}).matches(mr)


@pytest.fixture(scope='module')
def driver():
    return default_registry().get('gitlab')


@pytest.mark.parametrize('conf', [
    [{'event': 'gl_merge_request', 'action': ['opened', 'changed']}],
    [{'event': 'gl_merge_request', 'action': 'comment', 'comment': '(?i)^recheck$'}],
    [{'event': 'gl_merge_request', 'action': 'labeled', 'labels': ['gate'],
      'unlabels': 'wip'}],
    [{'event': 'gl_merge_request', 'action': ['approved', 'unapproved', 'unlabeled',
                                              'merged']}],
    [{'event': 'gl_push', 'ref': ['^refs/heads/.*$', {'regex': '^refs/tags/',
                                                       'negate': True}]}],
])
def test_accepted_triggers(driver, conf):
    vs.Schema(driver.get_trigger_schema())(conf)


@pytest.mark.parametrize('conf', [
    [{'action': 'opened'}],
    [{'event': 'pull_request'}],
    [{'event': 'gl_merge_request', 'action': 'synchronize'}],
    [{'event': 'gl_merge_request', 'label': 'gate'}],
])
def test_rejected_triggers(driver, conf):
    with pytest.raises(vs.Invalid):
        vs.Schema(driver.get_trigger_schema())(conf)


def test_reporter_requirement_and_connection_schemas(driver):
    vs.Schema(driver.get_reporter_schema())({'comment': True, 'approval': False,
                                             'merge': True, 'label': 'gated',
                                             'unlabel': ['gate']})
    vs.Schema(driver.get_reporter_schema())(None)
    with pytest.raises(vs.Invalid):
        vs.Schema(driver.get_reporter_schema())({'status': 'success'})
    vs.Schema(driver.get_require_schema())({'open': True, 'merged': False, 'approved': True,
                                            'labels': ['gate']})
    with pytest.raises(vs.Invalid):
        vs.Schema(driver.get_require_schema())({'review': [{'type': 'approved'}]})
    driver.connection_schema()({'server': 'gitlab.example.org', 'api_token': 't',
                                'api_token_name': 'zuul', 'webhook_token': 'w',
                                'keepalive': '0', 'disable_connection_pool': 'true',
                                'cloneurl': 'ssh://git@gitlab.example.org'})
    with pytest.raises(vs.Invalid):
        driver.connection_schema()({'keepalive': '-1'})
    with pytest.raises(vs.Invalid):
        driver.connection_schema()({'disable_connection_pool': 'maybe'})
