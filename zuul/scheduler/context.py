"""The collaborators a pipeline manager gets (``ctx``), for one tenant.

Bridges the managers' narrow interface to the scheduler's clients:
sources and reporters (connections), the layout (freezing, queues), the
merger, nodepool and executor clients, statistics and build history.
"""

from __future__ import annotations

import logging

from zuul.driver.gerrit.changes import topic_changes
from zuul.manager.base import item_log
from zuul.manager.cycles import CYCLE_QUEUES, CYCLE_REFUSED, Dependencies, dependency_groups
from zuul.model import item as m
from zuul.model.change import Branch, Change, Ref
from zuul.model.events import TriggerEvent
from zuul.model.queue import QueueConfig
from zuul.scheduler import classify, reuse
from zuul.scheduler.images import IMAGE_EVENTS, image_ref_for_event
from zuul.scheduler.reporting import build_page_base, format_report

log = logging.getLogger('zuul.scheduler.context')


class SchedulerContext:
    def __init__(self, scheduler, tenant):
        self.scheduler = scheduler
        self.tenant = tenant
        self.layouts = scheduler.layouts

    @property
    def connections(self):
        return self.scheduler.connections

    # -- changes and events ---------------------------------------------------

    def get_change_for_event(self, event):
        if event.type == 'timer':
            # A periodic run tests a branch tip: no source lookup needed.
            return Branch(event.connection, event.project, event.ref)
        if event.type in IMAGE_EVENTS:
            # So does an image event, naming its image (seed 001).
            return image_ref_for_event(event)
        connection = self.connections.get(event.connection)
        if connection is None:
            return None
        try:
            return connection.get_change_for_event(event)
        except Exception:
            log.exception('[e: %s] Unable to look up the change of %s', event.event_id,
                          event.describe())
            return None

    def lookup_change(self, project, spec):
        """``N,P`` (or N) on the connection of ``project`` in this tenant."""
        connection, project = self.layouts.find_project(self.tenant.layout, project)
        return self.connections.get(connection).lookup_change(project, spec)

    def lookup_ref(self, project, ref, oldrev=None, newrev=None):
        connection, project = self.layouts.find_project(self.tenant.layout, project)
        return Ref(connection, project, ref, oldrev, newrev)

    def event_may_match_pipeline(self, pipeline, event) -> bool:
        """False when no trigger of ``pipeline`` can match ``event``
        whatever its change is (so the change need not be looked up)."""
        for event_filter in self.layouts.trigger_filters(pipeline):
            check = getattr(event_filter, 'matches_event', None)
            if check is None or check(event):
                return True
        return False

    def event_matches_pipeline(self, pipeline, event, change) -> bool:
        for event_filter in self.layouts.trigger_filters(pipeline):
            if event_filter.matches(event, change):
                if getattr(event_filter, 'debug', False):
                    # A trigger's ``debug: true``: the item's report says
                    # why each job ran or not.
                    event.debug = True
                return self.change_meets_requirements(pipeline, change)
        return False

    def cannot_merge(self, pipeline, change) -> str | None:
        """Why the code-review system would refuse to merge ``change``
        (draft, conflict, branch protection), counting the statuses this
        pipeline sets itself as passed; None if it would merge."""
        connection = self.connections.get(getattr(change, 'connection', None) or '')
        check = getattr(connection, 'can_merge', None)
        if check is None:
            return None
        allow_needs = {f'{self.tenant.name}/{pipeline.name}'}
        try:
            return check(change, allow_needs)
        except Exception:
            log.exception('Unable to ask whether %s can merge', change.describe())
            return None

    def change_meets_requirements(self, pipeline, change) -> bool:
        for connection, require, reject in self.layouts.requirements(pipeline):
            if connection != getattr(change, 'connection', None):
                continue
            if require is not None and not require.matches(change):
                return False
            if reject is not None and reject.matches(change):
                return False
        return True

    def get_needed_changes(self, change):
        """Unmerged changes ``change`` needs, dependencies first; None if
        they form a cycle (see ``resolve_dependencies`` for cycles)."""
        if not isinstance(change, Change):
            return []
        groups = dependency_groups(change, self._needed)
        if any(len(group) > 1 for group in groups):
            return None
        return [c for group in groups[:-1] for c in group]

    def resolve_dependencies(self, pipeline, change) -> Dependencies:
        """The changes ``change`` needs, grouped into dependency cycles
        (with ``dependencies-by-topic``, the open changes sharing a
        topic count as one cycle); ``error`` says why a cycle keeps it
        out (its queue lacks ``allow-circular-dependencies``)."""
        if not isinstance(change, Change):
            return Dependencies(groups=[[change]])
        topics: dict = {}

        def needed_of(c):
            deps = self._needed(c)
            if c.topic and self.queue_settings(pipeline, c).dependencies_by_topic:
                if c.topic not in topics:
                    topics[c.topic] = self._topic_changes(c)
                known = {d.key for d in deps}
                deps += [t for t in topics[c.topic]
                         if t.key != c.key and t.key not in known]
            return deps
        groups = dependency_groups(change, needed_of)
        return Dependencies(groups=groups, error=self._cycle_error(pipeline, groups))

    def _cycle_error(self, pipeline, groups) -> str | None:
        for group in groups:
            if len(group) < 2:
                continue
            for c in group:
                if not self.queue_settings(pipeline, c).allow_circular_dependencies:
                    return CYCLE_REFUSED.format(project=c.project)
            names = {self.get_queue_config(pipeline, c)[0] for c in group}
            if len(names) > 1:
                return CYCLE_QUEUES.format(changes=', '.join(c.describe() for c in group))
        return None

    def queue_settings(self, pipeline, change) -> QueueConfig:
        """The ``- queue:`` of ``change``'s project (its project-pipeline's
        queue, else the project's); defaults when it names none."""
        layout = self.tenant.layout
        branch = getattr(change, 'branch', None)
        name = None
        ppc = layout.get_project_pipeline_config(change.project, pipeline.name, branch)
        if ppc is not None:
            name = ppc.queue_name
        if name is None:
            name = layout.get_project_metadata(change.project)['queue_name']
        queue = layout.queues.get(name) if name else None
        return queue if queue is not None else QueueConfig(name=name or '')

    def _topic_changes(self, change) -> list:
        """The open changes sharing ``change``'s topic, on its connection."""
        connection = self.connections.get(change.connection)
        lookup = getattr(connection, 'changes_by_topic', None)
        try:
            found = lookup(change.topic) if lookup is not None else \
                topic_changes(connection, change.topic)
        except Exception:
            log.exception('Unable to query the changes of topic %s', change.topic)
            return []
        return [c for c in found if not c.is_merged]

    def _needed(self, change):
        connection = self.connections.get(change.connection)
        deps = []
        for dep in connection.get_needed_changes(change, self.connections):
            if dep is not None and not dep.is_merged:
                deps.append(dep)
        return deps

    def missing_needed_changes(self, item):
        """A change ``item`` needs that is neither merged nor ahead of it
        (described), or None. Asked for every item at every pass of a
        dependent pipeline: the dependencies as read before are used, and
        read again only when one seems missing (it may have merged)."""
        change = item.change
        needed = self._needed(change)
        if not needed:
            return None
        ahead = {i.change.key for i in item.items_ahead()}
        if item.bundle is not None:
            ahead |= {i.change.key for i in item.bundle.items if i.queue is not None}
        missing = [dep for dep in needed if dep.key not in ahead]
        forget = getattr(self.connections.get(change.connection), 'forget_needed', None)
        if missing and forget is not None:
            forget(change)
            missing = [dep for dep in self._needed(change) if dep.key not in ahead]
        return missing[0].describe() if missing else None

    def tenant_limits(self) -> dict:
        """The tenant's ``max-changes-per-pipeline`` and
        ``max-dependencies`` (None when unset)."""
        tenant = getattr(self.tenant.layout, 'tenant', None)
        return {'max_changes_per_pipeline': getattr(tenant, 'max_changes_per_pipeline', None),
                'max_dependencies': getattr(tenant, 'max_dependencies', None)}

    def get_queue_config(self, pipeline, change):
        return self.layouts.queue_config(self.tenant.layout, pipeline, change)

    # -- merges -----------------------------------------------------------------

    def request_merge(self, pipeline, item, items):
        build_set = item.current_build_set
        item_log(item).info('Requesting merge of %s', [i.change.describe() for i in items])

        def done(result):
            self.scheduler.add_result_event('merge-completed', build_set=build_set,
                                            result=result)
        read_files = self.layouts.read_paths(self.tenant.layout, item.change.project)
        return self.scheduler.merger.merge_items(items, done, event_id=item.event_id,
                                                 read_files=read_files)

    def cancel_merge(self, build_set):
        """The build set was replaced (a gate reset): its merge, if still
        queued in Gearman, is taken out so the mergers do not spend time
        on it; a result that comes anyway is dropped (the build set is no
        longer current)."""
        handle = build_set.merge_request
        cancel = getattr(self.scheduler.merger, 'cancel', None)
        if handle is not None and cancel is not None:
            cancel(handle)

    # -- jobs -----------------------------------------------------------------

    def freeze_jobs(self, pipeline, item):
        return self.layouts.freeze_jobs(self.tenant.layout, pipeline, item)

    def request_nodes(self, pipeline, item, job):
        if not job.nodes:
            return None
        return self.scheduler.nodes.request(item, job, pipeline)

    # -- semaphores -------------------------------------------------------------

    @property
    def semaphores(self):
        return self.scheduler.semaphore_handler(self.tenant.name)

    def reuse_result(self, item, job) -> bool | str:
        """Job ``reuse-results``: True when an earlier SUCCESS build with
        the same inputs completes ``job`` for ``item``; ``'wait'`` while
        the projects it uses are being pinned."""
        return reuse.try_reuse(self, item, job)

    def retry_node_failure(self, build_set, job) -> bool:
        """The tenant's ``retry-node-failure``: whether a failed node
        request for ``job`` is made again."""
        return classify.retry_node_failure(self, build_set, job)

    def job_requirements(self, item, job):
        """Whether a job that ``requires`` something may start: a
        RequirementsState (READY, WAIT, or FAIL with the reason)."""
        from zuul.manager.requirements import requirements_state
        return requirements_state(item, job, getattr(self.scheduler, 'history', None),
                                  self.tenant.name, self.tenant.layout)

    def acquire_semaphores(self, item, job) -> bool:
        if not job.semaphores:
            return True
        acquired = self.semaphores.acquire(self.tenant.layout, item.current_build_set,
                                           job.name, job.semaphores)
        if not acquired:
            item_log(item).debug('%s waits for semaphore %s', job.name,
                                 ', '.join(job.semaphores))
        return acquired

    def release_semaphores(self, build_set, job_name=None):
        if job_name is None:
            self.semaphores.release_build_set(build_set)
        else:
            # Jobs waiting elsewhere in the tenant start on the next pass
            # over the pipelines, which follows every event.
            self.semaphores.release(build_set, job_name)

    def cancel_node_request(self, request):
        self.scheduler.nodes.cancel(request)

    def return_nodes(self, nodeset, build=None, result=None):
        """Give nodes back, or hold them for an autohold request that
        matches this failed build."""
        from zuul.scheduler.autohold import HOLD_RESULTS
        store = getattr(self.scheduler, 'autoholds', None)
        if build is not None and result in HOLD_RESULTS and store is not None and \
                hasattr(self.scheduler.nodes, 'hold'):
            item = build.build_set.item
            request = store.claim(self.tenant.name, item.change.project, build.job.name,
                                  item.change.ref, build.uuid,
                                  getattr(nodeset, 'node_ids', []))
            if request is not None:
                item_log(item).info('Holding the nodes of %s build %s for autohold %s',
                                    build.job.name, build.uuid, request.id)
                self.scheduler.nodes.hold(nodeset, build.job.name, request)
                return
        self.scheduler.nodes.release(nodeset)

    def execute(self, pipeline, item, job, nodeset):
        build = m.Build(job, item.current_build_set)
        self.scheduler.executor.execute(self.tenant.name, pipeline, item, job, nodeset, build)
        return build

    def cancel_build(self, build):
        self.scheduler.executor.cancel(build)

    # -- reporting --------------------------------------------------------------

    def report(self, pipeline, item, action):
        """Send ``action``'s report through the pipeline's reporters;
        returns True if the change merged as a result (gate submit)."""
        reporters = self.layouts.reporters(pipeline, action)
        if not reporters:
            return self._merged(item) if action == 'success' else None
        tenant = getattr(self.tenant.layout, 'tenant', None)
        build_page = build_page_base(tenant, getattr(self.scheduler, 'web_root', None))
        message = format_report(pipeline, item, action, build_page)
        # Every reporter off the loop: the loop does not wait for the
        # write-ahead; the reports go out once it landed (report_gate).
        off_loop = all(getattr(r, 'prepare_report', None) is not None or
                       getattr(r, 'report_off_loop', None) is not None and
                       r.can_report_off_loop() for r in reporters)
        landed = self._persist(pipeline, item, action, wait=not off_loop)
        pending = False
        for reporter in reporters:
            try:
                pending |= self._send_report(reporter, item, pipeline, action, message,
                                             landed)
            except Exception:
                item_log(item).exception('Reporter %s failed for %s', reporter, action)
        if pending:
            return m.REPORT_PENDING
        if action == 'success':
            return self._merged(item)
        return None

    def _send_report(self, reporter, item, pipeline, action, message,
                     landed=None) -> bool:
        """Report through ``reporter``: off the loop when it can
        (``report_off_loop``: its connection's workers call the API), else here.
        True when the outcome (did it merge?) comes later as a
        ``report-completed`` result event: for a success report of a
        reporter that merges, or that asks for the outcome after every
        success (``merged_outcome``: asking is itself a remote call)."""
        prepare = getattr(reporter, 'prepare_report', None)
        if prepare is not None:
            # What it needs is taken now; it goes out on its connection's
            # thread (SMTP, another database) once the write-ahead landed.
            send = prepare(item, pipeline, action, message)
            if send is not None:
                self._submit_after(landed, send)
            return False
        submit = getattr(reporter, 'report_off_loop', None)
        if submit is None or not reporter.can_report_off_loop():
            reporter.report(item, pipeline, action, message)
            return False
        if action == 'success' and (getattr(reporter, 'merge', False) or
                                    getattr(reporter, 'merged_outcome', False)):
            def done(merged):
                if merged:
                    self._emit_project_change_merged(item.change)
                self.scheduler.add_result_event('report-completed', item=item,
                                                merged=bool(merged))
            self._submit_after(landed, lambda: submit(item, pipeline, action, message, done),
                               on_error=lambda: done(False))
            return True
        self._submit_after(landed, lambda: submit(item, pipeline, action, message))
        return False

    def _submit_after(self, landed, submit, on_error=None) -> None:
        gate = getattr(self.scheduler, 'report_gate', None)
        if landed is None or gate is None:
            submit()
            return
        gate.put(landed, submit, on_error)

    def _merged(self, item) -> bool:
        change = item.change
        if not isinstance(change, Change):
            return False
        connection = self.connections.get(change.connection)
        merged = bool(connection and connection.is_merged(change))
        if merged:
            self._emit_project_change_merged(change)
        return merged

    def item_enqueued(self, pipeline, item):
        if self.scheduler.stats:
            self.scheduler.stats.item_enqueued(self.tenant.name, pipeline, item)
        self._dequeue_superseded(pipeline, item)
        self._emit_parent_change_enqueued(pipeline, item)

    def _dequeue_superseded(self, pipeline, item) -> None:
        """``supercedes``: a change entering ``pipeline`` leaves the
        pipelines it supersedes (e.g. gate over check)."""
        if not item.live:
            return
        for name in getattr(pipeline, 'supercedes', None) or ():
            manager = self.tenant.managers.get(name)
            if manager is None or name == pipeline.name:
                continue
            manager.dequeue_superseded(item.change, pipeline.name, item.event)

    def _emit_parent_change_enqueued(self, pipeline, item) -> None:
        """The zuul driver's ``parent-change-enqueued``: one event per
        change that needs this one (its git children)."""
        change = item.change
        if not isinstance(change, Change) or not item.live or not change.needed_by_changes:
            return
        if not self._wanted(TriggerEvent(type='parent-change-enqueued',
                                         connection=change.connection,
                                         pipeline=pipeline.name)):
            return
        for key in change.needed_by_changes:
            # "<connection>/<number>" (Gerrit) or "<connection>/<project>/<number>"
            # (GitHub: pull request numbers are per repository).
            connection, _, rest = key.partition('/')
            project, _, number = rest.rpartition('/')
            if not number.isdigit():
                continue
            self.scheduler.add_trigger_event(TriggerEvent(
                type='parent-change-enqueued', connection=connection or change.connection,
                project=project, change_number=int(number), pipeline=pipeline.name))

    def _emit_project_change_merged(self, change) -> None:
        """The zuul driver's ``project-change-merged``: one event per open
        change of the project whose change just merged."""
        connection = self.connections.get(change.connection)
        if not hasattr(connection, 'open_changes'):
            return
        if not self._wanted(TriggerEvent(type='project-change-merged',
                                         connection=change.connection,
                                         project=change.project, branch=change.branch)):
            return      # no pipeline takes them: no query, no events
        try:
            others = connection.open_changes(change.project, change.branch)
        except Exception:
            log.exception('Unable to list the open changes of %s', change.project)
            return
        for other in others:
            if other.number == change.number:
                continue
            self.scheduler.add_trigger_event(TriggerEvent(
                type='project-change-merged', connection=change.connection,
                project=change.project, branch=change.branch,
                change_number=other.number, patchset=other.patchset))

    def _wanted(self, event) -> bool:
        """Whether some pipeline of this tenant may take ``event`` (the
        zuul driver's own events are only made when one may)."""
        managers = getattr(self.tenant, 'managers', None)
        if managers is None:
            return True
        return any(self.event_may_match_pipeline(m.pipeline, event)
                   for m in managers.values())

    def item_dequeued(self, pipeline, item):
        if self.scheduler.stats:
            self.scheduler.stats.item_dequeued(self.tenant.name, pipeline, item)
        if getattr(item, 'reporting', None):
            # Its final report is out: the state without it is saved now,
            # not at the end of the batch, so no restart reports it again.
            self._persist(pipeline, item, None)

    def _persist(self, pipeline, item, action, wait: bool = True):
        """Write-ahead of a report (``action``) or right after one
        (None): the pipeline's state goes to ZooKeeper now. Not ``wait``:
        sent, not waited for; returns the Event set once it landed (None:
        nothing to wait for)."""
        manager = self.tenant.managers.get(pipeline.name) \
            if hasattr(self.tenant, 'managers') else None
        if manager is None:
            return None
        if action is None:
            after = getattr(self.scheduler, 'save_after_report', None)
            if after is not None and getattr(self.scheduler, 'state_store', None):
                after(manager)
                return None
            save = getattr(self.scheduler, 'save_state', None)
            if save is not None and getattr(self.scheduler, 'state_store', None):
                try:
                    # Nothing waits for it: ZooKeeper applies it before
                    # the next write-ahead, sent after it.
                    save(only=manager, wait=False)
                except Exception:
                    log.exception('Unable to save the state after a report')
            return None
        before = getattr(self.scheduler, 'before_report', None)
        if before is None:
            return None
        if wait:
            before(manager, item, action)
            return None
        return before(manager, item, action, wait=False)

    def item_reported(self, pipeline, item, action):
        if self.scheduler.history:
            self.scheduler.history.record_buildset(self.tenant.name, pipeline, item, action)
