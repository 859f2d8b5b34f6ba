"""Events GitLab could not deliver, made up again from its API.

GitLab sends each webhook once. While no zuul-web takes this
connection's deliveries (every zuul-web stopped, or all restarting)
they are lost; the receivers' registrations in ZooKeeper
(zuul.driver.webhooks.ReceiverRegistry) tell when that was. The
scheduler's connection keeps ``checked_until`` in ZooKeeper
(``/zuul/gitlab/<connection>/catchup``): the time up to which every
event is known to have reached the delivery queue. It advances while a
receiver is registered. When a receiver that started after it shows up,
the events of ``[checked_until - MARGIN, its start + MARGIN]`` are read
back from the API for every project the tenants use:

- merge requests updated in the window: ``opened`` (created in it),
  ``changed`` (a diff version made in it), ``merged``/``closed`` (at a
  time in it), ``comment`` (notes written in it), ``approved`` /
  ``unapproved`` (GitLab's system notes "approved this merge request" /
  "unapproved this merge request"), ``labeled``/``unlabeled`` (resource
  label events in it);
- pushes to branches and tags (the project's ``pushed`` events).

Every event handed to the scheduler leaves a signature
(events.signature) in a bounded log kept in ZooKeeper
(``/zuul/gitlab/<connection>/seen``); a made-up event with the
signature of one already handed over is dropped, so the margins cost
API calls, not duplicate builds. With ``catchup_interval`` (seconds) the
same is also done periodically over the time since the last pass, for a
GitLab that cannot reach a zuul-web that is up.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from datetime import datetime, timedelta, timezone

from kazoo.exceptions import NoNodeError

from zuul.driver.gitlab.client import GitlabError, api_path
from zuul.driver.gitlab.events import MR_EVENT, PUSH_EVENT, ZERO_SHA, signature, timestamp
from zuul.model.events import TriggerEvent

log = logging.getLogger('zuul.driver.gitlab.catchup')

MARGIN = 60.0          # clock skew, deliveries in flight, receivers' sessions
SEEN_SIZE = 1000       # signatures remembered
_SAVE_EVERY = 5.0      # seconds between advances of checked_until
APPROVED_NOTE = 'approved this merge request'
UNAPPROVED_NOTE = 'unapproved this merge request'


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime('%Y-%m-%dT%H:%M:%S.%fZ')


class CatchUp:
    def __init__(self, connection, zk_client, receivers, interval: float = 0.0,
                 clock=time.time):
        self.connection = connection
        self.client = connection.client       # the GitLab API
        self.zk = zk_client
        self.receivers = receivers
        self.interval = interval
        self.clock = clock
        self.root = f'/zuul/gitlab/{connection.name}'
        self._seen = deque(maxlen=SEEN_SIZE)
        self._seen_set: set[str] = set()
        self._lock = threading.Lock()
        self._seen_dirty = False
        self._last_save = 0.0
        self.passes = 0           # catch-up passes run (tests, logs)
        self.made_up = 0          # events handed over by catch-up
        self.zk.ensure_path(self.root)
        self.checked_until = self._read('catchup', {}).get('checked_until')
        for sig in self._read('seen', []):
            self._remember(sig)
        self._last_periodic = self.clock()

    # -- ZooKeeper ------------------------------------------------------------
    def _read(self, name: str, default):
        try:
            data, _ = self.zk.get(f'{self.root}/{name}')
            return json.loads(data)
        except (NoNodeError, ValueError):
            return default

    def _write(self, name: str, value) -> None:
        data = json.dumps(value).encode()
        path = f'{self.root}/{name}'
        if self.zk.exists(path):
            self.zk.set(path, data)
        else:
            self.zk.create(path, data, makepath=True)

    def _advance(self, when: float) -> None:
        self.checked_until = when
        self._write('catchup', {'checked_until': when})
        self._last_save = self.clock()

    # -- what was handed over -----------------------------------------------------
    def _remember_event(self, event: TriggerEvent) -> None:
        self._remember(signature(event))
        if event.action == 'opened':
            # It stands for its head: a "changed" to that head is no news.
            self._remember(signature(_as_changed(event)))

    def _remember(self, sig: str) -> None:
        if sig in self._seen_set:
            return
        if len(self._seen) == self._seen.maxlen:
            self._seen_set.discard(self._seen[0])
        self._seen.append(sig)
        self._seen_set.add(sig)

    def note(self, event: TriggerEvent) -> None:
        """An event handed to the scheduler (from a webhook)."""
        with self._lock:
            self._remember_event(event)
            self._seen_dirty = True

    def _was_seen(self, event: TriggerEvent) -> bool:
        with self._lock:
            return signature(event) in self._seen_set

    def _save_seen(self) -> None:
        with self._lock:
            if not self._seen_dirty:
                return
            seen, self._seen_dirty = list(self._seen), False
        self._write('seen', seen)

    # -- when to catch up ---------------------------------------------------------
    def tick(self) -> None:
        """After each pass over the delivery queue (consumer thread)."""
        now = self.clock()
        started = self.receivers.started()
        if started:
            newest = max(started)
            if self.checked_until is None:
                self._advance(now)
            elif newest > self.checked_until:
                log.info('%s: a webhook receiver started at %s, after %s: catching up',
                         self.connection.name, iso(newest), iso(self.checked_until))
                self.run(self.checked_until - MARGIN, newest + MARGIN)
                self._advance(now)
            elif now - self._last_save >= _SAVE_EVERY:
                self._advance(now)
        if self.interval and now - self._last_periodic >= self.interval:
            self.run(self._last_periodic - MARGIN, now)
            self._last_periodic = now
        self._save_seen()

    def run(self, since: float, until: float) -> int:
        """Hand over the events of ``[since, until]`` not handed over yet;
        returns how many."""
        events = []
        for project in sorted(self.connection.projects):
            try:
                events += self._merge_request_events(project, since, until)
                events += self._push_events(project, since, until)
            except GitlabError:
                log.exception('%s: catching up %s failed', self.connection.name, project)
        events.sort(key=lambda e: e.timestamp)
        count = 0
        for event in events:
            sig = signature(event)
            with self._lock:
                if sig in self._seen_set:
                    continue
                self._remember_event(event)
                self._seen_dirty = True
            log.info('[e: %s] %s: made up %s %s from the API (missed while no webhook '
                     'could be received)', event.event_id, self.connection.name,
                     event.describe(), event.action or '')
            self.connection.deliver(event)
            count += 1
        self.made_up += count
        self.passes += 1
        self._save_seen()
        return count

    # -- the API ------------------------------------------------------------------
    def _merge_request_events(self, project: str, since: float, until: float) -> list:
        out = []
        mrs = self.client.get_all(api_path('/projects/{}/merge_requests', project),
                                  params={'state': 'all', 'updated_after': iso(since),
                                          'order_by': 'updated_at', 'sort': 'asc'})
        for mr in mrs:
            out += self._one_merge_request(project, mr, since, until)
        return out

    def _one_merge_request(self, project: str, mr: dict, since: float,
                           until: float) -> list:
        iid = int(mr['iid'])
        path = api_path('/projects/{}/merge_requests/{}', project, iid)

        def within(value) -> float | None:
            when = timestamp(value)
            return when if when is not None and since <= when <= until else None

        def event(action: str, when: float, **extra) -> TriggerEvent:
            e = TriggerEvent(type=MR_EVENT, connection=self.connection.name,
                             project=project, action=action, change_number=iid,
                             branch=mr.get('target_branch'), newrev=mr.get('sha'),
                             change_url=mr.get('web_url'), timestamp=when,
                             ref=f'refs/merge-requests/{iid}/head', patchset=mr.get('sha'))
            for key, value in extra.items():
                setattr(e, key, value)
            return e

        out = []
        created = within(mr.get('created_at'))
        opened = event('opened', created) if created is not None else None
        if opened is not None and not self._was_seen(opened):
            # One "opened" for its current head; no "changed" besides.
            out.append(opened)
        else:
            versions = self.client.get_all(path + '/versions')
            newest = versions[0] if versions else {}
            when = within(newest.get('created_at'))
            if when is not None and len(versions) > 1 and \
                    newest.get('head_commit_sha') == mr.get('sha'):
                out.append(event('changed', when))
        out += self._note_events(path, mr, within, event)
        out += self._label_events(path, within, event)
        for key, action in (('merged_at', 'merged'), ('closed_at', 'closed')):
            when = within(mr.get(key))
            if when is not None:
                out.append(event(action, when))
        return out

    def _note_events(self, path, mr, within, event) -> list:
        out = []
        notes = self.client.get_all(path + '/notes', params={'sort': 'asc',
                                                             'order_by': 'created_at'})
        for note in notes:
            when = within(note.get('created_at'))
            if when is None:
                continue
            author = note.get('author') or {}
            account = {'username': author.get('username') or '',
                       'name': author.get('name') or '', 'email': ''}
            body = (note.get('body') or '').strip()
            if not note.get('system'):
                out.append(event('comment', when, comment=body, account=account,
                                 data={'note_id': note.get('id')}))
            elif body == APPROVED_NOTE:
                out.append(event('approved', when, account=account))
            elif body == UNAPPROVED_NOTE:
                out.append(event('unapproved', when, account=account))
        return out

    def _label_events(self, path, within, event) -> list:
        added, removed, last = [], [], None
        for item in self.client.get_all(path + '/resource_label_events'):
            when = within(item.get('created_at'))
            name = ((item.get('label') or {}).get('name')) or ''
            if when is None or not name:
                continue
            last = max(last or when, when)
            if item.get('action') == 'add':
                added.append(name)
                if name in removed:
                    removed.remove(name)
            else:
                removed.append(name)
                if name in added:
                    added.remove(name)
        if not (added or removed):
            return []
        return [event('labeled' if added else 'unlabeled', last, added=sorted(set(added)),
                      removed=sorted(set(removed)), label=(added or removed)[0])]

    def _push_events(self, project: str, since: float, until: float) -> list:
        day = (datetime.fromtimestamp(since, timezone.utc) - timedelta(days=1))
        out = []
        for item in self.client.get_all(api_path('/projects/{}/events', project),
                                        params={'action': 'pushed', 'sort': 'asc',
                                                'after': day.strftime('%Y-%m-%d')}):
            when = timestamp(item.get('created_at'))
            push = item.get('push_data') or {}
            if when is None or not since <= when <= until or not push.get('ref'):
                continue
            kind = 'tags' if push.get('ref_type') == 'tag' else 'heads'
            ref = f'refs/{kind}/{push["ref"]}'
            e = TriggerEvent(type=PUSH_EVENT, connection=self.connection.name,
                             project=project, ref=ref,
                             oldrev=push.get('commit_from') or ZERO_SHA,
                             newrev=push.get('commit_to') or ZERO_SHA, timestamp=when,
                             account={'username': item.get('author_username') or ''})
            if kind == 'heads':
                e.branch = push['ref']
            out.append(e)
        return out


def _as_changed(event: TriggerEvent) -> TriggerEvent:
    return TriggerEvent(type=event.type, connection=event.connection, project=event.project,
                        action='changed', change_number=event.change_number,
                        newrev=event.newrev)
