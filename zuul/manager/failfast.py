"""``fail-fast`` of a project-pipeline: once a voting job fails, the item
will fail, so its other builds are canceled, its jobs not started are
skipped (the failed job named as the reason), and it is reported without
waiting for the rest. A failure-output match (the executor's pre-fail)
counts as that failure at once, while its build runs on to the end."""

from __future__ import annotations

from zuul.model import item as m


def fail_now(manager, item: m.QueueItem, failed: m.Build, log) -> None:
    """``failed`` ended with a failure: cancel the rest of the item."""
    bs = item.current_build_set
    running = [b.job.name for b in bs.builds.values() if not b.finished]
    log.info('%s failed and %s is fail-fast: canceling %s', failed.job.name,
             manager.name, ', '.join(running) or 'nothing')
    manager.cancel_jobs(item)
    _skip_unstarted(bs, f'Skipped due to fail-fast: {failed.job.name} ended {failed.result}')


def on_pre_fail(manager, build: m.Build, log) -> None:
    """``build``'s console matched its ``failure-output``: cancel the
    item's other builds and node requests now; ``build`` runs on (its
    post-run and logs) and the item is reported when it ends."""
    bs = build.build_set
    item = bs.item
    if item.current_build_set is not bs or not bs.fail_fast or not build.job.voting:
        return
    ctx = manager.ctx
    others = [b for b in bs.builds.values() if b is not build and not b.finished]
    log.info('%s is failing (failure-output) and %s is fail-fast: canceling %s',
             build.job.name, manager.name, ', '.join(b.job.name for b in others) or 'nothing')
    for request in bs.node_requests.values():
        ctx.cancel_node_request(request)
    bs.node_requests.clear()
    for other in others:
        other.canceled = True
        ctx.cancel_build(other)
        other.result = m.CANCELED
        nodeset = bs.nodesets.pop(other.job.name, None)
        if nodeset is not None:
            ctx.return_nodes(nodeset)
        ctx.release_semaphores(bs, other.job.name)
    _skip_unstarted(bs, f'Skipped due to fail-fast: {build.job.name} is failing')


def _skip_unstarted(bs: m.BuildSet, reason: str) -> None:
    for job in bs.jobs or ():
        if job.name not in bs.builds and job.name not in bs.skipped:
            bs.skipped[job.name] = reason
