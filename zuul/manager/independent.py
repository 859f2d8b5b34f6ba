"""The independent manager (check): every change is tested on its own,
on top of the changes it depends on that have not merged yet."""

from __future__ import annotations

from zuul.manager.base import PipelineManager
from zuul.model import item as m


class IndependentPipelineManager(PipelineManager):
    dependent = False

    def get_queue(self, change, create: bool = True) -> m.ChangeQueue | None:
        if not create:
            return None
        # Each change has its own queue, named (as in released Zuul) after
        # the project's configured queue, else the project.
        name, _ = self.ctx.get_queue_config(self.pipeline, change)
        queue = m.ChangeQueue(self.name, name=name or change.project,
                              projects=[change.project], dynamic=True)
        self.queues.append(queue)
        return queue

    def add_change(self, change, event=None, quiet: bool = False, live: bool = True,
                   ignore_requirements: bool = False) -> m.QueueItem | None:
        existing = self.find_item(change)
        if existing and not self._is_newer(change, existing.change):
            return existing
        if not ignore_requirements and not self.ctx.change_meets_requirements(
                self.pipeline, change):
            return None
        needed = [] if self.pipeline.ignore_dependencies else \
            self.ctx.get_needed_changes(change)
        if needed is None:  # a cycle or an unknown change
            return None
        if not all(self._connection_allowed(c) for c in [change, *needed]):
            return None
        # Each queue holds its own copies of the changes needed, so all of
        # them count towards max-changes-per-pipeline.
        if self._limits_set() and self._over_tenant_limits(change, needed):
            return None
        queue = self.get_queue(change)
        for dep in needed:
            queue.enqueue_item(m.QueueItem(change=dep, event=event, live=False))
        item = m.QueueItem(change=change, event=event, live=True, quiet=quiet)
        queue.enqueue_item(item)
        self.ctx.item_enqueued(self.pipeline, item)
        if not quiet:
            self.ctx.report(self.pipeline, item, 'enqueue')
        return item

    def _new_changes_for(self, change, needed) -> int:
        return 1 + len(needed)

    def _items_needing(self, item: m.QueueItem, behind) -> list[m.QueueItem]:
        # A queue holds one live change behind the changes it needs, so a
        # change leaving takes the live one tested on top of it along.
        return [other for other in behind if other.live]

    @staticmethod
    def _is_newer(change, old) -> bool:
        return change.is_update_of(old) if hasattr(change, 'is_update_of') else False
