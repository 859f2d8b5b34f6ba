"""A ``[connection NAME] driver=github`` section: a source of pull requests
and branches (source.py), the webhook receiver's checks, and the API calls
reporters make.

Keys as released Zuul documents them: ``app_id``/``app_key`` (a GitHub
App) and/or ``api_token``, ``webhook_token``, ``server`` (default
github.com; another name is a GitHub Enterprise server, API at
``https://<server>/api/v3``), ``canonical_hostname``, ``verify_ssl``,
``sshkey``, ``max_threads_per_installation`` (workers per App
installation that read GitHub for events, default 1), ``repo_cache`` and
``repo_retry_timeout`` (the mergers' git side: zuul/merger/repos.py).
Added here: ``api_url`` and ``git_host`` (a host name or a base URL) to
point at a server whose API or git is elsewhere, ``request_timeout`` and
``retries``.

Events take this path: zuul-web checks a delivery's signature and stores
it in ZooKeeper; the leading scheduler's connection takes it, reads what
the scheduler will ask about it from GitHub on the worker of the
repository's installation (``prepare_event``), and only then hands the
event to the scheduler, in delivery order per installation. A rate limit
or a slow GitHub holds up that installation's events, never the
scheduler's loop or another installation.
"""

from __future__ import annotations

import json
import logging
import threading
import time

from zuul.driver.github import merges
from zuul.driver.github.client import AppAuth, GithubClient, GithubError
from zuul.driver.github.events import (
    INSTALLATION_KINDS,
    MalformedEventError,
    parse_webhook,
    verify_signature,
)
from zuul.driver.github.model import PullRequest
from zuul.driver.github.source import PullRequestSource
from zuul.driver.hosted import OffLoopWork
from zuul.model.events import TriggerEvent

log = logging.getLogger('zuul.driver.github')

ALLOWED_MODES_TTL = 300.0
# The check run's button that dequeues the item (``requested_action``).
ABORT_ACTION = {'label': 'Abort', 'identifier': 'abort',
                'description': 'Abort this check run'}


class WebhookRejectedError(Exception):
    """A delivery that must not be processed (bad or missing signature):
    answer 401 and log it."""


def _truthy(value, default: bool = True) -> bool:
    if value is None:
        return default
    return str(value).strip().lower() not in ('0', 'false', 'no', 'off')


