"""The dependent manager (gate): changes are tested in parallel as if the
ones ahead of them had already merged, in named queues that several
projects may share, inside a window that grows on success and shrinks on
failure."""

from __future__ import annotations

from zuul.manager.base import PipelineManager, item_log
from zuul.manager.batching import Batching
from zuul.model import item as m


class DependentPipelineManager(PipelineManager):
    dependent = True

    def __init__(self, pipeline, ctx):
        super().__init__(pipeline, ctx)
        # ``batching`` (zuul/manager/batching.py); None: released behaviour.
        config = getattr(pipeline, 'batching', None)
        self.batching = Batching(self, config) if config is not None else None

    def process_queues(self) -> bool:
        changed = self.batching.plan() if self.batching is not None else False
        return super().process_queues() or changed

    def _start_jobs(self, item: m.QueueItem) -> bool:
        if self.batching is not None and not self.batching.may_start_jobs(item):
            return False
        return super()._start_jobs(item)

    def _finish_report(self, item: m.QueueItem, action: str, merged: bool,
                       was_disabled: bool) -> None:
        queue = item.queue
        super()._finish_report(item, action, merged, was_disabled)
        if self.batching is not None and not item.quiet:
            self.batching.record(queue, action, bool(getattr(item, 'merged', False)))

    def add_change(self, change, event=None, quiet: bool = False, live: bool = True,
                   ignore_requirements: bool = False) -> m.QueueItem | None:
        # Released Zuul asks the code-review system whether the change
        # can merge (draft, conflicts, branch protection) before it
        # enters a gate, and reports why not.
        cannot_merge = getattr(self.ctx, 'cannot_merge', None)
        if live and cannot_merge is not None and self.find_item(change) is None:
            reason = cannot_merge(self.pipeline, change)
            if reason:
                self._refuse(change, event, quiet, f'{change.describe()} can not be merged: '
                             f'{reason}')
                return None
        return super().add_change(change, event, quiet, live, ignore_requirements)

    def get_queue(self, change, create: bool = True) -> m.ChangeQueue | None:
        """The change's queue: the one of its shared queue's name (with
        ``per-branch: true`` the name carries the branch, so each branch
        has its own), else its project's own."""
        name, projects = self.ctx.get_queue_config(self.pipeline, change)
        for queue in self.queues:
            if (queue.name == name) if name else (change.project in queue.projects):
                if change.project not in queue.projects:
                    queue.projects.append(change.project)
                return queue
        if not create:
            return None
        p = self.pipeline
        queue = m.ChangeQueue(
            self.name, name=name or change.project, projects=list(projects or [change.project]),
            window=p.window, window_floor=p.window_floor, window_ceiling=p.window_ceiling,
            window_increase_type=p.window_increase_type,
            window_increase_factor=p.window_increase_factor,
            window_decrease_type=p.window_decrease_type,
            window_decrease_factor=p.window_decrease_factor, branch=self._queue_branch(change))
        self.queues.append(queue)
        return queue

    def _queue_branch(self, change) -> str | None:
        """The branch a ``per-branch`` shared queue is for (None for a
        queue of every branch)."""
        settings = getattr(self.ctx, 'queue_settings', None)
        if settings is None or not settings(self.pipeline, change).per_branch:
            return None
        return getattr(change, 'branch', None)

    def enqueue_needed_changes(self, change, event, quiet, deps) -> bool:
        # A needed change in a cycle of its own brings its whole bundle
        # (add_change); the other changes of that cycle are then found.
        queue = self.get_queue(change, create=False)
        for dep in deps.needed:
            existing = self.find_item(dep)
            if existing is not None:
                if existing.queue is not queue:
                    return False  # needed change is in another queue
                continue
            dep_queue = self.get_queue(dep, create=False)
            if queue is not None and dep_queue is not None and dep_queue is not queue:
                return False
            if not self._shares_queue(change, dep):
                return False
            if self.add_change(dep, event, quiet=quiet) is None:
                return False
        return True

    def _items_needing(self, item: m.QueueItem, behind) -> list[m.QueueItem]:
        # Items behind that needed it (Depends-On, git parent) now miss a
        # change ahead of them; the others were only reset.
        return [other for other in behind
                if other.live and self.ctx.missing_needed_changes(other)]

    def _shares_queue(self, change, dep) -> bool:
        name, projects = self.ctx.get_queue_config(self.pipeline, change)
        if dep.project == change.project:
            return True
        return bool(name) and dep.project in (projects or [])

    def promote(self, changes) -> None:
        """Move the given changes to the head of their queue, in order,
        and restart everything behind them."""
        items = [self.find_item(c) for c in changes]
        items = [i for i in items if i is not None]
        if not items:
            return
        queue = items[0].queue
        if self.batching is not None:
            self.batching.forget(queue)    # batches are consecutive items
        rest = [i for i in queue.queue if i not in items]
        for item in list(queue.queue):
            self.cancel_jobs(item)
            item.reset_build_set()
            item.item_ahead = None
            item.items_behind = []
        queue.queue = []
        for item in items + rest:
            queue.enqueue_item(item)
            item_log(item).info('Promoted queue order: %s at %d', item.change.describe(),
                                queue.queue.index(item))
