"""The status JSON (what the status page and ``zuul show`` read), in the
shape released Zuul serves at /api/tenant/<t>/status."""

from __future__ import annotations

import time

from zuul.model import item as m


def _ms(t: float | None) -> int | None:
    return None if t is None else int(t * 1000)


def job_status(item: m.QueueItem, job: m.JobRef, estimates=None,
               now: float | None = None, zones_up: set | None = None) -> dict:
    """One job of an item. Times as released Zuul gives them:
    ``elapsed_time`` and ``remaining_time`` in ms (remaining only for a
    running build with an estimate, 0 once it ended), ``estimated_time`` in
    seconds (the mean of recent successful builds, or None).
    ``estimates(item, job_name)`` supplies the estimate."""
    bs = item.current_build_set
    build = bs.build_for(job.name)
    result = bs.result_of(job.name)
    now = time.time() if now is None else now
    estimated = estimates(item, job.name) if estimates else None
    elapsed = remaining = None
    if build and build.start_time:
        elapsed = max((build.end_time or now) - build.start_time, 0)
        if build.end_time:
            remaining = 0
        elif estimated:
            remaining = max(estimated - elapsed, 0)
    return {
        'name': job.name, 'uuid': build.uuid if build else None,
        'url': build.url if build else None, 'report_url': build.log_url if build else None,
        'result': result, 'voting': job.voting,
        'start_time': _ms(build.start_time) if build else None,
        'end_time': _ms(build.end_time) if build else None,
        'elapsed_time': _ms(elapsed), 'remaining_time': _ms(remaining),
        'estimated_time': estimated, 'canceled': bool(build and build.canceled),
        'waiting_status': _waiting(item, job, build, zones_up),
        'tries': bs.tries.get(job.name, 0),
        'dependencies': list(job.dependencies),
        'node_labels': [label for _, label in job.nodes],
        'skip_reason': bs.skipped.get(job.name),
        # Beyond released Zuul (doc/source/reference/waste.rst): why a
        # failed build failed (``infra:...`` or ``test``), and the earlier
        # build whose result this one reused.
        'failure_class': build.failure_class if build else None,
        'reused_from': (build.reused_from or {}).get('uuid') if build else None,
    }


def _waiting(item, job, build, zones_up: set | None = None) -> str | None:
    if build is not None:
        if build.zone and build.start_time is None and build.result is None:
            # Submitted for an executor of its nodes' zone (``zones_up``:
            # the zones with an executor up, None when not known).
            if zones_up is not None and build.zone not in zones_up:
                return f'executor zone {build.zone}: no executor of the zone is up'
            return f'executor zone {build.zone}'
        return None
    bs = item.current_build_set
    if bs.merge_state != m.MERGE_COMPLETE:
        return 'merge'
    if job.name in bs.node_requests:
        return 'node request'
    if job.dependencies:
        return 'dependencies'
    return None


def item_remaining(jobs: list[dict]) -> int | None:
    """An item's expected time to finish (ms): the longest chain of its
    unfinished jobs, a running job counting its remaining time and a job
    not started yet its whole estimate after the jobs it depends on.
    None when no unfinished job has an estimate (nothing to go by)."""
    by_name = {j['name']: j for j in jobs}
    memo: dict[str, int] = {}
    known = False

    def finish(name: str, seen: frozenset) -> int:
        nonlocal known
        job = by_name.get(name)
        if job is None or job['result'] is not None or name in seen:
            return 0
        if name not in memo:
            if job['start_time'] is not None:
                own = job['remaining_time'] or 0
                known = known or job['remaining_time'] is not None
                memo[name] = own
            else:
                own = int((job['estimated_time'] or 0) * 1000)
                known = known or job['estimated_time'] is not None
                memo[name] = own + max((finish(d, seen | {name})
                                        for d in job['dependencies']), default=0)
        return memo[name]

    longest = max((finish(j['name'], frozenset()) for j in jobs), default=0)
    return longest if known else None


def _failing_ahead(item: m.QueueItem, memo: dict) -> bool:
    """Whether a live item ahead of ``item`` is failing; ``memo`` (item
    id -> failing at or ahead) makes a whole queue linear, not quadratic."""
    chain, cur = [], item.item_ahead
    while cur is not None and cur.id not in memo:
        chain.append(cur)
        cur = cur.item_ahead
    known = memo[cur.id] if cur is not None else False
    for ahead in reversed(chain):
        known = known or (ahead.live and ahead.is_failing())
        memo[ahead.id] = known
    return known


