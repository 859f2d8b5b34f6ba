"""Merging a pull request as GitHub users expect.

- The method follows the project's ``merge-mode``: ``merge`` (and the
  ``merge-*`` strategies, which GitHub performs as a merge commit),
  ``squash-merge``, ``rebase``. ``cherry-pick`` has no GitHub method:
  released Zuul refuses it on GitHub, and so do we (a config error for
  the project, and a refused merge if it gets here anyway).
- The commit carries the pull request's title and body (plus
  ``Reviewed-by:`` lines of the approving reviewers), never the report.
- A merge GitHub refuses because the branch moved under it ("Base branch
  was modified") is tried again; any other refusal is final and its
  reason (GitHub's message) is what the merge-failure report says.
- ``allowed_modes`` reads which methods the repository allows
  (``allow_merge_commit``, ``allow_squash_merge``,
  ``allow_rebase_merge``), for the configuration check.
"""

from __future__ import annotations

import logging
import time

from zuul.driver.github.client import GithubError

log = logging.getLogger('zuul.driver.github.merges')

METHODS = {'merge': 'merge', 'merge-resolve': 'merge', 'merge-recursive': 'merge',
           'merge-ort': 'merge', 'squash-merge': 'squash', 'rebase': 'rebase'}
ALLOW_KEYS = {'merge': 'allow_merge_commit', 'squash': 'allow_squash_merge',
              'rebase': 'allow_rebase_merge'}
MERGE_ATTEMPTS = 3
RETRY_DELAY = 1.0


class MergeRefusedError(Exception):
    """GitHub did not merge; ``reason`` is its message."""

    def __init__(self, reason: str, status: int = 0):
        super().__init__(reason)
        self.reason = reason
        self.status = status


def github_method(merge_mode: str | None) -> str:
    mode = merge_mode or 'merge'
    if mode not in METHODS:
        raise MergeRefusedError(f'merge-mode {mode} is not supported by GitHub '
                                f'(supported: {", ".join(sorted(METHODS))})')
    return METHODS[mode]


def merge_message(change) -> tuple[str, str]:
    """(commit title, commit message) for ``change``."""
    body = (getattr(change, 'body', '') or '').strip()
    reviewers = [r for r in getattr(change, 'reviews', ()) or ()
                 if r.get('type') == 'approved']
    lines = [f'Reviewed-by: {r.get("name") or r["username"]}'
             + (f' <{r["email"]}>' if r.get('email') else '') for r in reviewers]
    if lines:
        body = f'{body}\n\n' + '\n'.join(lines) if body else '\n'.join(lines)
    return change.title or f'Pull request #{change.number}', body


def merge(client, change, merge_mode: str | None = None, sleep=time.sleep) -> str:
    """Merge ``change``; returns the new commit's SHA or raises
    MergeRefusedError with GitHub's reason."""
    method = github_method(merge_mode)
    title, message = merge_message(change)
    body = {'merge_method': method, 'sha': change.head_sha, 'commit_title': title,
            'commit_message': message}
    path = f'/repos/{change.project}/pulls/{change.number}/merge'
    for attempt in range(1, MERGE_ATTEMPTS + 1):
        try:
            answer = client.request('PUT', path, project=change.project, body=body).body
            return (answer or {}).get('sha') or ''
        except GithubError as exc:
            reason = exc.message
            if exc.status == 405 and 'base branch was modified' in reason.lower() and \
                    attempt < MERGE_ATTEMPTS:
                log.info('Merging %s: %s; trying again', change.describe(), reason)
                sleep(RETRY_DELAY * attempt)
                continue
            raise MergeRefusedError(reason, exc.status) from None
    raise MergeRefusedError('the merge was refused')   # pragma: no cover


def allowed_modes(client, project: str) -> set[str]:
    """The merge-modes the repository's settings allow."""
    data = client.get(f'/repos/{project}', project=project) or {}
    allowed = {method for method, key in ALLOW_KEYS.items() if data.get(key, True)}
    return {mode for mode, method in METHODS.items() if method in allowed}
