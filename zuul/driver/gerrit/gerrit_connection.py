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

import collections
import heapq
import json
import logging
import os
import re
import shlex
import subprocess
import threading
import time
import types
import urllib.parse
import zlib

from zuul.driver.gerrit.changes import (
    CHANGE_ID_RE,
    change_from_query,
    change_number_from_url,
    depends_on_footers,
)
from zuul.driver.gerrit.checks import DEFAULT_CHECKS_POLL_INTERVAL, GerritChecks
from zuul.driver.gerrit.events import MalformedEventError, parse_event
from zuul.driver.gerrit.rest import GerritRESTClient, check_auth_type
from zuul.driver.gerrit.ssh import GerritEventStream, GerritSSH
from zuul.lib.keyed_workers import KeyedWorkers
from zuul.model.change import Change, Ref
from zuul.model.events import TriggerEvent

log = logging.getLogger('zuul.driver.gerrit')

# Margin added to the outage window when catching up (clock skew, events
# produced between the last one seen and the disconnect).
CATCH_UP_MARGIN = 120

# Released Zuul's default link to a commit (Gerrit's built-in gitweb).
DEFAULT_GITWEB_URL_TEMPLATE = '{baseurl}/gitweb?p={project.name}.git;a=commitdiff;h={sha}'
# Refs the branch-head poller considers unless ``ref_filter`` says otherwise.
DEFAULT_REF_FILTER = r'^refs/(heads|tags)/'
ZERO_SHA = '0' * 40
# Report lanes: reports of different projects go out side by side.
REPORT_LANES = 4
# Changes read ahead at once, and the largest read that travels with
# its event (events are stored in ZooKeeper: znodes hold at most 1 MiB).
READ_AHEAD_THREADS = 4
READ_AHEAD_MAX_BYTES = 256 * 1024
# How deep a stack of open changes is read ahead with an event's change,
# and how many lookups its dependencies may take in all.
READ_AHEAD_DEPTH = 16
READ_AHEAD_MAX_LOOKUPS = 64
# Merged changes kept as dependencies (a merged change does not change).
MERGED_ROWS = 4096


