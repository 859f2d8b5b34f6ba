"""Gerrit stream-events JSON -> TriggerEvent.

Accepts the shapes real Gerrit versions produce: ``project`` as a string
(2.x) or ``{"name": ...}`` (3.x), change and patchset numbers as strings
or integers. A payload missing what its type needs raises
MalformedEventError, which the connection logs and skips.
"""

from __future__ import annotations

from zuul.model.events import TriggerEvent

CHANGE_EVENTS = {
    'patchset-created', 'draft-published', 'change-abandoned', 'change-restored',
    'change-merged', 'comment-added', 'wip-state-changed', 'private-state-changed',
    'vote-deleted', 'hashtags-changed', 'topic-changed', 'reviewer-added',
    'pending-check', 'change-deleted',
}

# Who did it, per event type (Gerrit names the account differently).
_ACCOUNT_KEYS = ('author', 'uploader', 'submitter', 'abandoner', 'restorer', 'editor',
                 'changer', 'deleter', 'reviewer', 'remover')


class MalformedEventError(ValueError):
    pass


def _project_name(value) -> str:
    if isinstance(value, dict):
        value = value.get('name')
    if not value or not isinstance(value, str):
        raise MalformedEventError('event has no project')
    return value


def _int(value, what: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise MalformedEventError(f'bad {what}: {value!r}') from None


def parse_event(data: dict, connection: str) -> TriggerEvent | None:
    """Normalize one event; None for event types Zuul ignores."""
    if not isinstance(data, dict):
        raise MalformedEventError('event is not an object')
    kind = data.get('type')
    if not kind:
        raise MalformedEventError('event has no type')
    account = next((data[k] for k in _ACCOUNT_KEYS if isinstance(data.get(k), dict)), {})
    ts = data.get('eventCreatedOn')
    event = TriggerEvent(type=kind, connection=connection, account=account or {},
                         data=data)
    if ts:
        event.timestamp = float(ts)
    if kind in CHANGE_EVENTS:
        return _change_event(event, data)
    if kind == 'ref-updated':
        return _ref_event(event, data)
    return None


def _change_event(event: TriggerEvent, data: dict) -> TriggerEvent:
    change = data.get('change')
    if not isinstance(change, dict):
        raise MalformedEventError(f'{event.type} event has no change')
    event.project = _project_name(change.get('project') or data.get('project'))
    event.branch = change.get('branch')
    event.change_number = _int(change.get('number'), 'change number')
    event.change_url = change.get('url')
    patchset = data.get('patchSet') or {}
    if patchset:
        event.patchset = _int(patchset.get('number'), 'patchset number')
        event.ref = patchset.get('ref')
        event.newrev = patchset.get('revision')
    if event.type == 'change-merged' and data.get('newRev'):
        # The branch head the submit produced (a merge commit, or the
        # patchset itself on a fast-forward).
        event.newrev = data['newRev']
    event.comment = data.get('comment')
    event.approvals = [
        {'type': a.get('type'), 'description': a.get('description'),
         'value': a.get('value'), 'oldValue': a.get('oldValue'),
         'username': (a.get('by') or event.account or {}).get('username')}
        for a in data.get('approvals') or [] if isinstance(a, dict)]
    event.hashtags = list(data.get('hashtags') or [])
    event.added = list(data.get('added') or [])
    event.removed = list(data.get('removed') or [])
    return event


def _ref_event(event: TriggerEvent, data: dict) -> TriggerEvent | None:
    ref = data.get('refUpdate')
    if not isinstance(ref, dict):
        raise MalformedEventError('ref-updated event has no refUpdate')
    event.project = _project_name(ref.get('project'))
    name = ref.get('refName') or ''
    if name.endswith('/meta') and name.startswith('refs/changes/'):
        return None  # NoteDb bookkeeping, not a code change
    if not name.startswith('refs/'):
        name = f'refs/heads/{name}'  # old Gerrit sends bare branch names
    event.ref = name
    event.oldrev = ref.get('oldRev')
    event.newrev = ref.get('newRev')
    if name.startswith('refs/heads/'):
        event.branch = name[len('refs/heads/'):]
    return event
