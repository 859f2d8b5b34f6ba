"""Launching builds: queue item + frozen job + nodes -> executor:execute.

Results come back on gear's thread and are handed to the scheduler thread
as result events (build-started, build-completed).
"""

from __future__ import annotations

import functools
import json
import logging
import time
from types import SimpleNamespace

from zuul.executor.protocol import (
    BuildResult,
    ExecuteRequest,
    ItemSpec,
    NodeSpec,
    SshKeySpec,
    ZuulContext,
    node_zone,
    valid_zone,
)
from zuul.executor.reproduction import public_request
from zuul.manager.requirements import READY, artifact_entries, requirements_state
from zuul.model import item as m
from zuul.model.change import Change
from zuul.scheduler import reuse
from zuul.scheduler.classify import classify_result, infra_failure_patterns
from zuul.scheduler.images import image_item_artifacts

log = logging.getLogger('zuul.scheduler.builds')


def item_spec(item: m.QueueItem, canonical_hostnames: dict, merge_mode: str) -> ItemSpec:
    change = item.change
    is_change = isinstance(change, Change)
    return ItemSpec(
        connection=change.connection, project=change.project,
        canonical_hostname=canonical_hostnames.get(change.connection, change.connection),
        branch=getattr(change, 'branch', None), ref=change.ref,
        number=change.number if is_change else None,
        patchset=change.patchset if is_change else None, merge_mode=merge_mode,
        change_url=getattr(change, 'url', None) or None,
        oldrev=getattr(change, 'oldrev', None), newrev=getattr(change, 'newrev', None),
        message=getattr(change, 'message', None) if is_change else None,
        topic=getattr(change, 'topic', None) if is_change else None)


def child_jobs(bs: m.BuildSet, job_name: str) -> list[str]:
    """``zuul.child_jobs``: the jobs of the build set that depend on
    ``job_name`` directly (first level), in job graph order."""
    return [j.name for j in bs.jobs or () if job_name in j.dependencies]


def _ancestors(bs: m.BuildSet, job_name: str) -> list[str]:
    """Every job ``job_name`` depends on, directly or not, nearest first."""
    seen: list[str] = []
    todo = list((bs.job(job_name) or m.JobRef(job_name)).dependencies)
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.append(name)
        parent = bs.job(name)
        if parent is not None:
            todo.extend(parent.dependencies)
    return seen


def parent_artifacts(item: m.QueueItem, job_name: str) -> list[dict]:
    """``zuul.artifacts`` from the builds of this item's build set that
    ``job_name`` depends on (directly or not)."""
    bs = item.current_build_set
    out = []
    for name in reversed(_ancestors(bs, job_name)):
        build = bs.build_for(name)
        if build is not None and build.result == m.SUCCESS:
            out.extend(artifact_entries(item, build))
    return out


def launch_repo_state(bs: m.BuildSet) -> dict:
    """The merge's start state, with the branch heads pinned for result
    reuse (zuul/scheduler/reuse.py) of projects the merge did not name:
    the build runs exactly what its input hash describes."""
    if not bs.pinned_state:
        return bs.repo_state
    state = {conn: dict(projects) for conn, projects in bs.pinned_state.items()}
    for conn, projects in (bs.repo_state or {}).items():
        state.setdefault(conn, {}).update(projects)
    return state


def node_specs(nodeset) -> list[NodeSpec]:
    """Nodes as the executor wants them, from the node client's nodeset
    (a list of (node names, nodepool node record dict))."""
    specs = []
    for names, node in getattr(nodeset, 'nodes', nodeset or ()):
        specs.append(NodeSpec(
            name=list(names), label=node.get('type') or node.get('label', ''),
            provider=node.get('provider', ''), region=node.get('region'),
            az=node.get('az'), id=str(node.get('id')) if node.get('id') else None,
            interface_ip=node.get('interface_ip') or node.get('public_ipv4'),
            public_ipv4=node.get('public_ipv4'), private_ipv4=node.get('private_ipv4'),
            public_ipv6=node.get('public_ipv6'),
            connection_port=int(node.get('connection_port') or node.get('port') or 22),
            connection_type=node.get('connection_type') or 'ssh',
            username=node.get('username') or None,   # None: [executor] default_username
            python_path=node.get('python_path') or 'auto',
            host_keys=list(node.get('host_keys') or []),
            cloud=node.get('cloud'), host_id=node.get('host_id'),
            resource=node.get('resource') or None, secret=node.get('secret') or None))
    return specs


def project_ssh_keys(keys, pipeline, item: m.QueueItem) -> list[SshKeySpec]:
    """The project key of the item's project for the build's ssh-agent,
    in a post-review pipeline only (released Zuul's rule: a change under
    review never gets it); ``keys`` a ProjectSshKeys or None."""
    if keys is None or not getattr(pipeline, 'post_review', False):
        return []
    change = item.change
    return [SshKeySpec(name=f'project key of {change.project}',
                       private_key=keys.private_key(change.connection, change.project))]


