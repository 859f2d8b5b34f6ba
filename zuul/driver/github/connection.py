"""A ``[connection NAME] driver=github`` section: a source of pull requests
and branches, the webhook receiver's checks, and the API calls reporters
make.

Keys as released Zuul documents them: ``app_id``/``app_key`` (a GitHub
App) and/or ``api_token``, ``webhook_token``, ``server`` (default
github.com; another name is a GitHub Enterprise server, API at
``https://<server>/api/v3``), ``canonical_hostname``, ``verify_ssl``,
``sshkey``. Added here: ``api_url`` and ``git_host`` (a host name or a
base URL) to point at a server whose API or git is elsewhere,
``request_timeout`` and ``retries``.
"""

from __future__ import annotations

import json
import logging
import re
import threading

from zuul.driver.github.client import AppAuth, GithubClient, GithubError
from zuul.driver.github.events import (
    MalformedEventError,
    parse_webhook,
    timestamp,
    verify_signature,
)
from zuul.driver.github.model import PullRequest
from zuul.model.change import Ref
from zuul.model.events import TriggerEvent

log = logging.getLogger('zuul.driver.github')

_DEPENDS_ON = re.compile(r'^\s*Depends-On:\s*(\S+)\s*$', re.IGNORECASE | re.MULTILINE)
_MERGE_METHODS = {'merge': 'merge', 'merge-resolve': 'merge', 'merge-recursive': 'merge',
                  'merge-ort': 'merge', 'squash-merge': 'squash', 'squash': 'squash',
                  'rebase': 'rebase', 'cherry-pick': 'rebase'}


class WebhookRejectedError(Exception):
    """A delivery that must not be processed (bad or missing signature):
    answer 401 and log it."""


def _truthy(value, default: bool = True) -> bool:
    if value is None:
        return default
    return str(value).strip().lower() not in ('0', 'false', 'no', 'off')


