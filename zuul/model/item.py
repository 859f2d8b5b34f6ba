"""Pipeline state: queues, items, build sets and builds.

Pure data plus the small decisions that only need this data (which jobs
are ready, whether an item is done). The pipeline managers drive it.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

# Build results, as released Zuul reports them.
SUCCESS = 'SUCCESS'
FAILURE = 'FAILURE'
POST_FAILURE = 'POST_FAILURE'
RETRY_LIMIT = 'RETRY_LIMIT'
TIMED_OUT = 'TIMED_OUT'
NODE_FAILURE = 'NODE_FAILURE'
MERGER_FAILURE = 'MERGER_FAILURE'
CONFIG_ERROR = 'CONFIG_ERROR'
SKIPPED = 'SKIPPED'
CANCELED = 'CANCELED'
ABORTED = 'ABORTED'
RETRY = 'RETRY'

# Why a build is retried without using up one of the job's ``attempts``:
# its executor was stopped (or restarted) under it; the build never got
# to its end (zuul.executor.infrafailure.EXECUTOR_STOPPED).
EXECUTOR_STOPPED = 'infra:executor-stopped'
UNCOUNTED_RETRIES = frozenset({EXECUTOR_STOPPED})

MERGE_NEW = 'new'
MERGE_PENDING = 'pending'
MERGE_COMPLETE = 'complete'


def new_uuid() -> str:
    return uuid.uuid4().hex


# ctx.report's answer while a merging report runs off the scheduler's loop.
REPORT_PENDING = 'report-pending'


@dataclass(eq=False)
class JobRef:
    """What the queue logic needs to know about a frozen job."""

    name: str
    voting: bool = True
    hard_dependencies: tuple[str, ...] = ()
    soft_dependencies: tuple[str, ...] = ()
    attempts: int = 3
    nodes: tuple[tuple[str, str], ...] = ()  # (node name, label)
    semaphores: tuple[str, ...] = ()
    hold_following_changes: bool = False
    frozen: object = None  # the full frozen job, passed to the executor

    @property
    def dependencies(self) -> tuple[str, ...]:
        return self.hard_dependencies + self.soft_dependencies


@dataclass(eq=False)
class Build:
    job: JobRef
    build_set: BuildSet
    uuid: str = field(default_factory=new_uuid)
    result: str | None = None
    url: str | None = None
    log_url: str | None = None
    start_time: float | None = None
    end_time: float | None = None
    executor: str | None = None
    result_data: dict = field(default_factory=dict)
    error_detail: str | None = None
    canceled: bool = False
    # Set while the build runs when its console matched the job's
    # ``failure-output``: the build will fail, so the item counts as
    # failing (and the gate resets behind it) before the playbook ends.
    pre_fail: bool = False
    # Issue 21 (zuul/scheduler/classify.py, zuul/scheduler/reuse.py): why
    # it failed ('infra:...' or 'test'), the content hash of its inputs,
    # and the build whose result it reused ({uuid, log_url, ...}).
    failure_class: str | None = None
    input_hash: str | None = None
    reused_from: dict | None = None
    # What it ran on: the job's nodeset (its name, or its labels for one
    # written inline) and each node ({name, label, provider, id, ...}).
    nodeset: str | None = None
    nodes: list = field(default_factory=list)
    # The executor zone of its nodes (node attribute ``executor-zone``):
    # only an executor of that zone runs it.
    zone: str | None = None

    @property
    def finished(self) -> bool:
        return self.result is not None

    @property
    def duration(self) -> float | None:
        if self.start_time is None or self.end_time is None:
            return None
        return self.end_time - self.start_time


@dataclass(eq=False)
class BuildSet:
    """One attempt at testing an item: a speculative merge, a frozen job
    graph, node requests and builds. Replaced wholesale on a reset."""

    item: QueueItem
    uuid: str = field(default_factory=new_uuid)
    merge_state: str = MERGE_NEW
    merge_request: object = None
    repo_state: dict = field(default_factory=dict)
    commit: str | None = None
    files: list[str] | None = None
    # Config files as the speculative merge left them (ProjectFiles of
    # zuul.merger.protocol), for speculative layouts.
    read_files: list | None = None
    unable_to_merge: bool = False
    merge_error: str | None = None
    config_errors: list = field(default_factory=list)
    layout: object = None
    jobs: list[JobRef] | None = None
    builds: dict[str, Build] = field(default_factory=dict)
    node_requests: dict[str, object] = field(default_factory=dict)
    nodesets: dict[str, object] = field(default_factory=dict)
    tries: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # job -> reason
    # The project-pipeline's ``fail-fast``: the first failing voting job
    # ends the build set (running builds canceled, the rest skipped).
    fail_fast: bool = False
    # The project-pipeline's ``debug``: notes on how the jobs were chosen,
    # added to the report (None: not asked for).
    debug_messages: list | None = None
    # The items ahead whose changes this build set was built on (and, in
    # a dependency cycle, the other items of its bundle).
    dependent_items: tuple = ()
    # Job ``deduplicate``: job name -> the build set (of another item of
    # the same bundle) whose build of that job counts for this one too.
    deduplicated: dict[str, BuildSet] = field(default_factory=dict)
    # Issue 21: the state after the speculative merge (MergeResult
    # merged_state), builds that ended RETRY and ran again (kept for the
    # history), and branch heads pinned for result reuse.
    merged_state: dict = field(default_factory=dict)
    retried_builds: list = field(default_factory=list)
    pinned_state: dict = field(default_factory=dict)

    def job(self, name: str) -> JobRef | None:
        for j in self.jobs or ():
            if j.name == name:
                return j
        return None

    def bind_builds_to_jobs(self) -> None:
        """Builds restored from saved state point at a placeholder job
        until the jobs are frozen again; then at their frozen job."""
        for name, build in self.builds.items():
            job = self.job(name)
            if job is not None and build.job is not job:
                build.job = job

    def build_for(self, name: str) -> Build | None:
        """This build set's build of job ``name``, or the one of the
        bundle item it was deduplicated to (while that is current)."""
        build = self.builds.get(name)
        if build is not None:
            return build
        owner = self.deduplicated.get(name)
        if owner is None:
            return None
        if owner.item.current_build_set is not owner:
            del self.deduplicated[name]     # the owner was reset: run again
            return None
        if name in owner.skipped:
            return None
        return owner.builds.get(name)

    def is_started(self, name: str) -> bool:
        """Whether job ``name`` has a build, is skipped, or is
        deduplicated to another item's build."""
        return name in self.builds or name in self.skipped or name in self.deduplicated

    def result_of(self, name: str) -> str | None:
        if name in self.skipped:
            return SKIPPED
        owner = self.deduplicated.get(name)
        if owner is not None and owner.item.current_build_set is owner and \
                name in owner.skipped:
            return SKIPPED
        build = self.build_for(name)
        return build.result if build else None


