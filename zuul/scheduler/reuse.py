"""Result reuse on identical inputs (job ``reuse-results: true``).

Every build launched for such a job gets ``input_hash``: a SHA-256 over
everything it runs with --

* the repositories it uses (the projects of every item merged for it,
  its ``required-projects`` and the projects of its playbooks and roles): each one's branch heads
  after the speculative merge (commit ids: merges are reproducible, so
  the same items on the same base give the same commits), or before it
  for a project the merge did not touch; projects the merge did not name
  at all are pinned with one ``merger:refstate`` read and the build runs
  at those pins (``BuildSet.pinned_state``);
* the frozen job as the executor gets it (playbooks, roles, vars,
  timeouts, groups...), with each playbook's secrets replaced by their
  digest (the plaintext is never hashed alone nor stored);
* the nodeset (node names and labels);
* the artifacts of the builds it depends on (and those it ``requires``);
* the tenant, and the project and branch of the item under test.

The ``zuul`` context (change number, pipeline, build set) is not an
input: that is what lets a gate build reuse the check result of the same
tree. A job whose input hash equals a SUCCESS build's does not run: it
reports SUCCESS at once, linking to the original build (``reused_from``;
its log URL is the original's). Build hashes are kept in memory while the
scheduler runs and in the build history (``input_hash`` column), which
is asked on a miss.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time

from zuul.model import item as m

log = logging.getLogger('zuul.scheduler.reuse')

HASH_VERSION = 1
# How long a merger has to pin the heads of the projects a job uses
# beyond the merge (the job runs normally without).  The scheduler's
# thread never waits for it: the job waits, its pipeline goes on
# (``Pinner``); a build set whose pinning failed is not pinned again.
PIN_TIMEOUT = 30.0
# Build sets remembered as not pinnable.
PIN_FAILURES_KEPT = 1000


def reuse_enabled(job: m.JobRef) -> bool:
    frozen = job.frozen
    return bool(frozen is not None and frozen.get('reuse_results'))


# -- the hash ---------------------------------------------------------------------

def used_projects(spec, item: m.QueueItem) -> list[tuple[str, str]]:
    """(connection, project) of every repository the job reads: those of
    every item merged for it (all are checked out), its required projects
    and where its playbooks and roles come from."""
    items = list(item.current_build_set.dependent_items) + [item]
    wanted = {(i.change.connection, i.change.project) for i in items}
    wanted.update((rp.connection, rp.project) for rp in spec.required_projects)
    for phase in (spec.pre_run, spec.run, spec.post_run, spec.cleanup_run):
        for playbook in phase:
            wanted.add((playbook.connection, playbook.project))
            wanted.update((r.connection, r.project) for r in playbook.roles)
    return sorted(wanted)


def _project_state(bs: m.BuildSet, connection: str, project: str) -> dict | None:
    for state in (bs.merged_state, bs.repo_state, bs.pinned_state):
        refs = ((state or {}).get(connection) or {}).get(project)
        if refs:
            return refs
    return None


def unpinned_projects(bs: m.BuildSet, projects) -> list[tuple[str, str]]:
    return [p for p in projects if _project_state(bs, *p) is None]


def _secret_digest(secrets: dict) -> str:
    raw = json.dumps(secrets, sort_keys=True, default=str).encode()
    return hashlib.sha256(raw).hexdigest()


def job_material(spec) -> dict:
    """The frozen job (a JobSpec) as hashed: secrets as digests."""
    data = spec.to_dict()
    for phase in ('pre_run', 'run', 'post_run', 'cleanup_run'):
        for playbook in data.get(phase) or ():
            if playbook.get('secrets'):
                playbook['secrets'] = _secret_digest(playbook['secrets'])
    return data


def input_hash(tenant: str, item: m.QueueItem, job: m.JobRef, spec,
               artifacts: list) -> str | None:
    """The content hash of a build's inputs; None when a repository it
    uses has no known state (it cannot be described, so never reused)."""
    bs = item.current_build_set
    projects = used_projects(spec, item)
    repos = {}
    for connection, project in projects:
        state = _project_state(bs, connection, project)
        if state is None:
            return None
        repos[f'{connection}/{project}'] = state
    material = {
        'version': HASH_VERSION, 'tenant': tenant,
        'item': [item.change.connection, item.change.project,
                 getattr(item.change, 'branch', None)],
        'job': job_material(spec), 'nodes': [list(n) for n in job.nodes],
        'repos': repos,
        'artifacts': [{k: a.get(k) for k in ('job', 'name', 'url', 'metadata')}
                      for a in artifacts],
    }
    raw = json.dumps(material, sort_keys=True, default=str).encode()
    return hashlib.sha256(raw).hexdigest()


# -- pinning ------------------------------------------------------------------------

PINNED, PENDING, UNPINNABLE = 'pinned', 'pending', 'unpinnable'


class Pinner:
    """Pins the heads of the projects a job uses beyond the merge with
    one ``merger:refstate`` read per build set, never waiting for it:
    ``pin`` asks and answers PENDING; the merger's answer (or, after
    ``timeout`` seconds, its absence) goes to ``post(build_set,
    result)``, which hands it to the scheduler's thread, which calls
    ``completed``.  A build set whose pinning failed is not pinned again
    (UNPINNABLE: its jobs run without reuse).  Without ``post`` the
    answer is taken where it arrives (tests, tools)."""

    def __init__(self, post=None, timeout: float = PIN_TIMEOUT):
        self._post = post
        self.timeout = timeout
        # build set uuid -> (handle, timer, projects, event_id)
        self._pending: dict[str, tuple] = {}
        self._failed: dict[str, None] = {}
        self._lock = threading.Lock()

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def pin(self, merger, bs: m.BuildSet, projects, event_id=None) -> str:
        """PINNED when every one of ``projects`` has a known state,
        PENDING while the merger is asked, UNPINNABLE once it failed."""
        projects = list(projects)
        if not unpinned_projects(bs, projects):
            return PINNED
        with self._lock:
            if bs.uuid in self._failed:
                return UNPINNABLE
            if bs.uuid in self._pending:
                return PENDING
        if merger is None:
            self._fail(bs, projects, event_id, 'no merger')
            return UNPINNABLE
        from zuul.merger.protocol import MergeItem
        items = [MergeItem(connection=c, project=p) for c, p in projects]
        timer = threading.Timer(self.timeout, self._answer, args=(bs, None))
        timer.daemon = True
        with self._lock:
            self._pending[bs.uuid] = (None, timer, projects, event_id)
        handle = merger.get_repo_state(items, lambda result: self._answer(bs, result),
                                       event_id=event_id)
        with self._lock:
            entry = self._pending.get(bs.uuid)
            if entry is not None:
                self._pending[bs.uuid] = (handle,) + entry[1:]
        timer.start()
        with self._lock:
            return PENDING if bs.uuid in self._pending else self._state(bs, projects)

    def _state(self, bs, projects) -> str:
        return UNPINNABLE if bs.uuid in self._failed or unpinned_projects(bs, projects) \
            else PINNED

    def _answer(self, bs: m.BuildSet, result) -> None:
        # Any thread: the merger's callback or the timer.
        if self._post is not None:
            self._post(bs, result)
        else:
            self.completed(bs, result)

    def completed(self, bs: m.BuildSet, result) -> None:
        """The scheduler's thread: the answer to ``bs``'s pinning (None:
        none came in time).  The first of answer and timeout decides."""
        with self._lock:
            entry = self._pending.pop(bs.uuid, None)
        if entry is None:
            return
        handle, timer, projects, event_id = entry
        timer.cancel()
        if result is None or not getattr(result, 'updated', False):
            if handle is not None:
                handle.cancel()
            self._fail(bs, projects, event_id,
                       getattr(result, 'error', None) or 'no merger answered')
            return
        for connection, found in (result.repo_state or {}).items():
            bs.pinned_state.setdefault(connection, {}).update(found)
        if unpinned_projects(bs, projects):
            self._fail(bs, projects, event_id, 'the merger did not know them all')

    def _fail(self, bs, projects, event_id, why: str) -> None:
        log.warning('[e: %s] Unable to pin %s for result reuse: %s', event_id, projects, why)
        with self._lock:
            self._failed[bs.uuid] = None
            while len(self._failed) > PIN_FAILURES_KEPT:
                self._failed.pop(next(iter(self._failed)))


# -- the index of successful builds --------------------------------------------------

class ReuseIndex:
    """Successful builds by (tenant, input hash): in memory, backed by
    the build history's ``input_hash`` column."""

    def __init__(self, history=None):
        # A callable: the scheduler's BuildHistory (or None) when asked.
        self.history = history or (lambda: None)
        self._builds: dict[tuple[str, str], dict] = {}
        self._lock = threading.Lock()

    def add(self, tenant: str, build: m.Build, result, url: str | None = None) -> None:
        """A build ended SUCCESS (``result``: the executor's BuildResult);
        called on the thread the result came on."""
        if not build.input_hash or build.reused_from:
            return
        change = build.build_set.item.change
        record = {'uuid': build.uuid, 'job': build.job.name,
                  'log_url': result.returned_log_url or result.log_url or url,
                  'url': url, 'change': getattr(change, 'number', None) or change.ref,
                  'patchset': getattr(change, 'patchset', None),
                  'result_data': dict(result.data or {})}
        with self._lock:
            self._builds[(tenant, build.input_hash)] = record

    def find(self, tenant: str, digest: str) -> dict | None:
        with self._lock:
            found = self._builds.get((tenant, digest))
        if found is not None:
            return found
        lookup = getattr(self.history(), 'find_build_by_input_hash', None)
        if lookup is None:
            return None
        try:
            return lookup(tenant, digest)
        except Exception:
            log.exception('Build history lookup of input hash %s failed', digest)
            return None


