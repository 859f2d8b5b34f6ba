"""Reporting a dependency cycle (a bundle of items) as one: every item's
result is known before any is reported; all changes merge or none does.

A mixin of :class:`zuul.manager.base.PipelineManager`: it uses the
manager's ``ctx``, ``_item_action``, ``_report_result``,
``_count_result``, ``cancel_jobs`` and ``remove_item``.
"""

from __future__ import annotations

import logging

from zuul.model import item as m

log = logging.getLogger('zuul.manager')

BUNDLE_FAILED = 'Skipped: another change of its dependency cycle failed'


def _in_queue(item: m.QueueItem) -> bool:
    return item.queue is not None and item in item.queue.queue


class BundleReporting:
    """The bundle half of a pipeline manager."""

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
            if _in_queue(item):
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
