"""The development Gerrit's ``checks`` plugin: checkers and the checks
they hold on patch sets, served over REST by rest.py in the plugin's
wire format (CheckerInfo, CheckInfo, PendingChecksInfo).

A checker (``<scheme>:<id>``) applies to the open changes of its
``repository`` while it is ENABLED; on the current patch set of such a
change it has a check, NOT_STARTED until someone posts another state.
Checks in NOT_STARTED are what ``checks.pending`` lists by default.

The state hangs off the review store (``checks_for(store)``): store.py
stays the plugin-free core, as Gerrit's own is.
"""

from __future__ import annotations

import re
import threading
import time
import weakref
from dataclasses import dataclass, field

from zuul.devtools.gerrit.store import ReviewError, ReviewStore

CHECK_STATES = ('NOT_STARTED', 'SCHEDULED', 'RUNNING', 'SUCCESSFUL', 'FAILED',
                'NOT_RELEVANT')
CHECKER_STATUSES = ('ENABLED', 'DISABLED')
_UUID = re.compile(r'^[a-zA-Z0-9._-]+:[^\s]+$')
_QUERY_TERM = re.compile(r'(checker|scheme|state):("[^"]*"|[^\s()]+)', re.I)


def timestamp(when: float | None = None) -> str:
    """Gerrit's REST timestamp: UTC, nanoseconds."""
    when = time.time() if when is None else when
    return time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(when)) + \
        f'.{int((when % 1) * 1e9):09d}'


@dataclass
class Checker:
    uuid: str
    repository: str
    name: str = ''
    description: str = ''
    url: str = ''
    status: str = 'ENABLED'
    created: str = field(default_factory=timestamp)
    updated: str = field(default_factory=timestamp)

    @property
    def scheme(self) -> str:
        return self.uuid.split(':', 1)[0]

    def to_dict(self) -> dict:
        return {'uuid': self.uuid, 'name': self.name or self.uuid,
                'description': self.description, 'url': self.url,
                'repository': self.repository, 'status': self.status, 'blocking': [],
                'query': 'status:open', 'created': self.created, 'updated': self.updated}


@dataclass
class Check:
    repository: str
    change_number: int
    patch_set_id: int
    checker_uuid: str
    state: str = 'NOT_STARTED'
    message: str = ''
    url: str = ''
    started: str | None = None
    finished: str | None = None
    created: str = field(default_factory=timestamp)
    updated: str = field(default_factory=timestamp)

    def to_dict(self) -> dict:
        d = {'repository': self.repository, 'change_number': self.change_number,
             'patch_set_id': self.patch_set_id, 'checker_uuid': self.checker_uuid,
             'state': self.state, 'created': self.created, 'updated': self.updated}
        for key in ('message', 'url', 'started', 'finished'):
            if getattr(self, key):
                d[key] = getattr(self, key)
        return d


