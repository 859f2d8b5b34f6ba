"""The independent manager (check): every change is tested on its own,
on top of the changes it depends on that have not merged yet."""

from __future__ import annotations

from zuul.manager.base import PipelineManager
from zuul.manager.cycles import Dependencies
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
        if existing is not None and existing.pending_report is not None:
            # Done here: its result is being reported off the loop. As when
            # reports were sent on the loop (the item gone by the time the
            # next event was handled), the change is enqueued afresh.
            existing = None
        if existing and not self._is_newer(change, existing.change):
            return existing
        if not ignore_requirements and not self.ctx.change_meets_requirements(
                self.pipeline, change):
            return None
        if self.pipeline.ignore_dependencies:
            deps = Dependencies(groups=[[change]])
        else:
            deps = self.ctx.resolve_dependencies(self.pipeline, change)
        if deps.error:
            self._refuse(change, event, quiet, deps.error)
            return None
        needed = deps.needed
        others = [c for c in deps.cycle if c.key != change.key]
        if not all(self._connection_allowed(c) for c in [change, *needed]):
            return None
        # Each queue holds its own copies of the changes needed, so all of
        # them count towards max-changes-per-pipeline.
        if self._limits_set() and self._over_tenant_limits(change, needed + others):
            return None
        if others:
            return self._enqueue_cycle(change, deps, event, quiet, ignore_requirements)
        queue = self.get_queue(change)
        for dep in needed:
            queue.enqueue_item(m.QueueItem(change=dep, event=event, live=False))
        item = m.QueueItem(change=change, event=event, live=True, quiet=quiet)
        queue.enqueue_item(item)
        self.ctx.item_enqueued(self.pipeline, item)
        if not quiet:
            self.ctx.report(self.pipeline, item, 'enqueue')
        return item

    def _enqueue_cycle(self, change, deps, event, quiet, ignore_requirements):
        """A change in a dependency cycle: one queue holds the changes the
        cycle needs (not live), then every change of the cycle as one
        bundle of live items, each tested with all of them."""
        others = [c for c in deps.cycle if c.key != change.key]
        if not self._cycle_members_allowed(change, others, ignore_requirements):
            return None
        return self._enqueue_bundle(change, deps.cycle, event, quiet, True,
                                    queue=self.get_queue(change), ahead=deps.needed)

    def _new_changes_for(self, change, needed) -> int:
        return 1 + len(needed)

    def _items_needing(self, item: m.QueueItem, behind) -> list[m.QueueItem]:
        # A queue holds one live change behind the changes it needs, so a
        # change leaving takes the live one tested on top of it along.
        return [other for other in behind if other.live]

    @staticmethod
    def _is_newer(change, old) -> bool:
        return change.is_update_of(old) if hasattr(change, 'is_update_of') else False

