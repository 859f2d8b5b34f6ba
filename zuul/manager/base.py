"""The pipeline manager base: how items move through a pipeline.

A manager owns its pipeline's queues and is only ever called from the
scheduler's one event thread. Everything slow (merges, node requests,
builds, reports to the code-review system) goes through ``ctx``, a narrow
set of collaborators the scheduler provides; results come back as calls
to ``on_merge_completed``, ``on_nodes_provisioned``, ``on_build_started``
and ``on_build_completed``, after which the scheduler calls
``process_queues``.

Subclasses say how queues are found and whether items are tested on top
of each other (dependent) or alone (independent).
"""

from __future__ import annotations

import logging
import time

from zuul.manager import failfast
from zuul.manager.bundles import BundleHandling, in_queue
from zuul.manager.cycles import deduplication_source
from zuul.model import item as m
from zuul.model.change import Change

log = logging.getLogger('zuul.manager')

# What a change is told when processing it failed unexpectedly; the
# exception itself goes only to the scheduler's log.
# Why an item leaves when its change no longer meets the pipeline's
# requirements (logged; the report is reporting.MISSING_REQUIREMENT).
MISSING_REQUIREMENTS = 'it no longer meets the requirements of the pipeline'

INTERNAL_ERROR = ('Zuul was unable to prepare the jobs of this change because of an '
                  'unexpected error. The Zuul operators can find the details in the '
                  'scheduler log under event id {event_id}.')


class ItemLogAdapter(logging.LoggerAdapter):
    """Every log line about an item carries its event id."""

    def process(self, msg, kwargs):
        return f'[e: {self.extra["event_id"]}] {msg}', kwargs


def item_log(item: m.QueueItem) -> ItemLogAdapter:
    return ItemLogAdapter(log, {'event_id': item.event_id})


