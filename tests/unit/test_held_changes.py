"""An event reaches the items of its change whatever the source's key
looks like: a pull request's key names its repository, a Gerrit change's
does not; GitHub's status and check-run events name only a commit."""

from __future__ import annotations

from types import SimpleNamespace

from zuul.driver.github.model import PullRequest
from zuul.model.change import Change
from zuul.model.events import TriggerEvent
from zuul.scheduler.held_changes import abort_requested, event_names_change, holds_change


def _managers(*changes):
    items = [SimpleNamespace(change=c, queue=object()) for c in changes]
    return [SimpleNamespace(all_items=lambda: iter(items))]


def test_pull_requests_and_gerrit_changes_are_found_by_their_events():
    pr = PullRequest(connection='gh', project='acme/widget', ref='refs/pull/7/head',
                     number=7, patchset='a' * 40, head_sha='a' * 40)
    gerrit = Change(connection='gerrit', project='org/app', ref='refs/changes/07/7/1',
                    number=7, patchset='1')
    managers = _managers(pr, gerrit)
    closed = TriggerEvent(type='pull_request', connection='gh', project='acme/widget',
                          action='closed', change_number=7)
    assert holds_change(managers, closed)
    # Same number, other repository: another pull request.
    assert not holds_change(managers, TriggerEvent(
        type='pull_request', connection='gh', project='acme/other', change_number=7))
    assert holds_change(managers, TriggerEvent(type='change-abandoned', connection='gerrit',
                                               project='org/app', change_number=7))
    # A status on the head names the pull request by its commit.
    status = TriggerEvent(type='pull_request', connection='gh', project='acme/widget',
                          action='status', newrev='a' * 40)
    assert holds_change(managers, status)
    assert not event_names_change(TriggerEvent(type='push', connection='gh',
                                               project='acme/widget', newrev='a' * 40), pr)


def test_the_abort_button_takes_the_change_out_of_its_pipeline_only():
    pr = PullRequest(connection='gh', project='acme/widget', ref='refs/pull/7/head',
                     number=7, patchset='a' * 40, head_sha='a' * 40)
    left = []
    item = SimpleNamespace(change=pr, queue=object())

    def manager():
        return SimpleNamespace(all_items=lambda: iter([item]),
                               dequeue_item=lambda i, why, e: left.append(why) or [i])
    managers = {'check': manager(), 'gate': manager()}
    event = TriggerEvent(type='check_run', connection='gh', project='acme/widget',
                         change_number=7)
    event.abort = 't/check'
    assert abort_requested('t', managers, event, pr) == 1
    assert left == ['aborted from the check run']
    assert abort_requested('other-tenant', managers, event, pr) == 0
    event.abort = None
    assert abort_requested('t', managers, event, pr) == 0
