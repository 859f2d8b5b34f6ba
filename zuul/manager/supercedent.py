"""The supercedent manager (post, promote): one queue per project and ref;
only the newest waiting item is kept behind the one running."""

from __future__ import annotations

from zuul.manager.base import PipelineManager
from zuul.model import item as m


class SupercedentPipelineManager(PipelineManager):
    dependent = False

    def get_queue(self, change, create: bool = True) -> m.ChangeQueue | None:
        key = f'{change.project}:{getattr(change, "branch", None) or change.ref}'
        for queue in self.queues:
            if queue.name == key:
                return queue
        if not create:
            return None
        queue = m.ChangeQueue(self.name, name=key, projects=[change.project], dynamic=True)
        self.queues.append(queue)
        return queue

    def add_change(self, change, event=None, quiet: bool = False, live: bool = True,
                   ignore_requirements: bool = False) -> m.QueueItem | None:
        queue = self.get_queue(change, create=False)
        if queue is not None:
            # Anything waiting behind the head is superseded by the newcomer.
            for waiting in queue.queue[1:]:
                self.remove_item(waiting)
        return super().add_change(change, event, quiet, live, ignore_requirements)

    def _process_item(self, item: m.QueueItem, nnfi):
        # Only the head of each queue runs; the one behind waits its turn.
        if item.queue.queue and item.queue.queue[0] is not item:
            return False, nnfi
        return super()._process_item(item, None)
