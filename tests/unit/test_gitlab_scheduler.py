"""An event about a merge request held in a pipeline (whose key names its
project) has its items re-checked even when no trigger takes it (an
``unapproved`` one, say): the scheduler sees the request as held."""

from __future__ import annotations

from types import SimpleNamespace

from zuul.driver.gitlab.model import MergeRequest
from zuul.model.events import TriggerEvent
from zuul.scheduler.scheduler import Scheduler


def _tenant(*changes):
    items = [SimpleNamespace(change=c) for c in changes]
    manager = SimpleNamespace(all_items=lambda: items)
    return SimpleNamespace(managers={'gl-gate': manager})


def test_an_event_about_a_held_merge_request_is_seen_as_held():
    held = MergeRequest(connection='gitlab', project='acme/widget', ref='r', number=3)
    tenant = _tenant(held)
    unapproved = TriggerEvent(type='gl_merge_request', connection='gitlab',
                              project='acme/widget', change_number=3, action='unapproved')
    assert Scheduler._holds_change(tenant, unapproved)
    other_project = TriggerEvent(type='gl_merge_request', connection='gitlab',
                                 project='acme/lib', change_number=3, action='unapproved')
    assert not Scheduler._holds_change(tenant, other_project)
    # Gerrit's keys have no project in them; they are still found.
    gerrit = SimpleNamespace(key='gerrit/7')
    assert Scheduler._holds_change(_tenant(gerrit), TriggerEvent(
        type='comment-added', connection='gerrit', project='org/app', change_number=7))

