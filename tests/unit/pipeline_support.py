"""The pipeline managers' test collaborators: the ctx a manager gets
from the scheduler, completing merges and builds synchronously and
deterministically (a build fails when a "broken" change is part of what
it tests), so the order of events is fully controlled. Used by the queue
tests (test_pipeline_managers.py, test_pipeline_leaving.py) and the
others that drive a manager directly."""

from dataclasses import dataclass, field
from types import SimpleNamespace

from zuul.manager import manager_for
from zuul.manager.cycles import CYCLE_REFUSED, Dependencies, dependency_groups
from zuul.model import item as m
from zuul.model.change import Change
from zuul.scheduler.semaphores import SemaphoreHandler


def _pipeline(name='gate', manager='dependent', **kw):
    defaults = dict(name=name, manager=manager, ignore_dependencies=False, window=20,
                    window_floor=3, window_ceiling=None, window_increase_type='linear',
                    window_increase_factor=1, window_decrease_type='exponential',
                    window_decrease_factor=2, precedence='normal')
    defaults.update(kw)
    return SimpleNamespace(**defaults)


@dataclass
class MergeResult:
    merged: bool
    repo_state: dict = field(default_factory=dict)
    commit: str | None = None
    files: list | None = None
    error: str | None = None


class Collaborators:
    """The ctx a manager gets, recording what it was asked to do."""

    def __init__(self, jobs=('job1',), broken=(), conflicting=(), queues=None,
                 needs=None, nodes=False, deps=None, semaphores=None, job_semaphores=None,
                 failed_nodes=(), hold_jobs=(), allow_cycles=False, by_topic=False,
                 topics=None, job_attrs=None, fail_own=None):
        self.jobs = jobs
        # Dependency cycles: the queue's allow-circular-dependencies and
        # dependencies-by-topic, change number -> topic, job -> frozen
        # attributes (deduplicate, required_projects), and
        # (change number, job) pairs whose own build fails.
        self.allow_cycles = allow_cycles
        self.by_topic = by_topic
        self.topics = topics or {}
        self.job_attrs = job_attrs or {}
        self.fail_own = set(fail_own or ())
        self.hold_jobs = set(hold_jobs)
        self.layout = SimpleNamespace(semaphores={
            name: SimpleNamespace(max=n) for name, n in (semaphores or {}).items()})
        self.job_semaphores = job_semaphores or {}
        self.sem = SemaphoreHandler('tenant')
        self.failed_nodes = set(failed_nodes)
        self.max_holding = {}
        self.deps = deps or {}
        self.broken = set(broken)
        self.conflicting = set(conflicting)
        self.queues = queues or {}
        self.needs = needs or {}
        self.nodes = nodes
        self.changes = {}
        self.pending_merges = []
        self.merges = []
        self.running = []
        self.node_requests = []
        self.reports = []
        self.notices = []
        self.history = []
        self.returned_nodes = []
        self.canceled = []
        self.manager = None

    def change_meets_requirements(self, pipeline, change):
        return True

    def get_needed_changes(self, change):
        return [self.changes[n] for n in self.needs.get(change.number, ())
                if not self.changes[n].is_merged]

    def resolve_dependencies(self, pipeline, change):
        if not isinstance(change, Change):
            return Dependencies(groups=[[change]])

        def needed_of(c):
            deps = self.get_needed_changes(c)
            topic = self.topics.get(c.number)
            if self.by_topic and topic:
                deps += [self.changes[n] for n, t in sorted(self.topics.items())
                         if t == topic and n != c.number and not self.changes[n].is_merged]
            return deps
        groups = dependency_groups(change, needed_of)
        error = None
        if any(len(g) > 1 for g in groups) and not self.allow_cycles:
            error = CYCLE_REFUSED.format(project=change.project)
        return Dependencies(groups=groups, error=error)

    def missing_needed_changes(self, item):
        ahead = {i.change.key for i in item.items_ahead()}
        if item.bundle is not None:
            ahead |= {i.change.key for i in item.bundle.live_items()}
        for n in self.needs.get(item.change.number, ()):
            dep = self.changes[n]
            if not dep.is_merged and dep.key not in ahead:
                return dep.describe()
        return None

    def get_queue_config(self, pipeline, change):
        for name, projects in self.queues.items():
            if change.project in projects:
                return name, projects
        return None, [change.project]

    def request_merge(self, pipeline, item, items):
        self.merges.append([i.change.number for i in items])
        self.pending_merges.append((item.current_build_set, [i.change.number for i in items]))
        return object()

    def cancel_merge(self, build_set):
        pass

    def freeze_jobs(self, pipeline, item):
        return [m.JobRef(j, hard_dependencies=tuple(self.deps.get(j, ())),
                         semaphores=tuple(self.job_semaphores.get(j, ())),
                         hold_following_changes=j in self.hold_jobs,
                         frozen=dict(self.job_attrs[j]) if j in self.job_attrs else None)
                for j in self.jobs], []

    def reuse_result(self, item, job):
        from zuul.scheduler.reuse import try_reuse
        return try_reuse(self, item, job)

    def retry_node_failure(self, build_set, job):
        from zuul.scheduler.classify import retry_node_failure
        return retry_node_failure(self, build_set, job)

    def job_requirements(self, item, job):
        from zuul.manager.requirements import requirements_state
        return requirements_state(item, job)

    def acquire_semaphores(self, item, job):
        if not job.semaphores:
            return True
        ok = self.sem.acquire(self.layout, item.current_build_set, job.name, job.semaphores)
        for name in job.semaphores:
            self.max_holding[name] = max(self.max_holding.get(name, 0), self.sem.held(name))
        return ok

    def release_semaphores(self, build_set, job_name=None):
        if job_name is None:
            self.sem.release_build_set(build_set)
        else:
            self.sem.release(build_set, job_name)

    def request_nodes(self, pipeline, item, job):
        if not self.nodes:
            return None
        request = SimpleNamespace(item=item, job=job.name)
        self.node_requests.append(request)
        return request

    def cancel_node_request(self, request):
        self.canceled.append(request)

    def return_nodes(self, nodeset, **kw):
        self.returned_nodes.append(nodeset)

    def execute(self, pipeline, item, job, nodeset):
        build = m.Build(job, item.current_build_set)
        build.tested = [i.change.number for i in item.current_build_set.dependent_items] + \
            [item.change.number]
        self.running.append(build)
        return build

    def cancel_build(self, build):
        pass

    def report(self, pipeline, item, action):
        if action in ('enqueue', 'start'):
            self.notices.append((getattr(item.change, 'number', None), action))
            return None
        self.reports.append((item.change.number, action))
        if action == 'success' and pipeline.manager == 'dependent':
            item.change.status = 'MERGED'
            return True
        return None

    def item_enqueued(self, pipeline, item):
        pass

    def item_dequeued(self, pipeline, item):
        pass

    def item_reported(self, pipeline, item, action):
        pass

    # -- driving --------------------------------------------------------

    def run(self, limit=200):
        """Process until nothing more happens."""
        for _ in range(limit):
            changed = self.manager.process_queues()
            if self.pending_merges:
                bs, numbers = self.pending_merges.pop(0)
                ok = not (set(numbers) & self.conflicting)
                self.manager.on_merge_completed(bs, MergeResult(ok, {'changes': numbers}))
                continue
            if self.node_requests:
                req = self.node_requests.pop(0)
                failed = req.item.change.number in self.failed_nodes
                self.manager.on_nodes_provisioned(req.item, req.job, req,
                                                  None if failed else f'nodes-{req.job}',
                                                  failed)
                continue
            if self.running:
                build = self.running.pop(0)
                if build.build_set.item.current_build_set is not build.build_set:
                    continue
                own = (build.build_set.item.change.number, build.job.name)
                result = m.FAILURE if (set(build.tested) & self.broken and
                                       build.job.name in ('job1', 'job2')) or \
                    own in self.fail_own else m.SUCCESS
                self.history.append((build.job.name, result, tuple(build.tested)))
                self.manager.on_build_completed(build, result)
                continue
            if not changed:
                return
        raise AssertionError('did not settle')


def _change(ctx, number, project='org/project'):
    change = Change('gerrit', project, f'refs/changes/{number:02d}/{number}/1',
                    number=number, patchset=1, branch_name='master')
    ctx.changes[number] = change
    return change


def _setup(pipeline, **kw):
    ctx = Collaborators(**kw)
    ctx.manager = manager_for(pipeline, ctx)
    return ctx, ctx.manager


def _start(ctx, manager, nodes: bool = False):
    """Process and complete merges, but run no build; with ``nodes``,
    also fulfil the node requests (so every item's builds run)."""
    for _ in range(10):
        manager.process_queues()
        while ctx.pending_merges:
            bs, _numbers = ctx.pending_merges.pop(0)
            manager.on_merge_completed(bs, MergeResult(True))
        while nodes and ctx.node_requests:
            req = ctx.node_requests.pop(0)
            manager.on_nodes_provisioned(req.item, req.job, req,
                                         f'nodes-{req.item.change.number}', False)
