"""The scheduler's one event thread.

Drains, in priority order, management events (reconfigure, enqueue,
dequeue, promote ...), result events (merge done, nodes provisioned,
build started/completed), then trigger events from connections; then lets
every pipeline manager process its queues until nothing changes. Under a
steady stream of events the pipelines are still processed at least every
``SETTLE_INTERVAL`` seconds, so queue items keep moving (merges requested,
builds started) while a backlog of events drains.

Everything that touches pipeline state runs on this thread, so the state
needs no locks. Other threads only put events on the queues.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

log = logging.getLogger('zuul.scheduler.loop')

SETTLE_INTERVAL = 0.5
# Under a stream of events the loop saves at most this often (seconds):
# a pipeline's save writes all of its items, so one save per event costs
# O(items) each time. Events are acknowledged only once the state they
# produced is saved, so a crash in between loses nothing (they are
# processed again); the loop counts as busy until the save is made.
MIN_SAVE_INTERVAL = 0.1
# After an event the pipelines are processed once no other event waits.
# When the last pass was costly (COSTLY_PASS seconds of CPU or more) the
# next is made not sooner than MIN_PASS_INTERVAL seconds after it: a pass
# looks at every item of the tenant, so with many items one pass per
# event costs items x events; events arriving closer together share one
# pass. A cheap pass (few items) is made after each event, as before.
# The loop counts as busy until the pass is made.
MIN_PASS_INTERVAL = 0.05
COSTLY_PASS = 0.001
# A save asked for at once (after a final report, ``save_urgent``) is
# made at once while saves are cheap; once the last one took COSTLY_SAVE
# seconds of CPU or more (a pipeline of many items), it waits for the
# loop's next save (at most MIN_SAVE_INTERVAL): the final reports of
# that time share one write, not one each.
COSTLY_SAVE = 0.002
# While ZooKeeper is away, how often saving that failed is logged.
SAVE_WARNING_INTERVAL = 30.0


class EventLoop:
    """Three prioritized queues and the thread that drains them.

    ``handlers`` is an object with ``handle_management(event)``,
    ``handle_result(event)``, ``handle_trigger(event)`` and
    ``process_pipelines() -> bool`` (True if anything changed).
    """

    def __init__(self, handlers, name: str = 'scheduler'):
        self.handlers = handlers
        self.management = collections.deque()
        self.results = collections.deque()
        self.triggers = collections.deque()
        self._cond = threading.Condition()
        self._running = False
        self._thread: threading.Thread | None = None
        self._busy = False
        self.name = name
        self.processed = 0
        self._last_settle = time.monotonic()
        self._save_failing_since: float | None = None
        self._last_save = 0.0
        self._save_due = False      # a save deferred by MIN_SAVE_INTERVAL
        self._settle_due = False    # a pass deferred (_pass_interval)
        self._last_pass_cost = 0.0  # CPU the last _settle took (s)
        self._last_save_cost = 0.0  # CPU the last save took (s)
        self._save_warned = 0.0
        # The longest the thread was busy with one step (an event, a pass
        # over the pipelines, a save) without looking at its queues: what
        # an event arriving then waited at most (benchmarks, monitoring).
        self.max_stall = 0.0
        self.stalls_over_100ms = 0
        # The steps over 100 ms by kind (``_describe``): which kind of
        # work still blocks the loop (benchmarks print the top ones).
        self.stall_kinds: collections.Counter = collections.Counter()
        # When the step now running started (monotonic), None between
        # steps: a sampler can tell a long step's stack from a short one's.
        self.step_started: float | None = None

    # -- producers (any thread) -------------------------------------------

    def _put(self, queue, event):
        with self._cond:
            queue.append(event)
            self._cond.notify_all()
        return event

    def add_management_event(self, event):
        return self._put(self.management, event)

    def add_result_event(self, event):
        return self._put(self.results, event)

    def add_trigger_event(self, event):
        return self._put(self.triggers, event)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> None:
        self._running = True
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        with self._cond:
            self._running = False
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def is_idle(self) -> bool:
        with self._cond:
            return not (self.management or self.results or self.triggers or self._busy)

    def wait_idle(self, timeout: float = 60.0, extra=None) -> bool:
        """Wait until every queue is empty, the thread is between passes,
        and ``extra()`` (outside work, e.g. builds running) is false."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                idle = not (self.management or self.results or self.triggers or self._busy)
                if idle and (extra is None or not extra()):
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1) if extra is not None else left)

    # -- the thread -----------------------------------------------------------

    def _next(self):
        for queue, kind in ((self.management, 'management'), (self.results, 'result'),
                            (self.triggers, 'trigger')):
            if queue:
                return kind, queue.popleft()
        return None, None

    def _run(self) -> None:
        # One pass before waiting for events: pipelines restored from
        # saved state (merges to ask again, node requests lost with the
        # previous scheduler's session) move without waiting for one.
        with self._cond:
            self._busy = True
        self._settle()
        self._save_now()
        while True:
            with self._cond:
                while self._running and not (self.management or self.results or
                                             self.triggers):
                    due = [at for at, deferred in (
                        (self._last_settle + self._pass_interval(), self._settle_due),
                        (self._last_save + MIN_SAVE_INTERVAL, self._save_due)) if deferred]
                    if due:
                        # Busy until the deferred pass and save are made.
                        left = min(due) - time.monotonic()
                        if left <= 0:
                            break
                        self._cond.wait(left)
                        continue
                    self._busy = False
                    self._cond.notify_all()
                    self._cond.wait()
                if not self._running:
                    self._busy = False
                    self._cond.notify_all()
                    return
                self._busy = True
                kind, event = self._next()
            if kind is not None:
                self._timed(self._dispatch, kind, event)
                self._settle_due = True
                with self._cond:
                    more = bool(self.management or self.results or self.triggers)
                since = time.monotonic() - self._last_settle
                if since < (SETTLE_INTERVAL if more else self._pass_interval()):
                    # The pass waits for the next events (or the interval).
                    if self._save_urgent():
                        self._save_now()
                    continue
            elif not self._settle_due or \
                    time.monotonic() - self._last_settle < self._pass_interval():
                self._save_now()    # woken for the deferred save
                continue
            cpu = time.thread_time()
            self._settle()
            self._last_settle = time.monotonic()
            self._last_pass_cost = time.thread_time() - cpu
            self._settle_due = False
            if self._save_urgent() or time.monotonic() - self._last_save >= MIN_SAVE_INTERVAL:
                self._save_now()
            else:
                self._save_due = True

    def _pass_interval(self) -> float:
        return MIN_PASS_INTERVAL if self._last_pass_cost >= COSTLY_PASS else 0.0

    def _save_urgent(self) -> bool:
        # e.g. a final report went out: the state without its item is
        # saved now (so no restart reports it again), with the rest;
        # when saves are costly, with the loop's next save (COSTLY_SAVE).
        urgent = getattr(self.handlers, 'save_urgent', None)
        if urgent is None or not urgent():
            return False
        if self._last_save_cost < COSTLY_SAVE or \
                time.monotonic() - self._last_save >= MIN_SAVE_INTERVAL:
            return True
        self._save_due = True
        return False

    def _save_now(self) -> None:
        self._save_due = False
        cpu = time.thread_time()
        self._timed(self._save)
        self._last_save_cost = time.thread_time() - cpu
        self._last_save = time.monotonic()

    def _timed(self, step, *args):
        start = self.step_started = time.monotonic()
        try:
            return step(*args)
        finally:
            self.step_started = None
            spent = time.monotonic() - start
            if spent > self.max_stall:
                self.max_stall = spent
            if spent > 0.1:
                self.stalls_over_100ms += 1
                kind = _describe(step, args)
                self.stall_kinds[kind] += 1
                log.info('Event loop busy %.0f ms in %s', spent * 1000, kind)

    def _dispatch(self, kind, event) -> None:
        self.processed += 1
        try:
            getattr(self.handlers, f'handle_{kind}')(event)
        except Exception:
            log.exception('Error handling %s event %r', kind, event)
            done = getattr(event, 'done', None)
            if kind == 'management' and done is not None and \
                    not getattr(event, '_done').is_set():
                import sys
                done(exception=sys.exc_info()[1])

    def _save(self) -> None:
        # Durable state: what the events and passes changed goes to
        # ZooKeeper once per batch, then the events are acknowledged.
        # ``save_batch``: sent without waiting for ZooKeeper's answer.
        save = getattr(self.handlers, 'save_batch', None) or \
            getattr(self.handlers, 'save_state', None)
        if save is None:
            return
        try:
            save()
            if self._save_failing_since is not None:
                log.info('Pipeline state saved again after %.0f s without ZooKeeper',
                         time.monotonic() - self._save_failing_since)
                self._save_failing_since = None
        except Exception as exc:
            from kazoo import exceptions as zk_errors
            if not isinstance(exc, (zk_errors.ConnectionLoss, zk_errors.OperationTimeoutError,
                                    zk_errors.SessionExpiredError)):
                log.exception('Error saving the pipeline state')
                return
            # ZooKeeper away (no quorum, no connection): the state stays in
            # memory and the next batch saves it; say so once in a while,
            # not at every batch.
            now = time.monotonic()
            if self._save_failing_since is None:
                self._save_failing_since = now
            if now - self._save_warned >= SAVE_WARNING_INTERVAL:
                self._save_warned = now
                log.warning('ZooKeeper unavailable (%s): pipeline state not saved for '
                            '%.0f s; events are kept until it is', type(exc).__name__,
                            now - self._save_failing_since)

    def _settle(self) -> None:
        # Let managers act on what the events changed, until stable (bounded:
        # each pass either changes something or ends the loop).
        for _ in range(100):
            try:
                if not self._timed(self.handlers.process_pipelines):
                    return
            except Exception:
                log.exception('Error processing pipelines')
                return
            with self._cond:
                if self.management or self.results or self.triggers:
                    return


def _describe(step, args) -> str:
    name = getattr(step, '__name__', repr(step))
    if len(args) == 2:      # (kind, event) of _dispatch
        kind, event = args
        detail = getattr(event, 'kind', None) or getattr(event, 'type', None) or ''
        return f'{name} {kind} {detail}'.strip()
    return name