@dataclass(eq=False)
class QueueItem:
    change: object
    event: object = None
    queue: ChangeQueue | None = None
    item_ahead: QueueItem | None = None
    items_behind: list[QueueItem] = field(default_factory=list)
    live: bool = True
    active: bool = False
    quiet: bool = False
    enqueue_time: float = field(default_factory=time.time)
    dequeue_time: float | None = None
    reported: bool = False
    reported_start: bool = False
    # The report being sent (written to ZooKeeper before it is sent, so a
    # scheduler restored from that state knows where it was).
    reporting: str | None = None
    reporting_time: float | None = None
    # (action, pipeline disabled then) of a report whose outcome (did the
    # change merge?) a connection's worker is still finding out; the item
    # stays until it is known (zuul/manager/base.py on_report_completed).
    pending_report: tuple | None = None
    dequeued_needing_change: str | None = None
    dequeued_missing_requirements: bool = False
    id: str = field(default_factory=new_uuid)
    current_build_set: BuildSet | None = None
    # The dependency cycle this item's change is part of (with
    # ``allow-circular-dependencies``), None for a change on its own.
    bundle: Bundle | None = None
    # Notes added to the item's report (e.g. why it was not enqueued).
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self):
        if self.current_build_set is None:
            self.current_build_set = BuildSet(self)

    @property
    def event_id(self) -> str:
        return getattr(self.event, 'event_id', None) or self.id[:12]

    def reset_build_set(self) -> BuildSet:
        old = self.current_build_set
        self.current_build_set = BuildSet(self)
        return old

    # -- job state ------------------------------------------------------

    def has_jobs(self) -> bool:
        return bool(self.current_build_set.jobs)

    def ready_jobs(self) -> list[JobRef]:
        """Jobs that can start: not started, not skipped, every hard
        dependency succeeded and every soft dependency that runs for this
        item succeeded (a soft dependency that does not run is ignored)."""
        bs = self.current_build_set
        ready = []
        for job in bs.jobs or ():
            if bs.is_started(job.name):
                continue
            if self._dependencies_met(job):
                ready.append(job)
        return ready

    def _dependencies_met(self, job: JobRef) -> bool:
        bs = self.current_build_set
        for dep in job.hard_dependencies:
            if bs.result_of(dep) != SUCCESS:
                return False
        for dep in job.soft_dependencies:
            if bs.job(dep) is None:
                continue
            if bs.result_of(dep) != SUCCESS:
                return False
        return True

    def skip_dependents_of_failures(self) -> bool:
        """Mark SKIPPED ("Skipped due to failed job X") every job whose
        dependency ended without success, transitively: a hard one, or a
        soft one that ran for this item (as released Zuul: soft only
        means the job may run without it when it does not run). Returns
        True if anything changed."""
        bs = self.current_build_set
        changed = True
        any_change = False
        while changed:
            changed = False
            for job in bs.jobs or ():
                if bs.is_started(job.name):
                    continue
                for dep in job.dependencies:
                    result = bs.result_of(dep)
                    if result is not None and result != SUCCESS:
                        bs.skipped[job.name] = f'Skipped due to failed job {dep}'
                        changed = any_change = True
                        break
        return any_change

    def skip_jobs(self, names, reason: str) -> None:
        """zuul_return child-job selection: skip the named jobs."""
        bs = self.current_build_set
        for name in names:
            if name not in bs.builds and name not in bs.deduplicated:
                bs.skipped[name] = reason

    def are_all_jobs_complete(self) -> bool:
        bs = self.current_build_set
        if bs.jobs is None:
            return False
        return all(bs.result_of(j.name) is not None for j in bs.jobs)

    def did_any_voting_job_fail(self) -> bool:
        bs = self.current_build_set
        for job in bs.jobs or ():
            result = bs.result_of(job.name)
            if job.voting and result not in (None, SUCCESS, SKIPPED):
                return True
            build = bs.build_for(job.name)
            if job.voting and result is None and build is not None and build.pre_fail:
                return True
        return False

    def did_all_jobs_succeed(self) -> bool:
        return self.are_all_jobs_complete() and not self.did_any_voting_job_fail()

    def has_failed_merge_or_config(self) -> bool:
        bs = self.current_build_set
        return bs.unable_to_merge or bool(bs.config_errors)

    def is_failing(self) -> bool:
        """Whether this item will not succeed: it cannot merge, has a
        config error, or a voting job failed."""
        return self.has_failed_merge_or_config() or self.did_any_voting_job_fail()

    def items_ahead(self):
        item = self.item_ahead
        while item is not None:
            yield item
            item = item.item_ahead


