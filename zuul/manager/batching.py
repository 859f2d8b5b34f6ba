"""Batched gating with bisection (pipeline ``batching``).

In a dependent pipeline with ``batching``, consecutive queued changes
are grouped into batches. Only the last item of a batch (its *tail*)
runs jobs; its speculative state already holds every change of the
batch, merged in queue order on top of everything ahead. The other items
(*riders*) merge and freeze their jobs as usual, and each of their jobs
that the tail also runs, checking out the rider's project, counts the
tail's build (the job-deduplication link of zuul/model/item.py, so a
rider's report links the tail's build). A rider's job the tail does not
run, or runs without the rider's project, runs on the rider itself.

When the batch passes, every item reports success and merges, in queue
order: what merges is exactly what the tail's build tested. When the
tail fails, the culprit is searched for (``bisect``). ``parallel`` (the
default): every change of the batch becomes a batch of one, all run at
once, each on top of those before it; the first that fails is the
culprit, reported failed and dequeued as in released Zuul. ``halves``:
the first half becomes a batch of its own (its last item the new tail)
and is tested while the second half waits; a half that passes merges,
one that fails is split again, until a batch of one fails. The parts are
*suspect* batches; while one ahead has not passed, the batches behind it
start no jobs (their speculative state would hold a change about to
leave); the parts of one parallel split do not hold each other. A second
half whose first half passed is split again without a run while the
changes ahead of it are those its tail failed with: its run would test
the tree that failed.

The batch size N adapts to the recent failure rate ``f`` of the queue's
changes (``adaptive: true``): the largest N (up to ``max``) for which a
batch of N still passes at least half of the time, (1 - f)^N >= 1/2.
Successes lower the rate and so grow N again.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field

from zuul.manager.base import item_log
from zuul.model import item as m

# Changes remembered per queue for the failure rate, and how many count
# at least (so the first failure does not shrink batches to one).
RECENT_CHANGES = 50
MIN_SAMPLE = 10


@dataclass(eq=False)
class Batch:
    """Consecutive items of one queue tested by one run of the tail."""

    items: list = field(default_factory=list)
    # Split from a batch that failed: it may hold the culprit.
    suspect: bool = False
    # The item set up to run the jobs (to notice when the tail changed).
    runner: object = None
    # Its tail already failed, testing it with these items ahead of it
    # (every item ahead in the queue then, this batch's own included):
    # while the same changes are ahead (those gone merged), running it
    # again would test the same tree, so it is split without a run.
    failed_with: tuple | None = None
    # The failed batch this one was split from: with ``bisect:
    # parallel`` its parts run at once, each on top of those before it.
    group: object = None

    @property
    def tail(self):
        return self.items[-1]

    def passed(self) -> bool:
        bs = self.tail.current_build_set
        return bs.jobs is not None and self.tail.did_all_jobs_succeed()



class FailureRate:
    """The share of recently reported changes of a queue that failed."""

    def __init__(self, size: int = RECENT_CHANGES):
        self.outcomes: collections.deque = collections.deque(maxlen=size)

    def record(self, failed: bool) -> None:
        self.outcomes.append(bool(failed))

    def rate(self) -> float:
        return sum(self.outcomes) / max(len(self.outcomes), MIN_SAMPLE)


def batch_size(maximum: int, adaptive: bool, rate: float) -> int:
    """N for failure rate ``rate``: ``maximum`` unless adaptive; then the
    largest N <= maximum with (1 - rate)^N >= 1/2 (at least 1)."""
    if not adaptive or rate <= 0:
        return maximum
    if rate >= 1:
        return 1
    return max(1, min(maximum, int(math.log(0.5) / math.log(1 - rate))))


class QueueBatches:
    """The batches of one change queue, in queue order."""

    def __init__(self, config):
        self.config = config
        self.batches: list[Batch] = []
        self.failures = FailureRate()
        self.sizes: list[int] = []   # N each time a batch was formed

    @property
    def size(self) -> int:
        return batch_size(self.config.max, self.config.adaptive, self.failures.rate())

    def batch_of(self, item) -> Batch | None:
        for batch in self.batches:
            if item in batch.items:
                return batch
        return None

    def held(self, batch: Batch) -> bool:
        """Whether a suspect batch ahead of ``batch`` is unresolved (the
        parts of one parallel bisection do not hold each other)."""
        for ahead in self.batches:
            if ahead is batch:
                return False
            if ahead.suspect and not ahead.passed() and \
                    not (batch.group is not None and ahead.group is batch.group):
                return True
        return False


class Batching:
    """The batching of one dependent pipeline manager's queues."""

    def __init__(self, manager, config):
        self.manager = manager
        self.config = config
        self.queues: dict[int, QueueBatches] = {}

    def of(self, queue) -> QueueBatches:
        state = self.queues.get(id(queue))
        if state is None:
            state = self.queues[id(queue)] = QueueBatches(self.config)
        return state

    def forget(self, queue) -> None:
        self.queues.pop(id(queue), None)

    # -- planning (before every pass over the queues) --------------------

    def plan(self) -> bool:
        changed = False
        live_queues = {id(q) for q in self.manager.queues}
        for key in [k for k in self.queues if k not in live_queues]:
            del self.queues[key]
        for queue in self.manager.queues:
            state = self.of(queue)
            self._drop_gone(queue, state)
            self._trim_to_window(queue, state)
            changed |= self._bisect_failures(state)
            changed |= self._split_known_failures(queue, state)
            self._drop_own_failures(state)
            changed |= self._form(queue, state)
            # New batches go last, but items behind a dropped culprit come
            # back ahead of waiting batches: keep them in queue order.
            position = {id(item): n for n, item in enumerate(queue.queue)}
            state.batches.sort(key=lambda b: position[id(b.items[0])])
            for batch in state.batches:
                self._set_runner(batch)
        return changed

    @staticmethod
    def _drop_gone(queue, state: QueueBatches) -> None:
        for batch in state.batches:
            batch.items = [i for i in batch.items if i.queue is queue and i in queue.queue]
        state.batches = [b for b in state.batches if b.items]

    @staticmethod
    def _trim_to_window(queue, state: QueueBatches) -> None:
        """The window shrank (a change failed): items now outside it
        leave their batch (the last one inside becomes the tail), else a
        tail that may not run would hold its riders forever. They are
        batched again once inside."""
        for batch in state.batches:
            batch.items = [i for i in batch.items if queue.is_actionable(i)]
        state.batches = [b for b in state.batches if b.items]

    def _bisect_failures(self, state: QueueBatches) -> bool:
        changed = False
        for batch in list(state.batches):
            tail = batch.tail
            if len(batch.items) < 2 or not tail.live or tail.has_failed_merge_or_config():
                continue
            if tail.current_build_set.jobs is None or not tail.did_any_voting_job_fail():
                continue
            self._split(state, batch)
            changed = True
        return changed

    def _split(self, state: QueueBatches, batch: Batch) -> None:
        """The tail failed: split the batch (``bisect``); every batch
        behind waits for the culprit."""
        failed = [b.job.name for b in batch.tail.current_build_set.builds.values()
                  if b.result not in (None, m.SUCCESS, m.SKIPPED)]
        if self.config.bisect == 'parallel':
            index = self._split_all(state, batch)
            how = f'testing each of its {len(batch.items)} changes at once'
        else:
            queue = batch.tail.queue.queue
            ahead = tuple(queue[:queue.index(batch.tail)])
            index = self._halve(state, batch, ahead)
            how = f'testing the first {len(state.batches[index].items)} first'
        behind = index + 1
        while behind < len(state.batches) and state.batches[behind].items[0] in batch.items:
            behind += 1
        item_log(batch.tail).info('Batch of %d (%s) failed (%s): bisecting, %s',
                                  len(batch.items),
                                  ', '.join(i.change.describe() for i in batch.items),
                                  ', '.join(failed) or 'a voting job', how)
        for item in batch.items:
            item.current_build_set.deduplicated.clear()
        self.manager.reset_item(batch.tail, 'its batch failed and is bisected')
        for later in state.batches[behind:]:
            for item in later.items:
                self._stop(item, 'a batch ahead failed and is bisected')

    @staticmethod
    def _halve(state: QueueBatches, batch: Batch, failed_with: tuple) -> int:
        """Replace ``batch`` by its two halves (the second keeps its
        tail, and so the failure); returns the first half's index."""
        half = len(batch.items) // 2
        first = Batch(batch.items[:half], suspect=True)
        second = Batch(batch.items[half:], suspect=True, failed_with=failed_with)
        index = state.batches.index(batch)
        state.batches[index:index + 1] = [first, second]
        return index

    @staticmethod
    def _split_all(state: QueueBatches, batch: Batch) -> int:
        """``bisect: parallel``: every change of ``batch`` becomes a batch
        of its own, all run at once (each on top of the ones before it, as
        without batching): the first that fails is the culprit, found in
        one round; those behind it run again without it."""
        group = object()
        parts = [Batch([item], suspect=True, group=group) for item in batch.items]
        index = state.batches.index(batch)
        state.batches[index:index + 1] = parts
        return index

    def _split_known_failures(self, queue, state: QueueBatches) -> bool:
        """A second half whose first half passed would run its tail on
        exactly the tree whose run failed: it is split again without that
        run (a batch of one still runs, so the culprit fails on its own
        build). Only ever saves a run: what merges still needs a passing
        one."""
        changed = False
        for batch in list(state.batches):
            if batch.failed_with is None or state.held(batch):
                continue
            tail_bs = batch.tail.current_build_set
            if len(batch.items) < 2 or tail_bs.builds or tail_bs.node_requests or \
                    not _same_ahead(queue, batch):
                batch.failed_with = None     # it runs
                continue
            item_log(batch.tail).info(
                'Batch of %d (%s) is known to fail (its tail failed with the same changes '
                'ahead): bisecting it without running it', len(batch.items),
                ', '.join(i.change.describe() for i in batch.items))
            self._halve(state, batch, batch.failed_with)
            changed = True
        return changed

    def _stop(self, item, why: str) -> None:
        bs = item.current_build_set
        if bs.builds or bs.node_requests:
            self.manager.reset_item(item, why)

    @staticmethod
    def _drop_own_failures(state: QueueBatches) -> None:
        """An item whose own merge, config or job failed (a rider's
        uncovered job, or the tail of a batch of one: the culprit) is not
        tested by the batch: it leaves it and fails on its own, as in a
        gate without batching. Runs after bisection, which resets the
        tails of larger failed batches."""
        for batch in state.batches:
            batch.items = [i for i in batch.items if not _fails_on_its_own(i)]
        state.batches = [b for b in state.batches if b.items]

    def _form(self, queue, state: QueueBatches) -> bool:
        """Items not yet in a batch join the last batch while its tail has
        started nothing, else make new batches of up to N."""
        batched = {id(i) for b in state.batches for i in b.items}
        changed = False
        for item in queue.queue:
            if id(item) in batched or not self._batchable(queue, item):
                continue
            last = state.batches[-1] if state.batches else None
            if last is None or not self._may_grow(state, last, queue, item):
                last = Batch()
                state.batches.append(last)
                state.sizes.append(state.size)
            last.items.append(item)
            batched.add(id(item))
            changed = True
        return changed

    @staticmethod
    def _batchable(queue, item) -> bool:
        if not item.live or item.bundle is not None or _fails_on_its_own(item):
            return False
        return queue.is_actionable(item)

    @staticmethod
    def _may_grow(state: QueueBatches, batch: Batch, queue, item) -> bool:
        if batch.suspect or len(batch.items) >= state.sizes[-1]:
            return False
        tail_bs = batch.tail.current_build_set
        if tail_bs.builds or tail_bs.node_requests or batch.tail.is_failing():
            return False
        # Only consecutive items: nothing unbatched between them.
        position = queue.queue.index
        return position(item) == position(batch.tail) + 1

    @staticmethod
    def _set_runner(batch: Batch) -> None:
        """A new tail (the old one left, or a split) runs its own jobs."""
        if batch.runner is not batch.tail:
            batch.tail.current_build_set.deduplicated.clear()
            batch.runner = batch.tail

    # -- asked by the manager ---------------------------------------------

    def may_start_jobs(self, item) -> bool:
        """Whether ``item`` may start (some of) its jobs now; links a
        rider's covered jobs to its tail's build set first."""
        state = self.queues.get(id(item.queue))
        batch = state.batch_of(item) if state is not None else None
        if batch is None:
            return True
        if state.held(batch):
            return False
        if item is batch.tail:
            # Known to fail: the next plan splits it (or lets it run).
            return batch.failed_with is None or len(batch.items) < 2
        tail_bs = batch.tail.current_build_set
        if tail_bs.jobs is None:
            return False   # which jobs the tail covers is not known yet
        link_covered_jobs(item, batch.tail)
        return True

    def record(self, queue, action: str, merged: bool) -> None:
        """A reported item counts towards its queue's failure rate."""
        if queue is None or action not in ('success', 'failure', 'merge-failure'):
            return
        self.of(queue).failures.record(not merged)


