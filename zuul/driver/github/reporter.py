"""Reporting to GitHub, as released Zuul's GitHub reporter documents:
a commit ``status`` (context ``<tenant>/<pipeline>``), a Checks API
``check`` run, a PR ``comment`` (on by default), ``label``/``unlabel``,
a ``review`` and ``merge`` (with the project's merge-mode as method)."""

from __future__ import annotations

import logging
from urllib.parse import quote

from zuul.driver.github.model import PullRequest
from zuul.driver.hosted import OffLoopReporter, as_list

log = logging.getLogger('zuul.driver.github.reporter')

_REVIEW_EVENTS = {'approve': 'APPROVE', 'comment': 'COMMENT',
                  'request-changes': 'REQUEST_CHANGES'}


class GithubReporter(OffLoopReporter):
    """One ``<action>: <github connection>: {...}`` entry of a pipeline."""

    def __init__(self, connection, config: dict | None):
        self.connection = connection
        config = dict(config or {})
        self.status = config.get('status')
        self.status_url = config.get('status-url')
        self.check = config.get('check')
        self.comment = config.get('comment', True) is not False
        self.merge = bool(config.get('merge', False))
        self.review = config.get('review')
        self.review_body = config.get('review-body') or ''
        self.labels = as_list(config.get('label'))
        self.unlabels = as_list(config.get('unlabel'))

    def __repr__(self):
        return f'<GithubReporter {self.connection.name} status={self.status} merge={self.merge}>'

    def context(self, item, pipeline) -> str:
        tenant = getattr(item, 'tenant_name', None) or getattr(pipeline, 'tenant_name', None)
        return f'{tenant}/{pipeline.name}' if tenant else pipeline.name

    def status_page(self, item, pipeline) -> str | None:
        """The item's page on zuul-web (``[web] root`` of zuul.conf), the
        link of statuses and check runs as in released Zuul."""
        root = getattr(self.connection, 'web_root', None)
        tenant = getattr(item, 'tenant_name', None) or getattr(pipeline, 'tenant_name', None)
        change = item.change
        if not root or not tenant or not isinstance(change, PullRequest):
            return None
        return f'{root.rstrip("/")}/t/{quote(tenant, safe="")}/status/change/' \
               f'{change.number},{change.patchset}'

    def report(self, item, pipeline, action: str, message: str) -> None:
        change = item.change
        if getattr(change, 'connection', None) != self.connection.name:
            return   # another connection reports its own changes
        is_pr = isinstance(change, PullRequest)
        sha = change.head_sha if is_pr else getattr(change, 'newrev', None)
        log.info('[e: %s] Reporting %s on %s %s', getattr(item, 'event_id', ''), action,
                 change.project, change.describe())
        if self.status and sha:
            self.connection.set_status(change.project, sha, self.status,
                                       self.context(item, pipeline),
                                       _first_line(message),
                                       self.status_url or self.status_page(item, pipeline))
        if self.check and sha:
            self.connection.check_run(change, self.context(item, pipeline),
                                      'completed' if self.check not in
                                      ('queued', 'in_progress') else self.check,
                                      self.check if self.check not in
                                      ('queued', 'in_progress') else None, message,
                                      details_url=self.status_page(item, pipeline),
                                      annotations=_annotations(item))
        if not is_pr:
            return
        if self.comment and message:
            self.connection.comment(change, message)
        for label in self.labels:
            self.connection.add_label(change, label)
        for label in self.unlabels:
            self.connection.remove_label(change, label)
        if self.review:
            self.connection.review(change, _REVIEW_EVENTS[self.review], self.review_body)
        if self.merge:
            self._merge(item, change)

    def _merge(self, item, change) -> None:
        from zuul.driver.github.merges import MergeRefusedError
        mode_of = getattr(self.connection, 'merge_mode_for', None)
        mode = getattr(item, 'merge_mode', None) or (mode_of(item) if mode_of else None)
        try:
            self.connection.merge(change, mode)
        except MergeRefusedError as exc:
            # The merge-failure report that follows says GitHub's reason.
            log.info('[e: %s] GitHub refused to merge %s: %s',
                     getattr(item, 'event_id', ''), change.describe(), exc.reason)
            bs = getattr(item, 'current_build_set', None)
            if bs is not None:
                bs.merge_error = f'GitHub refused the merge: {exc.reason}'


def _first_line(message: str) -> str:
    return (message or '').strip().splitlines()[0] if (message or '').strip() else ''


def _annotations(item) -> list[dict]:
    """Check-run annotations from the file comments jobs returned
    (``zuul_return: {zuul: {file_comments: {path: [{line, message, level}]}}}``)."""
    out = []
    bs = getattr(item, 'current_build_set', None)
    for build in (getattr(bs, 'builds', None) or {}).values():
        comments = ((build.result_data or {}).get('zuul') or {}).get('file_comments') or {}
        for path, entries in comments.items():
            for entry in entries or ():
                line = int(entry.get('line') or 1)
                level = {'info': 'notice', 'warning': 'warning'}.get(
                    str(entry.get('level') or '').lower(), 'failure')
                out.append({'path': path, 'start_line': line, 'end_line': line,
                            'annotation_level': level,
                            'message': str(entry.get('message') or '')})
    return out