@dataclass(eq=False)
class Bundle:
    """The items of one dependency cycle: enqueued together, each
    tested with all of them, reported together, merged all or none."""

    id: str = field(default_factory=new_uuid)
    items: list[QueueItem] = field(default_factory=list)
    # Set once the bundle's result is being reported, so each item
    # reports the bundle's result and not only its own.
    action: str | None = None

    def add(self, item: QueueItem) -> None:
        item.bundle = self
        self.items.append(item)

    def live_items(self) -> list[QueueItem]:
        """The bundle's items still in their queue."""
        return [i for i in self.items if i.queue is not None and i in i.queue.queue]

    def is_failing(self) -> bool:
        return any(i.is_failing() for i in self.live_items())

    def is_complete(self) -> bool:
        """Every item has its result: all jobs ended, or its merge or
        configuration failed."""
        return all(i.current_build_set.merge_state == MERGE_COMPLETE and
                   (i.has_failed_merge_or_config() or i.are_all_jobs_complete())
                   for i in self.live_items())

    def describe(self) -> str:
        return ', '.join(i.change.describe() for i in self.items)


@dataclass(eq=False)
class ChangeQueue:
    """A queue of items in one pipeline; in a dependent pipeline it may be
    shared by several projects (named queues) and has a window."""

    pipeline_name: str
    name: str = ''
    projects: list[str] = field(default_factory=list)
    branch: str | None = None
    queue: list[QueueItem] = field(default_factory=list)
    window: int = 0
    window_floor: int = 3
    window_ceiling: int | None = None
    window_increase_type: str = 'linear'
    window_increase_factor: int = 1
    window_decrease_type: str = 'exponential'
    window_decrease_factor: int = 2
    dynamic: bool = False

    def enqueue_item(self, item: QueueItem) -> None:
        item.queue = self
        if self.queue:
            item.item_ahead = self.queue[-1]
            item.item_ahead.items_behind.append(item)
        self.queue.append(item)

    def dequeue_item(self, item: QueueItem) -> None:
        if item in self.queue:
            self.queue.remove(item)
        if item.item_ahead:
            item.item_ahead.items_behind.remove(item)
        for behind in item.items_behind:
            behind.item_ahead = item.item_ahead
            if item.item_ahead:
                item.item_ahead.items_behind.append(behind)
        item.item_ahead = None
        item.items_behind = []
        item.dequeue_time = time.time()

    def move_item(self, item: QueueItem, new_ahead: QueueItem | None) -> bool:
        """Re-base ``item`` so that it is tested right behind ``new_ahead``
        (the nearest item ahead that is not failing). The item keeps its
        place in the list; only the speculative chain changes."""
        if item.item_ahead is new_ahead:
            return False
        if item.item_ahead:
            item.item_ahead.items_behind.remove(item)
        item.item_ahead = new_ahead
        if new_ahead:
            new_ahead.items_behind.append(item)
        return True

    def is_actionable(self, item: QueueItem) -> bool:
        if not self.window:
            return True
        return self.queue.index(item) < self.window

    def increase_window(self) -> None:
        if not self.window:
            return
        if self.window_increase_type == 'exponential':
            self.window *= self.window_increase_factor
        else:
            self.window += self.window_increase_factor
        if self.window_ceiling:
            self.window = min(self.window, self.window_ceiling)

    def decrease_window(self) -> None:
        if not self.window:
            return
        if self.window_decrease_type == 'exponential':
            self.window = max(self.window_floor,
                              self.window // max(self.window_decrease_factor, 1))
        else:
            self.window = max(self.window_floor, self.window - self.window_decrease_factor)
