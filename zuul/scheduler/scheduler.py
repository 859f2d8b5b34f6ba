"""The scheduler: tenants, their pipelines, and the events that move
changes through them.

Collaborators are passed in (STYLE.md: narrow collaborators):
- ``layouts``: builds tenant layouts and freezes jobs (zuul.scheduler.layouts)
- ``connections``: name -> connection (source, trigger filters, reporter)
- ``merger``, ``executor``, ``nodes``: clients that do slow work and post
  results back through ``add_result_event``
"""

from __future__ import annotations

import logging
import time

from zuul.lib.urls import safe_link, safe_result_data
from zuul.manager import manager_for
from zuul.model import item as m
from zuul.model.errors import UnknownNameError
from zuul.model.events import REF_UPDATE_EVENTS, ManagementEvent, ResultEvent, TriggerEvent
from zuul.scheduler.build_times import BuildTimes
from zuul.scheduler.context import SchedulerContext
from zuul.scheduler.durable import DurableState
from zuul.scheduler.held_changes import abort_requested, holds_change
from zuul.scheduler.loop import EventLoop
from zuul.scheduler.semaphores import SemaphoreHandler

log = logging.getLogger('zuul.scheduler')


# Event types whose change matters even when no pipeline is triggered:
# they dequeue superseded or closed changes, or may change the config.
# Management requests on one tenant's queues: with several active
# schedulers, answered by the one holding the tenant.
FORWARDED = frozenset({'enqueue', 'enqueue_ref', 'dequeue', 'promote'})

# A pass over the pipelines takes the tenants something happened to, and
# every tenant at least this often (seconds).
FULL_PASS_INTERVAL = 1.0

_CHANGE_NEEDED = frozenset({'patchset-created', 'change-abandoned', 'change-merged',
                            *REF_UPDATE_EVENTS})


class TenantState:
    """A tenant's current layout and a pipeline manager per pipeline."""

    def __init__(self, name: str, layout):
        self.name = name
        self.layout = layout
        self.managers: dict = {}
        self.loaded_at = time.time()