class GithubConnection(PullRequestSource, OffLoopWork):
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
        self.threads_per_installation = int(options.get('max_threads_per_installation') or 1)
        self._init_source()
        self._allowed_modes: dict[str, tuple[set, float]] = {}
        self._on_event = None
        self.queue = None
        self._thread = None
        self._in_flight: set[str] = set()
        self._stopped = threading.Event()
        self.web_root: str | None = None   # zuul.conf [web] root, set by the scheduler
        # item -> the project's merge-mode (set by the scheduler): the
        # method the merge reporter asks GitHub for.
        self.merge_mode_for = None

    def __repr__(self):
        return f'<GithubConnection {self.name} {self.server}>'

    # -- webhooks -----------------------------------------------------------
    def _check_signature(self, lowered: dict, body: bytes) -> None:
        if not self.webhook_token:
            raise WebhookRejectedError(f'connection {self.name} has no webhook_token')
        # GitHub signs with SHA-256 (X-Hub-Signature-256) and SHA-1
        # (X-Hub-Signature); released Zuul reads the SHA-1 one, so a
        # delivery with only that one is taken too. When both come, both
        # must match.
        sha256 = lowered.get('x-hub-signature-256')
        sha1 = lowered.get('x-hub-signature')
        if not sha256 and not sha1:
            raise WebhookRejectedError('no X-Hub-Signature-256 or X-Hub-Signature header')
        for header in (sha256, sha1):
            if header and not verify_signature(self.webhook_token, body, header):
                raise WebhookRejectedError('signature does not match the webhook_token')

    def check_webhook(self, headers: dict, body: bytes) -> TriggerEvent | None:
        """The event a webhook delivery carries (None: nothing to do);
        WebhookRejectedError if it is not signed with ``webhook_token``
        or cannot be read."""
        lowered = {k.lower(): v for k, v in headers.items()}
        self._check_signature(lowered, body)
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
        lowered = {k.lower(): v for k, v in headers.items()}
        kind = lowered.get('x-github-event')
        if event is None and kind not in INSTALLATION_KINDS:
            return None
        return self.queue.put({'kind': kind, 'delivery': lowered.get('x-github-delivery'),
                               'payload': json.loads(body)})

    def start(self, on_event) -> None:
        self._on_event = on_event
        if getattr(self, 'queue', None) is None:
            return
        self._stopped.clear()
        self._wake = threading.Event()
        # Reports: one worker per installation, so a change's reports go
        # out in the order the scheduler made them.
        self._start_workers(self._hand_over, self.threads_per_installation,
                            f'github-{self.name}')
        self.queue.client.ChildrenWatch(self.queue.root, lambda _: self._wake.set())
        self._thread = threading.Thread(target=self._consume, daemon=True,
                                        name=f'github-events-{self.name}')
        self._thread.start()

    def stop(self) -> None:
        self._on_event = None
        self._stopped.set()
        self.client.close()
        if getattr(self, '_thread', None) is not None:
            self._wake.set()
            self._thread.join(10)
            self._thread = None
        self._stop_workers()

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
        """Stored deliveries, oldest first, to the installation workers
        (or straight to the scheduler without workers); each removed once
        handed over (a malformed one is logged and dropped)."""
        count = 0
        for path, stored in self.queue.pending():
            if self._on_event is None or self._stopped.is_set():
                break
            if path in self._in_flight:
                continue
            kind = stored.get('kind') or ''
            try:
                event = parse_webhook(kind, stored.get('payload'), self.name,
                                      stored.get('delivery'))
            except MalformedEventError as exc:
                log.error('%s: dropping malformed %s delivery %s: %s', self.name,
                          kind, stored.get('delivery'), exc)
                event = None
            if kind in INSTALLATION_KINDS:
                self.installation_changed(stored.get('payload') or {})
            if event is None:
                self.queue.ack(path)
                continue
            log.info('[e: %s] %s: %s', event.event_id, self.name, event.describe())
            count += 1
            if self._workers is None or not self.change_cache:
                self._on_event(event)
                self.queue.ack(path)
                continue
            self._in_flight.add(path)
            self.read_ahead(self._installation_of(event.project), self.prepare_event,
                            event, (path, event))
        return count

    def _installation_of(self, project: str):
        """The worker key of ``project``: its App installation (0 without
        one, or when GitHub cannot say now)."""
        app = self.client.app
        if app is None:
            return 0
        key = app.installation_key(project)
        if key is None:
            try:
                key = app.installation_for(self.client, project)
            except GithubError as exc:
                log.warning('%s: installation of %s unknown: %s', self.name, project, exc)
        return key if key is not None else 0

    def _hand_over(self, result, tag) -> None:
        path, event = tag
        try:
            if self._on_event is not None and not self._stopped.is_set():
                self._on_event(result or event)
                self.queue.ack(path)
        finally:
            self._in_flight.discard(path)

    def installation_changed(self, payload: dict) -> None:
        """An ``installation`` or ``installation_repositories`` event: the
        cached answers about which repositories the App is installed on
        are asked again (an App installed after start is used at once)."""
        app = self.client.app
        if app is None:
            return
        installation = (payload.get('installation') or {}).get('id')
        repos = [r.get('full_name') for key in ('repositories', 'repositories_added',
                                                 'repositories_removed')
                 for r in payload.get(key) or () if r.get('full_name')]
        log.info('%s: installation %s %s (%s): asking again where the app is installed',
                 self.name, installation, payload.get('action'), ', '.join(repos) or 'all')
        app.forget(repos or None, installation if payload.get('action') in
                   ('deleted', 'removed', 'suspend') else None)

    def deliver(self, event: TriggerEvent) -> None:
        """Hand an event to the scheduler directly (tests, tools)."""
        if self._on_event is not None:
            self._on_event(event)

    def report_key(self, project: str):
        """Reports go out per installation."""
        app = self.client.app
        key = app.installation_key(project) if app is not None else None
        return key if key is not None else 0

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
              message: str = '') -> str:
        """Merge with the method the project's ``merge-mode`` maps to, the
        pull request's title and body as the commit message (``message``,
        the report, is not used); raises merges.MergeRefusedError with
        GitHub's reason."""
        sha = merges.merge(self.client, change, merge_mode)
        self._merged_heads.add((change.project, change.number, change.head_sha))
        return sha

    def allowed_merge_modes(self, project: str) -> set[str]:
        """What the repository's settings allow (read at most every
        ALLOWED_MODES_TTL seconds: layouts, speculative ones included, ask)."""
        now = time.monotonic()
        cached = self._allowed_modes.get(project)
        if cached is None or now - cached[1] > ALLOWED_MODES_TTL:
            cached = (merges.allowed_modes(self.client, project), now)
            self._allowed_modes[project] = cached
        return cached[0]

    def check_run(self, change, name: str, status: str, conclusion: str | None,
                  summary: str, details_url: str | None = None,
                  annotations: list | None = None) -> dict:
        """Create the check run ``name`` on the change's head, or update it
        if this app made one there already (one run per pipeline)."""
        body = {'name': name, 'head_sha': change.newrev, 'status': status,
                'output': {'title': name, 'summary': summary[:65535] or name,
                           'annotations': (annotations or [])[:50]},
                # A running check offers the Abort button (dequeues the item).
                'actions': [ABORT_ACTION] if status in ('queued', 'in_progress') else []}
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

