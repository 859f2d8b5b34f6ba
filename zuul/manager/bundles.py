"""Dependency cycles (bundles of items) in a pipeline: a cycle is
enqueued as one, or refused with released Zuul's warning; it is reported
as one (every item's result is known before any is reported) and all its
changes merge or none does.

A mixin of :class:`zuul.manager.base.PipelineManager`: it uses the
manager's ``ctx``, ``get_queue``, ``all_items``, ``_connection_allowed``,
``_item_action``, ``_report_result``, ``_count_result``, ``cancel_jobs``
and ``remove_item``.
"""

from __future__ import annotations

import logging

from zuul.manager.cycles import CYCLE_QUEUES
from zuul.model import item as m

log = logging.getLogger('zuul.manager')

BUNDLE_FAILED = 'Skipped: another change of its dependency cycle failed'


def in_queue(item: m.QueueItem) -> bool:
    """Whether ``item`` is (still) in its queue."""
    return item.queue is not None and item in item.queue.queue


class BundleHandling:
    """The bundle half of a pipeline manager: enqueueing a cycle and
    reporting it."""

    # -- enqueueing -------------------------------------------------------

    def _refuse(self, change, event, quiet: bool, message: str) -> None:
        """``change`` may not be enqueued (a dependency cycle its queue
        does not allow): it gets the pipeline's failure report with
        ``message`` as a warning, as released Zuul reports it."""
        log.info('[e: %s] Not enqueueing %s in %s: %s',
                 getattr(event, 'event_id', None), change.describe(), self.name, message)
        if quiet:
            return
        item = m.QueueItem(change=change, event=event)
        item.warnings.append(message)
        item.current_build_set.jobs = []
        item.current_build_set.merge_state = m.MERGE_COMPLETE
        item.reported = True
        self._report_result(item, 'failure')

    def _cycle_members_allowed(self, change, others, ignore_requirements: bool) -> bool:
        for other in others:
            if not ignore_requirements and not self.ctx.change_meets_requirements(
                    self.pipeline, other):
                log.info('%s is in a dependency cycle with %s, which does not meet the '
                         'requirements of %s: not enqueueing the cycle', change.describe(),
                         other.describe(), self.name)
                return False
            if not self._connection_allowed(other):
                return False
        return True

    def _take_out_for_bundle(self, cycle) -> None:
        """Items of the cycle's changes enqueued before the cycle closed
        leave (unreported): the bundle replaces them."""
        keys = {c.key for c in cycle}
        for item in list(self.all_items()):
            if item.live and item.change.key in keys and in_queue(item):
                log.info('[e: %s] %s is now part of a dependency cycle: replacing its item by the '
                         'cycle\'s', item.event_id, item.change.describe())
                queue = item.queue
                self.remove_item(item)
                if not any(i.live for i in queue.queue):
                    for support in list(queue.queue):   # needed only by that item
                        self.remove_item(support)

    def _enqueue_bundle(self, change, cycle, event, quiet: bool, ignore_requirements: bool,
                        queue=None, ahead=()) -> m.QueueItem | None:
        """Enqueue every change of ``cycle`` (which holds ``change``) as
        one bundle of live items, one after the other in one queue (the
        shared queue of the changes, or ``queue``), behind the changes
        ``ahead`` as items that are not live."""
        others = [c for c in cycle if c.key != change.key]
        if not self._cycle_members_allowed(change, others, ignore_requirements):
            return None
        if queue is None:
            queue = self.get_queue(change)
            if queue is None:
                return None
            if any(self.get_queue(other) is not queue for other in others):
                self._refuse(change, event, quiet, CYCLE_QUEUES.format(
                    changes=', '.join(c.describe() for c in cycle)))
                return None
        self._take_out_for_bundle(cycle)
        for dep in ahead:
            queue.enqueue_item(m.QueueItem(change=dep, event=event, live=False))
        bundle = m.Bundle()
        for c in cycle:
            item = m.QueueItem(change=c, event=event, live=True, quiet=quiet)
            bundle.add(item)
            queue.enqueue_item(item)
        log.info('[e: %s] Enqueued the dependency cycle %s in %s queue %s',
                 bundle.items[0].event_id, bundle.describe(), self.name,
                 queue.name or '<independent>')
        for item in bundle.items:
            self.ctx.item_enqueued(self.pipeline, item)
            if not quiet:
                self.ctx.report(self.pipeline, item, 'enqueue')
        return next(i for i in bundle.items if i.change.key == change.key)

    # -- reporting --------------------------------------------------------

    def _bundle_at_head(self, bundle: m.Bundle) -> bool:
        """In a dependent pipeline a bundle reports once nothing but its
        own items is ahead of it (the changes ahead merged or left)."""
        if not self.dependent:
            return True
        items = bundle.live_items()
        return bool(items) and items[0].item_ahead is None

    def _bundle_ready_to_report(self, bundle: m.Bundle) -> bool:
        if not self._bundle_at_head(bundle):
            return False
        if bundle.is_failing():
            return not any(i.current_build_set.merge_state == m.MERGE_PENDING
                           for i in bundle.live_items())
        return bundle.is_complete()

    def _stop_failed_bundle(self, item: m.QueueItem) -> bool:
        """An item of ``item``'s bundle failed, so the bundle will: this
        item's running builds are canceled and its jobs not started are
        skipped (it is reported with the bundle)."""
        bs = item.current_build_set
        if bs.jobs is None or not item.live:
            return False
        pending = [j.name for j in bs.jobs if not bs.is_started(j.name)]
        running = [b for b in bs.builds.values() if not b.finished]
        if not pending and not running and not bs.node_requests:
            return False
        if running or bs.node_requests:
            log.info('[e: %s] The dependency cycle of %s failed: canceling its builds',
                     item.event_id, item.change.describe())
            self.cancel_jobs(item)
        for name in pending:
            bs.skipped[name] = BUNDLE_FAILED
        return True

    def _bundle_actions(self, items) -> dict:
        """Each item's report: its own result when all of them succeeded
        (no-jobs is fine outside a gate); otherwise a failure for every
        item that would have succeeded, its own failure for the others."""
        own = {item: self._item_action(item) for item in items}
        fine = ('success',) if self.dependent else ('success', 'no-jobs')
        if all(action in fine for action in own.values()):
            return own
        return {item: 'failure' if action in ('success', 'no-jobs') else action
                for item, action in own.items()}

    def _report_bundle(self, bundle: m.Bundle) -> None:
        items = bundle.live_items()
        actions = self._bundle_actions(items)
        failed = any(action != 'success' and action != 'no-jobs'
                     for action in actions.values())
        bundle.action = 'failure' if failed else 'success'
        log.info('[e: %s] Reporting the dependency cycle %s of %s: %s',
                 items[0].event_id, bundle.describe(), self.name, bundle.action)
        merged_items, unmerged = [], []
        for item in items:
            action = actions[item]
            if unmerged and action == 'success':
                # An earlier change of the cycle did not merge: this one is
                # not submitted either.
                action = 'merge-failure'
                item.current_build_set.unable_to_merge = True
                item.warnings.append(_partial_merge_warning(merged_items, unmerged))
            merged = self._report_bundle_item(item, action)
            if self.dependent:
                (merged_items if merged else unmerged).append(item)
            if self.dependent and action == 'success' and not merged:
                item.current_build_set.unable_to_merge = True
                item.warnings.append(_partial_merge_warning(merged_items, unmerged))
                if not self.disabled:
                    self._report_result(item, 'merge-failure')
        if self.dependent:
            queue = items[0].queue
            if merged_items and not unmerged:
                queue.increase_window()
            else:
                queue.decrease_window()
        if not items[0].quiet:
            gated_but_unmerged = self.dependent and not failed and bool(unmerged)
            self._count_result('merge-failure' if gated_but_unmerged else bundle.action)
        for item in items:
            self.ctx.item_reported(self.pipeline, item, actions[item])
        for item in items:
            if in_queue(item):
                self.remove_item(item, merged=item in merged_items)

    def _report_bundle_item(self, item: m.QueueItem, action: str) -> bool:
        """Report one item of a bundle; True if its change merged."""
        if item.quiet:
            return False
        item.reported = True
        merged = self._report_result(item, action)
        if merged:
            item.merged = True
        return merged


def _partial_merge_warning(merged_items, unmerged) -> str:
    text = 'Some changes of this dependency cycle failed to merge: ' + \
        ', '.join(i.change.describe() for i in unmerged) + '.'
    if merged_items:
        text += ' These merged already, so their branches may be broken: ' + \
            ', '.join(i.change.describe() for i in merged_items) + '.'
    return text
