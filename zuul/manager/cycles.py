"""Dependency cycles between changes (queue ``allow-circular-dependencies``,
``dependencies-by-topic``) and job ``deduplicate`` inside them.

Pure functions over changes and items: the scheduler's context feeds
them the dependencies its sources know, the managers act on the result.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from zuul.model import item as m

# What a change is told when it is part of a cycle its queue does not
# allow (the wording released Zuul reports).
CYCLE_REFUSED = "Dependency cycle detected and project {project} doesn't allow circular " \
                "dependencies"
CYCLE_QUEUES = 'Dependency cycle detected and its changes are not in the same queue: {changes}'


@dataclass
class Dependencies:
    """What enqueueing a change takes.

    ``groups``: the unmerged changes it needs, transitively, as strongly
    connected groups in dependency order (a group of one is a plain
    dependency, a larger one a cycle); the last group holds the change
    itself and the other changes of its own cycle. ``error``: why it
    must not be enqueued (a cycle its queue does not allow), else None.
    """

    groups: list[list] = field(default_factory=list)
    error: str | None = None

    @property
    def cycle(self) -> list:
        """The change's own cycle (the change alone when there is none)."""
        return self.groups[-1] if self.groups else []

    @property
    def needed(self) -> list:
        """The changes needed outside the change's own cycle, dependencies
        first."""
        return [c for group in self.groups[:-1] for c in group]


def dependency_groups(change, needed_of) -> list[list]:
    """Strongly connected groups of the changes reachable from ``change``
    through ``needed_of(c)`` (the changes ``c`` needs), dependencies
    first; the last group contains ``change``. Within a group the order
    is the order the changes were found (``change`` first)."""
    index: dict = {}
    low: dict = {}
    on_stack: set = set()
    stack: list = []
    groups: list[list] = []
    found: list = []

    def connect(root):
        # Iterative Tarjan: (change, iterator over what it needs).
        work = [(root, iter(needed_of(root)))]
        _visit(root)
        while work:
            node, deps = work[-1]
            dep = next(deps, None)
            if dep is not None:
                if dep.key not in index:
                    _visit(dep)
                    work.append((dep, iter(needed_of(dep))))
                elif dep.key in on_stack:
                    low[node.key] = min(low[node.key], index[dep.key])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent.key] = min(low[parent.key], low[node.key])
            if low[node.key] == index[node.key]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member.key)
                    group.append(member)
                    if member.key == node.key:
                        break
                order = {c.key: n for n, c in enumerate(found)}
                groups.append(sorted(group, key=lambda c: order[c.key]))

    def _visit(node):
        index[node.key] = low[node.key] = len(index)
        stack.append(node)
        on_stack.add(node.key)
        found.append(node)

    connect(change)
    return groups


# -- job deduplicate -----------------------------------------------------------

def _dedup_setting(job: m.JobRef):
    frozen = job.frozen
    value = frozen.get('deduplicate', 'auto') if frozen is not None else 'auto'
    return 'auto' if value is None else value


def job_signature(job: m.JobRef) -> str:
    """What must be equal for two items' builds of a job to be the same
    build: everything the job was frozen to (names, playbooks, vars,
    nodeset, required projects, secrets)."""
    frozen = job.frozen
    if frozen is None:
        return json.dumps([job.name, list(job.nodes), list(job.dependencies)])
    data = frozen.to_dict() if hasattr(frozen, 'to_dict') else dict(frozen)
    data.pop('inheritance_path', None)     # records which variants matched
    return json.dumps(data, sort_keys=True, default=str)


def may_deduplicate(job: m.JobRef, item: m.QueueItem, other_item: m.QueueItem,
                    other_job: m.JobRef) -> bool:
    """Job ``deduplicate``: ``false`` never; ``true`` when both items'
    jobs are frozen the same; ``auto`` (the default) when they are and
    the job names ``required-projects`` or both items are of the same
    project."""
    setting = _dedup_setting(job)
    if setting is False or _dedup_setting(other_job) is False:
        return False
    if job.name != other_job.name or job_signature(job) != job_signature(other_job):
        return False
    if setting is True:
        return True
    frozen = job.frozen
    required = frozen.get('required_projects') if frozen is not None else None
    return bool(required) or item.change.project == other_item.change.project


def deduplication_source(item: m.QueueItem, job: m.JobRef):
    """For ``job`` of ``item`` in a bundle: the build set of an earlier
    item of the bundle that runs the same job for both (its build counts
    for this item), 'wait' while an earlier item's jobs are not known
    yet, or None to run the job here."""
    if item.bundle is None:
        return None
    for other in item.bundle.items:
        if other is item:
            return None
        if other.queue is None or other.queue is not item.queue:
            continue
        obs = other.current_build_set
        if obs.jobs is None:
            if obs.merge_state == m.MERGE_COMPLETE and obs.unable_to_merge:
                continue
            return 'wait'
        other_job = obs.job(job.name)
        if other_job is not None and obs.deduplicated.get(job.name) is None and \
                may_deduplicate(job, item, other, other_job):
            return obs
    return None