def reuse_note(original: dict) -> str:
    """The line a reused build's error_detail carries (shown in reports)."""
    where = original.get('log_url') or original.get('url') or ''
    change = original.get('change')
    of = f' of change {change},{original["patchset"]}' if original.get('patchset') else \
        (f' of {change}' if change else '')
    return f'(result reused from build {original["uuid"]}{of}: identical inputs; ' \
        f'{where})' if where else f'(result reused from build {original["uuid"]}{of}: ' \
        'identical inputs)'


def complete_as_reused(scheduler, build: m.Build, original: dict) -> None:
    """Report ``build`` SUCCESS through the scheduler's result events,
    pointing at ``original``."""
    now = time.time()
    build.reused_from = {k: original.get(k) for k in ('uuid', 'log_url', 'url', 'change',
                                                      'patchset')}
    build.url = original.get('url') or original.get('log_url')
    scheduler.add_result_event(
        'build-completed', build=build, result=m.SUCCESS,
        result_data=dict(original.get('result_data') or {}), error_detail=reuse_note(original),
        start_time=now, end_time=now, log_url=original.get('log_url'))


def try_reuse(ctx, item: m.QueueItem, job: m.JobRef) -> bool | str:
    """The pipeline manager's question before asking for nodes: True if
    ``job`` (with ``reuse-results``) completed from an earlier build,
    ``'wait'`` while the projects it uses are being pinned (ask again on
    a later pass)."""
    if not reuse_enabled(job):
        return False
    scheduler = getattr(ctx, 'scheduler', None)
    adapter = getattr(scheduler, 'executor', None)
    tenant = getattr(getattr(ctx, 'tenant', None), 'name', None)
    if not hasattr(adapter, 'try_reuse') or tenant is None:
        return False
    from zuul.manager.requirements import READY, requires_of
    required: list = []
    if requires_of(job):
        state = ctx.job_requirements(item, job)
        required = state.artifacts if state.state == READY else []
    return adapter.try_reuse(tenant, item, job, required)
