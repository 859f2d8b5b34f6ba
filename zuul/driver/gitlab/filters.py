"""GitLab trigger filters and pipeline requirements, with released Zuul's
keys (``pipeline.trigger.<gitlab>``, ``pipeline.require.<gitlab>``,
``pipeline.reject.<gitlab>``). Built from validated config (the schemas
are in zuul/driver/gitlab/__init__.py); regexes go through
zuul/lib/regex.py like every driver's."""

from __future__ import annotations

from zuul.driver.filter_util import RequestRequirement, as_list, compile_all
from zuul.model.events import TriggerEvent


class GitlabRequirement(RequestRequirement):
    """``require``/``reject`` for one GitLab connection."""

    def __init__(self, conf: dict, reject: bool = False):
        super().__init__(conf, reject)
        self.approved = conf.get('approved')
        self.labels = [str(label) for label in as_list(conf.get('labels'))]

    def _conditions(self, change):
        yield from self._state(change)
        if self.approved is not None:
            yield bool(getattr(change, 'approved', False)) == self.approved
        labels = getattr(change, 'labels', None) or []
        for label in self.labels:
            yield label in labels


class GitlabEventFilter:
    """One entry of a pipeline's ``trigger: <gitlab connection>:`` list."""

    def __init__(self, conf: dict, connection: str = ''):
        self.connection = connection
        self.types = [str(t) for t in as_list(conf.get('event'))]
        self.actions = [str(a) for a in as_list(conf.get('action'))]
        self.comments = compile_all(conf.get('comment'))
        self.labels = [str(label) for label in as_list(conf.get('labels'))]
        self.unlabels = [str(label) for label in as_list(conf.get('unlabels'))]
        self.refs = compile_all(conf.get('ref'))
        self.debug = bool(conf.get('debug'))

    def _action_ok(self, action: str) -> bool:
        if not self.actions:
            return True
        # Released Zuul's ``labeled`` covers every label change (with
        # ``labels`` for added and ``unlabels`` for removed ones).
        return action in self.actions or (action == 'unlabeled' and 'labeled' in self.actions)

    def matches_event(self, event: TriggerEvent) -> bool:
        """What the event alone decides."""
        if self.connection and event.connection != self.connection:
            return False
        if self.types and event.type not in self.types:
            return False
        if event.type == 'gl_merge_request' and not self._action_ok(event.action or ''):
            return False
        if self.comments and not any(r.search(event.comment or '') for r in self.comments):
            return False
        if self.labels and not set(self.labels) & set(event.added or ()):
            return False
        if self.unlabels and not set(self.unlabels) & set(event.removed or ()):
            return False
        return not (self.refs and not any(r.search(event.ref or '') for r in self.refs))

    def matches(self, event: TriggerEvent, change=None) -> bool:
        return self.matches_event(event)
