"""Several active schedulers: which tenants this one processes.

With ``[scheduler] standby = false`` every scheduler is active. The unit
of work is a tenant: the scheduler that holds a tenant's ZooKeeper lock
(``/zuul/locks/tenant/<tenant>``, zuul/zk/tenant_events.py) processes
all of its pipelines; the others leave them alone (they neither process
nor save them). A tenant rather than a pipeline because a trigger event
acts on every pipeline of its tenant at once (a new patchset dequeues
the change from each, a change enqueued in one enqueues its children in
another); the lock, the event queue and the state are named per tenant
so that the unit can be narrowed later (see doc/source/operations/
scaling.rst).

- **Events.** Any scheduler may receive an event: it stores it in the
  queue of each tenant that may act on it
  (``/zuul/events/tenant/<tenant>/trigger``); the tenant's owner
  consumes that queue in order (a watch wakes it) and deletes each event
  once the state it produced is saved.
- **Taking a tenant.** Each scheduler registers itself
  (``/zuul/schedulers/<id>``, ephemeral) and takes unowned tenants up to
  its fair share (tenants / schedulers, rounded up). Taking one reads
  its pipelines back from ZooKeeper with the same restore path a
  restarted scheduler uses (zuul/scheduler/state.py): running builds are
  adopted, lost node requests asked again. A scheduler holding more
  than its share gives up a tenant that is idle (nothing queued, no
  event waiting), so a scheduler that joins later gets work.
- **A scheduler that dies** loses its ZooKeeper session and so its
  locks; the others take its tenants within the session timeout.
- **Layouts.** Before it acts on a tenant (takes it, or handles one of
  its events) a scheduler compares the layout version it built from
  with the tenant's version in ZooKeeper; if another scheduler
  reconfigured the tenant since, it first rebuilds the layout from the
  shared config cache (only the projects that changed).

Decisions (acquire, release, layout refresh) run on the scheduler's
event thread as management events; this module's thread only notices
what should be done and feeds the owned tenants' events.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import threading

from kazoo.exceptions import NodeExistsError, NoNodeError

from zuul.model.events import ManagementEvent
from zuul.zk.tenant_events import (
    SCHEDULERS_ROOT,
    LayoutVersions,
    TenantEventQueues,
    projects_since,
    quote,
    tenant_lock_path,
)

log = logging.getLogger('zuul.scheduler.ownership')

# How often the thread looks at the other schedulers and the locks (a
# watch on an owned tenant's queue wakes it at once for events).
TICK = 1.0


class TenantOwnership:
    def __init__(self, scheduler, client, identifier: str, tick: float = TICK):
        self.scheduler = scheduler
        self.client = client
        self.identifier = identifier
        self.tick = tick
        self.queues = TenantEventQueues(client)
        self.requests = TenantEventQueues(client, 'management')
        self._seen_requests: dict[str, set] = {}
        self.versions = LayoutVersions(client)
        # tenant -> the kazoo lock held (written on the event thread).
        self.owned: dict = {}
        # tenant -> layout version this scheduler's layout was built from.
        self.known_versions: dict[str, int] = {}
        # tenant -> the newest layout version in ZooKeeper (from a watch).
        self.latest_versions: dict[str, int] = {}
        self._version_watched: set[str] = set()
        self._seen: dict[str, set] = {}
        self._watched: set[str] = set()
        self._feed_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._requested: set = set()
        self._thread = threading.Thread(target=self._run, name='tenant-ownership',
                                        daemon=True)
        self.taken = 0
        self.released = 0

    # -- lifecycle ------------------------------------------------------------

    def register(self) -> None:
        path = f'{SCHEDULERS_ROOT}/{quote(self.identifier)}'
        try:
            self.client.create(path, json.dumps({'id': self.identifier}).encode('utf8'),
                               ephemeral=True, makepath=True)
        except NodeExistsError:
            pass

    def start(self) -> None:
        self.register()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def release_all(self) -> None:
        """After the last save (stopping): the others take over at once."""
        if not self.client.connected:
            # Its session ends with the client: the locks go with it.
            self.owned.clear()
            return
        for tenant, lock in list(self.owned.items()):
            try:
                lock.release()
            except Exception:
                log.exception('Unable to release the lock of tenant %s', tenant)
        self.owned.clear()

    def owns(self, tenant: str) -> bool:
        return tenant in self.owned

    def schedulers(self) -> list[str]:
        try:
            return sorted(self.client.get_children(SCHEDULERS_ROOT))
        except NoNodeError:
            return []

    # -- events (any thread) --------------------------------------------------

    def route(self, event, data: dict) -> int:
        """Store ``event`` in the queue of each tenant that may act on it;
        those this scheduler owns go onto its loop at once. Returns how
        many tenants it went to."""
        scheduler = self.scheduler
        count = 0
        for tenant in list(scheduler.tenants.values()):
            if self.layout_behind(tenant.name):
                # Another scheduler reconfigured it since this one built
                # its layout (a project may have joined): the tenant's
                # holder, on the newest layout, decides.
                wanted = True
            else:
                try:
                    wanted = scheduler._tenant_may_want(
                        tenant, scheduler.ctx_by_tenant[tenant.name], event)
                except (RuntimeError, KeyError):
                    wanted = True
            if not wanted:
                continue
            count += 1
            with self._feed_lock:
                path = self.queues.put(tenant.name, data)
                if tenant.name in self.owned:
                    self._seen.setdefault(tenant.name, set()).add(path)
                    self._to_loop(event, tenant.name, path,
                                  self.versions.get(tenant.name)['version'])
        if not count:
            log.debug('[e: %s] No tenant takes %s', event.event_id, event.describe())
        return count

    def layout_behind(self, tenant: str) -> bool:
        """Whether ``tenant``'s layout in ZooKeeper is newer than the one
        this scheduler built (a watch keeps the newest version known, so
        routing an event costs no ZooKeeper read)."""
        if tenant not in self._version_watched:
            self._version_watched.add(tenant)

            def changed(data, stat):
                try:
                    version = json.loads(data.decode('utf8'))['version'] if data else 0
                except (ValueError, KeyError, TypeError, AttributeError):
                    version = 0
                self.latest_versions[tenant] = int(version)
                if int(version) > self.known_versions.get(tenant, 0):
                    # Another scheduler reconfigured it: refresh now,
                    # not at the next tick.
                    self._wake.set()
            self.client.DataWatch(self.versions.path(tenant), changed)
        return self.latest_versions.get(tenant, 0) > self.known_versions.get(tenant, 0)

    def _to_loop(self, event, tenant: str, path: str, version: int) -> None:
        # ``version``: the tenant's layout version, read after the event
        # was (a reconfiguration before the event is seen in it): the loop
        # reads the version again only when it is newer than its layout.
        mine = copy.copy(event)
        mine._tenant = tenant
        mine._zk_path = path
        mine._layout_version = version
        self.scheduler.loop.add_trigger_event(mine)

    def feed(self, tenant: str) -> int:
        """Events of owned ``tenant`` stored by any scheduler and not yet
        on this one's loop go onto it, oldest first."""
        from zuul.scheduler.state import event_from_data
        fed = 0
        with self._feed_lock:
            if tenant not in self.owned:
                return 0
            seen = self._seen.setdefault(tenant, set())
            paths = self.queues.children(tenant)
            seen.intersection_update(paths)
            found = []
            for path in paths:
                if path in seen:
                    continue
                seen.add(path)
                event = event_from_data(self.queues.read(path))
                if event is None:
                    continue
                found.append((event, path))
            version = self.versions.get(tenant)['version'] if found else 0
            for event, path in found:
                log.info('[e: %s] Trigger event %s of tenant %s from ZooKeeper',
                         event.event_id, event.describe(), tenant)
                self._to_loop(event, tenant, path, version)
                fed += 1
        return fed

    # -- management requests --------------------------------------------------

    def forward(self, kind: str, args: dict, timeout: float | None):
        """Ask the holder of ``args['tenant']`` to carry out ``kind``
        (enqueue, dequeue, promote) and wait for its answer."""
        from zuul.model.errors import UnknownNameError
        tenant = args['tenant']
        done = threading.Event()
        import uuid
        path = self.requests.put(tenant, {'kind': kind, 'args': args,
                                          'id': uuid.uuid4().hex})

        def answered(data, stat):
            if data is None or json.loads(data or b'{}').get('done'):
                done.set()
                return False
        self.client.DataWatch(path, answered)
        try:
            if not done.wait(timeout):
                raise TimeoutError(f'{kind} not processed within {timeout}s by the '
                                   f'scheduler holding tenant {tenant}')
            answer = self.requests.read(path) or {}
        finally:
            self.requests.delete(path)
        if not answer.get('done'):
            raise RuntimeError(f'{kind}: the request was dropped')
        if answer.get('error') is not None:
            if answer.get('error_type') == 'UnknownNameError':
                raise UnknownNameError(answer['error'])
            raise RuntimeError(answer['error'])
        return answer.get('result')

    def _serve_requests(self, tenant: str) -> None:
        """Requests forwarded to owned ``tenant``, onto the loop; each
        answer is written back into the request's znode."""
        seen = self._seen_requests.setdefault(tenant, set())
        paths = self.requests.children(tenant)
        seen.intersection_update(paths)
        for path in paths:
            if path in seen:
                continue
            seen.add(path)
            request = self.requests.read(path)
            if not request or request.get('done') or 'kind' not in request:
                continue
            event = self.scheduler.loop.add_management_event(
                ManagementEvent(request['kind'], **(request.get('args') or {})))
            threading.Thread(target=self._answer, args=(path, request, event),
                             name='forwarded-request', daemon=True).start()

    def _answer(self, path: str, request: dict, event) -> None:
        answer = dict(request, done=True, result=None, error=None)
        try:
            answer['result'] = event.wait(600)
        except Exception as exc:
            answer.update(error=str(exc), error_type=type(exc).__name__)
        try:
            self.client.set(path, json.dumps(answer, default=str).encode('utf8'))
        except NoNodeError:
            pass    # the requester gave up

    def _watch(self, tenant: str) -> None:
        if tenant in self._watched:
            return
        self._watched.add(tenant)
        def changed(children):
            if tenant not in self.owned:
                self._watched.discard(tenant)
                return False
            self._wake.set()
        for queues in (self.queues, self.requests):
            root = queues.root(tenant)
            self.client.ensure_path(root)
            self.client.ChildrenWatch(root, changed)

    # -- on the event thread --------------------------------------------------

    def take(self, tenant: str) -> bool:
        """Lock ``tenant`` (without waiting), bring its layout up to the
        newest, restore its pipelines from ZooKeeper and its waiting
        events onto the loop."""
        self._requested.discard(('take', tenant))
        if tenant in self.owned or tenant not in self.scheduler.tenants:
            return False
        lock = self.client.Lock(tenant_lock_path(tenant), identifier=self.identifier)
        if not lock.acquire(blocking=False):
            return False
        self.owned[tenant] = lock
        try:
            self.ensure_newest_layout(tenant)
            restored = self.scheduler.restore_tenant(tenant)
        except Exception:
            log.exception('Unable to take tenant %s; leaving it to another scheduler',
                          tenant)
            # What was restored before the failure is dropped (the saved
            # state in ZooKeeper is untouched): half a tenant must not stay
            # here, nor stop this scheduler from taking it again later.
            self.scheduler.forget_tenant_items(tenant)
            self.owned.pop(tenant, None)
            lock.release()
            return False
        self.taken += 1
        log.info('Scheduler %s processes tenant %s (%d items restored)', self.identifier,
                 tenant, restored)
        self._watch(tenant)
        self.feed(tenant)
        return True

    def release(self, tenant: str) -> bool:
        """Give up ``tenant`` if it is idle (another scheduler takes it)."""
        self._requested.discard(('release', tenant))
        if tenant not in self.owned or not self.idle(tenant):
            return False
        self.scheduler.save_state(tenant=tenant)
        with self._feed_lock:
            lock = self.owned.pop(tenant)
            self._seen.pop(tenant, None)
        lock.release()
        self.released += 1
        log.info('Scheduler %s gives tenant %s to another scheduler', self.identifier, tenant)
        return True

    def idle(self, tenant: str) -> bool:
        state = self.scheduler.tenants.get(tenant)
        if state is None:
            return True
        if any(True for m in state.managers.values() for _ in m.all_items()):
            return False
        return not self.queues.children(tenant)

    def ensure_newest_layout(self, tenant: str, seen: int | None = None) -> bool:
        """Rebuild ``tenant``'s layout from the shared config cache if
        another scheduler reconfigured it since this one built its own;
        True if it did. ``seen``: the version read after the event about
        to be processed (no ZooKeeper read when it is not newer)."""
        known = self.known_versions.get(tenant, 0)
        if seen is not None and seen <= known:
            return False
        record = self.versions.get(tenant)
        if record['version'] <= known:
            return False
        projects = projects_since(record, known)
        if projects is None:
            layout = self.scheduler.tenants[tenant].layout
            projects = [tp.name for tp in getattr(layout.tenant, 'projects', ()) or ()]
        log.info('Tenant %s: layout version %d in ZooKeeper, this scheduler has %d: '
                 'rebuilding it from the config cache (%s)', tenant, record['version'],
                 known, ', '.join(projects) or 'no project re-read')
        self.scheduler.reconfigure(tenant_names=[tenant], projects=projects,
                                   keep_shared=True)
        self.known_versions[tenant] = record['version']
        return True

    def reconfigured(self, tenants, projects) -> None:
        """This scheduler re-read ``projects`` (None: all) of ``tenants``
        and wrote them into the shared cache: a new layout version each."""
        for tenant in tenants:
            self.known_versions[tenant] = self.versions.bump(tenant, projects)

    def note_versions(self) -> None:
        """Before a load from the cache: the versions it is at least."""
        import urllib.parse

        from zuul.zk.pipeline_state import STATE_ROOT
        try:
            names = self.client.get_children(STATE_ROOT)
        except NoNodeError:
            names = []
        for name in names:
            tenant = urllib.parse.unquote(name)
            self.known_versions[tenant] = self.versions.get(tenant)['version']

    # -- the thread -------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._step()
            except Exception:
                log.exception('Error while sharing tenants')
            self._wake.wait(self.tick)
            self._wake.clear()

    def _step(self) -> None:
        for tenant in list(self.owned):
            self.feed(tenant)
            self._serve_requests(tenant)
        tenants = sorted(self.scheduler.tenants)
        for tenant in tenants:
            # A watch keeps each tenant's newest version known and wakes
            # this thread when one moves past this scheduler's layout.
            if self.layout_behind(tenant):
                self._request('refresh', tenant)
        live = max(1, len(self.schedulers()))
        share = math.ceil(len(tenants) / live) if tenants else 0
        owned = [t for t in tenants if t in self.owned]
        if len(owned) < share:
            free = [t for t in tenants if t not in self.owned and
                    not self.client.Lock(tenant_lock_path(t)).contenders()]
            for tenant in free[:share - len(owned)]:
                self._request('take', tenant)
        elif len(owned) > share:
            idle = [t for t in owned if self.idle(t)]
            if idle:
                self._request('release', idle[-1])

    def _request(self, what: str, tenant: str) -> None:
        if (what, tenant) in self._requested:
            return
        self._requested.add((what, tenant))
        self.scheduler.loop.add_management_event(
            ManagementEvent('tenant-' + what, tenant=tenant))

    def refresh(self, tenant: str) -> bool:
        self._requested.discard(('refresh', tenant))
        return self.ensure_newest_layout(tenant)

    def owners(self) -> dict:
        """tenant -> identifier of the scheduler holding its lock (or None)."""
        out = {}
        for tenant in sorted(self.scheduler.tenants):
            holders = self.client.Lock(tenant_lock_path(tenant)).contenders()
            out[tenant] = holders[0] if holders else None
        return out
