"""Pull requests and branches as a pipeline's source, with a change cache.

A pull request is read from GitHub once per event about it (``refresh``)
on the connection's workers, off the scheduler's loop, and kept: the
scheduler's lookups (the event's change, Depends-On targets, reverse
dependencies) are answered from the cache without calls. A change
nothing refreshed is read on first use. Branch protection rules are
cached per branch until a ``branch_protection_rule`` or ``push`` event
names the branch.

``can_merge`` answers, from the cached pull request and its branch's
protection, whether GitHub would merge it once the pipeline's own
statuses are set (released Zuul asks this before enqueueing into a
dependent pipeline): not a draft, no conflict, required status checks
passed, enough approving reviews, branch not locked.
"""

from __future__ import annotations

import logging
import re
import threading

from zuul.driver.depends_on import depends_on_urls, needed_by_url
from zuul.driver.github.client import GithubError
from zuul.driver.github.events import timestamp
from zuul.driver.github.model import PullRequest
from zuul.driver.hosted import RequestCache
from zuul.model.change import Ref
from zuul.model.events import TriggerEvent

log = logging.getLogger('zuul.driver.github.source')

_WRITE = ('write', 'maintain', 'admin')


class PullRequestSource(RequestCache):
    """Mixin of GithubConnection: needs ``name``, ``client``, ``web_url``."""

    def _init_source(self) -> None:
        self._changes: dict[tuple[str, int], PullRequest] = {}
        self._protection: dict[tuple[str, str], dict | None] = {}
        self._cache_lock = threading.Lock()
        self._merged_heads: set[tuple[str, int, str]] = set()
        self.cache_hits = 0
        # False: no change cache and no reading ahead on the workers:
        # every lookup asks GitHub, on the caller's thread (how the driver
        # worked before; benchmarks/github.py compares the two).
        self.change_cache = True
        # Set by the scheduler: whether some tenant may act on an event
        # (those nobody wants are handed over without reading GitHub).
        self.wants_event = None

    # -- events ---------------------------------------------------------------
    def prepare_event(self, event):
        """On a worker: what the scheduler will ask about ``event`` read
        now (the pull request refreshed, its dependencies, its branch's
        protection); returns the event."""
        if event.type == 'push':
            if event.newrev == '0' * 40 or event.oldrev == '0' * 40:
                self._forget_protection(event.project, event.branch)
            return event
        if event.type == 'branch_protection_rule':
            self._forget_protection(event.project, None)
            return event
        if self.wants_event is not None and not self.wants_event(event):
            return event
        number = event.change_number
        if number is None and event.newrev:
            number = self._pull_for_commit(event.project, event.newrev)
            event.change_number = number
        if number is None:
            return event
        change = self._from_delivery(event)
        if change is None:
            change = self.lookup_change(event.project, str(number), refresh=True)
        self.branch_protection(event.project, change.branch)
        for url in depends_on_urls(change.body):
            try:
                self.change_for_url(url)
            except GithubError as exc:
                log.warning('%s: Depends-On %s: %s', change.describe(), url, exc)
        probe = TriggerEvent(type='parent-change-enqueued', connection=self.name)
        if change.is_open and (self.wants_event is None or self.wants_event(probe)):
            # Only a pipeline of parent-change-enqueued uses them.
            change.needed_by_changes = self.changes_depending_on(change)
        event.prepared = True
        return event

    def _from_delivery(self, event) -> PullRequest | None:
        """The change built from the pull request the delivery carries
        (its title, body, state, labels, head are as of the event): a
        closed one needs nothing more from GitHub; an open one its files,
        reviews and statuses (and ``mergeable`` when the payload has none)."""
        pr = getattr(event, 'pull_request', None)
        if not isinstance(pr, dict) or not pr.get('head') or 'state' not in pr or \
                not self.change_cache:
            return None
        project, number = event.project, int(pr['number'])
        if pr.get('state') == 'open' and pr.get('mergeable') is None:
            return None      # read it: GitHub computes mergeable on demand
        change = self._change_from_pr(project, pr, details=pr.get('state') == 'open')
        with self._cache_lock:
            self._changes[(project, number)] = change
        return change

    def get_change_for_event(self, event):
        if event.type == 'push':
            return Ref(self.name, event.project, event.ref or '', event.oldrev,
                       event.newrev, url=f'{self.web_url}/{event.project}')
        number = event.change_number
        if number is None and event.newrev:
            number = self._pull_for_commit(event.project, event.newrev)
            event.change_number = number
        if number is None:
            return None
        return self.lookup_change(event.project, str(number),
                                  refresh=not getattr(event, 'prepared', False))

    def _pull_for_commit(self, project: str, sha: str) -> int | None:
        with self._cache_lock:
            for (name, number), change in self._changes.items():
                if name == project and change.head_sha == sha and change.is_open:
                    return number
        pulls = self.client.get(f'/repos/{project}/commits/{sha}/pulls', project=project)
        for pr in pulls or ():
            if pr.get('state') == 'open' and (pr.get('head') or {}).get('sha') == sha:
                return int(pr['number'])
        return None

    # -- pull requests --------------------------------------------------------
    def lookup_change(self, project: str, spec: str, refresh: bool = False) -> PullRequest:
        number, _, sha = str(spec).partition(',')
        return self._cached_request(project, int(number), sha, self._read_pull, refresh)

    def _read_pull(self, project: str, number: int) -> PullRequest:
        # ``mergeable`` may be null: GitHub computes it in the background
        # once asked, so the next event's read (an approval comes later)
        # has it; can_merge does not refuse on null.
        pr = self.client.get(f'/repos/{project}/pulls/{number}', project=project)
        return self._change_from_pr(project, pr)

    def _change_from_pr(self, project: str, pr: dict, details: bool = True) -> PullRequest:
        number = int(pr['number'])
        head_sha = (pr.get('head') or {}).get('sha') or ''
        change = PullRequest(
            connection=self.name, project=project, ref=f'refs/pull/{number}/head',
            newrev=head_sha, url=pr.get('html_url') or
            f'{self.web_url}/{project}/pull/{number}',
            number=number, patchset=head_sha, branch_name=(pr.get('base') or {}).get('ref'),
            subject=pr.get('title') or '', message=f'{pr.get("title") or ""}\n\n'
            f'{pr.get("body") or ""}'.strip(), owner=_user(pr.get('user')),
            status='MERGED' if pr.get('merged') else
            ('NEW' if pr.get('state') == 'open' else 'ABANDONED'),
            title=pr.get('title') or '', body=pr.get('body') or '',
            state=pr.get('state') or 'open', merged=bool(pr.get('merged')),
            draft=bool(pr.get('draft')), mergeable=pr.get('mergeable'),
            labels=[label.get('name') for label in pr.get('labels') or ()],
            head_sha=head_sha, updated_at=timestamp(pr.get('updated_at')) or 0.0,
            html_url=pr.get('html_url') or '')
        if details:
            change.files = self._files(project, number)
            change.reviews = self._reviews(project, number)
            change.statuses = self._statuses(project, head_sha)
        return change

    def _files(self, project: str, number: int) -> list[str]:
        return [f['filename'] for f in self.client.get_all(
            f'/repos/{project}/pulls/{number}/files', project=project)]

    def _reviews(self, project: str, number: int) -> list[dict]:
        """The latest review of each reviewer, with their permission."""
        latest: dict[str, dict] = {}
        for review in self.client.get_all(f'/repos/{project}/pulls/{number}/reviews',
                                          project=project):
            user = review.get('user') or {}
            login = user.get('login') or ''
            state = str(review.get('state') or '').lower()
            if state in ('commented', 'pending') and login in latest:
                continue   # a comment does not replace an approval
            latest[login] = {'type': state, 'username': login,
                             'email': user.get('email') or '',
                             'submitted_at': timestamp(review.get('submitted_at'))}
        for review in latest.values():
            review['permission'] = self._permission(project, review['username'])
        return list(latest.values())

    def _permission(self, project: str, login: str) -> str | None:
        try:
            data = self.client.get(f'/repos/{project}/collaborators/{login}/permission',
                                   project=project)
        except GithubError as exc:
            if exc.status in (403, 404):
                return None
            raise
        return (data or {}).get('permission')

    def _statuses(self, project: str, sha: str) -> list[str]:
        if not sha:
            return []
        combined = self.client.get(f'/repos/{project}/commits/{sha}/status', project=project)
        out = [f'{(s.get("creator") or {}).get("login", "")}:{s.get("context", "")}:'
               f'{s.get("state", "")}' for s in (combined or {}).get('statuses') or ()]
        for run in self.client.get_all(f'/repos/{project}/commits/{sha}/check-runs',
                                       project=project):
            app = (run.get('app') or {}).get('slug') or ''
            out.append(f'{app}:{run.get("name", "")}:{run.get("conclusion") or ""}')
        return out

    def open_changes(self, project: str, branch: str | None = None) -> list[PullRequest]:
        params = {'state': 'open'}
        if branch:
            params['base'] = branch
        return [self._change_from_pr(project, pr) for pr in
                self.client.get_all(f'/repos/{project}/pulls', project=project,
                                    params=params)]

    def is_merged(self, change) -> bool:
        if not isinstance(change, PullRequest):
            return False
        if (change.project, change.number, change.head_sha) in self._merged_heads:
            return True
        # Kept current by events: a merge outside Zuul sends one.
        cached = self._cached(change.project, change.number)
        if cached is not None:
            return cached.merged
        pr = self.client.get(f'/repos/{change.project}/pulls/{change.number}',
                             project=change.project)
        return bool(pr.get('merged'))

    # -- dependencies -------------------------------------------------------------
    def change_for_url(self, url: str) -> PullRequest | None:
        match = re.match(rf'^{re.escape(self.web_url)}/([^/]+/[^/]+)/pull/(\d+)/?$', url)
        if not match:
            return None
        return self.lookup_change(match.group(1), match.group(2))

    def get_needed_changes(self, change, connections) -> list:
        return needed_by_url(change, getattr(change, 'body', '') or '', connections)

    def changes_depending_on(self, change) -> list[str]:
        """Keys of the open pull requests whose Depends-On names ``change``
        (GitHub's issue search, in:body), as released Zuul finds reverse
        dependencies."""
        if not isinstance(change, PullRequest):
            return []
        url = f'{self.web_url}/{change.project}/pull/{change.number}'
        try:
            found = self.client.get('/search/issues', project=change.project, params={
                'q': f'"{url}" type:pr is:open in:body', 'per_page': 100})
        except GithubError as exc:
            log.warning('Unable to search for pull requests depending on %s: %s', url, exc)
            return []
        keys = []
        for hit in (found or {}).get('items') or ():
            match = re.match(rf'^{re.escape(self.web_url)}/([^/]+/[^/]+)/pull/(\d+)$',
                             hit.get('html_url') or '')
            if match and (match.group(1), int(match.group(2))) != \
                    (change.project, change.number):
                keys.append(f'{self.name}/{match.group(1)}/{match.group(2)}')
        return keys

    # -- branches and protection -------------------------------------------------
    def protected_branches(self, project: str) -> list[str]:
        """Names of the project's protected branches (for a tenant's
        ``exclude-unprotected-branches``)."""
        return [b['name'] for b in self.client.get_all(
            f'/repos/{project}/branches', project=project, params={'protected': 'true'})]

    def locked_branches(self, project: str) -> list[str]:
        """Protected branches whose rule locks them (read-only), for a
        tenant's ``exclude-locked-branches``."""
        return [name for name in self.protected_branches(project)
                if (self.branch_protection(project, name) or {}).get('lock')]

    def branch_protection(self, project: str, branch: str | None) -> dict | None:
        """The rule of ``branch`` (cached): required ``contexts``,
        approving ``reviews``, ``lock``; None when unprotected."""
        if not branch:
            return None
        key = (project, branch)
        with self._cache_lock:
            if key in self._protection:
                return self._protection[key]
        try:
            data = self.client.get(f'/repos/{project}/branches/{branch}/protection',
                                   project=project)
            checks = data.get('required_status_checks') or {}
            reviews = data.get('required_pull_request_reviews') or {}
            rule = {'contexts': list(checks.get('contexts') or ()),
                    'reviews': int(reviews.get('required_approving_review_count') or 0),
                    'lock': bool((data.get('lock_branch') or {}).get('enabled'))}
        except GithubError as exc:
            if exc.status == 404:
                rule = None
            elif exc.status == 403:
                rule = self._protection_from_branch(project, branch)
            else:
                raise
        with self._cache_lock:
            self._protection[key] = rule
        return rule

    def _protection_from_branch(self, project: str, branch: str) -> dict | None:
        """Without administration read permission: the required checks
        the branch itself shows."""
        data = self.client.get(f'/repos/{project}/branches/{branch}', project=project)
        if not data.get('protected'):
            return None
        checks = ((data.get('protection') or {}).get('required_status_checks') or {})
        return {'contexts': list(checks.get('contexts') or ()), 'reviews': 0, 'lock': False}

    def _forget_protection(self, project: str, branch: str | None) -> None:
        with self._cache_lock:
            for key in [k for k in self._protection
                        if k[0] == project and (branch is None or k[1] == branch)]:
                del self._protection[key]

    def can_merge(self, change, allow_needs=()) -> str | None:
        """None if GitHub would merge ``change`` once the statuses in
        ``allow_needs`` (the pipeline's own) pass; else GitHub's reason."""
        if not isinstance(change, PullRequest):
            return None
        if change.draft:
            return 'the pull request is a draft'
        if change.mergeable is False:
            return 'the pull request has merge conflicts with its branch'
        rule = self.branch_protection(change.project, change.branch)
        if rule is None:
            return None
        if rule['lock']:
            return f'branch {change.branch} is locked'
        states = {}
        for status in change.statuses:
            _, _, rest = status.partition(':')
            context, _, state = rest.rpartition(':')
            states.setdefault(context, state)
        for context in rule['contexts']:
            if context in allow_needs:
                continue
            state = states.get(context)
            if state in (None, '', 'pending'):
                return f'required status check "{context}" is expected'
            if state not in ('success', 'neutral', 'skipped'):
                return f'required status check "{context}" is {state}'
        approved = [r for r in change.reviews if r.get('type') == 'approved' and
                    r.get('permission') in _WRITE]
        if any(r.get('type') == 'changes_requested' and r.get('permission') in _WRITE
               for r in change.reviews):
            return 'a reviewer with write access requested changes'
        if len(approved) < rule['reviews']:
            return f'{rule["reviews"]} approving review(s) by reviewers with write access ' \
                   f'required, {len(approved)} given'
        return None


def _user(user) -> dict:
    user = user or {}
    return {'username': user.get('login') or '', 'name': user.get('login') or '',
            'email': user.get('email') or ''}