class Scheduler(DurableState):
    def __init__(self, layouts, connections, merger, executor, nodes, stats=None,
                 history=None):
        self.layouts = layouts
        self.connections = connections
        self.merger = merger
        self.executor = executor
        self.nodes = nodes
        self.stats = stats
        self.history = history
        # Expected job durations (status progress bars and ETAs).
        self.build_times = BuildTimes(history)
        self.tenants: dict[str, TenantState] = {}
        self.loop = EventLoop(self)
        self.ctx_by_tenant: dict[str, SchedulerContext] = {}
        # Optional zuul.scheduler.timer.TimerService, told of every
        # reconfiguration.
        self.timer = None
        # Optional zuul.scheduler.nodes.ProviderPublisher: the live
        # layouts' providers for zuul-launcher, after every reconfiguration.
        self.provider_publisher = None
        from zuul.scheduler.autohold import AutoholdStore
        self.autoholds = AutoholdStore()
        # Semaphore holders per tenant; they outlive reconfigurations.
        self._semaphores: dict[str, SemaphoreHandler] = {}
        self._init_durable_state()
        # Tenants the next pass over the pipelines processes (None: all),
        # and when a pass last took them all.
        self._pass_wanted: set | None = None
        self._full_pass = 0.0
        # zuul.scheduler.ownership.TenantOwnership when several schedulers
        # are active ([scheduler] standby = false): only the tenants it
        # holds are processed and saved here. None: this one does all.
        self.ownership = None
        # Whether this scheduler notes for a successor which connection
        # events it holds (the one that receives the events does).
        self.marks_saved = True

    def semaphore_handler(self, tenant_name: str) -> SemaphoreHandler:
        handler = self._semaphores.get(tenant_name)
        if handler is None:
            # setdefault: the RPC thread (playbook semaphores) and the event
            # loop may both get here first; one handler wins for both.
            handler = self._semaphores.setdefault(tenant_name, SemaphoreHandler(tenant_name))
            handler.on_shared_release = self.process_every_tenant
        return handler

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> None:
        # From the shared config cache: a scheduler that starts re-reads
        # only what no scheduler cached.
        if self.ownership is not None:
            self.ownership.note_versions()
        self.reconfigure(keep_shared=True)
        if self.ownership is None:
            self.restore_state()
        self.loop.start()

    def owns(self, tenant: str) -> bool:
        return self.ownership is None or self.ownership.owns(tenant)

    def stop(self) -> None:
        """Finish the event being handled, stop, and save the state."""
        self.loop.stop()
        try:
            self.save_state()
            # The loop's last saves answered, their follow-ups sent.
            landed = getattr(self.state_store, 'wait_landed', None)
            if landed is not None:
                landed()
        except Exception:
            log.exception('Unable to save the state while stopping')
        # Reports waiting for their write-ahead are handed on.
        if self.report_gate is not None:
            self.report_gate.stop()
        # The build history's writes asked for so far are written.
        stop_writer = getattr(self.history, 'stop', None)
        if stop_writer is not None:
            stop_writer()

    def add_trigger_event(self, event: TriggerEvent) -> None:
        if self.ownership is not None:
            # Several active: into each interested tenant's queue, taken
            # by whichever scheduler holds that tenant.
            from zuul.scheduler.state import event_data
            try:
                self.ownership.route(event, event_data(event))
                self._note_latest(event)
            except Exception:
                log.exception('[e: %s] Unable to store trigger event %s in ZooKeeper',
                              event.event_id, event.describe())
            return
        if self.event_queue is not None:
            from zuul.scheduler.state import event_data
            try:
                event._zk_path = self.event_queue.put(event_data(event))
                self._note_latest(event)
            except Exception:
                log.exception('[e: %s] Unable to store trigger event %s in ZooKeeper',
                              event.event_id, event.describe())
        self.loop.add_trigger_event(event)

    def add_result_event(self, kind: str, **args) -> None:
        self.loop.add_result_event(ResultEvent(kind, args))

    def management(self, kind: str, timeout: float | None = 60.0, **args):
        """Submit a management request and wait for its outcome."""
        if self.ownership is not None and args.get('tenant') in self.tenants and \
                kind in FORWARDED and not self.owns(args['tenant']):
            # Another scheduler holds the tenant: it answers.
            return self.ownership.forward(kind, args, timeout)
        event = self.loop.add_management_event(ManagementEvent(kind, **args))
        return event.wait(timeout)

    def wait_until_settled(self, timeout: float = 120.0) -> bool:
        """For tests and tools: True once no event is queued and no merge,
        node request or build is outstanding."""
        return self.loop.wait_idle(timeout, extra=self._work_outstanding)

    def _work_outstanding(self) -> bool:
        # Connections reading events ahead or sending reports off the loop.
        listing = getattr(self.connections, 'all', None)
        if listing is not None and any(getattr(c, 'workers_busy', lambda: 0)()
                                       for c in listing()):
            return True
        if getattr(getattr(self.executor, 'pins', None), 'pending', 0):
            return True
        if getattr(self.history, 'pending', lambda: 0)():
            return True     # build history rows not written yet
        if getattr(self.state_store, 'in_flight', 0):
            return True     # pipeline state sent, not answered yet
        if self.report_gate is not None and self.report_gate.pending():
            return True     # reports waiting for their write-ahead
        for tenant in self.tenants.values():
            for manager in tenant.managers.values():
                for item in manager.all_items():
                    bs = item.current_build_set
                    if bs.merge_state == m.MERGE_PENDING or bs.node_requests or \
                            item.pending_report is not None:
                        return True
                    if any(not b.finished for b in bs.builds.values()):
                        return True
        return False

    # -- reconfiguration ------------------------------------------------------

    def reconfigure(self, tenant_names=None, projects=None, keep_shared=False) -> None:
        """(Re)load layouts; queue items are kept and move to the new
        layout's managers. Runs on the scheduler thread after start()."""
        if keep_shared:
            layouts = self.layouts.load(tenant_names=tenant_names, projects=projects,
                                        keep_shared=True)
        else:
            layouts = self.layouts.load(tenant_names=tenant_names, projects=projects)
            if self.ownership is not None:
                # Re-read and in the shared cache: the others follow.
                self.ownership.reconfigured(list(layouts), projects)
        for name, layout in layouts.items():
            old = self.tenants.get(name)
            state = TenantState(name, layout)
            ctx = SchedulerContext(self, state)
            self.ctx_by_tenant[name] = ctx
            for pipeline in self.layouts.pipelines(layout):
                manager = manager_for(pipeline, ctx)
                if old and pipeline.name in old.managers:
                    manager.queues = old.managers[pipeline.name].queues
                state.managers[pipeline.name] = manager
            self.tenants[name] = state
            log.info('Tenant %s loaded with pipelines %s', name, sorted(state.managers))
        if self.timer is not None:
            self.timer.reconfigure(self.tenants)
        if self.provider_publisher is not None:
            configured = getattr(getattr(self.layouts, 'tenant_config', None), 'tenants', None)
            self.provider_publisher.publish(self.tenants, configured)
        self._watch_projects()

    def _watch_projects(self) -> None:
        """Tell polling connections (git) which of their projects the
        tenants use, so their ref updates become trigger events."""
        wanted: dict[str, set[str]] = {}
        for state in self.tenants.values():
            for tp in getattr(state.layout.tenant, 'projects', ()) or ():
                wanted.setdefault(tp.connection, set()).add(tp.name)
        for name, projects in wanted.items():
            connection = self.connections.get(name)
            if connection is not None and hasattr(connection, 'watch'):
                connection.watch(projects)

    # -- handlers (scheduler thread) ------------------------------------------

    def handle_management(self, event: ManagementEvent) -> None:
        self.mark_dirty()
        handler = getattr(self, '_mgmt_' + event.kind.replace('-', '_'), None)
        if handler is None:
            event.done(exception=ValueError(f'unknown request {event.kind}'))
            return
        tenant = event.args.get('tenant')
        if event.kind in FORWARDED and tenant in self.tenants and not self.owns(tenant):
            # Given up (or taken by another) since the request was made.
            holder = self.ownership.owners().get(tenant)
            event.done(exception=UnknownNameError(
                f'Tenant "{tenant}" is processed by scheduler {holder or "(none yet)"}, '
                'not this one: ask again'))
            return
        try:
            event.done(handler(**event.args))
        except Exception as e:
            event.done(exception=e)

    def handle_result(self, event: ResultEvent) -> None:
        args = event.args
        self.mark_dirty(*self._pipeline_of_result(args))
        if event.kind == 'merge-completed':
            bs = args['build_set']
            self._manager_of(bs.item).on_merge_completed(bs, args['result'])
        elif event.kind == 'nodes-provisioned':
            item = args['item']
            self._manager_of(item).on_nodes_provisioned(
                item, args['job_name'], args['request'], args.get('nodeset'),
                args.get('failed', False))
            build = item.current_build_set.builds.get(args['job_name'])
            if args.get('error_detail') and build is not None and \
                    build.result == m.NODE_FAILURE and not build.error_detail:
                build.error_detail = args['error_detail']   # why, on the report line
        elif event.kind == 'build-started':
            build = args['build']
            build.start_time = args.get('start_time') or build.start_time
            build.url = args.get('url') or build.url
        elif event.kind == 'build-pre-fail':
            # failure-output matched: the item fails from now on (the gate
            # resets behind it) though the build has not ended.
            build = args['build']
            if build.result is None:
                build.pre_fail = True
                # fail-fast acts now, not when the build ends
                self._manager_of(build.build_set.item).on_build_pre_fail(build)
        elif event.kind == 'build-completed':
            self._on_build_completed(args)
        elif event.kind == 'report-completed':
            self._manager_of(args['item']).on_report_completed(args['item'], args['merged'])
        elif event.kind == 'pin-completed':
            self.executor.pin_completed(args['build_set'], args['result'])
        else:
            log.error('Unknown result event %s', event.kind)

    def _on_build_completed(self, args: dict) -> None:
        build = args['build']
        build.start_time = build.start_time or args.get('start_time')
        build.end_time = args.get('end_time')
        # Links from the job: http(s) or relative only (zuul.lib.urls).
        build.log_url = safe_link(args.get('log_url')) or build.log_url
        build.result_data = safe_result_data(args.get('result_data') or {})
        build.error_detail = args.get('error_detail')
        item = build.build_set.item
        manager = self._manager_of(item)
        tenant = next((t for t in self.tenants.values()
                       if manager in t.managers.values()), None)
        if tenant is not None:
            self.build_times.record(tenant.name, item.change.project,
                                    getattr(item.change, 'branch', None),
                                    build.job.name, args['result'], build.duration)
        manager.on_build_completed(build, args['result'])
        self._forget.append(build)
        if self.stats is not None and tenant is not None and hasattr(manager, 'pipeline'):
            connection = self.connections.get(getattr(item.change, 'connection', None) or '')
            self.stats.build_completed(
                tenant.name, manager.pipeline, item, build,
                hostname=getattr(connection, 'canonical_hostname', '') or '')

    def handle_trigger(self, event: TriggerEvent) -> None:
        tenant = getattr(event, '_tenant', None)
        if tenant is not None and not self.owns(tenant):
            return      # given up meanwhile: left in the queue for the holder
        if tenant is not None:
            self.mark_dirty(tenant)     # else each tenant that may want it, below
        try:
            if tenant is not None and self.ownership is not None:
                # Never act on a layout older than another scheduler's.
                self.ownership.ensure_newest_layout(
                    tenant, seen=getattr(event, '_layout_version', None))
            self._handle_trigger(event)
        finally:
            path = getattr(event, '_zk_path', None)
            if path:
                self._acks.append(path)

    def _handle_trigger(self, event: TriggerEvent) -> None:
        log.info('[e: %s] Processing trigger event %s', event.event_id, event.describe())
        only = getattr(event, '_tenant', None)
        for tenant in list(self.tenants.values()):
            if only is not None and tenant.name != only:
                continue
            ctx = self.ctx_by_tenant[tenant.name]
            if not self._tenant_may_want(tenant, ctx, event):
                # e.g. Zuul's own review comments: no pipeline wants them,
                # so don't ask the code-review system about their change.
                log.debug('[e: %s] No pipeline of tenant %s takes %s', event.event_id,
                          tenant.name, event.type)
                continue
            if only is None:
                self.mark_dirty(tenant.name)
            change = ctx.get_change_for_event(event)
            if change is None:
                continue
            # Any event about a change re-checks its items against what the
            # source says now: requirements lost, abandoned, new patchset.
            for manager in tenant.managers.values():
                manager.recheck_change(change, event)
            abort_requested(tenant.name, tenant.managers, event, change)
            if event.type == 'change-merged' or event.type in REF_UPDATE_EVENTS:
                self._maybe_reconfigure(tenant, event, change)
            for name, manager in tenant.managers.items():
                if ctx.event_matches_pipeline(manager.pipeline, event, change):
                    manager.add_change(change, event)

    def _tenant_may_want(self, tenant: TenantState, ctx, event) -> bool:
        if not self.layouts.has_project(tenant.layout, event.connection, event.project) \
                and event.type not in ('timer', 'parent-change-enqueued',
                                       'project-change-merged'):
            return False
        return event.type in _CHANGE_NEEDED or holds_change(tenant.managers.values(), event) \
            or any(ctx.event_may_match_pipeline(m.pipeline, event)
                   for m in tenant.managers.values())

    def may_want_event(self, event) -> bool:
        """Whether some tenant may act on ``event`` (so a connection reads
        its change ahead, off this loop). Called from connection threads:
        it only reads, and says True when it cannot tell."""
        try:
            return any(self._tenant_may_want(tenant, self.ctx_by_tenant[tenant.name], event)
                       for tenant in list(self.tenants.values()))
        except (RuntimeError, KeyError):   # queues changed under us
            return True

    def process_every_tenant(self) -> None:
        """The next pass processes every tenant's pipelines (e.g. a global
        semaphore was released: another tenant's item may take it)."""
        self._pass_wanted = None

    def process_pipelines(self) -> bool:
        """One pass over the pipelines of the tenants something happened
        to since the last pass (an event, a result, a change made by the
        previous pass), and over every tenant at least every
        FULL_PASS_INTERVAL. True if anything changed."""
        changed = False
        wanted, self._pass_wanted = self._pass_wanted, set()
        now = time.monotonic()
        if wanted is None or now - self._full_pass >= FULL_PASS_INTERVAL:
            wanted, self._full_pass = None, now
        for tenant in list(self.tenants.values()):
            if not self.owns(tenant.name) or (wanted is not None and
                                              tenant.name not in wanted):
                continue
            tenant_changed = False
            for name, manager in list(tenant.managers.items()):
                try:
                    if manager.process_queues():
                        tenant_changed = True
                        self.mark_dirty(tenant.name, name)
                except Exception:
                    self.mark_dirty(tenant.name, name)
                    # Managers fail single items themselves; this keeps a
                    # bug elsewhere in one pipeline from stalling the rest.
                    log.exception('Error processing pipeline %s of tenant %s',
                                  manager.name, tenant.name)
            changed |= tenant_changed
            if tenant_changed and self.stats is not None:
                self.stats.queue_lengths(tenant.name, tenant.managers.values())
        reprioritize = getattr(self.nodes, 'reprioritize', None)
        if reprioritize is not None:
            # [scheduler] relative_priority: requests whose items ahead
            # left move up (a no-op without the key).
            try:
                reprioritize()
            except Exception:
                log.exception('Unable to revise the relative priority of node requests')
        return changed

    # -- helpers -------------------------------------------------------------

    def _pipeline_of_result(self, args: dict) -> tuple:
        """(tenant, pipeline) whose item a result event is about ((None,
        None): unknown). Its effects on other pipelines come through
        events or passes, which say so themselves."""
        item = args.get('item')
        if item is None:
            holder = args.get('build_set') or getattr(args.get('build'), 'build_set', None)
            item = getattr(holder, 'item', None)
        if item is None:
            return None, None
        manager = self._manager_of(item)
        for tenant in self.tenants.values():
            for name, candidate in tenant.managers.items():
                if candidate is manager:
                    return tenant.name, name
        return None, None

    def _manager_of(self, item: m.QueueItem):
        for tenant in self.tenants.values():
            for manager in tenant.managers.values():
                if item.queue in manager.queues:
                    return manager
        return _NullManager()

    def _maybe_reconfigure(self, tenant: TenantState, event, change) -> None:
        def later():
            log.info('[e: %s] Config of %s changed on %s; reconfiguring tenant %s',
                     event.event_id, event.project, event.ref, tenant.name)
            self.loop.add_management_event(ManagementEvent(
                'reconfigure', tenants=[tenant.name], projects=[event.project]))
        if self.layouts.event_updates_config(tenant.layout, event, change, later=later):
            log.info('[e: %s] Config of %s changed; reconfiguring tenant %s',
                     event.event_id, event.project, tenant.name)
            self.reconfigure(tenant_names=[tenant.name], projects=[event.project])

    def get_tenant(self, name: str) -> TenantState:
        try:
            return self.tenants[name]
        except KeyError:
            raise UnknownNameError(f'Unknown tenant "{name}"') from None

    def get_manager(self, tenant: str, pipeline: str):
        state = self.get_tenant(tenant)
        try:
            return state.managers[pipeline]
        except KeyError:
            raise UnknownNameError(f'Unknown pipeline "{pipeline}" in tenant '
                                   f'"{tenant}"') from None

    # -- management requests --------------------------------------------------

    def _mgmt_tenant_take(self, tenant):
        return self.ownership.take(tenant)

    def _mgmt_tenant_release(self, tenant):
        return self.ownership.release(tenant)

    def _mgmt_tenant_refresh(self, tenant):
        return self.ownership.refresh(tenant)

    def _mgmt_reconfigure(self, tenants=None, projects=None):
        self.reconfigure(tenant_names=tenants, projects=projects)
        return True

    def _mgmt_enqueue(self, tenant, pipeline, project, change):
        manager = self.get_manager(tenant, pipeline)
        ctx = self.ctx_by_tenant[tenant]
        obj = ctx.lookup_change(project, change)
        event = TriggerEvent(type='zuul-enqueue', connection=obj.connection,
                             project=obj.project, change_number=getattr(obj, 'number', None))
        item = manager.add_change(obj, event, ignore_requirements=True)
        if item is None:
            raise UnknownNameError(f'Change {change} could not be enqueued in {pipeline}')
        return item.id

    def _mgmt_enqueue_ref(self, tenant, pipeline, project, ref, oldrev=None, newrev=None):
        manager = self.get_manager(tenant, pipeline)
        ctx = self.ctx_by_tenant[tenant]
        obj = ctx.lookup_ref(project, ref, oldrev, newrev)
        event = TriggerEvent(type='zuul-enqueue-ref', connection=obj.connection,
                             project=obj.project, ref=ref, oldrev=oldrev, newrev=newrev)
        item = manager.add_change(obj, event, ignore_requirements=True)
        if item is None:
            raise UnknownNameError(f'{ref} could not be enqueued in {pipeline}')
        return item.id

    def _mgmt_dequeue(self, tenant, pipeline, project, change=None, ref=None):
        manager = self.get_manager(tenant, pipeline)
        ctx = self.ctx_by_tenant[tenant]
        obj = ctx.lookup_change(project, change) if change else \
            ctx.lookup_ref(project, ref)
        for item in list(manager.all_items()):
            # A ref item's key holds its newrev, which a request by ref lacks.
            same = item.change.key == obj.key if change else (
                getattr(item.change, 'ref', None) == obj.ref and
                item.change.project == obj.project and
                getattr(item.change, 'connection', None) == obj.connection)
            if same:
                manager.dequeue_item(item, 'dequeued on request')
                return True
        raise UnknownNameError(f'{change or ref} is not in pipeline {pipeline}')

    def _mgmt_status_get(self, tenant, version=''):
        from zuul.scheduler.status import tenant_status
        if not self.owns(tenant) and self.status_publisher is not None:
            # Another scheduler's: as it published it.
            self.get_tenant(tenant)
            published = self.status_publisher.store.read(tenant)
            if published is not None:
                return published
        return tenant_status(self, tenant, self.status_estimate(tenant), version=version)

    def _mgmt_status_publish(self, publisher):
        publisher.publish()
        return True

    def status_estimate(self, tenant: str):
        """Expected job durations for ``tenant``'s status."""
        times = self.build_times

        def estimate(item, job_name):
            change = item.change
            return times.estimate(tenant, change.project, getattr(change, 'branch', None),
                                  job_name)
        return estimate

    def _mgmt_tenant_list(self):
        return [{'name': name, 'projects': self.layouts.project_count(state.layout),
                 'queue': sum(1 for mgr in state.managers.values() for _ in mgr.all_items())}
                for name, state in sorted(self.tenants.items())]

    def _mgmt_promote(self, tenant, pipeline, changes):
        manager = self.get_manager(tenant, pipeline)
        if not hasattr(manager, 'promote'):
            raise UnknownNameError(f'Pipeline {pipeline} does not support promote')
        objs = [self._queued_change(manager, spec) for spec in changes]
        manager.promote(objs)
        return True

    @staticmethod
    def _queued_change(manager, spec: str):
        """The change of ``manager``'s queue that ``N,P`` (or a pull
        request's ``N,SHA``) names."""
        number, _, patchset = spec.partition(',')
        for item in manager.all_items():
            change = item.change
            if str(getattr(change, 'number', '')) == number and \
                    str(getattr(change, 'patchset', '')).startswith(patchset):
                return change
        raise UnknownNameError(f'Change {spec} is not in pipeline {manager.name}')


class _NullManager:
    """Results for items that left their pipeline are dropped (their
    nodes were already returned by the cancel)."""

    def on_merge_completed(self, *a):
        pass

    def on_nodes_provisioned(self, item, job_name, request, nodeset, failed):
        pass

    def on_build_completed(self, *a):
        pass

    def on_build_pre_fail(self, *a):
        pass

    def on_report_completed(self, *a):
        pass
