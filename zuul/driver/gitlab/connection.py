"""A ``[connection NAME] driver=gitlab`` section: a source of merge
requests and branches, the webhook receiver's checks, and the API calls
reporters make.

Keys as released Zuul documents them: ``server`` (default gitlab.com),
``baseurl`` (the web and API root, default ``https://<server>``),
``canonical_hostname``, ``api_token`` and ``api_token_name`` (a personal
access token and its name, the user name of HTTPS clones),
``webhook_token`` (the webhooks' secret token), ``sshkey`` and
``cloneurl`` (where git clones from, default ``baseurl``), ``keepalive``
and ``disable_connection_pool``. Added here: ``request_timeout``,
``retries``, ``catchup_interval`` (see catchup.py) and ``event_workers``
(default 4).

No GitLab call runs on the scheduler's loop: each event's merge request
(and the ones its Depends-On names) is read on the connection's workers
(``prepare_event``) and kept in a change cache the scheduler's lookups
are answered from; reports (notes, approvals, labels, merges and the
rebases they wait for) are sent on the workers too. Projects are spread
over ``event_workers`` lanes: a slow GitLab or a rate limit for one
project holds up its lane's reads and reports, in order, never the
scheduler's loop, the other connections or other projects' reports;
events are handed to the scheduler in the order GitLab sent them (those
after a held one are read meanwhile and follow it at once).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import zlib
from collections import OrderedDict

from zuul.driver.depends_on import depends_on_urls, needed_by_url
from zuul.driver.gitlab.client import GitlabClient, GitlabError, api_path
from zuul.driver.gitlab.events import (
    MalformedEventError,
    parse_delivery,
    timestamp,
    token_matches,
)
from zuul.driver.gitlab.model import MergeRequest
from zuul.driver.hosted import OffLoopWork, RequestCache
from zuul.driver.webhooks import (
    DeliveryQueue,
    MalformedWebhookError,
    ReceiverRegistry,
    WebhookRejectedError,
)
from zuul.model.change import Ref
from zuul.model.events import TriggerEvent

log = logging.getLogger('zuul.driver.gitlab')

_FILES_CACHE = 1024
_PROJECT_TTL = 60.0
_REBASE_WAIT = 120.0


def truthy(value, default: bool = False) -> bool:
    if value is None or value == '':
        return default
    return str(value).strip().lower() in ('1', 'true', 'yes', 'on')


class GitlabConnection(RequestCache, OffLoopWork):
    driver_name = 'gitlab'

    def __init__(self, name: str, options: dict, sleep=time.sleep):
        self.name = name
        self.options = dict(options)
        self.server = options.get('server') or 'gitlab.com'
        self.baseurl = (options.get('baseurl') or f'https://{self.server}').rstrip('/')
        self.canonical_hostname = options.get('canonical_hostname') or self.server
        self.webhook_token = options.get('webhook_token')
        self.client = GitlabClient(
            self.baseurl, api_token=options.get('api_token'),
            keepalive=_number(options.get('keepalive'), 60),
            pool=not truthy(options.get('disable_connection_pool')),
            timeout=float(options.get('request_timeout') or 30),
            retries=_number(options.get('retries'), 5), sleep=sleep)
        self.deliveries = DeliveryQueue(name, self._events_of, after_each=self._periodic,
                                        hand_over=self._read_ahead)
        self.event_workers = max(1, _number(options.get('event_workers'), 4))
        self._changes: dict[tuple[str, int], MergeRequest] = {}
        self._cache_lock = threading.Lock()
        self._merged_heads: set[tuple[str, int, str]] = set()
        self._stopped = threading.Event()
        self.cache_hits = 0
        # Set by the scheduler: whether some tenant may act on an event.
        # Until it is, nothing is read ahead or cached (a tool, a test of
        # the delivery queue): every lookup asks GitLab.
        self.wants_event = None
        self.catchup = None
        self.projects: set[str] = set()
        self._files: OrderedDict[tuple[str, str], list[str]] = OrderedDict()
        self._project_info: dict[str, tuple[float, dict]] = {}
        self._lock = threading.Lock()
        self._sleep = sleep
        self.web_root: str | None = None   # zuul.conf [web] root, set by the scheduler
        # item -> the project's merge-mode (set by the scheduler).
        self.merge_mode_for = None

    def __repr__(self):
        return f'<GitlabConnection {self.name} {self.baseurl}>'

    # -- webhooks (zuul-web's side) --------------------------------------------
    def check_webhook(self, headers: dict, body: bytes) -> dict:
        """The record to store for a delivery; WebhookRejectedError (401)
        for a wrong or missing ``X-Gitlab-Token``, MalformedWebhookError
        (400) for a body that cannot be read."""
        lowered = {k.lower(): v for k, v in headers.items()}
        if not self.webhook_token:
            raise WebhookRejectedError(f'connection {self.name} has no webhook_token')
        if not token_matches(self.webhook_token, lowered.get('x-gitlab-token')):
            raise WebhookRejectedError('X-Gitlab-Token does not match the webhook_token'
                                       if lowered.get('x-gitlab-token')
                                       else 'no X-Gitlab-Token header')
        delivery = lowered.get('x-gitlab-event-uuid')
        try:
            payload = json.loads(body)
            parse_delivery(payload, self.name, delivery)
        except (ValueError, MalformedEventError) as exc:
            raise MalformedWebhookError(
                f'unreadable {lowered.get("x-gitlab-event") or "webhook"} payload: '
                f'{exc}') from None
        return {'kind': lowered.get('x-gitlab-event'), 'delivery': delivery,
                'payload': payload}

    def attach_zookeeper(self, client) -> None:
        self.deliveries.attach(client)
        self.receivers = ReceiverRegistry(client, self.name)

    def register_receiver(self) -> None:
        """zuul-web takes this connection's deliveries from now on."""
        self.receivers.register()

    def enqueue_webhook(self, headers: dict, body: bytes) -> str | None:
        """Check a delivery and store it for the scheduler; None when it
        carries nothing to act on."""
        record = self.check_webhook(headers, body)
        if not parse_delivery(record['payload'], self.name, record['delivery']):
            return None
        return self.deliveries.put(record)

    # -- events (the scheduler's side) ------------------------------------------
    def _events_of(self, record: dict) -> list[TriggerEvent]:
        events = parse_delivery(record.get('payload'), self.name, record.get('delivery'))
        for event in events:
            log.info('[e: %s] %s: %s %s', event.event_id, self.name, event.describe(),
                     event.action or '')
            if self.catchup is not None:
                self.catchup.note(event)
        return events

    @property
    def change_cache(self) -> bool:
        """Lookups answered from the cache: events keep it current."""
        return self.wants_event is not None and self._workers is not None and \
            not self._stopped.is_set()

    def start(self, on_event) -> None:
        self._on_event = on_event
        self._stopped.clear()
        if self.wants_event is not None:
            # Handed over in delivery order (a shared gate queue's order
            # is the order of the approvals), read per project lane.
            self._start_workers(self._hand_over, 1, f'gitlab-{self.name}', ordered=True)
        if self.deliveries.queue is None:
            return
        from zuul.driver.gitlab.catchup import CatchUp
        interval = float(self.options.get('catchup_interval') or 0)
        self.catchup = CatchUp(self, self.deliveries.client, self.receivers,
                               interval=interval)
        self.receivers.watch(lambda names: self.deliveries.wake())
        self.deliveries.start(on_event)

    def stop(self) -> None:
        self._stopped.set()
        self.deliveries.stop()
        self._stop_workers()
        self.client.close()

    def _periodic(self) -> None:
        if self.catchup is not None:
            self.catchup.tick()

    def deliver(self, event: TriggerEvent) -> None:
        """Hand an event to the scheduler (catch-up, tests), read ahead
        first like a delivered one."""
        self._read_ahead([event], None)

    def _read_ahead(self, events, done) -> None:
        """A delivery's events to the scheduler; ``done()`` once all are
        handed over. Read ahead on the lane of their project when the
        cache is on, else handed over at once."""
        if not self.change_cache:
            on_event = getattr(self, '_on_event', None)
            for event in events:
                if on_event is not None:
                    on_event(event)
            if done is not None:
                done()
            return
        for i, event in enumerate(events):
            last = done if i == len(events) - 1 else None
            self.read_ahead(self.report_key(event.project), self.prepare_event, event,
                            (event, last))

    def _hand_over(self, result, tag) -> None:
        event, done = tag
        on_event = getattr(self, '_on_event', None)
        if on_event is not None and not self._stopped.is_set():
            on_event(result or event)
            if done is not None:
                done()

    def report_key(self, project: str) -> int:
        """The lane of ``project`` (its events and reports, in order)."""
        return zlib.crc32((project or '').encode()) % self.event_workers

    def watch(self, projects) -> None:
        """The projects the tenants use (caught up after an outage)."""
        self.projects = set(projects)

    # -- source -----------------------------------------------------------------
    def prepare_event(self, event: TriggerEvent) -> TriggerEvent:
        """On a worker: the event's merge request read (fresh) and the
        ones its Depends-On names on this GitLab, into the cache."""
        if event.type == 'gl_push' or event.change_number is None:
            return event
        if self.wants_event is not None and not self.wants_event(event):
            # Nobody acts on it, but it may tell of a change (merged,
            # closed): the next lookup reads it again.
            with self._cache_lock:
                self._changes.pop((event.project, int(event.change_number)), None)
            return event
        change = self.lookup_change(event.project, str(event.change_number), refresh=True)
        for url in depends_on_urls(change.description):
            self.change_for_url(url)
        event.prepared = True
        return event

    def get_change_for_event(self, event: TriggerEvent):
        if event.type == 'gl_push':
            return Ref(self.name, event.project, event.ref or '', event.oldrev,
                       event.newrev, url=self._commit_url(event.project, event.newrev))
        if event.change_number is None:
            return None
        return self.lookup_change(event.project, str(event.change_number),
                                  refresh=not getattr(event, 'prepared', False))

    def _commit_url(self, project: str, sha: str | None) -> str:
        return f'{self.baseurl}/{project}/-/commit/{sha or ""}'

    def lookup_change(self, project: str, spec: str, refresh: bool = False) -> MergeRequest:
        number, _, sha = str(spec).partition(',')
        if not number.isdigit():
            raise LookupError(f'Malformed merge request "{spec}": expected N or N,SHA')
        return self._cached_request(project, int(number), sha, self._read_mr, refresh)

    def _read_mr(self, project: str, number: int) -> MergeRequest:
        try:
            mr = self.client.get(api_path('/projects/{}/merge_requests/{}', project,
                                          number))
        except GitlabError as exc:
            if exc.status == 404:
                raise LookupError(f'Merge request {number} not found in {project}') \
                    from None
            raise
        return self._change_from_mr(project, mr)

    def _change_from_mr(self, project: str, mr: dict) -> MergeRequest:
        iid = int(mr['iid'])
        sha = mr.get('sha') or ''
        state = mr.get('state') or 'opened'
        description = mr.get('description') or ''
        change = MergeRequest(
            connection=self.name, project=project, ref=f'refs/merge-requests/{iid}/head',
            newrev=sha, url=mr.get('web_url') or
            f'{self.baseurl}/{project}/-/merge_requests/{iid}',
            number=iid, patchset=sha, branch_name=mr.get('target_branch') or '',
            subject=mr.get('title') or '',
            message=f'{mr.get("title") or ""}\n\n{description}'.strip(),
            owner=_user(mr.get('author')),
            status={'merged': 'MERGED', 'opened': 'NEW'}.get(state, 'ABANDONED'),
            title=mr.get('title') or '', description=description, state=state,
            labels=[_label(x) for x in mr.get('labels') or ()],
            source_branch=mr.get('source_branch') or '',
            merge_status=mr.get('detailed_merge_status') or mr.get('merge_status') or '',
            draft=bool(mr.get('draft') or mr.get('work_in_progress')),
            updated_at=timestamp(mr.get('updated_at')) or 0.0,
            web_url=mr.get('web_url') or '')
        if state == 'opened':
            change.approved, change.approved_by = self._approvals(project, iid)
        change.files = self._files_of(project, iid, sha)
        return change

    def _approvals(self, project: str, iid: int) -> tuple[bool, list[str]]:
        data = self.client.get(api_path('/projects/{}/merge_requests/{}/approvals',
                                        project, iid)) or {}
        users = [((a or {}).get('user') or {}).get('username') or ''
                 for a in data.get('approved_by') or ()]
        approved = data.get('approved')
        if approved is None:
            approved = int(data.get('approvals_left') or 0) == 0
        return bool(approved) and bool(users), users

    def _files_of(self, project: str, iid: int, sha: str) -> list[str]:
        """The paths a merge request's head changes; a head's files never
        change, so they are kept (the newest ``_FILES_CACHE`` heads)."""
        key = (project, sha)
        with self._lock:
            if sha and key in self._files:
                self._files.move_to_end(key)
                return list(self._files[key])
        files = []
        for diff in self.client.get_all(api_path('/projects/{}/merge_requests/{}/diffs',
                                                 project, iid)):
            for path in (diff.get('old_path'), diff.get('new_path')):
                if path and path not in files:
                    files.append(path)
        with self._lock:
            self._files[key] = files
            while len(self._files) > _FILES_CACHE:
                self._files.popitem(last=False)
        return list(files)

    def open_changes(self, project: str, branch: str | None = None) -> list[MergeRequest]:
        params = {'state': 'opened'}
        if branch:
            params['target_branch'] = branch
        return [self._change_from_mr(project, mr) for mr in self.client.get_all(
            api_path('/projects/{}/merge_requests', project), params=params)]

    def is_merged(self, change) -> bool:
        if not isinstance(change, MergeRequest):
            return False
        if (change.project, change.number, change.patchset) in self._merged_heads:
            change.state, change.status = 'merged', 'MERGED'
            return True
        # Kept current by events: a merge outside Zuul sends one.
        cached = self._cached(change.project, change.number)
        if cached is not None:
            return cached.is_merged
        mr = self.client.get(api_path('/projects/{}/merge_requests/{}', change.project,
                                      change.number))
        if (mr or {}).get('state') == 'merged':
            change.state, change.status = 'merged', 'MERGED'
            return True
        return False

    def change_for_url(self, url: str) -> MergeRequest | None:
        """A merge request URL of this GitLab
        (``<baseurl>/<project>/-/merge_requests/<iid>``, also without ``-/``)."""
        match = re.match(rf'^{re.escape(self.baseurl)}/(.+?)/(?:-/)?merge_requests/(\d+)/?$',
                         url.strip())
        if not match:
            return None
        try:
            return self.lookup_change(match.group(1), match.group(2))
        except LookupError:
            log.warning('%s: Depends-On %s names no merge request', self.name, url)
            return None

    def get_needed_changes(self, change, connections) -> list:
        return needed_by_url(change, getattr(change, 'description', ''), connections)

    def protected_branches(self, project: str) -> list[str]:
        """Names of the project's protected branches (for a tenant's
        ``exclude-unprotected-branches``)."""
        return [b['name'] for b in self.client.get_all(
            api_path('/projects/{}/protected_branches', project))]

    def project_info(self, project: str) -> dict:
        """The project as GitLab describes it (merge method, squash
        option), kept for a minute."""
        now = time.monotonic()
        cached = self._project_info.get(project)
        if cached and now - cached[0] < _PROJECT_TTL:
            return cached[1]
        data = self.client.get(api_path('/projects/{}', project)) or {}
        self._project_info[project] = (now, data)
        return data

    # -- reporting ----------------------------------------------------------------
    def comment(self, change: MergeRequest, text: str) -> None:
        self.client.request('POST', api_path('/projects/{}/merge_requests/{}/notes',
                                             change.project, change.number),
                            body={'body': text})

    def set_labels(self, change: MergeRequest, add=(), remove=()) -> None:
        body = {}
        if add:
            body['add_labels'] = ','.join(add)
        if remove:
            body['remove_labels'] = ','.join(remove)
        if body:
            self.client.request('PUT', api_path('/projects/{}/merge_requests/{}',
                                                change.project, change.number), body=body)

    def approve(self, change: MergeRequest, approve: bool = True) -> None:
        """Approve (for this head) or take the approval back; doing what
        is done already is not an error."""
        verb = 'approve' if approve else 'unapprove'
        body = {'sha': change.patchset} if approve else None
        try:
            self.client.request('POST', api_path(f'/projects/{{}}/merge_requests/{{}}/{verb}',
                                                 change.project, change.number), body=body)
        except GitlabError as exc:
            # 401: approved already by this user; 404: not approved by it.
            if exc.status not in ((401,) if approve else (404,)):
                raise
            log.debug('%s of %s: %s already', verb, change.describe(), verb + 'd')

    def merge(self, change: MergeRequest, merge_mode: str | None = None,
              message: str = '') -> None:
        """Merge the head Zuul tested: squashed for ``squash-merge``; for
        ``rebase``/``cherry-pick``, or when the project's merge method
        (``ff``, ``rebase_merge``) asks for a branch rebased onto its
        target, GitLab rebases it first. GitLab refuses what it refuses
        (GitlabError): a moved head (409), conflicts or a request that
        cannot be merged (405/406), no permission (401)."""
        path = api_path('/projects/{}/merge_requests/{}', change.project, change.number)
        body = {'sha': change.patchset, 'squash': merge_mode == 'squash-merge'}
        method = self.project_info(change.project).get('merge_method') or 'merge'
        rebase_first = merge_mode in ('rebase', 'cherry-pick') or method in (
            'ff', 'rebase_merge')
        if rebase_first:
            body['sha'] = self._rebase(change, path)
        try:
            self.client.request('PUT', path + '/merge', body=body)
        except GitlabError as exc:
            if exc.status not in (405, 406) or not rebase_first:
                raise
            # The target moved meanwhile (an item ahead merged): once more.
            body['sha'] = self._rebase(change, path)
            self.client.request('PUT', path + '/merge', body=body)
        self._merged_heads.add((change.project, change.number, change.patchset))

    def _rebase(self, change: MergeRequest, path: str) -> str:
        """Rebase the source branch onto its target (GitLab does it);
        returns the new head."""
        self.client.request('PUT', path + '/rebase')
        deadline = time.monotonic() + _REBASE_WAIT
        while True:
            mr = self.client.get(path, params={'include_rebase_in_progress': 'true'}) or {}
            if not mr.get('rebase_in_progress'):
                break
            if time.monotonic() > deadline:
                raise GitlabError(0, 'rebase did not finish', path, 'PUT')
            self._sleep(0.5)
        if mr.get('merge_error'):
            raise GitlabError(406, mr['merge_error'], path, 'PUT')
        return mr.get('sha') or change.patchset


def _number(value, default: int) -> int:
    return default if value is None or str(value).strip() == '' else int(value)


def _user(user) -> dict:
    user = user or {}
    return {'username': user.get('username') or '', 'name': user.get('name') or '',
            'email': user.get('email') or ''}


def _label(value) -> str:
    return (value.get('name') or value.get('title') or '') if isinstance(value, dict) \
        else str(value)

