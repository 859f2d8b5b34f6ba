"""GitHub trigger filters and pipeline requirements, with released Zuul's
key names (``pipeline.trigger.<github>``, ``pipeline.require.<github>``).

Built from already-validated config (zuul/driver/github/__init__.py holds
the schemas); regexes go through zuul/lib/regex.py like Gerrit's.
"""

from __future__ import annotations

import time

from zuul.driver.filter_util import RequestRequirement, age_seconds, as_list, compile_all
from zuul.model.events import TriggerEvent


class ReviewFilter:
    """One entry of ``review``: every given sub-key must match the same
    review (username/email regexes, older-than/newer-than, type, permission)."""

    def __init__(self, conf: dict):
        self.username = compile_all(conf.get('username'))
        self.email = compile_all(conf.get('email'))
        self.older_than = conf.get('older-than')
        self.newer_than = conf.get('newer-than')
        self.types = [str(t).lower() for t in as_list(conf.get('type'))]
        self.permissions = [str(p).lower() for p in as_list(conf.get('permission'))]

    def matches(self, review: dict, now: float | None = None) -> bool:
        if self.username and not any(r.search(review.get('username') or '')
                                     for r in self.username):
            return False
        if self.email and not any(r.search(review.get('email') or '') for r in self.email):
            return False
        if self.types and str(review.get('type') or '').lower() not in self.types:
            return False
        if self.permissions and not self._permitted(review.get('permission')):
            return False
        return self._age_ok(review.get('submitted_at'), now or time.time())

    def _permitted(self, permission) -> bool:
        # A higher permission includes the lower ones (admin > write > read).
        order = {'read': 0, 'triage': 0, 'write': 1, 'maintain': 1, 'admin': 2}
        have = order.get(str(permission or '').lower())
        return have is not None and any(have >= order.get(p, 3) for p in self.permissions)

    def _age_ok(self, submitted, now: float) -> bool:
        if submitted is None:
            return not (self.older_than or self.newer_than)
        age = now - float(submitted)
        if self.newer_than and age > age_seconds(self.newer_than):
            return False
        if self.older_than and age < age_seconds(self.older_than):
            return False
        return True

    def matches_any(self, reviews) -> bool:
        return any(self.matches(r) for r in reviews or ())


class GithubRequirement(RequestRequirement):
    """``require``/``reject`` for one GitHub connection."""

    def __init__(self, conf: dict, reject: bool = False):
        super().__init__(conf, reject)
        self.reviews = [ReviewFilter(r) for r in as_list(conf.get('review'))]
        self.current_patchset = conf.get('current-patchset')
        self.draft = conf.get('draft')
        self.statuses = compile_all(conf.get('status'))
        self.labels = [str(label) for label in as_list(conf.get('label'))]

    def _conditions(self, change):
        for review in self.reviews:
            yield review.matches_any(getattr(change, 'reviews', []))
        yield from self._state(change)
        if self.current_patchset is not None:
            yield bool(getattr(change, 'is_current_patchset', True)) == self.current_patchset
        if self.draft is not None:
            yield bool(getattr(change, 'draft', False)) == self.draft
        statuses = getattr(change, 'statuses', [])
        for status in self.statuses:
            yield any(status.search(s) for s in statuses)
        labels = getattr(change, 'labels', [])
        for label in self.labels:
            yield label in labels


class GithubEventFilter:
    """One entry of a pipeline's ``trigger: <github connection>:`` list."""

    def __init__(self, conf: dict, connection: str = ''):
        self.connection = connection
        self.types = [str(t) for t in as_list(conf.get('event'))]
        actions = [str(a) for a in as_list(conf.get('action'))]
        # ``requested`` is released Zuul's deprecated alias of rerequested.
        self.actions = ['rerequested' if a == 'requested' else a for a in actions]
        self.branches = compile_all(conf.get('branch'))
        self.refs = compile_all(conf.get('ref'))
        self.comments = compile_all(conf.get('comment'))
        self.labels = [str(label) for label in as_list(conf.get('label'))]
        self.unlabels = [str(label) for label in as_list(conf.get('unlabel'))]
        self.states = [str(s).lower() for s in as_list(conf.get('state'))]
        self.statuses = compile_all(conf.get('status'))
        self.checks = compile_all(conf.get('check'))
        self.debug = bool(conf.get('debug'))
        require, reject = conf.get('require'), conf.get('reject')
        if require is None and conf.get('require-status'):
            require = {'status': conf['require-status']}   # deprecated form
        self.require = GithubRequirement(require) if require else None
        self.reject = GithubRequirement(reject, reject=True) if reject else None

    def matches(self, event: TriggerEvent, change=None) -> bool:
        return self.matches_event(event) and self._matches_change(change)

    def matches_event(self, event: TriggerEvent) -> bool:
        """What the event alone decides (the pull request's own state is
        checked by ``matches`` through require/reject)."""
        if self.connection and event.connection != self.connection:
            return False
        if self.types and event.type not in self.types:
            return False
        if self.actions and (event.action or '') not in self.actions:
            return False
        if self.branches and not any(r.search(event.branch or '') for r in self.branches):
            return False
        if self.refs and not any(r.search(event.ref or '') for r in self.refs):
            return False
        if self.comments and not any(r.search(event.comment or '') for r in self.comments):
            return False
        if self.labels and not (event.action in ('labeled', 'unlabeled') and
                                event.label in self.labels):
            return False
        if self.unlabels and not (event.action == 'unlabeled' and event.label in self.unlabels):
            return False
        if self.states and (event.review_state or '') not in self.states:
            return False
        if self.statuses and not any(r.search(event.status or '') for r in self.statuses):
            return False
        return not (self.checks and not any(r.search(event.check or '') for r in self.checks))

    def _matches_change(self, change) -> bool:
        if change is None:
            return self.require is None
        if self.require and not self.require.matches(change):
            return False
        return not (self.reject and self.reject.matches(change))