class ChecksPlugin:
    def __init__(self, store: ReviewStore):
        self.store = store
        self.lock = threading.RLock()
        self.checkers: dict[str, Checker] = {}
        self.checks: dict[tuple[int, int, str], Check] = {}
        # Every check update posted, in order (tests assert on it).
        self.history: list[dict] = []

    # -- checkers ----------------------------------------------------------------

    def create_checker(self, uuid: str, repository: str, name: str = '',
                       status: str = 'ENABLED', description: str = '',
                       url: str = '') -> Checker:
        if not _UUID.match(uuid or ''):
            raise ReviewError(f'invalid checker UUID {uuid!r}: expected <scheme>:<id>')
        if status not in CHECKER_STATUSES:
            raise ReviewError(f'invalid checker status {status!r}')
        if repository not in self.store.projects:
            raise ReviewError(f'repository {repository} not found')
        with self.lock:
            if uuid in self.checkers:
                raise ReviewError(f'checker {uuid} already exists')
            checker = Checker(uuid, repository, name, description, url, status)
            self.checkers[uuid] = checker
            return checker

    def set_checker_status(self, uuid: str, status: str) -> None:
        with self.lock:
            self._checker(uuid).status = status
            self.checkers[uuid].updated = timestamp()

    def _checker(self, uuid: str) -> Checker:
        checker = self.checkers.get(uuid)
        if checker is None:
            raise ReviewError(f'checker {uuid} not found')
        return checker

    # -- checks ------------------------------------------------------------------

    def _applies(self, checker: Checker, change) -> bool:
        return checker.status == 'ENABLED' and checker.repository == change.project and \
            change.is_open

    def checks_of(self, change, patchset: int) -> list[Check]:
        """Every check on a patch set: those posted, and NOT_STARTED ones
        of the checkers that apply to its (current) patch set."""
        with self.lock:
            out = [c for (n, ps, _), c in sorted(self.checks.items())
                   if (n, ps) == (change.number, patchset)]
            if patchset == change.current.number:
                posted = {c.checker_uuid for c in out}
                out += [Check(change.project, change.number, patchset, ch.uuid)
                        for ch in self.checkers.values()
                        if ch.uuid not in posted and self._applies(ch, change)]
            return out

    def post_check(self, change, patchset: int, data: dict) -> Check:
        """Create or update a check from a CheckInput."""
        uuid = data.get('checker_uuid')
        state = data.get('state')
        if not uuid:
            raise ReviewError('checker_uuid is required')
        if state is not None and state not in CHECK_STATES:
            raise ReviewError(f'invalid state {state!r}')
        with self.lock:
            self._checker(uuid)
            if not any(ps.number == patchset for ps in change.patchsets):
                raise ReviewError(f'patch set {patchset} of change {change.number} not found')
            key = (change.number, patchset, uuid)
            check = self.checks.get(key) or Check(change.project, change.number, patchset,
                                                  uuid)
            if state is not None:
                check.state = state
            for name in ('message', 'url', 'started', 'finished'):
                if data.get(name) is not None:
                    setattr(check, name, data[name])
            check.updated = timestamp()
            self.checks[key] = check
            self.history.append(dict(check.to_dict()))
            return check

    def pending(self, query: str) -> list[dict]:
        """``checks.pending``: PendingChecksInfo for the current patch sets
        of the open changes, for one checker (``checker:<uuid>``) or the
        checkers of a scheme (``scheme:<scheme>``), in the ``state:``
        states of the query (NOT_STARTED when none)."""
        checkers, states = self._parse_query(query)
        out = []
        with self.store.lock, self.lock:
            for change in sorted(self.store.changes.values(), key=lambda c: c.number):
                if not change.is_open:
                    continue
                ps = change.current.number
                found = {c.checker_uuid: {'state': c.state}
                         for c in self.checks_of(change, ps)
                         if c.checker_uuid in checkers and c.state in states}
                if found:
                    out.append({'patch_set': {'repository': change.project,
                                              'change_number': change.number,
                                              'patch_set_id': ps},
                                'pending_checks': found})
        return out

    def _parse_query(self, query: str) -> tuple[set[str], set[str]]:
        terms = [(op.lower(), value.strip('"')) for op, value in
                 _QUERY_TERM.findall(query or '')]
        selectors = [t for t in terms if t[0] in ('checker', 'scheme')]
        if len(selectors) != 1:
            raise ReviewError('query must contain exactly one checker or scheme operator')
        states = {v.upper() for op, v in terms if op == 'state'} or {'NOT_STARTED'}
        bad = states - set(CHECK_STATES)
        if bad:
            raise ReviewError(f'invalid state {sorted(bad)[0]!r}')
        op, value = selectors[0]
        with self.lock:
            if op == 'checker':
                self._checker(value)
                return {value}, states
            return {c.uuid for c in self.checkers.values() if c.scheme == value}, states


_PLUGINS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_PLUGINS_LOCK = threading.Lock()


def checks_for(store: ReviewStore) -> ChecksPlugin:
    """The checks plugin state of ``store`` (made on first use)."""
    with _PLUGINS_LOCK:
        plugin = _PLUGINS.get(store)
        if plugin is None:
            plugin = _PLUGINS[store] = ChecksPlugin(store)
        return plugin