def _regex_list(value) -> list[re.Pattern]:
    """``ref_filter`` as zuul.conf gives it: one regex, or several
    separated by commas or newlines."""
    if isinstance(value, (list, tuple)):
        items = value
    else:
        items = re.split(r'[,\n]', str(value))
    return [re.compile(v.strip()) for v in items if v.strip()]


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
        self._merged_rows: collections.OrderedDict[int, dict] = collections.OrderedDict()
        # event_delay: seconds each event is held before the scheduler
        # sees it (so replicas catch up). ``clock`` is injectable for tests.
        self.event_delay = float(options.get('event_delay') or 0)
        self.clock = time.monotonic
        self._delayed: list[tuple[float, int, TriggerEvent]] = []
        self._delayed_seq = 0
        self._delay_cond = threading.Condition()
        self._delay_thread: threading.Thread | None = None
        self._stopping = threading.Event()
        # max_dependencies: events about a change with more are ignored.
        md = options.get('max_dependencies')
        self.max_dependencies = int(md) if md not in (None, '') else None
        self.gitweb_url_template = options.get('gitweb_url_template') or \
            DEFAULT_GITWEB_URL_TEMPLATE
        # poll_interval: branch heads (refs matching ref_filter) are polled
        # this often and a ref-updated event is made for each one that moved
        # without the stream saying so. Unset: no polling.
        pi = options.get('poll_interval')
        self.poll_interval = float(pi) if pi not in (None, '') else None
        self.ref_filter = _regex_list(options.get('ref_filter') or DEFAULT_REF_FILTER)
        self._ref_heads: dict[str, dict[str, str]] | None = None
        self._poll_thread: threading.Thread | None = None
        # HTTP (REST) access: with a password, as auth_type says.
        self.auth_type = check_auth_type(options.get('auth_type'))
        self.rest: GerritRESTClient | None = None
        self.checks: GerritChecks | None = None
        if options.get('password'):
            self.rest = GerritRESTClient(
                self.baseurl, self.user, options['password'], self.auth_type,
                verify_ssl=str(options.get('verify_ssl', 'true')).lower() not in
                ('false', '0', 'no'))
            self.checks = GerritChecks(name, self.rest, self.query_change)
        self._checks_thread: threading.Thread | None = None
        # Reports (review, submit, the merged check after it) go out on
        # these workers, off the scheduler's loop, until the connection
        # stops; also on a scheduler that does not read the event stream
        # (several active: it reports for the tenants it holds).
        self._report_workers: KeyedWorkers | None = self._new_report_workers()
        # Read-ahead: a change event's change is read from Gerrit by these
        # workers before the event reaches the scheduler (in stream order)
        # and travels with it (``change_data``), so the loop of whichever
        # scheduler takes it does not wait on SSH.
        # ``wants_event(event)`` (set by the scheduler) says which to read.
        self.wants_event = None
        self._read_workers: KeyedWorkers | None = None

    # -- lifecycle ----------------------------------------------------------

    def start(self, on_event) -> None:
        """Begin consuming stream-events; ``on_event(TriggerEvent)``."""
        self.on_event = on_event
        self._stopping.clear()
        if self._report_workers is None:
            self._report_workers = self._new_report_workers()
        self._read_workers = KeyedWorkers(self._hand_over, READ_AHEAD_THREADS,
                                          name=f'gerrit-{self.name}-read')
        if self.event_delay > 0:
            self._delay_thread = threading.Thread(
                target=self._delay_loop, name=f'gerrit-delay-{self.name}', daemon=True)
            self._delay_thread.start()
        self.stream = GerritEventStream(self.ssh, self._handle_raw_event, self._catch_up,
                                        name=self.name)
        self.stream.start()
        if self.poll_interval:
            self._poll_thread = threading.Thread(
                target=self._poll_loop, name=f'gerrit-poll-{self.name}', daemon=True)
            self._poll_thread.start()
        if self.checks is not None:
            self._checks_thread = threading.Thread(
                target=self._checks_loop, name=f'gerrit-checks-{self.name}', daemon=True)
            self._checks_thread.start()

    def stop(self) -> None:
        self._stopping.set()
        for workers in (self._report_workers, self._read_workers):
            if workers is not None:
                workers.stop()
        self._report_workers = self._read_workers = None
        with self._delay_cond:
            self._delay_cond.notify_all()
        for thread in (self._delay_thread, self._poll_thread, self._checks_thread):
            if thread is not None:
                thread.join(10)
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
        elif event.type == 'ref-updated':
            self._note_ref(event.project, event.ref, event.newrev)
        self._deliver(event)

    def _deliver(self, event: TriggerEvent) -> None:
        if self.event_delay > 0 and self._delay_thread is not None:
            with self._delay_cond:
                self._delayed_seq += 1
                heapq.heappush(self._delayed, (self.clock() + self.event_delay,
                                               self._delayed_seq, event))
                self._delay_cond.notify_all()
            return
        self._dispatch(event)

    def _delay_loop(self) -> None:
        """Hand each held event on once ``event_delay`` has passed (by
        ``self.clock``), in arrival order."""
        while not self._stopping.is_set():
            with self._delay_cond:
                if not self._delayed:
                    self._delay_cond.wait(1.0)
                    continue
                due = self._delayed[0][0]
                remaining = due - self.clock()
                if remaining > 0:
                    # Short waits so an injected clock is honoured promptly.
                    self._delay_cond.wait(min(remaining, 0.1))
                    continue
                _, _, event = heapq.heappop(self._delayed)
            try:
                self._dispatch(event)
            except Exception:
                log.exception('Delivering %s failed', event.describe())

    def _dispatch(self, event: TriggerEvent) -> None:
        if self.max_dependencies is not None and event.is_change_event and \
                self._too_many_dependencies(event):
            return
        log.info('[e: %s] %s event: %s', event.event_id, self.name, event.describe())
        workers = self._read_workers
        if workers is not None:
            # Every event through the workers (one key): handed on in
            # stream order, whichever read finishes first.
            workers.submit(0, self._read_change, event, tag=event)
            return
        if self.on_event is not None:
            self.on_event(event)

    def _read_change(self, event: TriggerEvent) -> None:
        if not event.is_change_event:
            return
        wants = self.wants_event
        if wants is not None and not wants(event):
            return      # no tenant acts on it (e.g. our own review comments)
        rows = self.ssh.query(f'change:{event.change_number}')
        row = rows[0] if rows else {}
        needed = None
        if row:
            # The changes it needs (git parent, Depends-On of this
            # connection) too: enqueueing it asks for them on the loop.
            needed = self._read_needed(
                change_from_query(row, self.name, event.patchset, self.baseurl),
                READ_AHEAD_DEPTH, {int(event.change_number)}, [READ_AHEAD_MAX_LOOKUPS])
        size = len(json.dumps(row))
        if size <= READ_AHEAD_MAX_BYTES:
            # (A huge change, thousands of files, is read on the loop
            # rather than make the stored event too big for ZooKeeper;
            # so are huge dependencies, without the change's own row.)
            event.change_data = row
            if size + len(json.dumps(needed)) <= READ_AHEAD_MAX_BYTES:
                event.needed_data = needed

    def _hand_over(self, _result, event: TriggerEvent) -> None:
        # A failed read (logged by the workers) hands the event over all
        # the same: the scheduler reads the change itself.
        if self.on_event is not None and not self._stopping.is_set():
            self.on_event(event)

    def _too_many_dependencies(self, event: TriggerEvent) -> bool:
        """True when the change the event is about has more (open,
        transitive) dependencies than ``max_dependencies``: released Zuul
        ignores such an event without feedback."""
        limit = self.max_dependencies
        seen: set[str] = set()
        todo = [event.change_number]
        looked: set[int] = set()
        while todo:
            number = todo.pop()
            if number in looked:
                continue
            looked.add(number)
            try:
                change = self.query_change(number)
            except Exception:
                log.exception('Counting dependencies of %s failed', number)
                return False
            if change is None:
                continue
            for key in change.git_parent_changes:
                dep_number = int(key.rsplit('/', 1)[1])
                dep = self.query_change(dep_number)
                if dep is None or dep.is_merged:
                    continue
                seen.add(f'{self.name}/{dep_number}')
                todo.append(dep_number)
            for value in depends_on_footers(change.message):
                dep_number = change_number_from_url(value, self.baseurl) \
                    if not CHANGE_ID_RE.match(value) else None
                if dep_number is not None:
                    dep = self.query_change(dep_number)
                    if dep is None or dep.is_merged:
                        continue
                    seen.add(f'{self.name}/{dep_number}')
                    todo.append(dep_number)
                else:
                    seen.add(value)  # another connection's change, or a Change-Id
            if len(seen) > limit:
                log.warning('[e: %s] Ignoring %s: change %s has more than %s dependencies '
                            '(max_dependencies)', event.event_id, event.type,
                            event.change_number, limit)
                return True
        return False

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

    def catch_up_since(self, since: float, seen=()) -> int:
        """After a scheduler restart or takeover: synthesize the events of
        everything that happened after ``since`` (the creation time of the
        newest event the previous scheduler held) from Gerrit's own
        timestamps -- less ``seen``, the events of the second ``since``
        itself that the previous scheduler had (zuul.zk.pipeline_state
        event_signature), as Gerrit's times are in whole seconds --
        the previous process's view of each change is gone. Returns how
        many events were delivered."""
        age = int(time.time() - since) + CATCH_UP_MARGIN
        try:
            rows = self.ssh.query(f'-age:{age}s')
        except Exception:
            log.exception('Catch-up query on %s failed', self.name)
            return 0
        count = 0
        for row in sorted(rows, key=lambda r: r.get('lastUpdated', 0)):
            for event in self._events_since(row, since, seen):
                self._remember(event)
                self._deliver(event)
                count += 1
        return count

    def report_landed(self, change, since: float) -> bool:
        """Whether this connection's user commented on ``change`` at or
        after ``since``: a report a scheduler was sending when it died
        arrived (so its successor does not send it twice)."""
        rows = self.ssh.query(f'change:{change.number}')
        for row in rows[:1]:
            for comment in row.get('comments') or ():
                by = (comment.get('reviewer') or {}).get('username')
                if by == self.user and float(comment.get('timestamp') or 0) >= int(since):
                    return True
        return False

    def _events_since(self, row: dict, since: float, seen=()) -> list[TriggerEvent]:
        change = change_from_query(row, self.name, baseurl=self.baseurl)
        base = dict(connection=self.name, project=change.project, branch=change.branch,
                    change_number=change.number, patchset=change.patchset,
                    ref=change.ref, newrev=change.newrev, change_url=change.url)
        events = []
        current = row.get('currentPatchSet') or {}
        had = [s for s in seen if s.get('change') == change.number]
        if float(current.get('createdOn') or 0) >= since and not any(
                s['type'] == 'patchset-created' and s.get('patchset') == change.patchset
                for s in had):
            events.append(TriggerEvent(type='patchset-created', **base))
        votes_seen = {tuple(v) for s in had if s['type'] == 'comment-added' and
                      s.get('patchset') == change.patchset for v in s.get('approvals', ())}
        fresh = [a for a in change.approvals if float(a.get('grantedOn') or 0) >= since
                 and (a.get('type'), str(a.get('value')), a.get('username')) not in votes_seen]
        if fresh:
            approvals = [{'type': a.get('type'), 'description': a.get('description') or
                          a.get('type'), 'value': str(a.get('value')),
                          'username': a.get('username')} for a in fresh]
            events.append(TriggerEvent(type='comment-added', approvals=approvals,
                                       comment='', **base))
        if change.last_updated >= since:
            kind = {'MERGED': 'change-merged', 'ABANDONED': 'change-abandoned'}.get(
                change.status)
            if kind and not any(s['type'] == kind for s in had):
                events.append(TriggerEvent(type=kind, **base))
        for e in events:
            log.info('[e: %s] Synthesized %s for %s,%s: it happened while no scheduler '
                     'ran', e.event_id, e.type, change.number, change.patchset)
        return events

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
            row = event.change_data
            if row is None:
                return self.query_change(event.change_number, event.patchset)
            # Read ahead (after the event arrived): as fresh as the event.
            if not row:
                return None
            change = change_from_query(row, self.name, event.patchset, self.baseurl)
            needed = getattr(event, 'needed_data', None)
            if needed is not None:
                change.needed_read = [self._as_change(part) for part in needed]
            return change
        return Ref(self.name, event.project, event.ref or '', event.oldrev, event.newrev,
                   url=self.commit_url(event.project, event.newrev))

    def commit_url(self, project: str, sha: str | None) -> str:
        """A link to ``sha`` of ``project`` from ``gitweb_url_template``
        (``{baseurl}``, ``{project.name}`` and friends, ``{sha}``)."""
        proj = types.SimpleNamespace(
            name=project, canonical_hostname=self.canonical_hostname,
            canonical_name=f'{self.canonical_hostname}/{project}')
        try:
            return self.gitweb_url_template.format(baseurl=self.baseurl, project=proj,
                                                   sha=sha or '')
        except (KeyError, AttributeError, IndexError, ValueError) as e:
            log.error('Bad gitweb_url_template on %s: %s', self.name, e)
            return ''

    # -- branch-head polling (poll_interval, ref_filter) -------------------

    def _note_ref(self, project: str, ref: str | None, newrev: str | None) -> None:
        with self._lock:
            if self._ref_heads is not None and ref:
                heads = self._ref_heads.setdefault(project, {})
                if newrev and newrev != ZERO_SHA:
                    heads[ref] = newrev
                else:
                    heads.pop(ref, None)

    def _ref_wanted(self, ref: str) -> bool:
        return any(r.search(ref) for r in self.ref_filter)

    def list_refs(self, project: str) -> dict[str, str]:
        """``{ref: sha}`` of ``project`` (``git ls-remote``), only refs
        matching ``ref_filter``."""
        env = dict(os.environ)
        ssh = ['ssh', '-o', 'BatchMode=yes']
        if self.git_ssh_key():
            ssh += ['-i', self.git_ssh_key()]
        if self.options.get('known_hosts'):
            ssh += ['-o', f'UserKnownHostsFile={self.options["known_hosts"]}',
                    '-o', 'StrictHostKeyChecking=yes']
        env['GIT_SSH_COMMAND'] = ' '.join(shlex.quote(a) for a in ssh)
        out = subprocess.run(['git', 'ls-remote', self.git_url(project)], env=env,
                             capture_output=True, text=True, timeout=120, check=True).stdout
        refs = {}
        for line in out.splitlines():
            sha, _, ref = line.partition('\t')
            if ref and not ref.endswith('^{}') and self._ref_wanted(ref):
                refs[ref] = sha
        return refs

    def poll_refs(self) -> list[TriggerEvent]:
        """One poll: every project's refs (per ``ref_filter``) against the
        last poll; each moved, new or deleted ref becomes a ref-updated
        event (delivered). The first poll only records the heads."""
        projects = [p for p in self.ssh.run('gerrit ls-projects').splitlines() if p]
        current = {}
        for project in projects:
            try:
                current[project] = self.list_refs(project)
            except Exception:
                log.exception('Polling refs of %s on %s failed', project, self.name)
        events = []
        with self._lock:
            previous, first = self._ref_heads, self._ref_heads is None
            self._ref_heads = {p: dict(r) for p, r in current.items()}
        if first:
            return events
        for project, refs in current.items():
            before = previous.get(project, {})
            for ref in sorted(set(refs) | set(before)):
                old, new = before.get(ref, ZERO_SHA), refs.get(ref, ZERO_SHA)
                if old == new:
                    continue
                branch = ref[len('refs/heads/'):] if ref.startswith('refs/heads/') else None
                event = TriggerEvent(type='ref-updated', connection=self.name,
                                     project=project, branch=branch, ref=ref,
                                     oldrev=old, newrev=new)
                log.info('[e: %s] Poll found %s %s moved %s -> %s', event.event_id,
                         project, ref, old[:8], new[:8])
                events.append(event)
        for event in events:
            self._deliver(event)
        return events

    def _poll_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self.poll_refs()
            except Exception:
                log.exception('Polling refs on %s failed', self.name)
            self._stopping.wait(self.poll_interval)

    # -- checks plugin (pending-check events, checks-api reports) ----------

    def poll_checks(self) -> list[TriggerEvent]:
        """One poll of the pending checks (checks.py); the events are
        delivered and returned."""
        if self.checks is None:
            raise RuntimeError(f'Gerrit connection {self.name} has no HTTP password: '
                               f'the checks plugin is reached over HTTP')
        events = self.checks.poll()
        for event in events:
            self._deliver(event)
        return events

    def _checks_loop(self) -> None:
        interval = self.poll_interval or DEFAULT_CHECKS_POLL_INTERVAL
        while not self._stopping.is_set():
            try:
                self.poll_checks()
            except Exception:
                log.exception('Polling pending checks on %s failed', self.name)
            self._stopping.wait(interval)

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
        """Git parent plus Depends-On footers (on any known connection).

        Read once per change object (a patchset's dependencies do not
        change; only whether they merged does) and kept on it as
        ``needed_read``: read ahead with an event's change, or at the
        first call. ``forget_needed`` makes the next call read again."""
        read = getattr(change, 'needed_read', None)
        if read is None:
            read = [self._as_change(part) for part in self._needed_parts(change, connections)]
            change.needed_read = read
        return list(read)

    @staticmethod
    def forget_needed(change: Change) -> None:
        """The dependencies of ``change`` are read again at the next
        ``get_needed_changes`` (one of them may have merged since)."""
        change.needed_read = None

    def _read_needed(self, change: Change, depth: int, seen: set, budget: list) -> list | None:
        """Off the loop: the query rows of the changes ``change`` needs,
        each open one with the rows it needs in turn (``_needed``), down
        to ``depth`` levels; None if one is another connection's, or if
        they take more than ``budget[0]`` lookups in all (a commit
        message is the uploader's: hundreds of Depends-On footers are
        looked up when the change is enqueued, as without read-ahead)."""
        budget[0] -= len(change.git_parent_changes) + len(depends_on_footers(change.message))
        if budget[0] < 0:
            return None
        parts = self._needed_parts(change, None)
        if parts is None or depth <= 0:
            return parts
        for part in parts:
            number = int(part.get('number') or 0)
            if part.get('status') == 'MERGED' or number in seen:
                continue
            seen.add(number)
            below = self._read_needed(self._as_change(part), depth - 1, seen, budget)
            if budget[0] < 0:
                return None
            if below is not None:
                part['_needed'] = below
        return parts

    def _as_change(self, part) -> Change:
        if isinstance(part, Change):
            return part
        change = change_from_query(part, self.name, baseurl=self.baseurl)
        if part.get('_needed') is not None:
            change.needed_read = [self._as_change(p) for p in part['_needed']]
        return change

    def _needed_parts(self, change: Change, connections) -> list | None:
        """The changes ``change`` needs, in order: query rows of this
        connection's, Change objects of other connections' (Depends-On
        URLs). With ``connections`` None (reading ahead, off the loop),
        None if another connection's change is named."""
        parts: list = []
        for key in change.git_parent_changes:
            row = self._dependency_row(int(key.rsplit('/', 1)[1]))
            if row is not None:
                parts.append(row)
        for value in depends_on_footers(change.message):
            if CHANGE_ID_RE.match(value):
                parts += [r for r in self.ssh.query(f'change:{value}')
                          if r.get('status') != 'ABANDONED']
                continue
            if urllib.parse.urlparse(value).scheme not in ('http', 'https'):
                log.warning('Ignoring unrecognized Depends-On %r on %s', value,
                            change.describe())
                continue
            number = change_number_from_url(value, self.baseurl)
            row = self._dependency_row(number) if number is not None else None
            if row is not None:
                parts.append(row)
                continue
            if connections is None:
                return None
            parts += self._resolve_depends_on(value, connections, change)
        return parts

    def _dependency_row(self, number: int) -> dict | None:
        """The query row of change ``number``, as a dependency. A merged
        change stays merged: its row is kept (the most recent
        ``MERGED_ROWS``), so the merged parent nearly every change has is
        asked for once, not with every event about its children."""
        with self._lock:
            row = self._merged_rows.get(number)
            if row is not None:
                self._merged_rows.move_to_end(number)
                return row
        rows = self.ssh.query(f'change:{number}')
        if not rows:
            return None
        if rows[0].get('status') == 'MERGED':
            with self._lock:
                self._merged_rows[number] = rows[0]
                while len(self._merged_rows) > MERGED_ROWS:
                    self._merged_rows.popitem(last=False)
        return rows[0]

    def _resolve_depends_on(self, value: str, connections, change):
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
               submit: bool = False, tag: str | None = None,
               notify: str | None = None) -> None:
        self.ssh.review(change.project, f'{change.number},{change.patchset}', message,
                        labels, submit=submit, tag=tag, notify=notify)

    def _new_report_workers(self) -> KeyedWorkers:
        # A project's reports stay in order (one worker per lane; a
        # project always maps to the same lane). Threads start on first use.
        return KeyedWorkers(self._report_done, 1, name=f'gerrit-{self.name}-reports')

    def reports_off_loop(self) -> bool:
        return self._report_workers is not None

    def submit_report(self, project: str, work, done=None) -> None:
        """Run ``work()`` on ``project``'s report lane; ``done(result)``
        follows (result None if it failed)."""
        lane = zlib.crc32(project.encode('utf-8')) % REPORT_LANES
        self._report_workers.submit(lane, work, tag=done)

    def _report_done(self, result, done) -> None:
        # Stopping: a report cut short says nothing about the change (the
        # saved state keeps its item; the next scheduler reports again).
        if done is not None and not self._stopping.is_set():
            done(result)

    def workers_busy(self) -> int:
        """Changes being read ahead and reports being sent."""
        return sum(w.busy() for w in (self._report_workers, self._read_workers)
                   if w is not None)

    # -- git ------------------------------------------------------------------

    def git_url(self, project: str) -> str:
        if self.options.get('git_over_ssh', 'true') in (False, 'false', 'False') and \
                self.options.get('password'):
            return f'{self.baseurl}/{project}'
        return f'ssh://{self.user}@{self.server}:{self.port}/{project}'

    def git_ssh_key(self) -> str | None:
        return self.options.get('sshkey')

