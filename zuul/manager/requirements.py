"""``provides``/``requires`` between changes (released Zuul's job.requires).

A job that ``requires`` some names waits until every job providing one of
them, in the items ahead of its own in the queue, has ended; it gets the
artifacts those builds returned (``zuul.artifacts``); if one of them did
not succeed, the requiring job fails without running. An item ahead that
is not being tested (a dependency enqueued only as the base of a change in
an independent pipeline) counts through its newest builds in the build
history: artifacts of a build that already ended are still passed. Items
that are not changes (branch tips, tags, periodic runs) ignore it.

``requirements_state`` only reads pipeline state: the pipeline manager
asks it before a job's nodes are requested (a job waits, or fails
unrun), and zuul/scheduler/builds.py for the artifacts at launch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from zuul.model import item as m
from zuul.model.change import Change

log = logging.getLogger('zuul.manager.requirements')

READY, WAIT, FAIL = 'ready', 'wait', 'fail'


@dataclass
class RequirementsState:
    state: str
    artifacts: list = field(default_factory=list)
    reason: str | None = None


def artifact_entries(item: m.QueueItem, build: m.Build) -> list[dict]:
    """A finished build's ``zuul_return`` artifacts as ``zuul.artifacts``
    entries: ``{project, change, patchset, job, name, url, metadata}``."""
    change = item.change
    is_change = isinstance(change, Change)
    out = []
    returned = ((build.result_data or {}).get('zuul') or {}).get('artifacts') or []
    for art in returned if isinstance(returned, list) else ():
        if not isinstance(art, dict) or 'name' not in art or 'url' not in art:
            continue
        entry = {'project': change.project,
                 'change': str(change.number) if is_change else None,
                 'patchset': str(change.patchset) if is_change else None,
                 'job': build.job.name, 'name': art['name'], 'url': art['url'],
                 'metadata': art.get('metadata') or {}}
        out.append(entry)
    return out


def _names(value) -> set[str]:
    return {str(v) for v in value or ()}


def requires_of(job) -> set[str]:
    frozen = getattr(job, 'frozen', None)
    return _names(frozen.get('requires')) if frozen is not None else set()


def requirements_state(item: m.QueueItem, job, history=None, tenant: str | None = None,
                       layout=None) -> RequirementsState:
    """What ``job`` of ``item`` may do now."""
    wanted = requires_of(job)
    if not wanted or not isinstance(item.change, Change):
        return RequirementsState(READY)
    artifacts: list = []
    waiting = False
    for ahead in item.items_ahead():
        if not isinstance(ahead.change, Change):
            continue
        if ahead.live:
            found = _from_build_set(ahead, wanted)
        else:
            found = _from_history(ahead, wanted, history, tenant, layout)
        if found.state == FAIL:
            return found
        waiting = waiting or found.state == WAIT
        artifacts = found.artifacts + artifacts   # nearest change last
    if waiting:
        return RequirementsState(WAIT)
    return RequirementsState(READY, artifacts)


def _from_build_set(ahead: m.QueueItem, wanted: set[str]):
    bs = ahead.current_build_set
    if bs.jobs is None:
        # Not frozen yet: whether it provides anything is not known.
        return RequirementsState(WAIT) if not bs.unable_to_merge else \
            RequirementsState(READY)
    artifacts, waiting = [], False
    for provider in bs.jobs:
        if not requires_provided(provider, wanted):
            continue
        build = bs.build_for(provider.name)
        result = bs.result_of(provider.name)
        if result is None or result == m.RETRY:
            waiting = True
        elif result == m.SUCCESS:
            artifacts.extend(artifact_entries(ahead, build))
        else:
            return RequirementsState(FAIL, reason=_failed(provider.name, ahead, result))
    return RequirementsState(WAIT if waiting else READY, artifacts)


def requires_provided(provider, wanted: set[str]) -> bool:
    frozen = getattr(provider, 'frozen', None)
    return frozen is not None and bool(_names(frozen.get('provides')) & wanted)


def _from_history(ahead: m.QueueItem, wanted: set[str], history, tenant, layout):
    """The newest recorded build of each job providing something wanted,
    for the change ahead (any pipeline): its artifacts, or a failure."""
    if history is None or tenant is None or layout is None:
        return RequirementsState(READY)
    change = ahead.change
    try:
        rows = history.get_builds(tenant, project=change.project, change=change.number,
                                  patchset=str(change.patchset), limit=200)
    except Exception:
        log.exception('Unable to read the build history for %s', change.describe())
        return RequirementsState(READY)
    seen, artifacts = set(), []
    for row in rows:     # newest first
        name = row['job_name']
        if name in seen or not _job_provides(layout, name, change.branch, wanted):
            continue
        seen.add(name)
        if row['result'] != m.SUCCESS:
            return RequirementsState(FAIL, reason=_failed(name, ahead, row['result']))
        for art in history.get_build_artifacts(row['uuid']):
            artifacts.append({'project': change.project, 'change': str(change.number),
                              'patchset': str(change.patchset), 'job': name,
                              'name': art['name'], 'url': art['url'],
                              'metadata': _metadata(art.get('meta'))})
    return RequirementsState(READY, artifacts)


def _job_provides(layout, name: str, branch, wanted: set[str]) -> bool:
    from zuul.model.freeze import freeze_job
    if name not in (getattr(layout, 'jobs', None) or {}):
        return False
    try:
        frozen = freeze_job(layout, name, branch)
    except Exception:
        return False
    return frozen is not None and bool(_names(frozen.get('provides')) & wanted)


def _metadata(text):
    import ast
    if not text:
        return {}
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return {}
    return value if isinstance(value, dict) else {}


def _failed(job_name: str, ahead: m.QueueItem, result) -> str:
    return (f'Requirements not met: {job_name} of {ahead.change.describe()}, which '
            f'provides what this job requires, ended {result}')
