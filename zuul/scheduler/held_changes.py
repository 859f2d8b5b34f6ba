"""Is an event about a change some pipeline already holds?

An event about a change already in a pipeline must reach that change
even when no trigger takes it: a closed pull request, a dismissed review,
a removed label or an abandoned change leaves its pipelines at once
(``PipelineManager.recheck_change``). Events name their change by
connection, project and number (Gerrit), or only by a commit (GitHub's
``status`` and ``check_run`` deliveries name the head of a pull request),
whatever the source's key for the change looks like.
"""

from __future__ import annotations

from zuul.model.change import Change
from zuul.model.events import REF_UPDATE_EVENTS


def event_names_change(event, change) -> bool:
    """Whether ``event`` is about ``change`` (a queue item's change)."""
    if not isinstance(change, Change):
        return False
    if getattr(change, 'connection', None) != event.connection:
        return False
    number = getattr(event, 'change_number', None)
    if number:
        if str(change.number) != str(number):
            return False
        # Pull request numbers are per repository; a Gerrit event names
        # its change's project too, so this never refuses one of them.
        return not event.project or change.project == event.project
    newrev = getattr(event, 'newrev', None)
    if newrev and event.type not in REF_UPDATE_EVENTS:
        head = getattr(change, 'head_sha', None) or getattr(change, 'newrev', None)
        return bool(head) and head == newrev and change.project == event.project
    return False


def holds_change(managers, event) -> bool:
    """True if an item of the event's change is in one of ``managers``."""
    if not getattr(event, 'change_number', None) and not getattr(event, 'newrev', None):
        return False
    return any(event_names_change(event, item.change)
               for manager in managers for item in manager.all_items())


def abort_requested(tenant_name: str, managers: dict, event, change) -> int:
    """An event that asks to take its change out of one pipeline
    (``event.abort`` = ``<tenant>/<pipeline>``: GitHub's Abort button on
    a check run): its items there are dequeued, builds canceled. Returns
    the number of items that left."""
    target = getattr(event, 'abort', None)
    if not target or not isinstance(change, Change):
        return 0
    tenant, _, pipeline = target.rpartition('/')
    manager = managers.get(pipeline) if tenant == tenant_name else None
    if manager is None:
        return 0
    left = 0
    for item in list(manager.all_items()):
        if item.queue is not None and item.change.key == change.key:
            left += len(manager.dequeue_item(item, 'aborted from the check run', event))
    return left
