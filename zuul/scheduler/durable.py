"""The scheduler's durable state (zuul.zk.pipeline_state): pipelines
restored at start and saved after every batch of events, the events
acknowledged once the state they produced is saved, the write-ahead of
each report, and the mark a successor catches up from.

A part of ``zuul.scheduler.scheduler.Scheduler`` (its base class): the
methods use the scheduler's tenants, loop and collaborators.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

log = logging.getLogger('zuul.scheduler')

# How often the leader notes in ZooKeeper that it is up to date (a
# successor catches up on events since then).
MARK_INTERVAL = 2.0
# The loop's save snapshots only the tenants it touched, and all of them
# at least this often (seconds).
FULL_SAVE_INTERVAL = 5.0


class DurableState:
    """Restore and save of a scheduler's pipelines (a mixin)."""

    def _init_durable_state(self) -> None:
        # Durable state (zuul.zk.pipeline_state), when the daemon gives
        # them: pipelines saved after every batch of events, trigger
        # events kept until the state they produced is saved.
        self.state_store = None
        # zuul.scheduler.report_gate.ReportGate, made on first use.
        self.report_gate = None
        self.event_queue = None
        # zuul.scheduler.status_publisher.StatusPublisher: the tenants'
        # status in ZooKeeper for zuul-web (None: not published).
        self.status_publisher = None
        self._acks: list[str] = []
        self._forget: list = []
        self._marked = 0.0
        # (acks, forgets) of saves that did not land, for the next save.
        self._held_follow_ups: collections.deque = collections.deque()
        self._saved_once = False
        # The pipelines the loop touched since the last save (tenant ->
        # names, None: all of the tenant's; None: all); when the loop's
        # save last took every one.
        self._dirty: dict | None = None
        self._full_saved = 0.0
        self._save_failed = False     # a write of the loop's save did not land
        # Write-aheads of reports sent off the loop: set once the loop's
        # next save (which includes their pipelines) landed.
        self._write_aheads: list[threading.Event] = []
        # A final report went out: the loop saves after this event, not
        # MIN_SAVE_INTERVAL later (zuul/scheduler/loop.py).
        self._urgent_save = False
        # Per connection: creation time of the newest trigger event held
        # durably (for a successor's catch-up).
        self.latest_events: dict[str, float] = {}
        self.recent_events: dict[str, list] = {}
        self._latest_changed = False
        # Connection threads note events while the loop writes the mark.
        self._latest_lock = threading.Lock()
        self.restored_items = 0

    def restore_state(self) -> None:
        """Put back what a previous scheduler saved: pipelines (items in
        order, merges, builds to adopt), then the trigger events it had
        not processed yet."""
        from zuul.scheduler.state import Restorer, event_from_data
        if self.state_store is not None:
            restorers = []
            for tenant in self.tenants.values():
                restorers += self._restore_pipelines(tenant, Restorer)
            for restorer in restorers:
                restorer.follow_builds()
        if self.event_queue is not None:
            for path, data in self.event_queue.pending():
                event = event_from_data(data)
                if event is None:
                    self.event_queue.ack(path)
                    continue
                event._zk_path = path
                log.info('[e: %s] Trigger event %s left by the previous scheduler',
                         event.event_id, event.describe())
                self.loop.add_trigger_event(event)

    def _restore_pipelines(self, tenant, restorer_class) -> list:
        """Put back ``tenant``'s saved pipelines; returns their restorers
        (running builds to follow once every pipeline is back)."""
        restorers = []
        for name in self.state_store.pipelines(tenant.name):
            if name not in tenant.managers:
                log.info('Pipeline %s of tenant %s is gone: dropping its saved '
                         'state', name, tenant.name)
                self.state_store.delete(tenant.name, name)
        for name, manager in tenant.managers.items():
            # A state that cannot be read or put back stops the start:
            # going on would save an empty pipeline over it.
            state = self.state_store.load(tenant.name, name)
            if not state:
                continue
            restorer = restorer_class(manager, self.connections, self.executor, self.nodes)
            count = restorer.restore(state)
            self.restored_items += count
            restorer.count = count
            restorers.append(restorer)
            if count:
                log.info('Restored %d items in pipeline %s of tenant %s', count,
                         name, tenant.name)
        return restorers

    def restore_tenant(self, name: str) -> int:
        """On taking ``name`` (several active schedulers): its pipelines
        as the previous holder saved them; returns the items restored."""
        from zuul.scheduler.state import Restorer
        tenant = self.tenants[name]
        for manager in tenant.managers.values():
            for queue in manager.queues:
                if queue.queue:
                    raise RuntimeError(f'tenant {name}: pipeline {manager.name} holds '
                                       'items of an earlier hold')
        if self.state_store is None:
            return 0
        restorers = self._restore_pipelines(tenant, Restorer)
        for restorer in restorers:
            restorer.follow_builds()
        return sum(r.count for r in restorers)

    def forget_tenant_items(self, name: str) -> int:
        """Drop what this scheduler holds in memory of ``name``'s
        pipelines (a take that failed half-way); nothing is cancelled or
        reported and the saved state is left for the next holder.
        Returns the items dropped."""
        tenant = self.tenants.get(name)
        if tenant is None:
            return 0
        dropped = 0
        for manager in tenant.managers.values():
            dropped += sum(1 for _ in manager.all_items())
            manager.queues = []
            manager.disabled = False
            manager.consecutive_failures = 0
        if dropped:
            log.info('Dropped %d items of tenant %s restored before the take failed',
                     dropped, name)
        return dropped

    def _note_latest(self, event) -> None:
        from zuul.zk.pipeline_state import event_signature
        stamp = float(getattr(event, 'timestamp', 0) or 0)
        with self._latest_lock:
            latest = self.latest_events.get(event.connection, 0)
            if stamp > latest:
                self.latest_events[event.connection] = stamp
                self.recent_events[event.connection] = [event_signature(event)]
                self._latest_changed = True
            elif stamp == latest:
                self.recent_events.setdefault(event.connection, []).append(
                    event_signature(event))
                self._latest_changed = True

    def save_state(self, only=None, tenant: str | None = None, wait: bool = True,
                   then=None) -> int:
        """Write every pipeline whose state changed (or just the manager
        ``only``); then acknowledge the events and forget the build
        records whose results are now saved. Returns pipelines written.

        Not ``wait`` (the loop's save after each batch): the writes are
        sent and the loop goes on; the acknowledgements, forgets and the
        last-saved mark follow once ZooKeeper answered that the writes
        landed (if one did not, they wait for the next save)."""
        if self.state_store is None:
            return 0
        from zuul.scheduler.state import encode_snapshot
        states = []
        dirty = self._take_dirty(wait, only, tenant)
        for state in list(self.tenants.values()):
            if not self.owns(state.name) or tenant not in (None, state.name):
                continue    # another scheduler's (several active)
            if dirty is not None and state.name not in dirty:
                continue    # nothing on the loop touched it since the last save
            touched = None if dirty is None else dirty[state.name]
            for name, manager in list(state.managers.items()):
                if only is not None and manager is not only:
                    continue
                if touched is not None and name not in touched:
                    continue
                states.append((state.name, name, encode_snapshot(manager, self.nodes)))
        if only is not None:
            if wait:
                return self._saved(self.state_store.save_many(states))

            def landed(ok: bool) -> None:
                if not ok:
                    self._save_failed = True    # the loop's next save takes all
                if then is not None:
                    then(ok)
            return self._saved(self.state_store.save_many(states, then=landed))
        first, self._saved_once = not self._saved_once, True
        self._urgent_save = False
        follow = self._follow_ups()
        try:
            if wait or first:
                # The changed pipelines' writes go out together: one round trip.
                written = self.state_store.save_many(states)
                self._after_save(follow, wait=True)
                return self._saved(written)
            return self._saved(self.state_store.save_many(
                states, then=lambda ok: self._after_save(follow, wait=False, ok=ok)))
        except Exception:
            # Not saved (ZooKeeper away): the reports waiting for this
            # write-ahead go all the same, as when it failed on the loop.
            for landed in follow[3]:
                landed.set()
            raise

    def mark_dirty(self, tenant: str | None = None, pipeline: str | None = None) -> None:
        """The loop changed (or may have changed) ``pipeline`` of
        ``tenant`` (None: every pipeline of it; no tenant: of any): the
        next save snapshots them, and the next pass processes the tenant."""
        wanted = getattr(self, '_pass_wanted', None)
        if tenant is None:
            self._pass_wanted = None
        elif wanted is not None:
            wanted.add(tenant)
        if tenant is None or self._dirty is None:
            self._dirty = None
            return
        touched = self._dirty.get(tenant, ())
        if touched is None:
            return
        if pipeline is None:
            self._dirty[tenant] = None
        else:
            self._dirty[tenant] = set(touched) | {pipeline}

    def _take_dirty(self, wait: bool, only, tenant) -> dict | None:
        """The pipelines the loop's save snapshots: tenant -> pipeline
        names or None (all of its pipelines); None: all. Only the
        loop's save skips the others (a snapshot and its JSON encoding
        are most of a save's CPU); every FULL_SAVE_INTERVAL it takes all,
        so a change made without saying so is saved all the same."""
        if only is not None or tenant is not None:
            return None
        dirty, self._dirty = self._dirty, {}
        failed, self._save_failed = self._save_failed, False
        now = time.monotonic()
        if wait or dirty is None or failed or now - self._full_saved >= FULL_SAVE_INTERVAL:
            self._full_saved = now
            return None
        return dirty

    def _saved(self, written: int) -> int:
        if written and self.status_publisher is not None:
            self.status_publisher.changed()
        return written

    def _follow_ups(self) -> tuple:
        """What a save makes final: the events to acknowledge, the build
        records to forget, the last-saved mark (or None: not due)."""
        while self._held_follow_ups:
            acks, forget = self._held_follow_ups.popleft()
            self._acks[:0], self._forget[:0] = acks, forget
        acks, self._acks = self._acks, []
        forget, self._forget = self._forget, []
        mark = None
        now = time.time()
        if self.marks_saved and (now - self._marked >= MARK_INTERVAL or
                                 self._latest_changed):
            # An event a connection thread notes meanwhile marks it changed
            # again (in the next mark), never lost: a successor would
            # synthesize it a second time.
            with self._latest_lock:
                self._latest_changed = False
                mark = (now, dict(self.latest_events),
                        {k: list(v) for k, v in self.recent_events.items()})
            self._marked = now
        aheads, self._write_aheads = self._write_aheads, []
        return acks, forget, mark, aheads

    def _after_save(self, follow: tuple, wait: bool, ok: bool = True) -> None:
        acks, forget, mark, aheads = follow
        for landed in aheads:
            # Landed, or not: then the report goes all the same.
            landed.set()
        if not ok:
            # A write did not land: kept for the next save (the loop's).
            self._held_follow_ups.append((acks, forget))
            with self._latest_lock:
                self._latest_changed = True
            self._save_failed = True        # the next save takes every tenant
            return
        # Waited for or not, they go out on the save's ZooKeeper session
        # after it, which applies them in order.
        if mark is not None:
            from zuul.zk.pipeline_state import mark_saved
            mark_saved(self.state_store.client, *mark, wait=wait)
        if acks:
            self.event_queue.ack_many(acks, wait=False)
        for build in forget:
            if hasattr(self.executor, 'forget'):
                self.executor.forget(build)

    def save_batch(self) -> int:
        """The loop's save after a batch: not waited for."""
        return self.save_state(wait=False)

    def before_report(self, manager, item, action: str, wait: bool = True):
        """Write-ahead: the pipeline is saved with the report marked as
        being sent, so a scheduler restored from it knows. Not ``wait``:
        returns an Event set once the write landed (or failed: the report
        goes all the same), None when nothing was written."""
        if self.state_store is None or action in ('start', 'enqueue'):
            return None
        item.reporting = action
        item.reporting_time = time.time()
        if not wait:
            # Written by the loop's next save (at most MIN_SAVE_INTERVAL
            # away, zuul/scheduler/loop.py), with whatever else changed:
            # one write for every report of that time, not one each.
            if self.report_gate is None:
                from zuul.scheduler.report_gate import ReportGate
                self.report_gate = ReportGate()
            landed = threading.Event()
            self._write_aheads.append(landed)
            self.mark_dirty(self._tenant_of(manager), manager.pipeline.name)
            return landed
        try:
            self.save_state(only=manager)
        except Exception:
            log.exception('Unable to save the state before reporting')
        return None

    def save_after_report(self, manager) -> None:
        """An item's final report went out: its pipeline without it is
        written by the loop's save right after the event at hand (one
        write for the reports of that event, not one each)."""
        self.mark_dirty(self._tenant_of(manager), manager.pipeline.name)
        self._urgent_save = True

    def save_urgent(self) -> bool:
        return self._urgent_save

    def _tenant_of(self, manager) -> str | None:
        for state in self.tenants.values():
            if manager in state.managers.values():
                return state.name
        return None

