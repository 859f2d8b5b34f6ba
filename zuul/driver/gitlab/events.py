"""GitLab webhook deliveries -> TriggerEvents.

A delivery is an ``X-Gitlab-Event`` header (``Merge Request Hook``,
``Note Hook``, ``Push Hook``, ``Tag Push Hook``; a ``System Hook``
carries the same bodies), the ``X-Gitlab-Token`` secret and a JSON body
whose ``object_kind`` says what it is (GitLab's documented webhook
payloads). Events are named as released Zuul's GitLab trigger names them:

===============================================  ================  ===========
webhook                                          TriggerEvent.type  .action
===============================================  ================  ===========
merge_request ``open``, ``reopen``               gl_merge_request  opened
merge_request ``update`` with ``oldrev``         gl_merge_request  changed
merge_request ``update`` with label changes      gl_merge_request  labeled /
                                                                   unlabeled
merge_request ``approved`` / ``unapproved``      gl_merge_request  approved /
                                                                   unapproved
merge_request ``merge``                          gl_merge_request  merged
merge_request ``close``                          gl_merge_request  closed
note on a merge request                          gl_merge_request  comment
push, tag_push                                   gl_push           (none)
===============================================  ================  ===========

``labeled`` is an update that added labels (``added``; ``removed`` holds
any removed at the same time), ``unlabeled`` one that only removed some.
``approval``/``unapproval`` (one reviewer's vote that does not change
whether the request is approved) and other deliveries give no event; a
body missing what its kind needs raises MalformedEventError.
"""

from __future__ import annotations

import hmac
from datetime import datetime

from zuul.driver.hosted import MalformedEventError, named, require
from zuul.model.events import TriggerEvent

ZERO_SHA = '0' * 40
MR_EVENT = 'gl_merge_request'
PUSH_EVENT = 'gl_push'

_OPEN_ACTIONS = {'open': 'opened', 'reopen': 'opened', 'merge': 'merged',
                 'close': 'closed', 'approved': 'approved', 'unapproved': 'unapproved'}


def token_matches(expected: str | None, given: str | None) -> bool:
    """Whether the ``X-Gitlab-Token`` header is the webhook secret
    (compared in constant time)."""
    if not expected or not given:
        return False
    return hmac.compare_digest(expected.encode('utf8'), given.encode('utf8'))


def timestamp(value) -> float | None:
    """GitLab's times (``2024-05-01T10:00:00.123Z``, or the webhooks'
    ``2024-05-01 10:00:00 UTC``) as epoch seconds."""
    if not value:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip().replace(' UTC', '+00:00').replace('Z', '+00:00')
    if ' ' in text and 'T' not in text:
        text = text.replace(' ', 'T', 1)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        from datetime import timezone
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def parse_delivery(payload, connection: str, delivery: str | None = None
                   ) -> list[TriggerEvent]:
    """The events one delivery carries (often one, none for what Zuul
    does not act on)."""
    if not isinstance(payload, dict):
        raise MalformedEventError('payload is not a JSON object')
    kind = payload.get('object_kind')
    handler = _HANDLERS.get(kind)
    if handler is None:
        return []
    events = handler(payload, connection)
    for event in events:
        event.account = _account(payload)
        event.data = {**(event.data or {}), 'kind': kind, 'delivery': delivery}
        if delivery:
            event.event_id = delivery.replace('-', '')[:16] or event.event_id
    return events


def _project(payload: dict) -> str:
    return named(payload, 'project', 'path_with_namespace')


def _iid(attrs: dict, what: str = 'merge request') -> int:
    try:
        return int(attrs['iid'])
    except (KeyError, TypeError, ValueError):
        raise MalformedEventError(f'{what} has no iid') from None


def _account(payload: dict) -> dict:
    user = payload.get('user')
    if isinstance(user, dict):
        return {'username': user.get('username') or '', 'name': user.get('name') or '',
                'email': user.get('email') or ''}
    username = payload.get('user_username') or ''
    return {'username': username, 'name': payload.get('user_name') or username,
            'email': payload.get('user_email') or ''}


