"""GitHub webhook deliveries -> TriggerEvent.

A delivery is an ``X-GitHub-Event`` type, an ``X-Hub-Signature-256``
(and/or the SHA-1 ``X-Hub-Signature``) header and a JSON body (GitHub's
documented webhook payloads). Event types and actions are named as
released Zuul's GitHub trigger names them:

==========================  ===================  =========================
webhook                     TriggerEvent.type    TriggerEvent.action
==========================  ===================  =========================
pull_request opened         pull_request         opened
pull_request synchronize    pull_request         changed
pull_request closed         pull_request         closed
pull_request reopened       pull_request         reopened
pull_request edited         pull_request         edited
pull_request (un)labeled    pull_request         labeled / unlabeled
issue_comment created (PR)  pull_request         comment
status                      pull_request         status
pull_request_review         pull_request_review  submitted / dismissed
check_run                   check_run            rerequested, completed,
                                                 requested_action
push                        push                 (none)
branch_protection_rule      branch_protection_   (GitHub's action)
                            rule
==========================  ===================  =========================

``installation`` and ``installation_repositories`` deliveries carry no
trigger event: the connection forgets which repositories it thought the
App was (not) installed on (INSTALLATION_KINDS).

A ``status`` or ``check_run`` delivery names a commit, not a pull request:
``newrev`` is that commit and the connection finds the pull requests
whose head it is. Deliveries Zuul does not act on (ping, other actions)
give None; a payload missing what its type needs raises
MalformedEventError (logged and skipped by the receiver).
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import datetime

from zuul.driver.hosted import MalformedEventError, named, require
from zuul.model.events import TriggerEvent

ZERO_SHA = '0' * 40
INSTALLATION_KINDS = ('installation', 'installation_repositories')

_PR_ACTIONS = {'opened': 'opened', 'synchronize': 'changed', 'closed': 'closed',
               'reopened': 'reopened', 'edited': 'edited', 'labeled': 'labeled',
               'unlabeled': 'unlabeled'}
_CHECK_ACTIONS = {'rerequested', 'completed', 'requested_action'}


_DIGESTS = {'sha256': hashlib.sha256, 'sha1': hashlib.sha1}


def verify_signature(secret: str, body: bytes, header: str | None) -> bool:
    """Whether ``header`` (``sha256=<hex>``, GitHub's X-Hub-Signature-256,
    or ``sha1=<hex>``, its X-Hub-Signature) is the HMAC of ``body`` under
    the webhook secret."""
    algorithm, _, digest = (header or '').partition('=')
    if algorithm not in _DIGESTS or not digest:
        return False
    expected = hmac.new(secret.encode('utf8'), body, _DIGESTS[algorithm]).hexdigest()
    return hmac.compare_digest(expected, digest.strip().lower())


def sign(secret: str, body: bytes) -> str:
    """The X-Hub-Signature-256 value GitHub sends for ``body``."""
    return 'sha256=' + hmac.new(secret.encode('utf8'), body, hashlib.sha256).hexdigest()


def parse_webhook(kind: str, payload: dict, connection: str,
                  delivery: str | None = None) -> TriggerEvent | None:
    """Normalize one delivery of type ``kind`` (the X-GitHub-Event header)."""
    if not isinstance(payload, dict):
        raise MalformedEventError('payload is not an object')
    handler = _HANDLERS.get(kind)
    if handler is None:
        return None
    event = handler(payload, connection)
    if event is not None:
        event.account = _account(payload.get('sender'))
        event.data = {'kind': kind, 'delivery': delivery}
        if delivery:
            event.event_id = delivery.replace('-', '')[:16] or event.event_id
    return event


def _project(payload: dict) -> str:
    return named(payload, 'repository', 'full_name')


def _account(user) -> dict:
    if not isinstance(user, dict):
        return {}
    login = user.get('login') or ''
    return {'username': login, 'name': login, 'email': user.get('email') or ''}


def timestamp(value) -> float | None:
    if not value:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return datetime.fromisoformat(str(value).replace('Z', '+00:00')).timestamp()
    except ValueError:
        return None


def _stamp(event: TriggerEvent, value) -> None:
    """The event's time from GitHub's timestamp, when it has one."""
    stamp = timestamp(value)
    if stamp:
        event.timestamp = stamp


def _number(pr: dict) -> int:
    try:
        return int(pr['number'])
    except (KeyError, TypeError, ValueError):
        raise MalformedEventError('pull request has no number') from None


def _pr_event(payload: dict, connection: str, pr: dict, action: str) -> TriggerEvent:
    base = pr.get('base') or {}
    head = pr.get('head') or {}
    event = TriggerEvent(type='pull_request', connection=connection,
                         project=_project(payload), action=action,
                         change_number=_number(pr), branch=base.get('ref'),
                         newrev=head.get('sha'), change_url=pr.get('html_url'))
    event.ref = f'refs/pull/{event.change_number}/head'
    event.patchset = head.get('sha')   # a pull request's "patchset" is its head
    # The pull request as the delivery shows it: the connection builds the
    # change from it rather than asking GitHub again.
    event.pull_request = pr
    _stamp(event, pr.get('updated_at'))
    return event


def _pull_request(payload: dict, connection: str) -> TriggerEvent | None:
    action = _PR_ACTIONS.get(payload.get('action'))
    if action is None:
        return None
    pr = require(payload, 'pull_request', 'pull_request')
    event = _pr_event(payload, connection, pr, action)
    if action in ('labeled', 'unlabeled'):
        label = payload.get('label') or {}
        event.label = label.get('name')
        if action == 'labeled':
            event.added = [event.label] if event.label else []
        else:
            event.removed = [event.label] if event.label else []
    return event


def _issue_comment(payload: dict, connection: str) -> TriggerEvent | None:
    if payload.get('action') != 'created':
        return None
    issue = require(payload, 'issue')
    if 'pull_request' not in issue:
        return None  # a comment on an issue, not on a pull request
    comment = require(payload, 'comment')
    event = TriggerEvent(type='pull_request', connection=connection,
                         project=_project(payload), action='comment',
                         change_number=_number(issue), change_url=issue.get('html_url'),
                         comment=comment.get('body') or '')
    event.ref = f'refs/pull/{event.change_number}/head'
    _stamp(event, comment.get('created_at'))
    return event


def _review(payload: dict, connection: str) -> TriggerEvent | None:
    action = payload.get('action')
    if action not in ('submitted', 'dismissed'):
        return None
    pr = require(payload, 'pull_request')
    review = require(payload, 'review')
    event = _pr_event(payload, connection, pr, action)
    event.type = 'pull_request_review'
    event.review_state = str(review.get('state') or '').lower() or None
    _stamp(event, review.get('submitted_at'))
    return event


def _status(payload: dict, connection: str) -> TriggerEvent | None:
    sha = payload.get('sha')
    if not sha:
        raise MalformedEventError('status has no sha')
    sender = (payload.get('sender') or {}).get('login') or ''
    event = TriggerEvent(type='pull_request', connection=connection,
                         project=_project(payload), action='status', newrev=sha,
                         status=f'{sender}:{payload.get("context") or ""}:'
                                f'{payload.get("state") or ""}')
    _stamp(event, payload.get('updated_at'))
    return event


def _check_run(payload: dict, connection: str) -> TriggerEvent | None:
    action = payload.get('action')
    if action == 'requested':
        action = 'rerequested'   # released Zuul's deprecated alias
    if action not in _CHECK_ACTIONS:
        return None
    run = require(payload, 'check_run')
    app = (run.get('app') or {}).get('slug') or ''
    event = TriggerEvent(type='check_run', connection=connection,
                         project=_project(payload), action=action,
                         newrev=run.get('head_sha'),
                         check=f'{app}:{run.get("name") or ""}:{run.get("conclusion") or ""}')
    prs = run.get('pull_requests') or []
    if prs:
        event.change_number = _number(prs[0])
        event.branch = ((prs[0].get('base') or {}).get('ref'))
        event.ref = f'refs/pull/{event.change_number}/head'
    if action == 'requested_action':
        event.comment = (payload.get('requested_action') or {}).get('identifier')
        if event.comment == 'abort':
            # The Abort button of Zuul's check run: its name is
            # <tenant>/<pipeline>, the pipeline to take the change out of.
            event.abort = run.get('name') or ''
    return event


def _push(payload: dict, connection: str) -> TriggerEvent | None:
    ref = payload.get('ref')
    if not ref:
        raise MalformedEventError('push has no ref')
    newrev = payload.get('after') or ZERO_SHA
    if payload.get('deleted'):
        newrev = ZERO_SHA
    event = TriggerEvent(type='push', connection=connection, project=_project(payload),
                         ref=ref, oldrev=payload.get('before') or ZERO_SHA, newrev=newrev)
    if ref.startswith('refs/heads/'):
        event.branch = ref[len('refs/heads/'):]
    return event


def _protection_rule(payload: dict, connection: str) -> TriggerEvent | None:
    event = TriggerEvent(type='branch_protection_rule', connection=connection,
                         project=_project(payload), action=payload.get('action'))
    event.branch = (payload.get('rule') or {}).get('name')
    return event


_HANDLERS = {
    'branch_protection_rule': _protection_rule,
    'pull_request': _pull_request,
    'issue_comment': _issue_comment,
    'pull_request_review': _review,
    'status': _status,
    'check_run': _check_run,
    'push': _push,
}
