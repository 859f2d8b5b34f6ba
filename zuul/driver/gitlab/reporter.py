"""Reporting to GitLab, as released Zuul's GitLab reporter documents: a
note on the merge request (``comment``, on by default), an approval
given or taken back (``approval``), ``label``/``unlabel`` and ``merge``
(with the project's merge-mode: ``squash-merge`` squashes, ``rebase``
and ``cherry-pick`` have GitLab rebase the branch first). Sent on the
connection's report workers when it has them (``report_off_loop``),
never on the scheduler's loop."""

from __future__ import annotations

import logging

from zuul.driver.gitlab.model import MergeRequest
from zuul.driver.hosted import OffLoopReporter, as_list

log = logging.getLogger('zuul.driver.gitlab.reporter')


class GitlabReporter(OffLoopReporter):
    """One ``<action>: <gitlab connection>: {...}`` entry of a pipeline."""

    def __init__(self, connection, config: dict | None):
        self.connection = connection
        config = dict(config or {})
        self.comment = config.get('comment', True) is not False
        self.approval = config.get('approval')          # None: leave approvals alone
        self.merge = bool(config.get('merge', False))
        self.labels = as_list(config.get('label'))
        self.unlabels = as_list(config.get('unlabel'))

    def __repr__(self):
        return (f'<GitlabReporter {self.connection.name} approval={self.approval} '
                f'merge={self.merge}>')

    def report(self, item, pipeline, action: str, message: str) -> None:
        change = item.change
        if getattr(change, 'connection', None) != self.connection.name or \
                not isinstance(change, MergeRequest):
            return   # a push, or another connection's change
        log.info('[e: %s] Reporting %s on %s %s', getattr(item, 'event_id', ''), action,
                 change.project, change.describe())
        if self.comment and message:
            self.connection.comment(change, message)
        if self.labels or self.unlabels:
            self.connection.set_labels(change, self.labels, self.unlabels)
        if self.approval is not None:
            self.connection.approve(change, bool(self.approval))
        if self.merge:
            mode_of = getattr(self.connection, 'merge_mode_for', None)
            mode = getattr(item, 'merge_mode', None) or (mode_of(item) if mode_of else None)
            self.connection.merge(change, mode, message)
