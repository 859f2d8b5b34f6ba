"""An event about a merge request held in a pipeline (whose key names its
project) has its items re-checked even when no trigger takes it (an
``unapproved`` one, say): the scheduler sees the request as held."""

from __future__ import annotations

from types import SimpleNamespace

from zuul.driver.gitlab.model import MergeRequest
from zuul.model.change import Change
from zuul.model.events import TriggerEvent
from zuul.scheduler.held_changes import holds_change


def _managers(*changes):
    items = [SimpleNamespace(change=c) for c in changes]
    return [SimpleNamespace(all_items=lambda: items)]


def test_an_event_about_a_held_merge_request_is_seen_as_held():
    held = MergeRequest(connection='gitlab', project='acme/widget', ref='r', number=3)
    managers = _managers(held)
    unapproved = TriggerEvent(type='gl_merge_request', connection='gitlab',
                              project='acme/widget', change_number=3, action='unapproved')
    assert holds_change(managers, unapproved)
    other_project = TriggerEvent(type='gl_merge_request', connection='gitlab',
                                 project='acme/lib', change_number=3, action='unapproved')
    assert not holds_change(managers, other_project)
    # Gerrit's keys have no project in them; they are still found.
    gerrit = Change('gerrit', 'org/app', 'refs/changes/07/7/1', number=7, patchset=1,
                    branch_name='master')
    assert holds_change(_managers(gerrit), TriggerEvent(
        type='comment-added', connection='gerrit', project='org/app', change_number=7))