def _same_ahead(queue, batch: Batch) -> bool:
    """Whether the tail of ``batch`` would now test the tree of the
    failed run recorded in ``failed_with``: the items ahead of it are
    those of then, less some that merged since."""
    items = queue.queue
    now = items[:items.index(batch.tail)]
    then = batch.failed_with
    remaining = [i for i in then if i in now]
    if remaining != now:
        return False        # another change came in ahead, or the order changed
    return all(getattr(i, 'merged', False) for i in then if i not in now)


def _fails_on_its_own(item) -> bool:
    """Its merge or config failed, or one of its own builds (not one of
    the tail it links to) failed."""
    if item.has_failed_merge_or_config():
        return True
    bs = item.current_build_set
    for name, build in bs.builds.items():
        job = bs.job(name)
        if job is not None and job.voting and build.result not in (None, m.SUCCESS,
                                                                    m.SKIPPED):
            return True
    return False


def projects_checked_out(job: m.JobRef, item) -> set[str]:
    """The projects a build of ``job`` for ``item`` tests: the item's own
    and the job's ``required-projects``."""
    names = {item.change.project}
    frozen = job.frozen
    required = frozen.get('required_projects') if frozen is not None else None
    for entry in required or ():
        name = entry.get('name') if isinstance(entry, dict) else getattr(entry, 'name', entry)
        if isinstance(name, str):
            names.add(name)
    return names


def _covers(tail_job: m.JobRef, tail, project: str) -> bool:
    for name in projects_checked_out(tail_job, tail):
        if name == project or name.endswith('/' + project):
            return True
    return False


def link_covered_jobs(rider, tail) -> None:
    """Each job of ``rider`` that ``tail`` also runs with the rider's
    project checked out counts the tail's build."""
    bs = rider.current_build_set
    tail_bs = tail.current_build_set
    if rider not in tail_bs.dependent_items:
        return      # the tail's merge does not hold it: it tests itself
    project = rider.change.project
    for job in bs.jobs or ():
        if job.name in bs.builds or job.name in bs.skipped:
            continue
        tail_job = tail_bs.job(job.name)
        if tail_job is not None and job.voting <= tail_job.voting and \
                _covers(tail_job, tail, project):
            bs.deduplicated[job.name] = tail_bs