class GithubConnection:
    driver_name = 'github'

    def __init__(self, name: str, options: dict):
        self.name = name
        self.options = dict(options)
        self.server = options.get('server') or 'github.com'
        self.canonical_hostname = options.get('canonical_hostname') or self.server
        self.webhook_token = options.get('webhook_token')
        api_url = options.get('api_url') or (
            'https://api.github.com' if self.server == 'github.com'
            else f'https://{self.server}/api/v3')
        self.web_url = ('https://github.com' if self.server == 'github.com'
                        else f'https://{self.server}')
        git_host = options.get('git_host') or self.server
        self.git_base = git_host if '://' in git_host else f'https://{git_host}'
        app = None
        if options.get('app_id') and options.get('app_key'):
            with open(options['app_key']) as f:
                app = AppAuth(int(options['app_id']), f.read())
        self.client = GithubClient(api_url, api_token=options.get('api_token'), app=app,
                                   verify_ssl=_truthy(options.get('verify_ssl')),
                                   timeout=float(options.get('request_timeout') or 30),
                                   retries=int(options.get('retries') or 3),
                                   client_cert=options.get('sslkey'),
                                   rate_limit_logging=_truthy(options.get('rate_limit_logging')))
        if options.get('repo_cache'):
            log.warning('%s: repo_cache is not supported; repositories are fetched from %s',
                        name, self.git_base)
        self._on_event = None
        self.queue = None
        self._thread = None
        self.web_root: str | None = None   # zuul.conf [web] root, set by the scheduler
        # item -> the project's merge-mode (set by the scheduler): the
        # method the merge reporter asks GitHub for.
        self.merge_mode_for = None

    def __repr__(self):
        return f'<GithubConnection {self.name} {self.server}>'

    # -- webhooks -----------------------------------------------------------
    def check_webhook(self, headers: dict, body: bytes) -> TriggerEvent | None:
        """The event a webhook delivery carries (None: nothing to do);
        WebhookRejectedError if it is not signed with ``webhook_token``
        or cannot be read."""
        lowered = {k.lower(): v for k, v in headers.items()}
        if not self.webhook_token:
            raise WebhookRejectedError(f'connection {self.name} has no webhook_token')
        if not verify_signature(self.webhook_token, body,
                                lowered.get('x-hub-signature-256')):
            raise WebhookRejectedError('signature does not match the webhook_token')
        kind = lowered.get('x-github-event')
        if not kind:
            raise WebhookRejectedError('no X-GitHub-Event header')
        try:
            payload = json.loads(body)
            return parse_webhook(kind, payload, self.name, lowered.get('x-github-delivery'))
        except (ValueError, MalformedEventError) as exc:
            raise WebhookRejectedError(f'unreadable {kind} payload: {exc}') from None

    # Deliveries go from zuul-web to the scheduler through ZooKeeper
    # (``/zuul/events/connection/<name>``): zuul-web answers GitHub as soon
    # as a delivery is stored; the leading scheduler takes them in order
    # and removes each once its event is in the scheduler's own durable
    # event queue, so a restart of either loses none.

    def attach_zookeeper(self, client) -> None:
        from zuul.zk.pipeline_state import TriggerEventQueue
        self.queue = TriggerEventQueue(client, f'/zuul/events/connection/{self.name}')

    def enqueue_webhook(self, headers: dict, body: bytes) -> str | None:
        """Check a delivery (WebhookRejectedError) and store it; None when
        it carries nothing to act on (a ping, an ignored action)."""
        event = self.check_webhook(headers, body)
        if event is None:
            return None
        lowered = {k.lower(): v for k, v in headers.items()}
        return self.queue.put({'kind': lowered.get('x-github-event'),
                               'delivery': lowered.get('x-github-delivery'),
                               'payload': json.loads(body)})

    def start(self, on_event) -> None:
        self._on_event = on_event
        if getattr(self, 'queue', None) is None:
            return
        self._stopped = threading.Event()
        self._wake = threading.Event()
        self.queue.client.ChildrenWatch(self.queue.root, lambda _: self._wake.set())
        self._thread = threading.Thread(target=self._consume, daemon=True,
                                        name=f'github-events-{self.name}')
        self._thread.start()

    def stop(self) -> None:
        self._on_event = None
        if getattr(self, '_thread', None) is not None:
            self._stopped.set()
            self._wake.set()
            self._thread.join(10)
            self._thread = None

    def _consume(self) -> None:
        while not self._stopped.is_set():
            self._wake.clear()
            try:
                self.process_deliveries()
            except Exception:
                log.exception('%s: handling webhook deliveries failed; trying again',
                              self.name)
                self._stopped.wait(2)
                continue
            self._wake.wait(5)

    def process_deliveries(self) -> int:
        """Stored deliveries, oldest first, to the scheduler; each removed
        once handed over (a malformed one is logged and dropped)."""
        count = 0
        for path, stored in self.queue.pending():
            if self._on_event is None or self._stopped.is_set():
                break
            try:
                event = parse_webhook(stored.get('kind') or '', stored.get('payload'),
                                      self.name, stored.get('delivery'))
            except MalformedEventError as exc:
                log.error('%s: dropping malformed %s delivery %s: %s', self.name,
                          stored.get('kind'), stored.get('delivery'), exc)
                event = None
            if event is not None:
                log.info('[e: %s] %s: %s', event.event_id, self.name, event.describe())
                self._on_event(event)
                count += 1
            self.queue.ack(path)
        return count

    def deliver(self, event: TriggerEvent) -> None:
        """Hand an event to the scheduler directly (tests, tools)."""
        if self._on_event is not None:
            self._on_event(event)

    # -- source -------------------------------------------------------------
    def get_change_for_event(self, event: TriggerEvent):
        if event.type == 'push':
            return Ref(self.name, event.project, event.ref or '', event.oldrev,
                       event.newrev, url=f'{self.web_url}/{event.project}')
        number = event.change_number
        if number is None and event.newrev:
            number = self._pull_for_commit(event.project, event.newrev)
            event.change_number = number
        if number is None:
            return None
        return self.lookup_change(event.project, str(number))

    def _pull_for_commit(self, project: str, sha: str) -> int | None:
        pulls = self.client.get(f'/repos/{project}/commits/{sha}/pulls', project=project)
        for pr in pulls or ():
            if pr.get('state') == 'open' and (pr.get('head') or {}).get('sha') == sha:
                return int(pr['number'])
        return None

    def lookup_change(self, project: str, spec: str) -> PullRequest:
        number, _, sha = str(spec).partition(',')
        pr = self.client.get(f'/repos/{project}/pulls/{int(number)}', project=project)
        change = self._change_from_pr(project, pr)
        if sha and not change.head_sha.startswith(sha):
            change.is_current_patchset = False
            change.patchset = sha
        return change

    def _change_from_pr(self, project: str, pr: dict) -> PullRequest:
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
        pr = self.client.get(f'/repos/{change.project}/pulls/{change.number}',
                             project=change.project)
        return bool(pr.get('merged'))

    def change_for_url(self, url: str) -> PullRequest | None:
        match = re.match(rf'^{re.escape(self.web_url)}/([^/]+/[^/]+)/pull/(\d+)/?$', url)
        if not match:
            return None
        return self.lookup_change(match.group(1), match.group(2))

    def get_needed_changes(self, change, connections) -> list:
        needed = []
        for url in _depends_on(getattr(change, 'body', '') or ''):
            for connection in connections.all():
                resolver = getattr(connection, 'change_for_url', None)
                found = resolver(url) if resolver else None
                if found is not None:
                    if not found.is_merged:
                        needed.append(found)
                    break
            else:
                log.warning('%s: Depends-On %s names no known change', change.describe(), url)
        return needed

    def protected_branches(self, project: str) -> list[str]:
        """Names of the project's protected branches (for a tenant's
        ``exclude-unprotected-branches``)."""
        return [b['name'] for b in self.client.get_all(
            f'/repos/{project}/branches', project=project, params={'protected': 'true'})]

    def git_url(self, project: str) -> str:
        return f'{self.git_base}/{project}.git'

    def git_token(self, project: str) -> str | None:
        return self.client.token_for(project)

    # -- reporting ----------------------------------------------------------
    def set_status(self, project: str, sha: str, state: str, context: str,
                   description: str = '', url: str | None = None) -> None:
        body = {'state': state, 'context': context, 'description': description[:140]}
        if url:
            body['target_url'] = url
        self.client.request('POST', f'/repos/{project}/statuses/{sha}', project=project,
                            body=body)

    def comment(self, change: PullRequest, text: str) -> None:
        self.client.request('POST', f'/repos/{change.project}/issues/{change.number}/comments',
                            project=change.project, body={'body': text})

    def add_label(self, change: PullRequest, label: str) -> None:
        self.client.request('POST', f'/repos/{change.project}/issues/{change.number}/labels',
                            project=change.project, body={'labels': [label]})

    def remove_label(self, change: PullRequest, label: str) -> None:
        from urllib.parse import quote
        try:
            self.client.request('DELETE', f'/repos/{change.project}/issues/{change.number}'
                                f'/labels/{quote(label, safe="")}', project=change.project)
        except GithubError as exc:
            if exc.status != 404:   # already gone
                raise

    def review(self, change: PullRequest, event: str, body: str = '') -> None:
        self.client.request('POST', f'/repos/{change.project}/pulls/{change.number}/reviews',
                            project=change.project,
                            body={'event': event, 'body': body, 'commit_id': change.head_sha})

    def merge(self, change: PullRequest, merge_mode: str | None = None,
              message: str = '') -> None:
        """Merge with the method the project's ``merge-mode`` maps to;
        GitHub refuses (405/409) when branch protection or the head moved."""
        method = _MERGE_METHODS.get(merge_mode or 'merge', 'merge')
        self.client.request('PUT', f'/repos/{change.project}/pulls/{change.number}/merge',
                            project=change.project,
                            body={'merge_method': method, 'sha': change.head_sha,
                                  'commit_title': change.title,
                                  'commit_message': message or change.body})

    def check_run(self, change, name: str, status: str, conclusion: str | None,
                  summary: str, details_url: str | None = None,
                  annotations: list | None = None) -> dict:
        """Create the check run ``name`` on the change's head, or update it
        if this app made one there already (one run per pipeline)."""
        body = {'name': name, 'head_sha': change.newrev, 'status': status,
                'output': {'title': name, 'summary': summary[:65535] or name,
                           'annotations': (annotations or [])[:50]}}
        if conclusion:
            body['conclusion'] = conclusion
        if details_url:
            body['details_url'] = details_url
        project = change.project
        existing = self.client.get(f'/repos/{project}/commits/{change.newrev}/check-runs',
                                   project=project, params={'check_name': name})
        runs = (existing or {}).get('check_runs') or []
        if runs:
            return self.client.request('PATCH', f'/repos/{project}/check-runs/{runs[0]["id"]}',
                                       project=project, body=body).body
        return self.client.request('POST', f'/repos/{project}/check-runs', project=project,
                                   body=body).body


def _user(user) -> dict:
    user = user or {}
    return {'username': user.get('login') or '', 'name': user.get('login') or '',
            'email': user.get('email') or ''}


def _depends_on(text: str) -> list[str]:
    return [m.group(1) for m in _DEPENDS_ON.finditer(text or '')]
