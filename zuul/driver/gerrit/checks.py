"""Gerrit's ``checks`` plugin (deprecated upstream, as in released Zuul):
pending checks become ``pending-check`` events, and the ``checks-api``
reporter sets a check's state, message and link.

Polling: every ENABLED checker the connection's account can see
(``GET /a/plugins/checks/checkers/``) is asked for its pending checks
(``GET /a/plugins/checks/checks.pending/?query=checker:<uuid>``); each
check newly pending on a patch set makes one event whose ``data`` names
the checker (``uuid``, ``scheme``; a trigger's ``uuid`` or ``scheme``
selects them, see ``event_checker``). A check
that stops being pending and later becomes pending again (a re-run from
Gerrit's UI) makes a new event.

Reporting: ``POST /a/changes/<project>~<number>/revisions/<ps>/checks/``
with a CheckInput. A reporter given a ``scheme`` reports to the checker
the item's pending-check event named, or else to the ENABLED checker of
that scheme on the change's repository.
"""

from __future__ import annotations

import logging
import threading
import time
from urllib.parse import quote

from zuul.driver.gerrit.rest import GerritRESTClient
from zuul.model.events import TriggerEvent

log = logging.getLogger('zuul.driver.gerrit.checks')

CHECK_STATES = ('NOT_STARTED', 'SCHEDULED', 'RUNNING', 'SUCCESSFUL', 'FAILED',
                'NOT_RELEVANT')
FINAL_STATES = ('SUCCESSFUL', 'FAILED', 'NOT_RELEVANT')
# Released Zuul's interval when zuul.conf gives no poll_interval.
DEFAULT_CHECKS_POLL_INTERVAL = 30.0


def gerrit_timestamp(when: float | None = None) -> str:
    """A time as Gerrit's REST API writes it (UTC)."""
    when = time.time() if when is None else when
    return time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(when)) + \
        f'.{int((when % 1) * 1e9):09d}'


def scheme_of(uuid: str | None) -> str:
    return (uuid or '').split(':', 1)[0]


def event_checker(event) -> str | None:
    """The checker UUID a pending-check event is about (None for other
    events)."""
    if getattr(event, 'type', None) != 'pending-check':
        return None
    return (getattr(event, 'data', None) or {}).get('uuid')


class GerritChecks:
    """The checks plugin seen from one connection."""

    def __init__(self, connection_name: str, rest: GerritRESTClient, query_change):
        self.connection_name = connection_name
        self.rest = rest
        self.query_change = query_change
        self._lock = threading.Lock()
        self._checkers: list[dict] = []
        # (change, patchset, uuid) of the checks pending at the last poll.
        self._pending: set[tuple[int, int, str]] = set()

    # -- checkers ----------------------------------------------------------------

    def refresh_checkers(self) -> list[dict]:
        checkers = self.rest.get('plugins/checks/checkers/') or []
        with self._lock:
            self._checkers = list(checkers)
        return checkers

    def checker_for(self, scheme: str, project: str) -> str | None:
        """The ENABLED checker of ``scheme`` on ``project``."""
        for attempt in range(2):
            with self._lock:
                found = [c['uuid'] for c in self._checkers
                         if scheme_of(c.get('uuid')) == scheme and
                         c.get('repository') == project and c.get('status') == 'ENABLED']
            if found or attempt:
                return found[0] if found else None
            self.refresh_checkers()  # a checker made since the last poll
        return None

    # -- polling -----------------------------------------------------------------

    def poll(self) -> list[TriggerEvent]:
        """One poll: the events of the checks newly pending."""
        pending: dict[tuple[int, int, str], dict] = {}
        for checker in self.refresh_checkers():
            if checker.get('status') != 'ENABLED':
                continue
            uuid = checker['uuid']
            for info in self.rest.get('plugins/checks/checks.pending/',
                                      {'query': f'checker:{uuid}'}) or []:
                ps = info.get('patch_set') or {}
                for found_uuid, check in (info.get('pending_checks') or {}).items():
                    key = (int(ps['change_number']), int(ps['patch_set_id']), found_uuid)
                    pending[key] = dict(check, repository=ps.get('repository'))
        with self._lock:
            new = sorted(set(pending) - self._pending)
            self._pending = set(pending)
        events = []
        for number, patchset, uuid in new:
            event = self._event(number, patchset, uuid, pending[(number, patchset, uuid)])
            if event is not None:
                events.append(event)
        return events

    def _event(self, number: int, patchset: int, uuid: str, check: dict):
        change = self.query_change(number, patchset)
        if change is None:
            log.warning('Pending check %s on unknown change %s,%s', uuid, number, patchset)
            return None
        event = TriggerEvent(type='pending-check', connection=self.connection_name,
                             project=change.project, branch=change.branch,
                             change_number=number, patchset=patchset, ref=change.ref,
                             newrev=change.newrev, change_url=change.url,
                             data={'uuid': uuid, 'scheme': scheme_of(uuid),
                                   'state': check.get('state')})
        log.info('[e: %s] Check %s pending on %s,%s', event.event_id, uuid, number, patchset)
        return event

    # -- reporting ----------------------------------------------------------------

    def report(self, change, uuid: str, state: str, message: str | None = None,
               url: str | None = None) -> dict:
        data = {'checker_uuid': uuid, 'state': state}
        if message:
            data['message'] = message
        if url:
            data['url'] = url
        if state == 'RUNNING':
            data['started'] = gerrit_timestamp()
        elif state in FINAL_STATES:
            data['finished'] = gerrit_timestamp()
        change_id = quote(f'{change.project}~{change.number}', safe='~')
        return self.rest.post(f'changes/{change_id}/revisions/{change.patchset}/checks/',
                              data)
