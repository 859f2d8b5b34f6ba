"""A live Gerrit connection: event stream, change lookups, reports.

One object per ``[connection NAME]`` with ``driver=gerrit``. It turns
stream-events into TriggerEvents for the scheduler, answers the source
questions the pipelines ask (the change for an event, what a change
depends on, whether it merged), and posts reports (``gerrit review``).

After a stream outage it queries the changes updated meanwhile and
synthesizes the events it missed (new patchsets, votes, merges,
abandons), so an approval given during the outage still gates.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse

from zuul.driver.gerrit.changes import (
    CHANGE_ID_RE,
    change_from_query,
    change_number_from_url,
    depends_on_footers,
)
from zuul.driver.gerrit.events import MalformedEventError, parse_event
from zuul.driver.gerrit.ssh import GerritEventStream, GerritSSH
from zuul.model.change import Change, Ref
from zuul.model.events import TriggerEvent

log = logging.getLogger('zuul.driver.gerrit')

# Margin added to the outage window when catching up (clock skew, events
# produced between the last one seen and the disconnect).
CATCH_UP_MARGIN = 120


class GerritConnection:
    driver_name = 'gerrit'

    def __init__(self, name: str, options: dict):
        self.name = name
        self.options = dict(options)
        self.server = options['server']
        self.port = int(options.get('port', 29418))
        self.user = options.get('user', 'zuul')
        self.baseurl = (options.get('baseurl') or f'https://{self.server}').rstrip('/')
        self.canonical_hostname = options.get('canonical_hostname') or self.server
        self.keepalive = int(options.get('keepalive', 60))
        self.ssh = GerritSSH(self.server, self.port, self.user,
                             key_filename=options.get('sshkey'), keepalive=self.keepalive,
                             known_hosts=options.get('known_hosts'))
        self.stream: GerritEventStream | None = None
        self.on_event = None
        self._known: dict[int, tuple[int, frozenset, str]] = {}
        self._lock = threading.Lock()

    # -- lifecycle ----------------------------------------------------------

    def start(self, on_event) -> None:
        """Begin consuming stream-events; ``on_event(TriggerEvent)``."""
        self.on_event = on_event
        self.stream = GerritEventStream(self.ssh, self._handle_raw_event, self._catch_up,
                                        name=self.name)
        self.stream.start()

    def stop(self) -> None:
        if self.stream is not None:
            self.stream.stop()
            self.stream.join(10)
        self.ssh.close()

    # -- events -------------------------------------------------------------

    def _handle_raw_event(self, data: dict) -> None:
        try:
            event = parse_event(data, self.name)
        except MalformedEventError as e:
            log.error('Skipping malformed event from %s: %s', self.name, e)
            return
        if event is None:
            return
        if event.is_change_event:
            self._remember(event)
        self._deliver(event)

    def _deliver(self, event: TriggerEvent) -> None:
        log.info('[e: %s] %s event: %s', event.event_id, self.name, event.describe())
        if self.on_event is not None:
            self.on_event(event)

    def _remember(self, event: TriggerEvent) -> None:
        with self._lock:
            ps, votes, status = self._known.get(event.change_number, (0, frozenset(), 'NEW'))
            if event.patchset and event.patchset > ps:
                ps, votes = event.patchset, frozenset()
            votes = votes | {(a.get('type'), str(a.get('value')), a.get('username'))
                             for a in event.approvals}
            if event.type == 'change-merged':
                status = 'MERGED'
            elif event.type == 'change-abandoned':
                status = 'ABANDONED'
            elif event.type == 'change-restored':
                status = 'NEW'
            self._known[event.change_number] = (ps, votes, status)

    def _catch_up(self, last_event_time: float | None) -> None:
        """Synthesize the events missed while the stream was down."""
        since = last_event_time or time.time()
        age = int(time.time() - since) + CATCH_UP_MARGIN
        try:
            rows = self.ssh.query(f'-age:{age}s')
        except Exception:
            log.exception('Catch-up query on %s failed', self.name)
            return
        for row in sorted(rows, key=lambda r: r.get('lastUpdated', 0)):
            for event in self._missed_events(row):
                self._remember(event)
                self._deliver(event)

    def _missed_events(self, row: dict) -> list[TriggerEvent]:
        change = change_from_query(row, self.name, baseurl=self.baseurl)
        with self._lock:
            ps, votes, status = self._known.get(change.number, (0, frozenset(), 'NEW'))
        base = dict(connection=self.name, project=change.project, branch=change.branch,
                    change_number=change.number, patchset=change.patchset,
                    ref=change.ref, newrev=change.newrev, change_url=change.url)
        events = []
        if change.patchset > ps and ps:
            events.append(TriggerEvent(type='patchset-created', **base))
        current = {(a.get('type'), str(a.get('value')), a.get('username'))
                   for a in change.approvals}
        new_votes = current - set(votes)
        if new_votes:
            approvals = [{'type': t, 'description': t, 'value': v, 'username': u}
                         for t, v, u in sorted(new_votes, key=str)]
            events.append(TriggerEvent(type='comment-added', approvals=approvals,
                                       comment='', **base))
        if change.status != status:
            kind = {'MERGED': 'change-merged', 'ABANDONED': 'change-abandoned',
                    'NEW': 'change-restored'}.get(change.status)
            if kind:
                events.append(TriggerEvent(type=kind, **base))
        for e in events:
            log.info('[e: %s] Synthesized %s for %s,%s after a stream outage', e.event_id,
                     e.type, change.number, change.patchset)
        return events

    # -- source ---------------------------------------------------------------

    def query_change(self, number, patchset=None) -> Change | None:
        rows = self.ssh.query(f'change:{number}')
        if not rows:
            return None
        return change_from_query(rows[0], self.name, patchset, self.baseurl)

    def open_changes(self, project: str, branch: str | None = None) -> list[Change]:
        """Every open change of ``project`` (on ``branch``), current
        patchsets (for ``project-change-merged``)."""
        query = f'status:open project:{project}' + (f' branch:{branch}' if branch else '')
        return [change_from_query(row, self.name, baseurl=self.baseurl)
                for row in self.ssh.query(query)]

    def get_change_for_event(self, event: TriggerEvent):
        if event.is_change_event:
            return self.query_change(event.change_number, event.patchset)
        return Ref(self.name, event.project, event.ref or '', event.oldrev, event.newrev,
                   url=f'{self.baseurl}/plugins/gitiles/{event.project}/+/{event.ref}')

    def lookup_change(self, project: str, spec: str) -> Change:
        number, _, patchset = str(spec).partition(',')
        if not number.isdigit() or (patchset and not patchset.isdigit()):
            raise LookupError(f'Malformed change "{spec}": expected N,P')
        change = self.query_change(int(number), int(patchset) if patchset else None)
        if change is None or (project and change.project != project):
            raise LookupError(f'Change {spec} not found in project {project}')
        return change

    def is_merged(self, change: Change) -> bool:
        fresh = self.query_change(change.number)
        merged = bool(fresh and fresh.is_merged)
        if merged:
            change.status = 'MERGED'
        return merged

    def get_needed_changes(self, change: Change, connections) -> list[Change]:
        """Git parent plus Depends-On footers (on any known connection)."""
        needed = []
        for key in change.git_parent_changes:
            number = int(key.rsplit('/', 1)[1])
            dep = self.query_change(number)
            if dep is not None:
                needed.append(dep)
        for value in depends_on_footers(change.message):
            needed.extend(self._resolve_depends_on(value, connections, change))
        return needed

    def _resolve_depends_on(self, value: str, connections, change):
        if CHANGE_ID_RE.match(value):
            rows = self.ssh.query(f'change:{value}')
            return [change_from_query(r, self.name, baseurl=self.baseurl) for r in rows
                    if r.get('status') != 'ABANDONED']
        if urllib.parse.urlparse(value).scheme not in ('http', 'https'):
            log.warning('Ignoring unrecognized Depends-On %r on %s', value, change.describe())
            return []
        for connection in connections.all():
            resolver = getattr(connection, 'change_for_url', None)
            if resolver is None:
                continue
            dep = resolver(value)
            if dep is not None:
                return [dep]
        log.warning('Depends-On %s on %s names no known change', value, change.describe())
        return []

    def change_for_url(self, url: str) -> Change | None:
        number = change_number_from_url(url, self.baseurl)
        if number is None:
            return None
        return self.query_change(number)

    # -- reporter ----------------------------------------------------------

    def report(self, change: Change, message: str, labels: dict | None = None,
               submit: bool = False, tag: str | None = None) -> None:
        self.ssh.review(change.project, f'{change.number},{change.patchset}', message,
                        labels, submit=submit, tag=tag)

    # -- git ------------------------------------------------------------------

    def git_url(self, project: str) -> str:
        if self.options.get('git_over_ssh', 'true') in (False, 'false', 'False') and \
                self.options.get('password'):
            return f'{self.baseurl}/{project}'
        return f'ssh://{self.user}@{self.server}:{self.port}/{project}'

    def git_ssh_key(self) -> str | None:
        return self.options.get('sshkey')