class PipelineManager(BundleHandling):
    """Template-method base for independent, dependent and supercedent."""

    dependent = False

    def __init__(self, pipeline, ctx):
        self.pipeline = pipeline
        self.ctx = ctx
        self.queues: list[m.ChangeQueue] = []
        # ``disable-after-consecutive-failures``: kept by this manager in
        # memory, so a reconfiguration (which builds new managers) or a
        # scheduler restart re-enables the pipeline and restarts the count.
        self.consecutive_failures = 0
        self.disabled = False

    @property
    def name(self) -> str:
        return self.pipeline.name

    # -- hooks for subclasses -------------------------------------------

    def get_queue(self, change, create: bool = True) -> m.ChangeQueue | None:
        raise NotImplementedError

    def enqueue_needed_changes(self, change, event, quiet, deps) -> bool:
        """Make sure the changes ``change`` needs (``deps``, a
        ``cycles.Dependencies``) are merged or ahead of it; returns False
        if it must not be enqueued."""
        return True

    # -- queries --------------------------------------------------------

    def all_items(self):
        for queue in self.queues:
            yield from queue.queue

    def find_item(self, change) -> m.QueueItem | None:
        for item in self.all_items():
            if item.change.key == change.key and item.live:
                return item
        return None

    def is_change_in_pipeline(self, change) -> bool:
        return any(i.change.key == change.key and i.live and _same_version(i.change, change)
                   for i in self.all_items())

    # -- adding and removing --------------------------------------------

    def add_change(self, change, event=None, quiet: bool = False, live: bool = True,
                   ignore_requirements: bool = False) -> m.QueueItem | None:
        """Enqueue ``change`` if it belongs here; returns the item."""
        existing = self.find_item(change)
        if existing and _same_version(existing.change, change):
            if live and not existing.live:
                existing.live = True
            return existing
        if not ignore_requirements and not self.ctx.change_meets_requirements(
                self.pipeline, change):
            log.debug('%s does not meet the requirements of %s', change.describe(), self.name)
            return None
        if not self._connection_allowed(change):
            return None
        deps = None
        if live and not self.pipeline.ignore_dependencies:
            deps = self.ctx.resolve_dependencies(self.pipeline, change)
            if deps.error:
                self._refuse(change, event, quiet, deps.error)
                return None
        if live and self._over_tenant_limits(change, self._needed_for_limits(change, deps)):
            return None
        if deps is not None and not self.enqueue_needed_changes(change, event, quiet, deps):
            log.info('%s: dependencies not satisfied, not enqueueing in %s',
                     change.describe(), self.name)
            return None
        if deps is not None and len(deps.cycle) > 1:
            return self._enqueue_bundle(change, deps.cycle, event, quiet, ignore_requirements)
        queue = self.get_queue(change)
        if queue is None:
            return None
        item = m.QueueItem(change=change, event=event, live=live, quiet=quiet)
        queue.enqueue_item(item)
        item_log(item).info('Enqueued %s in %s queue %s', change.describe(), self.name,
                            queue.name or '<independent>')
        self.ctx.item_enqueued(self.pipeline, item)
        if live and not quiet:
            self.ctx.report(self.pipeline, item, 'enqueue')
        return item

    def _connection_allowed(self, change) -> bool:
        """``allow-other-connections: false``: only changes (live, or
        needed by one) from a connection the pipeline's configuration names
        (trigger, require, reject, a reporter) may be enqueued."""
        if getattr(self.pipeline, 'allow_other_connections', True):
            return True
        connection = getattr(change, 'connection', None)
        if connection in (getattr(self.pipeline, 'connection_drivers', None) or {}):
            return True
        log.info('%s is from connection %s, which pipeline %s does not use '
                 '(allow-other-connections is false): not enqueueing it',
                 change.describe(), connection, self.name)
        return False

    # -- tenant limits ------------------------------------------------------

    def _tenant_limit(self, name: str) -> int | None:
        """The tenant's ``max-changes-per-pipeline``/``max-dependencies``
        (attribute ``name``), None when unset."""
        limits = getattr(self.ctx, 'tenant_limits', None)
        return limits().get(name) if limits is not None else None

    def _limits_set(self) -> bool:
        return self._tenant_limit('max_changes_per_pipeline') is not None or \
            self._tenant_limit('max_dependencies') is not None

    def _needed_for_limits(self, change, deps=None) -> list:
        """The unmerged changes ``change`` needs (with the other changes
        of its dependency cycle), looked up only when a tenant limit is
        set (the lookup is not free)."""
        if self.pipeline.ignore_dependencies or not self._limits_set():
            return []
        if deps is not None:
            return deps.needed + [c for c in deps.cycle if c.key != change.key]
        return self.ctx.get_needed_changes(change) or []

    def changes_in_pipeline(self) -> int:
        """Every change in every queue, live or not; a change in several
        items counts once per item."""
        return sum(len(queue.queue) for queue in self.queues)

    def _new_changes_for(self, change, needed) -> int:
        """How many changes enqueueing ``change`` (with ``needed``) adds."""
        return 1 + sum(1 for dep in needed if self.find_item(dep) is None)

    def _over_tenant_limits(self, change, needed) -> bool:
        """True (logged, never reported) when enqueueing ``change`` would
        pass the tenant's ``max-dependencies`` or
        ``max-changes-per-pipeline``."""
        max_deps = self._tenant_limit('max_dependencies')
        if max_deps is not None and len(needed) > max_deps:
            log.warning('%s has %d dependencies, more than max-dependencies (%d) of the '
                        'tenant: not enqueueing it in %s', change.describe(), len(needed),
                        max_deps, self.name)
            return True
        max_changes = self._tenant_limit('max_changes_per_pipeline')
        if max_changes is not None:
            now = self.changes_in_pipeline()
            adding = self._new_changes_for(change, needed)
            if now + adding > max_changes:
                log.warning('Pipeline %s is full: it holds %d changes, %s would add %d and '
                            'max-changes-per-pipeline of the tenant is %d; not enqueueing it',
                            self.name, now, change.describe(), adding, max_changes)
                return True
        return False

    def remove_item(self, item: m.QueueItem, merged: bool = False) -> None:
        """Take ``item`` out; cancel its work; items that were built on top
        of it without it having merged are reset."""
        self.cancel_jobs(item)
        queue = item.queue
        if not merged:
            for other in list(queue.queue):
                if item in other.current_build_set.dependent_items:
                    self.reset_item(other, f'{item.change.describe()} left the queue')
        queue.dequeue_item(item)
        item_log(item).info('Dequeued %s from %s', item.change.describe(), self.name)
        if not queue.queue and queue.dynamic:
            self.queues.remove(queue)
        self.ctx.item_dequeued(self.pipeline, item)

    def dequeue_change(self, change, reason: str = 'dequeued') -> bool:
        item = self.find_item(change)
        if item is None:
            return False
        if item.live and not item.quiet:
            self.ctx.report(self.pipeline, item, 'dequeue')
        self.remove_item(item)
        return True

    # -- leaving on events ---------------------------------------------

    def recheck_change(self, change, event=None) -> list[m.QueueItem]:
        """An event concerned ``change`` (as its source describes it now):
        every item of it that no longer belongs here leaves at once, with
        the items that need it. Called for every trigger event about a
        change, before the event may enqueue anything. Returns the items
        that left."""
        if not isinstance(change, Change):
            return []
        left: list[m.QueueItem] = []
        for item in list(self.all_items()):
            if item.queue is None or item.change.key != change.key:
                continue
            if item.pending_report is not None:
                continue    # our own merge under way: its outcome decides
            if isinstance(item.change, Change) and change.is_merged and \
                    (self.dependent or not item.live):
                # Merged outside the gate, or a dependency that merged:
                # nothing to cancel or report; what was built on top of
                # it is reset.
                item_log(item).info('%s merged; dequeuing it from %s',
                                    item.change.describe(), self.name)
                self.remove_item(item)
                left.append(item)
                continue
            reason = self._reason_to_leave(item, change)
            if reason is not None:
                left += self.dequeue_item(item, reason, event)
        return left

    def _reason_to_leave(self, item: m.QueueItem, change) -> str | None:
        old = item.change
        if not isinstance(old, Change) or change.is_merged:
            return None
        if not change.is_open:
            return f'the change is {change.status.lower()}'
        if change.is_update_of(old):
            if getattr(self.pipeline, 'dequeue_on_new_patchset', True):
                return f'patchset {change.patchset} replaced it'
            return None  # kept; requirements are of its own patchset
        if change.patchset != old.patchset or not item.live:
            return None
        if _manually_enqueued(item):
            return None  # an operator enqueued it past the requirements
        if not self.ctx.change_meets_requirements(self.pipeline, change):
            item.dequeued_missing_requirements = True
            return MISSING_REQUIREMENTS
        return None

    def dequeue_missing_requirements(self, item: m.QueueItem, event=None) -> list[m.QueueItem]:
        """Take out ``item``, whose change no longer meets the pipeline's
        requirements (whatever the driver, whoever noticed): reported as
        released Zuul does, through the failure actions (see
        ``_report_dequeue``). Returns every item that left."""
        item.dequeued_missing_requirements = True
        return self.dequeue_item(item, MISSING_REQUIREMENTS, event)

    def _report_dequeue(self, item: m.QueueItem) -> str:
        """The report of a live item leaving before its result: an item
        that no longer meets the requirements gets the failure report
        (its vote is the failure vote) saying "This change is unable to
        merge due to a missing merge requirement."; any other only the
        ``dequeue`` reporters. Returns the action recorded."""
        if item.dequeued_missing_requirements:
            self._report_result(item, 'failure')
            self._count_result('failure')
            return 'failure'
        self.ctx.report(self.pipeline, item, 'dequeue')
        return 'dequeued'

    def dequeue_item(self, item: m.QueueItem, reason: str, event=None,
                     report: bool = True) -> list[m.QueueItem]:
        """Take ``item`` out before it completes: its builds are canceled,
        node requests canceled and nodes returned, the items behind it are
        reset without it, and the pipeline's ``dequeue`` reporters (if
        any) are told -- or, for an item that no longer meets the
        pipeline's requirements, its failure reporters
        (``_report_dequeue``). Items that need it leave with it. Returns
        every item that left."""
        event_id = getattr(event, 'event_id', None) or item.event_id
        log.info('[e: %s] Dequeuing %s from %s: %s', event_id, item.change.describe(),
                 self.name, reason)
        queue = item.queue
        behind = self._items_behind_in_list(item) if queue is not None else []
        action = 'failure' if item.dequeued_missing_requirements else 'dequeued'
        if item.live:
            if report and not item.quiet and not item.reported:
                item.reported = True
                action = self._report_dequeue(item)
        self.remove_item(item)
        if item.live:
            self.ctx.item_reported(self.pipeline, item, action)
        left = [item]
        if item.bundle is not None:
            for other in item.bundle.items:
                if in_queue(other):
                    left += self.dequeue_item(
                        other, f'it is in a dependency cycle with {item.change.describe()}, '
                        f'which left ({reason})', event, report)
        for other in self._items_needing(item, behind):
            if in_queue(other):
                left += self.dequeue_item(
                    other, f'it needs {item.change.describe()}, which left ({reason})',
                    event, report)
        return left

    def _items_needing(self, item: m.QueueItem, behind) -> list[m.QueueItem]:
        """Of the items that were behind ``item`` (which just left), those
        that cannot go on without it."""
        return []

    def dequeue_superseded(self, change, by: str, event=None) -> list[m.QueueItem]:
        """``change`` entered pipeline ``by``, which supersedes this one:
        its live items leave here, unreported."""
        left = []
        for item in list(self.all_items()):
            if item.queue is not None and item.live and item.change.key == change.key:
                left += self.dequeue_item(item, f'superseded by pipeline {by}', event,
                                          report=False)
        return left

    # -- resets ---------------------------------------------------------

    def cancel_jobs(self, item: m.QueueItem) -> None:
        bs = item.current_build_set
        for name, request in list(bs.node_requests.items()):
            self.ctx.cancel_node_request(request)
        bs.node_requests.clear()
        for build in bs.builds.values():
            if not build.finished:
                build.canceled = True
                self.ctx.cancel_build(build)
                build.result = m.CANCELED  # whatever the executor says later
        for nodeset in bs.nodesets.values():
            self.ctx.return_nodes(nodeset)
        bs.nodesets.clear()
        self.ctx.release_semaphores(bs)
        if bs.merge_state == m.MERGE_PENDING:
            self.ctx.cancel_merge(bs)

    def reset_item(self, item: m.QueueItem, why: str) -> None:
        """Start testing ``item`` afresh; the items of its dependency
        cycle are tested with it, so they start afresh too."""
        items = [item]
        if item.bundle is not None:
            items += [i for i in item.bundle.items if i is not item and in_queue(i)]
        for each in items:
            item_log(each).info('Resetting %s: %s', each.change.describe(), why)
            self.cancel_jobs(each)
            each.reset_build_set()

    # -- the main loop --------------------------------------------------

    def process_queues(self) -> bool:
        changed = False
        for queue in list(self.queues):
            nnfi = None
            for item in list(queue.queue):
                if item.queue is not queue or item not in queue.queue:
                    continue  # removed while processing (e.g. with its bundle)
                try:
                    item_changed, nnfi = self._process_item(item, nnfi)
                except Exception:
                    # One item's problem (a config that breaks freezing, a
                    # bug) must not stall every item behind it.
                    item_log(item).exception('Unexpected error processing %s in %s',
                                             item.change.describe(), self.name)
                    self._fail_item(item)
                    item_changed = True
                changed = changed or item_changed
        return changed

    def _fail_item(self, item: m.QueueItem) -> None:
        """Report ``item`` as a config error (the details are in the log,
        under its event id) and take it out of the pipeline."""
        bs = item.current_build_set
        bs.config_errors = [INTERNAL_ERROR.format(event_id=item.event_id)]
        if bs.jobs is None:
            bs.jobs = []
        try:
            if item.live and not item.quiet and not item.reported:
                item.reported = True
                self._report_result(item, 'config-error')
            if item.live:
                self.ctx.item_reported(self.pipeline, item, 'config-error')
        except Exception:
            item_log(item).exception('Unable to report the failure of %s',
                                     item.change.describe())
        try:
            self.remove_item(item)
        except Exception:
            item_log(item).exception('Unable to dequeue %s cleanly', item.change.describe())
            queue = item.queue
            if queue is not None and item in queue.queue:
                queue.dequeue_item(item)
                if not queue.queue and queue.dynamic and queue in self.queues:
                    self.queues.remove(queue)

    def _process_item(self, item: m.QueueItem, nnfi):
        changed = False
        queue = item.queue
        if self.dependent and item.live and not self._needed_changes_ok(item):
            return True, nnfi
        if self.dependent and queue.move_item(item, self._expected_ahead(item, nnfi)):
            self.reset_item(item, 'the items ahead of it changed')
            changed = True
        elif self.dependent and self._built_on_other_items(item):
            self.reset_item(item, 'the items it was tested with changed')
            changed = True
        bundle_failing = item.bundle is not None and item.bundle.is_failing()
        actionable = queue.is_actionable(item)
        if actionable:
            changed |= self._prepare(item)
            if item.live and not bundle_failing:
                changed |= self._start_jobs(item)
        if bundle_failing:
            changed |= self._stop_failed_bundle(item)
        failing = (item.is_failing() or bundle_failing) if item.live else False
        if item.bundle is not None and item.live:
            if self._bundle_ready_to_report(item.bundle):
                self._report_bundle(item.bundle)
                return True, nnfi
        elif item.live and self._ready_to_report(item):
            self._report_and_remove(item)
            # An item whose merge is under way stays ahead of the others.
            return True, (item if item.pending_report is not None else nnfi)
        if not item.live and not any(i.live for i in self._items_behind_in_list(item)):
            self.remove_item(item)  # support item nobody needs anymore
            return True, nnfi
        if not failing:
            nnfi = item
        return changed, nnfi

    def _items_behind_in_list(self, item):
        q = item.queue.queue
        return q[q.index(item) + 1:]

    def _needed_changes_ok(self, item: m.QueueItem) -> bool:
        """In a dependent pipeline a change may only be tested behind the
        changes it needs; if one of them left the queue unmerged, so does
        this change."""
        missing = self.ctx.missing_needed_changes(item)
        if not missing:
            return True
        item.dequeued_needing_change = missing
        item_log(item).info('%s needs %s, which is no longer ahead of it',
                            item.change.describe(), missing)
        if not item.quiet:
            self._report_result(item, 'failure')
            self._count_result('failure')
        self.remove_item(item)
        return False

    def _prepare(self, item: m.QueueItem) -> bool:
        bs = item.current_build_set
        if not item.live:
            return False  # a change tested only as the base of others
        if bs.merge_state == m.MERGE_NEW:
            items = self._merge_items(item)
            bs.dependent_items = tuple(i for i in items if i is not item)
            bs.merge_state = m.MERGE_PENDING
            bs.merge_request = self.ctx.request_merge(self.pipeline, item, items)
            return True
        if bs.merge_state != m.MERGE_COMPLETE or not item.live:
            return False
        if bs.jobs is None and not bs.unable_to_merge:
            jobs, errors = self.ctx.freeze_jobs(self.pipeline, item)
            bs.config_errors = list(errors or [])
            bs.jobs = jobs or []
            if bs.builds:   # restored after a scheduler restart
                bs.bind_builds_to_jobs()
            if bs.jobs and not item.reported_start and not item.quiet:
                item.reported_start = True
                if not self.disabled:  # a disabled pipeline makes no start reports
                    self.ctx.report(self.pipeline, item, 'start')
            return True
        return False

    def _merge_items(self, item: m.QueueItem) -> list[m.QueueItem]:
        """The items whose changes this one is tested on top of, oldest
        first, then the item itself, then (in a dependency cycle) the
        items of its bundle behind it: each item of a bundle is tested
        with all of them."""
        ahead = [i for i in item.items_ahead() if not getattr(i, 'merged', False)]
        behind = []
        if item.bundle is not None:
            members = [i for i in item.bundle.items if in_queue(i)]
            behind = members[members.index(item) + 1:] if item in members else []
        return list(reversed(ahead)) + [item] + behind

    def _expected_ahead(self, item: m.QueueItem, nnfi):
        """The item ``item`` is to be tested behind: the nearest
        non-failing item ahead, but an item of a bundle stays right behind
        the bundle item before it."""
        if item.bundle is not None:
            members = [i for i in item.bundle.items if in_queue(i)]
            position = members.index(item) if item in members else 0
            if position > 0:
                return members[position - 1]
        return nnfi

    def _built_on_other_items(self, item: m.QueueItem) -> bool:
        """Whether ``item``'s speculative merge holds other items than it
        would now (an item ahead of an item ahead was taken out of the
        chain, a bundle changed): then it is tested again."""
        bs = item.current_build_set
        if bs.merge_state == m.MERGE_NEW or not item.live:
            return False
        was = [i for i in bs.dependent_items if in_queue(i)]
        now = [i for i in self._merge_items(item) if i is not item]
        return was != now

    def _start_jobs(self, item: m.QueueItem) -> bool:
        bs = item.current_build_set
        if bs.jobs is None or item.has_failed_merge_or_config():
            return False
        if self.dependent and self._held_by_changes_ahead(item):
            return False
        changed = item.skip_dependents_of_failures()
        for job in item.ready_jobs():
            if job.name in bs.node_requests or job.name in bs.nodesets:
                continue
            source = deduplication_source(item, job)
            if source == 'wait':
                continue    # an earlier item of the bundle may run it for both
            if source is not None:
                bs.deduplicated[job.name] = source
                item_log(item).info('%s of %s is deduplicated: the build of %s counts',
                                    job.name, item.change.describe(),
                                    source.item.change.describe())
                changed = True
                continue
            if not self._requirements_met(item, job):
                changed = changed or job.name in bs.builds   # failed unrun
                continue
            reused = self._reuse_result(item, job)
            if reused == 'wait':
                continue    # its projects are being pinned: a later pass
            if reused:
                changed = True
                continue
            if not self.ctx.acquire_semaphores(item, job):
                continue  # waits until a holder elsewhere in the tenant finishes
            request = self.ctx.request_nodes(self.pipeline, item, job)
            if request is None:  # a job without nodes starts at once
                self._launch(item, job, None)
            else:
                bs.node_requests[job.name] = request
            changed = True
        return changed

    def _reuse_result(self, item: m.QueueItem, job: m.JobRef) -> bool | str:
        """Job ``reuse-results``: True when an earlier SUCCESS build had
        the same inputs and counts for this one, ``'wait'`` while that
        cannot be told yet (zuul/scheduler/reuse.py)."""
        return self.ctx.reuse_result(item, job)

    def _held_by_changes_ahead(self, item: m.QueueItem) -> bool:
        """A job with ``hold-following-changes`` in an item ahead that has
        not yet succeeded keeps this item's jobs from starting."""
        for ahead in item.items_ahead():
            abs_ = ahead.current_build_set
            for job in abs_.jobs or ():
                if job.hold_following_changes and abs_.result_of(job.name) != m.SUCCESS:
                    return True
        return False

    def _requirements_met(self, item: m.QueueItem, job: m.JobRef) -> bool:
        """A job that ``requires`` something waits, before asking for
        nodes, until the jobs providing it in the items ahead have ended;
        if one of them failed it fails unrun, with the reason."""
        from zuul.manager.requirements import FAIL, READY, requires_of
        if not requires_of(job):
            return True
        state = self.ctx.job_requirements(item, job)
        if state.state == READY:
            return True
        if state.state == FAIL:
            item_log(item).info('%s: %s', job.name, state.reason)
            bs = item.current_build_set
            now = time.time()
            build = m.Build(job, bs, start_time=now, end_time=now, error_detail=state.reason)
            bs.builds[job.name] = build
            self.on_build_completed(build, m.FAILURE)
        return False

    def _launch(self, item: m.QueueItem, job: m.JobRef, nodeset) -> None:
        bs = item.current_build_set
        if nodeset is not None:
            bs.nodesets[job.name] = nodeset
        bs.tries[job.name] = bs.tries.get(job.name, 0) + 1
        build = self.ctx.execute(self.pipeline, item, job, nodeset)
        bs.builds[job.name] = build
        item_log(item).info('Started build %s of %s (try %d)', build.uuid, job.name,
                            bs.tries[job.name])

    def _ready_to_report(self, item: m.QueueItem) -> bool:
        if item.pending_report is not None:
            return False
        bs = item.current_build_set
        if bs.merge_state != m.MERGE_COMPLETE:
            return False
        done = item.has_failed_merge_or_config() or item.are_all_jobs_complete()
        if not done:
            return False
        if self.dependent and item.item_ahead is not None:
            return False
        return True

    @staticmethod
    def _item_action(item: m.QueueItem) -> str:
        """The report an item's own results call for."""
        bs = item.current_build_set
        if bs.unable_to_merge:
            return 'merge-failure'
        if bs.config_errors:
            return 'config-error'
        if not bs.jobs:
            return 'no-jobs'
        if item.did_all_jobs_succeed():
            return 'success'
        return 'failure'

    def _report_and_remove(self, item: m.QueueItem) -> None:
        action = self._item_action(item)
        merged = False
        was_disabled = self.disabled
        if not item.quiet:
            item.reported = True
            merged = self._report_result(item, action)
            if merged == m.REPORT_PENDING:
                # A connection merges off the loop: the item waits at the
                # head for the outcome (on_report_completed).
                item.pending_report = (action, was_disabled)
                return
        self._finish_report(item, action, merged, was_disabled)

    def on_report_completed(self, item: m.QueueItem, merged: bool) -> None:
        """The outcome of a report that ran off the scheduler's loop."""
        pending = item.pending_report
        if pending is None or item.queue is None:
            return      # dequeued meanwhile
        item.pending_report = None
        self._finish_report(item, pending[0], bool(merged), pending[1])

    def _finish_report(self, item: m.QueueItem, action: str, merged: bool,
                       was_disabled: bool) -> None:
        bs = item.current_build_set
        if self.dependent:
            if action == 'success' and not merged:
                bs.unable_to_merge = True
                item_log(item).info('%s succeeded but did not merge', item.change.describe())
                if not was_disabled:
                    self._report_result(item, 'merge-failure')
            if merged:
                item.merged = True
                item.queue.increase_window()
            else:
                item.queue.decrease_window()
        if not item.quiet:
            gated_but_unmerged = self.dependent and action == 'success' and not merged
            self._count_result('merge-failure' if gated_but_unmerged else action)
        self.ctx.item_reported(self.pipeline, item, action)
        self.remove_item(item, merged=merged)

    # -- disable-after-consecutive-failures ------------------------------

    def _report_result(self, item: m.QueueItem, action: str) -> bool:
        """Report an item's result; True if its change merged. While the
        pipeline is disabled the result goes to the ``disabled`` reporters
        instead (whatever it is), so nothing merges."""
        if self.disabled:
            item.result_while_disabled = action
            self.ctx.report(self.pipeline, item, 'disabled')
            return False
        result = self.ctx.report(self.pipeline, item, action)
        return result if result == m.REPORT_PENDING else result is True

    def _count_result(self, action: str) -> None:
        """A reported failure counts towards
        ``disable-after-consecutive-failures``, a success starts the count
        again; at the limit the pipeline is disabled until the next
        reconfiguration."""
        limit = getattr(self.pipeline, 'disable_after_consecutive_failures', None)
        if not limit or self.disabled:
            return
        if action == 'success':
            self.consecutive_failures = 0
        elif action == 'failure':
            self.consecutive_failures += 1
            if self.consecutive_failures >= limit:
                self.disabled = True
                log.warning('Pipeline %s disabled after %d consecutive failures: its results '
                            'go to its disabled reporters until the tenant is reconfigured',
                            self.name, self.consecutive_failures)

    # -- results ----------------------------------------------------------

    def on_merge_completed(self, build_set: m.BuildSet, result) -> None:
        item = build_set.item
        if item.current_build_set is not build_set:
            return  # a reset happened meanwhile
        build_set.merge_state = m.MERGE_COMPLETE
        if not result.merged:
            build_set.unable_to_merge = True
            build_set.merge_error = getattr(result, 'error', None)
            item_log(item).info('%s did not merge: %s', item.change.describe(),
                                build_set.merge_error or 'conflict')
            return
        build_set.repo_state = result.repo_state
        build_set.merged_state = getattr(result, 'merged_state', None) or {}
        build_set.commit = result.commit
        build_set.files = getattr(result, 'files', None)
        build_set.read_files = getattr(result, 'read_files', None)

    def on_nodes_provisioned(self, item: m.QueueItem, job_name: str, request, nodeset,
                             failed: bool) -> None:
        bs = item.current_build_set
        if bs.node_requests.get(job_name) is not request:
            if nodeset is not None:
                self.ctx.return_nodes(nodeset)
            return
        del bs.node_requests[job_name]
        job = bs.job(job_name)
        if failed or job is None:
            self.ctx.release_semaphores(bs, job_name)
            build = m.Build(job or m.JobRef(job_name), bs, result=m.NODE_FAILURE,
                            failure_class='infra:node-failure')
            if job is not None and self._retry_node_failure(bs, job, build):
                return
            bs.builds[job_name] = build
            item_log(item).info('Node request for %s failed', job_name)
            return
        self._launch(item, job, nodeset)

    def _retry_node_failure(self, bs: m.BuildSet, job: m.JobRef, build: m.Build) -> bool:
        """The tenant's ``retry-node-failure``: a failed node request is
        made again while attempts are left (zuul/scheduler/classify.py)."""
        if not self.ctx.retry_node_failure(bs, job):
            return False
        bs.retried_builds.append(build)
        item_log(bs.item).info('Node request for %s failed: requesting nodes again (try %d '
                               'of %d)', job.name, bs.tries[job.name] + 1, job.attempts)
        return True

    def on_build_pre_fail(self, build: m.Build) -> None:
        """A running build matched its ``failure-output`` (zuul/manager/failfast.py)."""
        failfast.on_pre_fail(self, build, item_log(build.build_set.item))

    def on_build_completed(self, build: m.Build, result: str) -> None:
        bs = build.build_set
        item = bs.item
        nodeset = bs.nodesets.pop(build.job.name, None)
        if nodeset is not None:
            self.ctx.return_nodes(nodeset, build=build, result=result)
        if bs.builds.get(build.job.name) is build:
            self.ctx.release_semaphores(bs, build.job.name)
        if item.current_build_set is not bs or build.canceled:
            build.result = build.result or m.CANCELED
            return
        if result == m.RETRY and build.failure_class in m.UNCOUNTED_RETRIES:
            # stopped with its executor: this try does not count
            bs.tries[build.job.name] = max(0, bs.tries.get(build.job.name, 1) - 1)
        if result == m.RETRY and bs.tries.get(build.job.name, 0) < build.job.attempts:
            item_log(item).info('Build %s of %s will be retried (%s)', build.uuid,
                                build.job.name, build.failure_class or 'infra')
            build.result = m.RETRY
            bs.retried_builds.append(build)
            del bs.builds[build.job.name]
            return
        if result == m.RETRY:
            result = m.RETRY_LIMIT
        build.result = result
        item_log(item).info('Build %s of %s: %s', build.uuid, build.job.name, result)
        if bs.fail_fast and build.job.voting and result not in (m.SUCCESS, m.SKIPPED):
            failfast.fail_now(self, item, build, item_log(item))
            return
        skip = (build.result_data.get('zuul') or {}).get('child_jobs')
        if skip is not None and result == m.SUCCESS:
            children = [j.name for j in bs.jobs or () if build.job.name in j.dependencies]
            item.skip_jobs([c for c in children if c not in skip],
                           f'Skipped by {build.job.name}')


def _manually_enqueued(item: m.QueueItem) -> bool:
    return getattr(item.event, 'type', None) in ('zuul-enqueue', 'zuul-enqueue-ref')


def _same_version(a, b) -> bool:
    if isinstance(a, Change) and isinstance(b, Change):
        return a.patchset == b.patchset
    return getattr(a, 'newrev', None) == getattr(b, 'newrev', None)