def nodeset_record(job: m.JobRef, nodes: list[NodeSpec]) -> tuple[str | None, list[dict]]:
    """What a build record keeps of its nodes: the nodeset's name (its
    labels for one written inline) and each node."""
    records = [{'name': list(n.name), 'label': n.label, 'provider': n.provider,
                'region': n.region, 'az': n.az, 'id': n.id} for n in nodes]
    attributes = getattr(job.frozen, 'attributes', None) or {}
    name = attributes.get('nodeset') if isinstance(attributes.get('nodeset'), str) else None
    if not name and records:
        labels = sorted({r['label'] for r in records if r['label']})
        name = ', '.join(labels)[:255] or None
    return name, records


class ExecutorAdapter:
    """What SchedulerContext.execute/cancel_build call."""

    def __init__(self, client, scheduler, canonical_hostnames: dict, job_spec_for,
                 merge_mode_for=None):
        self.client = client
        self.scheduler = scheduler
        self.canonical_hostnames = canonical_hostnames
        self.job_spec_for = job_spec_for
        self.merge_mode_for = merge_mode_for or (lambda item: 'merge-resolve')
        self.handles: dict[str, object] = {}
        # zuul.zk.builds.BuildRecords (None: Gearman only, nothing adopted).
        self.records = None
        # Job ``reuse-results``: successful builds by input hash.
        self.reuse_index = reuse.ReuseIndex(lambda: getattr(scheduler, 'history', None))
        # zuul.merger.repos.RepoUrlResolver: where each project is
        # fetched from, kept with what a build ran with (zuul reproduce).
        self.repo_urls = None
        # zuul.zk.ssh_keys.ProjectSshKeys (None: no project keys given).
        self.project_ssh_keys = None
        # Pinning answers reach the scheduler's thread as result events.
        self.pins = reuse.Pinner(post=lambda bs, result: scheduler.add_result_event(
            'pin-completed', build_set=bs, result=result))

    def execute(self, tenant: str, pipeline, item: m.QueueItem, job: m.JobRef, nodeset,
                build: m.Build) -> None:
        """Launch ``build``. The pipeline manager starts a job that
        ``requires`` something only once its providers ahead have ended
        (zuul/manager/requirements.py); their artifacts go with it."""
        tenant_state = (getattr(self.scheduler, 'tenants', None) or {}).get(tenant)
        state = requirements_state(item, job, getattr(self.scheduler, 'history', None),
                                   tenant, getattr(tenant_state, 'layout', None))
        required = state.artifacts if state.state == READY else []
        if reuse.reuse_enabled(job):
            digest = self.input_hash_for(tenant, item, job, required)
            build.input_hash = None if digest == reuse.PENDING else digest
        self._submit(tenant, pipeline, item, job, nodeset, build, required)

    def input_hash_for(self, tenant: str, item: m.QueueItem, job: m.JobRef,
                       required_artifacts: list) -> str | None:
        """The content hash of what a build of ``job`` would run with
        (zuul/scheduler/reuse.py); the projects it uses beyond the merge
        are pinned first (never waited for: ``reuse.PENDING`` while they
        are). None: not describable, never reused."""
        bs = item.current_build_set
        spec = self.job_spec_for(job, item)
        missing = reuse.unpinned_projects(bs, reuse.used_projects(spec, item))
        if missing:
            state = self.pins.pin(getattr(self.scheduler, 'merger', None), bs, missing,
                                  item.event_id)
            if state != reuse.PINNED:
                return reuse.PENDING if state == reuse.PENDING else None
        artifacts = required_artifacts + parent_artifacts(item, job.name)
        return reuse.input_hash(tenant, item, job, spec, artifacts)

    def pin_completed(self, build_set, result) -> None:
        """The scheduler's thread: a merger answered (or did not) a
        pinning read."""
        self.pins.completed(build_set, result)

    def try_reuse(self, tenant: str, item: m.QueueItem, job: m.JobRef,
                  required_artifacts: list) -> bool | str:
        """For a job with ``reuse-results``: when a SUCCESS build had the
        same input hash, complete a build of it as SUCCESS now, pointing
        at that one; True if so (nothing is launched), ``'wait'`` while
        its projects are being pinned."""
        digest = self.input_hash_for(tenant, item, job, required_artifacts)
        if digest == reuse.PENDING:
            return 'wait'
        original = self.reuse_index.find(tenant, digest) if digest else None
        if original is None:
            return False
        bs = item.current_build_set
        build = m.Build(job, bs, input_hash=digest)
        bs.builds[job.name] = build
        log.info('[e: %s] %s: inputs identical to build %s: its SUCCESS is reused',
                 item.event_id, job.name, original['uuid'])
        reuse.complete_as_reused(self.scheduler, build, original)
        return True

    def _submit(self, tenant, pipeline, item, job, nodeset, build,
                required_artifacts: list) -> None:
        bs = item.current_build_set
        tenant_state = (getattr(self.scheduler, 'tenants', None) or {}).get(tenant)
        items = list(bs.dependent_items) + [item]
        request = ExecuteRequest(
            uuid=build.uuid, job=self.job_spec_for(job, item),
            zuul=ZuulContext(tenant=tenant, pipeline=pipeline.name, buildset=bs.uuid,
                             ref=item.change.ref,
                             message=getattr(item.change, 'message', None),
                             canonical_hostnames=dict(self.canonical_hostnames),
                             event_id=item.event_id,
                             child_jobs=child_jobs(bs, job.name),
                             artifacts=required_artifacts +
                             parent_artifacts(item, job.name) +
                             image_item_artifacts(item),
                             post_review=bool(getattr(pipeline, 'post_review', False)),
                             **self._image_context(item, job)),
            nodes=node_specs(nodeset),
            items=[item_spec(i, self.canonical_hostnames, self.merge_mode_for(i))
                   for i in items],
            repo_state=launch_repo_state(bs), attempt=bs.tries.get(job.name, 1),
            infra_failure_patterns=infra_failure_patterns(getattr(
                getattr(tenant_state, 'layout', None), 'tenant', None)),
            ssh_keys=project_ssh_keys(self.project_ssh_keys, pipeline, item))
        build.nodeset, build.nodes = nodeset_record(job, request.nodes)
        self._keep_reproduction(tenant, request)
        nodes = [node for _, node in getattr(nodeset, 'nodes', nodeset or ())]
        build.zone = node_zone(nodes)
        if build.zone is not None and not valid_zone(build.zone):
            self._refuse(build, tenant, f'node attribute executor-zone {build.zone!r} is not '
                         'a valid zone name')
            return
        log.info('[e: %s] Launching %s build %s%s', item.event_id, job.name, build.uuid,
                 f' (executor zone {build.zone})' if build.zone else '')
        zoned = {'zone': build.zone} if build.zone else {}
        handle = self.client.execute(request, on_progress=self._progress(build),
                                     on_complete=self._complete(build, tenant), **zoned)
        self.handles[build.uuid] = handle

    def _keep_reproduction(self, tenant: str, request: ExecuteRequest) -> None:
        """What the build runs with, secrets left out, into the build
        database (``zuul reproduce``); a database failure never stops
        the build."""
        history = getattr(self.scheduler, 'history', None)
        if history is None or not hasattr(history, 'record_reproduction'):
            return
        try:
            # Taken where it is written (off the loop: a deep copy of the
            # whole request); the request is not changed once submitted.
            history.record_reproduction(tenant, request.uuid,
                                        functools.partial(public_request, request,
                                                          self.repo_urls))
        except Exception:
            log.exception('Unable to keep what build %s runs with', request.uuid)

    def _keep_outcome(self, build, result) -> None:
        """The speculative state the executor ran the build on, with what
        it kept of the launch (``zuul reproduce`` checks it makes the same
        commits)."""
        history = getattr(self.scheduler, 'history', None)
        state = getattr(result, 'merged_state', None)
        if history is None or not state or not hasattr(history, 'add_reproduction_outcome'):
            return
        try:
            history.add_reproduction_outcome(build.uuid, {
                'merged_state': state, 'git_user': list(result.git_user or [])})
        except Exception:
            log.exception('Unable to keep the state build %s ran on', build.uuid)

    def _refuse(self, build, tenant, why: str) -> None:
        """A build that cannot be submitted ends as an ERROR, saying why."""
        log.error('Build %s of %s not launched: %s', build.uuid, build.job.name, why)
        result = BuildResult(result='ERROR', error_detail=why)
        self._complete(build, tenant)(SimpleNamespace(url=None), result)

    def zones_up(self) -> set | None:
        """Executor zones with an executor up (None: not known)."""
        records = self.records
        if records is None or not hasattr(records, 'executor_zones'):
            return None
        try:
            return records.executor_zones()
        except Exception:
            log.exception('Unable to list the executors in ZooKeeper')
            return None

    def _image_context(self, item, job) -> dict:
        from zuul.scheduler.images import image_context
        layouts = getattr(self.scheduler, 'layouts', None)
        tenants = getattr(self.scheduler, 'tenants', None) or {}
        return image_context(item, job, getattr(layouts, 'connection_drivers', None),
                             [t.layout for t in tenants.values()] or None)

    def _progress(self, build):
        def on_progress(handle, progress):
            if progress.url or build.start_time is None:
                self.scheduler.add_result_event('build-started', build=build,
                                                url=progress.url, start_time=time.time())
            if getattr(progress, 'pre_fail', False) and not build.pre_fail:
                self.scheduler.add_result_event('build-pre-fail', build=build)
        return on_progress

    def _complete(self, build, tenant: str | None = None):
        def on_complete(handle, result):
            self.handles.pop(build.uuid, None)
            self._keep_outcome(build, result)
            if result is not None and result.result == m.SUCCESS and tenant:
                self.reuse_index.add(tenant, build, result, handle.url)
            if (result is None or result.result is None) and self.records is not None:
                # The Gearman side lost it: after a Gearman server restart
                # the executor may still be running it, or have finished
                # it. WORK_FAIL means its executor's connection went (it
                # died): only a result it recorded first counts.
                detail = getattr(result, 'error_detail', None)
                self.follow(build, lost_detail=detail, url=handle.url,
                            executor_gone=bool(detail) and detail.startswith('WORK_FAIL'))
                return
            self._completed(build, result, handle.url)
        return on_complete

    def _completed(self, build, result, url) -> None:
        # Playbook semaphores the build still holds (its executor may be
        # gone) are free from now on.
        from zuul.scheduler.semaphores import release_build_playbooks
        release_build_playbooks(self.scheduler, build.uuid)
        if result is None or result.result is None:
            outcome = m.RETRY  # the executor was lost: relaunch
            data, detail, start, end = {}, getattr(result, 'error_detail', None), \
                None, time.time()
        else:
            outcome = result.result
            if outcome == 'ERROR':
                outcome = m.FAILURE
            data, detail = result.data, result.error_detail
            start, end = result.start_time, result.end_time or time.time()
        # zuul_return's log_url (logs uploaded elsewhere) over the copy
        # the executor kept, over the live stream (gone once it ends).
        log_url = ((result.returned_log_url or result.log_url) if result is not None
                   else None) or url
        build.failure_class = classify_result(result)
        if outcome in (m.RETRY, m.RETRY_LIMIT) and not detail:
            detail = f'({build.failure_class})'    # why, on the report line
        self.scheduler.add_result_event(
            'build-completed', build=build, result=outcome, result_data=data,
            error_detail=detail, end_time=end, start_time=start,
            log_url=log_url)

    def follow(self, build: m.Build, lost_detail: str | None = None,
               url: str | None = None, executor_gone: bool = False) -> None:
        """Take a build whose Gearman job is gone (or launched by a
        scheduler that died) from its ZooKeeper record: its result if it
        ended, its result when it ends if its executor lives, else RETRY."""
        from zuul.executor.protocol import BuildResult
        from zuul.zk.builds import COMPLETED

        def on_done(record):
            self.handles.pop(build.uuid, None)
            if record is not None and record.get('state') == COMPLETED:
                try:
                    result = BuildResult.from_json(json.dumps(record['result']))
                except (ValueError, KeyError, TypeError) as exc:
                    result = BuildResult(result=None, error_detail=f'bad result: {exc}')
                log.info('Build %s: result taken from its ZooKeeper record', build.uuid)
            else:
                log.info('Build %s was lost with its executor (%s): retrying it',
                         build.uuid, lost_detail or 'no executor')
                result = BuildResult(result=None,
                                     error_detail=lost_detail or 'executor lost')
            self._keep_outcome(build, result)
            self._completed(build, result, url or build.url)
        record = self.records.get(build.uuid) if self.records is not None else None
        if record is None or (executor_gone and record.get('state') != COMPLETED):
            on_done(None)
            return
        self.handles[build.uuid] = _AdoptedHandle(build.uuid, record.get('executor'),
                                                  record.get('url'))
        if record.get('state') != COMPLETED:
            log.info('Build %s still runs on %s: following it through ZooKeeper',
                     build.uuid, record.get('executor'))
        self.records.follow(build.uuid, on_done)

    def forget(self, build: m.Build) -> None:
        """The build's result is applied: its record is no longer needed."""
        if self.records is not None:
            # After the save holding its result, on the same session: not
            # waited for (ZooKeeper applies it after the save).
            self.records.delete(build.uuid, wait=False)

    def cancel(self, build: m.Build) -> None:
        handle = self.handles.pop(build.uuid, None)
        if handle is not None:
            try:
                self.client.cancel(handle)
            except Exception:
                log.exception('Unable to cancel build %s', build.uuid)


class _AdoptedHandle:
    """What ``cancel`` needs of a build followed through ZooKeeper."""

    def __init__(self, uuid: str, worker_hostname: str | None, url: str | None):
        self.uuid = uuid
        self.worker_hostname = worker_hostname
        self.url = url
