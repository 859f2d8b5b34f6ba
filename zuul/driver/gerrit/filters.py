"""Gerrit trigger filters and pipeline requirements.

Built from already-validated config (the schemas live in trigger.py and
source.py); regexes are compiled by zuul/lib/regex.py.
"""

from __future__ import annotations

import time

from zuul.driver.filter_util import FilterRegex, age_seconds, as_list, compile_all
from zuul.driver.gerrit.checks import event_checker, scheme_of
from zuul.model.events import TriggerEvent


def _pop_first(conf: dict, *keys):
    """The value of the first of ``keys`` present; all of them removed."""
    found = None
    for key in keys:
        value = conf.pop(key, None)
        if found is None and value is not None:
            found = value
    return found


class ApprovalFilter:
    """One entry of ``approval``/``require-approval``/``reject-approval``:
    a label with a value (or list of values), optionally by username or
    email regex, newer-than/older-than."""

    def __init__(self, conf: dict):
        conf = dict(conf)
        # Released spellings: username/email, and the older username-filter /
        # email-filter (also with underscores).
        self.username = compile_all(_pop_first(conf, 'username', 'username-filter',
                                                'username_filter'))
        self.email = compile_all(_pop_first(conf, 'email', 'email-filter', 'email_filter'))
        self.newer_than = conf.pop('newer-than', None)
        self.older_than = conf.pop('older-than', None)
        self.labels = {label: [int(v) for v in as_list(value)] for label, value in conf.items()}

    def matches(self, approval: dict, now: float | None = None) -> bool:
        by = approval.get('by') or {}
        username = approval.get('username') or by.get('username') or ''
        email = approval.get('email') or by.get('email') or ''
        if self.username and not any(r.search(username) for r in self.username):
            return False
        if self.email and not any(r.search(email) for r in self.email):
            return False
        granted = approval.get('grantedOn')
        now = now or time.time()
        if self.newer_than and granted and now - float(granted) > age_seconds(self.newer_than):
            return False
        if self.older_than and granted and now - float(granted) < age_seconds(self.older_than):
            return False
        for label, values in self.labels.items():
            if approval.get('type') != label and approval.get('description') != label:
                return False
            try:
                if int(approval.get('value')) not in values:
                    return False
            except (TypeError, ValueError):
                return False
        return True

    def matches_any(self, approvals) -> bool:
        return any(self.matches(a) for a in approvals or ())


class GerritEventFilter:
    """One entry of a pipeline's ``trigger: <gerrit connection>:`` list."""

    def __init__(self, conf: dict, connection: str = ''):
        self.connection = connection
        self.types = [FilterRegex(f'^(?:{t})$') for t in as_list(conf.get('event'))]
        self.branches = compile_all(conf.get('branch'))
        self.refs = compile_all(conf.get('ref'))
        self.ignore_deletes = conf.get('ignore-deletes', True)
        self.comments = compile_all(conf.get('comment') or conf.get('comment_filter'))
        self.emails = compile_all(conf.get('email') or conf.get('email-filter') or
                                   conf.get('email_filter'))
        self.usernames = compile_all(conf.get('username') or conf.get('username-filter') or
                                      conf.get('username_filter'))
        self.approvals = [ApprovalFilter(a) for a in as_list(conf.get('approval'))]
        self.require_approvals = [ApprovalFilter(a) for a in
                                  as_list(conf.get('require-approval'))]
        self.reject_approvals = [ApprovalFilter(a) for a in
                                 as_list(conf.get('reject-approval'))]
        require = conf.get('require')
        reject = conf.get('reject')
        self.require = GerritRequirement(require) if require else None
        self.reject = GerritRequirement(reject, reject=True) if reject else None
        # Checks plugin: the checker (uuid) or its scheme (the part of the
        # UUID before the colon) a pending-check event must name.
        self.uuid = conf.get('uuid')
        self.scheme = conf.get('scheme')
        self.hashtags_added = compile_all(conf.get('added'))
        self.hashtags_removed = compile_all(conf.get('removed'))

    def matches(self, event: TriggerEvent, change=None) -> bool:
        return self.matches_event(event) and self._matches_change(change)

    def matches_event(self, event: TriggerEvent) -> bool:
        """What can be decided from the event alone (the change's own
        approvals and state are checked by ``matches``)."""
        if self.connection and event.connection != self.connection:
            return False
        if self.types and not any(t.search(event.type) for t in self.types):
            return False
        if self.branches and not any(r.search(event.branch or '') for r in self.branches):
            return False
        if self.uuid and event_checker(event) != self.uuid:
            return False
        if self.scheme and scheme_of(event_checker(event)) != self.scheme:
            return False
        if self.refs and not any(r.search(event.ref or '') for r in self.refs):
            return False
        if self.ignore_deletes and event.type == 'ref-updated' and \
                event.newrev == '0' * 40:
            return False
        if self.comments and not any(r.search(event.comment or '') for r in self.comments):
            return False
        account = event.account or {}
        if self.emails and not any(r.search(account.get('email') or '')
                                   for r in self.emails):
            return False
        if self.usernames and not any(r.search(account.get('username') or '')
                                      for r in self.usernames):
            return False
        if self.approvals and not all(a.matches_any(event.approvals) for a in self.approvals):
            return False
        if self.hashtags_added and not any(r.search(h) for r in self.hashtags_added
                                           for h in event.added):
            return False
        if self.hashtags_removed and not any(r.search(h) for r in self.hashtags_removed
                                             for h in event.removed):
            return False
        return True

    def _matches_change(self, change) -> bool:
        if change is None:
            return not (self.require_approvals or self.require)
        approvals = getattr(change, 'approvals', [])
        if not all(a.matches_any(approvals) for a in self.require_approvals):
            return False
        if any(a.matches_any(approvals) for a in self.reject_approvals):
            return False
        if self.require and not self.require.matches(change):
            return False
        if self.reject and self.reject.matches(change):
            return False
        return True


class GerritRequirement:
    """A pipeline's ``require:``/``reject:`` for one Gerrit connection.

    As a requirement every given condition must hold; as a rejection the
    change is rejected if any given condition holds.
    """

    def __init__(self, conf: dict, reject: bool = False):
        self.reject = reject
        self.approvals = [ApprovalFilter(a) for a in as_list(conf.get('approval'))]
        self.open = conf.get('open')
        self.current_patchset = conf.get('current-patchset')
        self.wip = conf.get('wip')
        self.statuses = as_list(conf.get('status'))
        self.hashtags = compile_all(conf.get('hashtags'))

    def _conditions(self, change):
        for a in self.approvals:
            yield a.matches_any(getattr(change, 'approvals', []))
        if self.open is not None:
            yield getattr(change, 'is_open', False) == self.open
        if self.current_patchset is not None:
            yield getattr(change, 'is_current_patchset', True) == self.current_patchset
        if self.wip is not None:
            yield getattr(change, 'wip', False) == self.wip
        if self.statuses:
            yield getattr(change, 'status', None) in self.statuses
        if self.hashtags:
            yield any(r.search(h) for r in self.hashtags
                      for h in getattr(change, 'hashtags', []))

    def matches(self, change) -> bool:
        results = list(self._conditions(change))
        if self.reject:
            return any(results)
        return all(results)