def _mr_event(project: str, connection: str, mr: dict, action: str) -> TriggerEvent:
    iid = _iid(mr)
    sha = (mr.get('last_commit') or {}).get('id') or mr.get('sha')
    event = TriggerEvent(type=MR_EVENT, connection=connection, project=project,
                         action=action, change_number=iid, branch=mr.get('target_branch'),
                         newrev=sha, change_url=mr.get('url') or mr.get('web_url'))
    event.ref = f'refs/merge-requests/{iid}/head'
    event.patchset = sha
    stamp = timestamp(mr.get('updated_at'))
    if stamp:
        event.timestamp = stamp
    return event


def _merge_request(payload: dict, connection: str) -> list[TriggerEvent]:
    attrs = require(payload, 'object_attributes')
    project = _project(payload)
    action = attrs.get('action')
    if action in _OPEN_ACTIONS:
        return [_mr_event(project, connection, attrs, _OPEN_ACTIONS[action])]
    if action != 'update':
        return []
    events = []
    if attrs.get('oldrev'):
        event = _mr_event(project, connection, attrs, 'changed')
        event.oldrev = attrs['oldrev']
        events.append(event)
    labels = (payload.get('changes') or {}).get('labels')
    if isinstance(labels, dict):
        before = {_label(x) for x in labels.get('previous') or ()}
        after = {_label(x) for x in labels.get('current') or ()}
        added, removed = sorted(after - before), sorted(before - after)
        if added or removed:
            event = _mr_event(project, connection, attrs,
                              'labeled' if added else 'unlabeled')
            event.added, event.removed = added, removed
            event.label = (added or removed)[0]
            events.append(event)
    return events


def _label(value) -> str:
    return value.get('title') or value.get('name') or '' if isinstance(value, dict) \
        else str(value)


def _note(payload: dict, connection: str) -> list[TriggerEvent]:
    attrs = require(payload, 'object_attributes')
    if attrs.get('noteable_type') != 'MergeRequest':
        return []   # a comment on a commit, an issue or a snippet
    mr = require(payload, 'merge_request')
    event = _mr_event(_project(payload), connection, mr, 'comment')
    event.comment = attrs.get('note') or attrs.get('description') or ''
    event.data = {'note_id': attrs.get('id')}
    stamp = timestamp(attrs.get('created_at'))
    if stamp:
        event.timestamp = stamp
    return [event]


def _push(payload: dict, connection: str) -> list[TriggerEvent]:
    ref = payload.get('ref')
    if not ref or not isinstance(ref, str):
        raise MalformedEventError('push has no ref')
    if not ref.startswith('refs/'):
        ref = ('refs/tags/' if payload.get('object_kind') == 'tag_push'
               else 'refs/heads/') + ref
    event = TriggerEvent(type=PUSH_EVENT, connection=connection, project=_project(payload),
                         ref=ref, oldrev=payload.get('before') or ZERO_SHA,
                         newrev=payload.get('after') or ZERO_SHA)
    if ref.startswith('refs/heads/'):
        event.branch = ref[len('refs/heads/'):]
    return [event]


_HANDLERS = {
    'merge_request': _merge_request,
    'note': _note,
    'push': _push,
    'tag_push': _push,
}


def signature(event: TriggerEvent) -> str:
    """What identifies an event whether a webhook brought it or a
    catch-up made it up from the API (so the second is not acted on
    twice)."""
    if event.type == PUSH_EVENT:
        return f'push {event.project} {event.ref} {event.newrev}'
    base = f'{event.action} {event.project}!{event.change_number}'
    if event.action == 'changed':
        return f'{base} {event.newrev}'
    if event.action == 'comment':
        note = (event.data or {}).get('note_id')
        return f'{base} note {note}' if note is not None else f'{base} {event.comment!r}'
    if event.action in ('approved', 'unapproved'):
        return f'{base} {event.newrev} {(event.account or {}).get("username", "")}'
    if event.action in ('labeled', 'unlabeled'):
        return f'{base} +{",".join(event.added)} -{",".join(event.removed)}'
    return base