def failing_reasons(item: m.QueueItem, memo: dict | None = None) -> list[str]:
    """Why the item will not succeed, in released Zuul's words; an item
    behind a failing one is failing too (it was tested with it)."""
    bs = item.current_build_set
    failing = []
    if bs.unable_to_merge:
        failing.append('it has a merge conflict')
    if bs.config_errors:
        failing.append('it has an invalid configuration')
    if item.did_any_voting_job_fail():
        failing.append('at least one job failed')
    if _failing_ahead(item, {} if memo is None else memo):
        failing.append('a needed change is failing')
    return failing


def item_status(item: m.QueueItem, estimates=None, now: float | None = None,
                pipeline: str | None = None, memo: dict | None = None,
                zones_up: set | None = None) -> dict:
    """One queue item; ``remaining_time`` (ms) is its expected time to
    finish (item_remaining), ``enqueue_time`` (ms since the epoch) when it
    entered the pipeline, ``pipeline`` the pipeline it is in; ``memo`` is
    shared by the items of one queue (failing_reasons)."""
    change = item.change
    number = getattr(change, 'number', None)
    bs = item.current_build_set
    jobs = [job_status(item, j, estimates, now, zones_up) for j in bs.jobs or ()]
    return {
        'id': f'{number},{change.patchset}' if number else change.describe(),
        'item_id': item.id, 'event_id': item.event_id,
        'project': change.project, 'connection': change.connection,
        'ref': change.ref, 'branch': getattr(change, 'branch', None),
        'url': getattr(change, 'url', None), 'owner': getattr(change, 'owner', None),
        'subject': getattr(change, 'subject', None),
        'live': item.live, 'active': bs.merge_state != m.MERGE_NEW,
        'enqueue_time': _ms(item.enqueue_time),
        'item_ahead': _id(item.item_ahead), 'items_behind': [_id(i) for i in item.items_behind],
        'failing_reasons': failing_reasons(item, memo), 'zuul_ref': bs.uuid,
        'remaining_time': item_remaining(jobs), 'pipeline': pipeline,
        'jobs': jobs,
    }


def _id(item: m.QueueItem | None):
    if item is None:
        return None
    c = item.change
    return f'{c.number},{c.patchset}' if getattr(c, 'number', None) else c.describe()


def queue_heads(queue: m.ChangeQueue) -> list[list[m.QueueItem]]:
    """Items grouped into chains from each head (an item nobody is ahead
    of), following the speculative order."""
    heads = []
    queued = {id(i) for i in queue.queue}
    for item in queue.queue:
        if item.item_ahead is None:
            chain, cur = [], item
            while cur is not None:
                chain.append(cur)
                cur = next((b for b in cur.items_behind if id(b) in queued), None)
            heads.append(chain)
    return heads


def queue_name(queue: m.ChangeQueue) -> str:
    """Never blank: a queue without a configured name (an independent
    pipeline's per-change queue) is named after its projects."""
    if queue.name:
        return queue.name
    projects = queue.projects or list(dict.fromkeys(
        i.change.project for i in queue.queue))
    return ', '.join(projects) or queue.pipeline_name


def pipeline_status(manager, estimates=None, now: float | None = None,
                    zones_up: set | None = None) -> dict:
    p = manager.pipeline
    queues = []
    for queue in manager.queues:
        memo: dict = {}
        queues.append({
            'name': queue_name(queue), 'window': queue.window,
            'heads': [[item_status(i, estimates, now, p.name, memo, zones_up) for i in chain]
                      for chain in queue_heads(queue)],
        })
    return {'name': p.name, 'description': getattr(p, 'description', None) or '',
            'manager': p.manager, 'change_queues': queues}


def tenant_status(scheduler, tenant_name: str, estimates=None, version: str = '',
                  now: float | None = None) -> dict:
    state = scheduler.get_tenant(tenant_name)
    loop = scheduler.loop
    zones = getattr(scheduler.executor, 'zones_up', None)
    zones_up = zones() if zones is not None and _zoned_builds(state) else None
    return {
        'zuul_version': version, 'tenant': tenant_name,
        'last_reconfigured': _ms(getattr(state, 'loaded_at', None)),
        'pipelines': [pipeline_status(mgr, estimates, now, zones_up)
                      for mgr in state.managers.values()],
        'trigger_event_queue': {'length': len(loop.triggers)},
        'management_event_queue': {'length': len(loop.management)},
        'result_event_queue': {'length': len(loop.results)},
    }


def _zoned_builds(state) -> bool:
    """Whether a build of the tenant waits for an executor of a zone
    (only then are the executors listed)."""
    return any(b.zone and b.start_time is None and b.result is None
               for mgr in state.managers.values() for item in mgr.all_items()
               for b in item.current_build_set.builds.values())
