"""Queue logic of the pipeline managers, driven through the collaborator
interface the scheduler gives them. The collaborators here complete merges
and builds synchronously and deterministically (a build fails when a
"broken" change is part of what it tests), so the order of events is fully
controlled; the end-to-end tests run the same managers on real daemons."""

from dataclasses import dataclass, field, replace
from types import SimpleNamespace

from zuul.manager import manager_for
from zuul.manager.cycles import CYCLE_REFUSED, Dependencies, dependency_groups
from zuul.model import item as m
from zuul.model.change import Change, Ref
from zuul.scheduler.reporting import format_report
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


def test_gate_middle_change_fails_others_merge_and_third_retested_without_it():
    ctx, manager = _setup(_pipeline(), broken={2})
    for n in (1, 2, 3):
        manager.add_change(_change(ctx, n))
    ctx.run()
    assert ctx.reports.count((1, 'success')) == 1
    assert (2, 'failure') in ctx.reports and (2, 'success') not in ctx.reports
    assert (3, 'success') in ctx.reports
    assert [c.status for c in (ctx.changes[1], ctx.changes[2], ctx.changes[3])] == \
        ['MERGED', 'NEW', 'MERGED']
    # change 3 was first merged on top of 1 and 2, then re-tested without 2
    assert [1, 2, 3] in ctx.merges
    tested_3 = [tested for job, result, tested in ctx.history if tested[-1] == 3]
    assert 2 not in tested_3[-1]
    assert not list(manager.all_items())


def test_gate_reports_in_queue_order():
    ctx, manager = _setup(_pipeline())
    for n in (1, 2, 3):
        manager.add_change(_change(ctx, n))
    ctx.run()
    assert [r for r in ctx.reports if r[1] == 'success'] == \
        [(1, 'success'), (2, 'success'), (3, 'success')]


def test_gate_merge_conflict_reported_and_skipped_by_others():
    ctx, manager = _setup(_pipeline(), conflicting={2})
    for n in (1, 2, 3):
        manager.add_change(_change(ctx, n))
    ctx.run()
    assert (2, 'merge-failure') in ctx.reports
    assert {(1, 'success'), (3, 'success')} <= set(ctx.reports)
    assert ctx.changes[2].status == 'NEW'


def test_check_tests_each_change_alone():
    ctx, manager = _setup(_pipeline('check', 'independent'), broken={2})
    for n in (1, 2, 3):
        manager.add_change(_change(ctx, n))
    ctx.run()
    assert sorted(ctx.reports) == [(1, 'success'), (2, 'failure'), (3, 'success')]
    assert sorted(t for _, _, t in ctx.history) == [(1,), (2,), (3,)]


def test_check_tests_change_on_top_of_unmerged_dependency():
    ctx, manager = _setup(_pipeline('check', 'independent'), needs={2: [1]})
    _change(ctx, 1)
    manager.add_change(_change(ctx, 2))
    ctx.run()
    assert ctx.history == [('job1', m.SUCCESS, (1, 2))]
    assert ctx.reports == [(2, 'success')]   # the dependency is not reported


def test_gate_dependency_enqueued_ahead_and_dequeued_with_it():
    ctx, manager = _setup(_pipeline(), needs={2: [1]}, broken={1})
    _change(ctx, 1)
    item = manager.add_change(_change(ctx, 2))
    assert item is not None
    assert [i.change.number for i in manager.all_items()] == [1, 2]
    ctx.run()
    assert (1, 'failure') in ctx.reports
    # 2 needed 1, which failed: 2 must not merge
    assert ctx.changes[2].status == 'NEW'
    assert (2, 'success') not in ctx.reports


def test_gate_refuses_change_needing_change_in_another_queue():
    ctx, manager = _setup(_pipeline(), needs={2: [1]})
    _change(ctx, 1, project='org/other')
    manager.add_change(ctx.changes[1])
    assert manager.add_change(_change(ctx, 2)) is None


def test_shared_queue_across_projects():
    ctx, manager = _setup(_pipeline(), queues={'integrated': ['org/a', 'org/b']}, broken={1})
    manager.add_change(_change(ctx, 1, 'org/a'))
    manager.add_change(_change(ctx, 2, 'org/b'))
    assert len(manager.queues) == 1
    ctx.run()
    assert ctx.merges[:2] == [[1], [1, 2]]
    tested_2 = [t for _, _, t in ctx.history if t[-1] == 2]
    assert tested_2[-1] == (2,)
    assert ctx.changes[2].status == 'MERGED'


def test_job_dependencies_skip_children_of_failed_job():
    ctx, manager = _setup(_pipeline('check', 'independent'), jobs=('job1', 'job3', 'job4'),
                          deps={'job3': ['job1'], 'job4': ['job3']}, broken={1})
    item = manager.add_change(_change(ctx, 1))
    ctx.run()
    assert [(j, r) for j, r, _ in ctx.history] == [('job1', m.FAILURE)]
    assert item.current_build_set.skipped == {'job3': 'Skipped due to failed job job1',
                                              'job4': 'Skipped due to failed job job3'}
    assert ctx.reports == [(1, 'failure')]


def test_retry_until_attempts_then_retry_limit():
    ctx, manager = _setup(_pipeline('check', 'independent'))
    item = manager.add_change(_change(ctx, 1))
    manager.process_queues()
    bs, numbers = ctx.pending_merges.pop(0)
    manager.on_merge_completed(bs, MergeResult(True))
    for attempt in range(3):
        manager.process_queues()
        build = ctx.running.pop(0)
        manager.on_build_completed(build, m.RETRY)
    manager.process_queues()
    assert item.current_build_set.tries['job1'] == 3
    assert ctx.reports == [(1, 'failure')]
    assert build.result == m.RETRY_LIMIT


def test_new_patchset_leaves_pipeline_and_cancels_nodes():
    ctx, manager = _setup(_pipeline('check', 'independent'), nodes=True)
    change = _change(ctx, 1)
    manager.add_change(change)
    manager.process_queues()
    bs, _ = ctx.pending_merges.pop(0)
    manager.on_merge_completed(bs, MergeResult(True))
    manager.process_queues()
    assert len(ctx.node_requests) == 1
    newer = Change('gerrit', 'org/project', 'refs/changes/01/1/2', number=1, patchset=2,
                   branch_name='master')
    manager.recheck_change(newer)
    assert not list(manager.all_items())
    assert ctx.canceled == [ctx.node_requests[0]]


def test_supercedent_keeps_only_newest_waiting_ref():
    ctx, manager = _setup(_pipeline('post', 'supercedent'))
    refs = [Ref('gerrit', 'org/project', 'refs/heads/master', newrev=f'{n:040d}')
            for n in (1, 2, 3)]
    for ref in refs:
        manager.add_change(ref)
    assert [i.change.newrev for i in manager.all_items()] == [refs[0].newrev, refs[2].newrev]


def test_window_shrinks_on_failure_and_limits_actionable_items():
    ctx, manager = _setup(_pipeline(window=2, window_floor=1), broken={1})
    for n in (1, 2, 3, 4):
        manager.add_change(_change(ctx, n))
    manager.process_queues()
    # only the first two items in the window asked for a merge
    assert [numbers[-1] for _, numbers in ctx.pending_merges] == [1, 2]
    ctx.run()
    assert manager.queues[0].window >= 1


def test_serial_pipelines_are_dependent_with_their_window():
    from zuul.manager.dependent import DependentPipelineManager
    manager = manager_for(_pipeline(manager='serial', window=1), Collaborators())
    assert isinstance(manager, DependentPipelineManager)


# -- semaphores ---------------------------------------------------------------


def _start(ctx, manager):
    """Process and complete merges, but run no build."""
    for _ in range(10):
        manager.process_queues()
        while ctx.pending_merges:
            bs, _numbers = ctx.pending_merges.pop(0)
            manager.on_merge_completed(bs, MergeResult(True))


def test_semaphore_max_one_serialises_a_job_across_changes():
    ctx, manager = _setup(_pipeline('check', 'independent'), jobs=('job1', 'free'),
                          semaphores={'lock': 1}, job_semaphores={'job1': ['lock']})
    for n in (1, 2, 3):
        manager.add_change(_change(ctx, n))
    _start(ctx, manager)
    # every change merged; only one of the three job1 builds may start
    started = [(b.job.name, b.tested[-1]) for b in ctx.running]
    assert sum(1 for name, _ in started if name == 'job1') == 1
    assert sum(1 for name, _ in started if name == 'free') == 3
    ctx.run()
    assert sorted(ctx.reports) == [(1, 'success'), (2, 'success'), (3, 'success')]
    assert ctx.max_holding['lock'] == 1
    assert [t for job, _, t in ctx.history if job == 'job1'] == [(1,), (2,), (3,)]
    assert ctx.sem.held('lock') == 0


def test_semaphore_max_two_runs_two_at_once():
    ctx, manager = _setup(_pipeline('check', 'independent'),
                          semaphores={'pair': 2}, job_semaphores={'job1': ['pair']})
    for n in (1, 2, 3):
        manager.add_change(_change(ctx, n))
    _start(ctx, manager)
    assert len(ctx.running) == 2
    ctx.run()
    assert ctx.max_holding['pair'] == 2
    assert len(ctx.reports) == 3 and ctx.sem.held('pair') == 0


def test_semaphores_are_all_or_nothing():
    # job1 needs a and b; job2 holds b: job1 must not sit on a meanwhile
    ctx, manager = _setup(_pipeline('check', 'independent'), jobs=('job2', 'job1'),
                          semaphores={'a': 1, 'b': 1},
                          job_semaphores={'job1': ['a', 'b'], 'job2': ['b']})
    manager.add_change(_change(ctx, 1))
    _start(ctx, manager)
    assert [b.job.name for b in ctx.running] == ['job2']
    assert ctx.sem.held('a') == 0 and ctx.sem.held('b') == 1
    ctx.run()
    assert ctx.reports == [(1, 'success')]
    assert ctx.sem.holders == {}


def test_semaphore_released_when_node_request_fails():
    ctx, manager = _setup(_pipeline('check', 'independent'), nodes=True, failed_nodes={1},
                          semaphores={'lock': 1}, job_semaphores={'job1': ['lock']})
    manager.add_change(_change(ctx, 1))
    manager.add_change(_change(ctx, 2))
    ctx.run()
    assert sorted(ctx.reports) == [(1, 'failure'), (2, 'success')]
    assert ctx.sem.held('lock') == 0


def test_semaphore_released_when_item_is_dequeued_and_on_gate_reset():
    ctx, manager = _setup(_pipeline('check', 'independent'),
                          semaphores={'lock': 1}, job_semaphores={'job1': ['lock']})
    manager.add_change(_change(ctx, 1))
    manager.add_change(_change(ctx, 2))
    _start(ctx, manager)
    assert [b.tested[-1] for b in ctx.running] == [1]
    assert manager.dequeue_change(ctx.changes[1])
    assert ctx.sem.held('lock') == 0
    manager.process_queues()
    assert [b.tested[-1] for b in ctx.running if not b.canceled] == [2]
    ctx.run()
    assert (2, 'success') in ctx.reports and ctx.sem.holders == {}

    # in a gate, a failure ahead resets the items behind; what they held
    # is given back and taken again by the new build sets
    ctx, manager = _setup(_pipeline(), broken={1}, semaphores={'lock': 2},
                          job_semaphores={'job1': ['lock']})
    for n in (1, 2, 3):
        manager.add_change(_change(ctx, n))
    ctx.run()
    assert (1, 'failure') in ctx.reports
    assert {(2, 'success'), (3, 'success')} <= set(ctx.reports)
    assert ctx.max_holding['lock'] == 2 and ctx.sem.holders == {}


def test_hold_following_changes_waits_for_the_job_ahead():
    ctx, manager = _setup(_pipeline(), jobs=('job1', 'job2'), hold_jobs={'job1'}, broken={1})
    for n in (1, 2):
        manager.add_change(_change(ctx, n))
    _start(ctx, manager)
    # item 1 runs both jobs; item 2 waits for job1 of item 1
    assert sorted((b.tested[-1], b.job.name) for b in ctx.running) == \
        [(1, 'job1'), (1, 'job2')]
    ctx.run()
    # job1 failed on item 1: item 2 was re-tested without it, and merged
    assert (1, 'failure') in ctx.reports and (2, 'success') in ctx.reports
    assert all(t == (2,) for job, _, t in ctx.history if t[-1] == 2)


def test_hold_following_changes_releases_items_behind_on_success():
    ctx, manager = _setup(_pipeline(), jobs=('job1',), hold_jobs={'job1'})
    for n in (1, 2, 3):
        manager.add_change(_change(ctx, n))
    _start(ctx, manager)
    assert [b.tested for b in ctx.running] == [[1]]
    ctx.run()
    assert [r for r in ctx.reports if r[1] == 'success'] == \
        [(1, 'success'), (2, 'success'), (3, 'success')]
    # each item started only once the one ahead had succeeded: no resets
    assert [t for _, _, t in ctx.history] == [(1,), (1, 2), (1, 2, 3)]


# -- leaving at once: requirements lost, abandoned, new patchset, supercedes --

def _event(event_id='ev-1', kind='comment-added'):
    return SimpleNamespace(event_id=event_id, type=kind)


def _running(ctx, manager):
    """Complete merges and node requests until every item's builds run."""
    for _ in range(10):
        manager.process_queues()
        while ctx.pending_merges:
            bs, _numbers = ctx.pending_merges.pop(0)
            manager.on_merge_completed(bs, MergeResult(True))
        while ctx.node_requests:
            req = ctx.node_requests.pop(0)
            manager.on_nodes_provisioned(req.item, req.job, req,
                                         f'nodes-{req.item.change.number}', False)


def _now(change, **changes):
    """``change`` as its source describes it after an event."""
    return replace(change, **changes)


def test_gate_item_that_loses_its_approval_leaves_at_once(caplog):
    ctx, manager = _setup(_pipeline(), nodes=True)
    first, second = _change(ctx, 1), _change(ctx, 2)
    manager.add_change(first)
    manager.add_change(second)
    _running(ctx, manager)
    builds = {b.tested[-1]: b for b in ctx.running}
    assert sorted(builds) == [1, 2] and builds[2].tested == [1, 2]
    ctx.change_meets_requirements = lambda pipeline, change: change.number != 1
    with caplog.at_level('INFO', logger='zuul.manager'):
        left = manager.recheck_change(_now(first), _event('ev-unapprove'))
    assert [i.change.number for i in left] == [1]
    assert left[0].dequeued_missing_requirements
    # released Zuul: the failure report (not the dequeue reporters), once
    assert ctx.reports == [(1, 'failure')]
    assert format_report(_pipeline(failure_message='Build failed.'), left[0], 'failure') == \
        'This change is unable to merge due to a missing merge requirement.'
    assert builds[1].canceled and builds[1].result == m.CANCELED
    assert 'nodes-1' in ctx.returned_nodes
    lines = [r.getMessage() for r in caplog.records if 'Dequeuing 1,1' in r.getMessage()]
    assert len(lines) == 1 and 'ev-unapprove' in lines[0] and 'requirements' in lines[0]
    # the change behind was reset and is tested (and merges) without it
    assert builds[2].canceled
    ctx.run()
    assert ctx.reports == [(1, 'failure'), (2, 'success')]
    assert ctx.history[-1] == ('job1', m.SUCCESS, (2,))
    assert not list(manager.all_items())


def test_any_pipeline_reports_a_lost_requirement_through_its_failure_actions():
    """The generic path (any driver may call it): an independent pipeline
    too, and the failure counts towards disable-after-consecutive-failures."""
    ctx, manager = _setup(_pipeline('check', 'independent',
                                    disable_after_consecutive_failures=5))
    first = _change(ctx, 1)
    manager.add_change(first)
    _running(ctx, manager)
    (item,) = list(manager.all_items())
    left = manager.dequeue_missing_requirements(item, _event('ev-label-removed'))
    assert [i.change.number for i in left] == [1]
    assert ctx.reports == [(1, 'failure')] and manager.consecutive_failures == 1
    assert not list(manager.all_items())


def test_a_quiet_or_already_reported_item_is_not_reported_twice():
    ctx, manager = _setup(_pipeline(), nodes=True)
    change = _change(ctx, 1)
    item = manager.add_change(change)
    item.reported = True
    manager.dequeue_missing_requirements(item)
    assert ctx.reports == []


def test_requirements_still_met_keep_the_item():
    ctx, manager = _setup(_pipeline(), nodes=True)
    change = _change(ctx, 1)
    manager.add_change(change)
    _running(ctx, manager)
    assert manager.recheck_change(_now(change), _event()) == []
    ctx.run()
    assert ctx.reports == [(1, 'success')]


def test_manually_enqueued_item_is_not_held_to_the_requirements():
    ctx, manager = _setup(_pipeline())
    change = _change(ctx, 1)
    manager.add_change(change, _event(kind='zuul-enqueue'), ignore_requirements=True)
    ctx.change_meets_requirements = lambda pipeline, change: False
    assert manager.recheck_change(_now(change), _event()) == []
    # ...but abandoning it still takes it out
    assert len(manager.recheck_change(_now(change, status='ABANDONED'), _event())) == 1


def test_abandoned_change_leaves_check_and_its_node_request_is_canceled():
    ctx, manager = _setup(_pipeline('check', 'independent'), nodes=True)
    change = _change(ctx, 1)
    manager.add_change(change)
    _start(ctx, manager)
    (request,) = ctx.node_requests
    left = manager.recheck_change(_now(change, status='ABANDONED'),
                                  _event(kind='change-abandoned'))
    assert [i.change.number for i in left] == [1]
    assert ctx.canceled == [request] and ctx.reports == [(1, 'dequeue')]
    assert not list(manager.all_items())


def test_new_patchset_dequeues_by_default():
    ctx, manager = _setup(_pipeline())
    change = _change(ctx, 1)
    manager.add_change(change)
    _running(ctx, manager)
    (build,) = ctx.running
    newer = _now(change, patchset=2, ref='refs/changes/01/1/2')
    assert len(manager.recheck_change(newer, _event(kind='patchset-created'))) == 1
    assert build.canceled and ctx.reports == [(1, 'dequeue')]


def test_new_patchset_keeps_the_item_when_dequeue_on_new_patchset_is_false():
    ctx, manager = _setup(_pipeline('check', 'independent', dequeue_on_new_patchset=False))
    change = _change(ctx, 1)
    manager.add_change(change)
    _running(ctx, manager)
    newer = _now(change, patchset=2, ref='refs/changes/01/1/2')
    assert manager.recheck_change(newer, _event(kind='patchset-created')) == []
    # the new patchset is tested alongside; the old one still reports
    manager.add_change(newer)
    ctx.run()
    assert sorted(ctx.reports) == [(1, 'success'), (1, 'success')]
    assert not any(b.canceled for b in ctx.running)


def test_depends_on_target_abandoned_takes_the_gate_items_needing_it():
    ctx, manager = _setup(_pipeline(), needs={2: [1]})
    target, dependent, other = _change(ctx, 1), _change(ctx, 2), _change(ctx, 3)
    for change in (target, dependent, other):
        manager.add_change(change)
    _running(ctx, manager)
    left = manager.recheck_change(_now(target, status='ABANDONED'),
                                  _event(kind='change-abandoned'))
    assert [i.change.number for i in left] == [1, 2]
    assert ctx.reports == [(1, 'dequeue'), (2, 'dequeue')]
    ctx.run()
    assert ctx.reports[-1] == (3, 'success') and ctx.history[-1][2] == (3,)
    assert 'failure' not in {action for _, action in ctx.reports}


def test_depends_on_target_new_patchset_takes_the_check_item_tested_on_it():
    ctx, manager = _setup(_pipeline('check', 'independent'), needs={2: [1]})
    target, dependent = _change(ctx, 1), _change(ctx, 2)
    manager.add_change(dependent)
    _running(ctx, manager)
    assert [(i.change.number, i.live) for i in manager.all_items()] == [(1, False), (2, True)]
    newer = _now(target, patchset=2, ref='refs/changes/01/1/2')
    left = manager.recheck_change(newer, _event(kind='patchset-created'))
    assert [i.change.number for i in left] == [1, 2]
    # the target was only the base of the test: only the dependent reports
    assert ctx.reports == [(2, 'dequeue')]
    assert all(b.canceled for b in ctx.running)
    assert not list(manager.all_items())


def test_merged_change_is_not_taken_out_of_an_independent_pipeline():
    # e.g. a promote pipeline holds merged changes
    ctx, manager = _setup(_pipeline('promote', 'independent'))
    change = _change(ctx, 1)
    change.status = 'MERGED'
    manager.add_change(change)
    assert manager.recheck_change(_now(change), _event()) == []


def test_entering_a_superseding_pipeline_leaves_the_superseded_one():
    from zuul.scheduler.context import SchedulerContext
    check_ctx, check = _setup(_pipeline('check', 'independent'))
    gate_ctx, gate = _setup(_pipeline(supercedes=['check']))
    change = _change(check_ctx, 1)
    gate_ctx.changes[1] = change
    other = _change(check_ctx, 2)
    check.add_change(change)
    check.add_change(other)
    _running(check_ctx, check)
    tenant = SimpleNamespace(name='tenant', managers={'check': check, 'gate': gate})
    scheduler = SimpleNamespace(layouts=None, stats=None)
    context = SchedulerContext(scheduler, tenant)
    gate_ctx.item_enqueued = context.item_enqueued
    gate.add_change(change, _event(kind='comment-added'))
    assert [i.change.number for i in check.all_items()] == [2]
    assert [i.change.number for i in gate.all_items()] == [1]
    # superseded, not reported
    assert check_ctx.reports == [] and check_ctx.running[0].canceled


class _FailFast(Collaborators):
    """A project-pipeline with ``fail-fast: true``."""

    def freeze_jobs(self, pipeline, item):
        item.current_build_set.fail_fast = True
        return super().freeze_jobs(pipeline, item)


def test_fail_fast_cancels_running_builds_skips_the_rest_and_reports_at_once():
    ctx = _FailFast(jobs=('job1', 'jobA', 'jobB'), broken={1}, deps={'jobB': ['jobA']})
    mgr = ctx.manager = manager_for(_pipeline('check', 'independent'), ctx)
    item = mgr.add_change(_change(ctx, 1))
    ctx.run()
    bs = item.current_build_set
    assert ctx.reports == [(1, 'failure')]
    assert bs.builds['job1'].result == m.FAILURE
    assert bs.builds['jobA'].result == m.CANCELED          # was running: canceled
    assert bs.result_of('jobB') == m.SKIPPED               # never started
    assert 'fail-fast' in bs.skipped['jobB'] and 'job1' in bs.skipped['jobB']
    # jobA's build ended after the cancel: its result did not count
    assert ('jobA', m.SUCCESS, (1,)) in ctx.history and bs.builds['jobA'].canceled


def test_without_fail_fast_every_job_runs_to_the_end():
    ctx = Collaborators(jobs=('job1', 'jobA', 'jobB'), broken={1}, deps={'jobB': ['jobA']})
    mgr = ctx.manager = manager_for(_pipeline('check', 'independent'), ctx)
    item = mgr.add_change(_change(ctx, 1))
    ctx.run()
    bs = item.current_build_set
    assert ctx.reports == [(1, 'failure')]
    assert [bs.result_of(j) for j in ('job1', 'jobA', 'jobB')] == \
        [m.FAILURE, m.SUCCESS, m.SUCCESS]


def test_fail_fast_ignores_a_failing_non_voting_job():
    ctx = _FailFast(jobs=('job1', 'jobA'), broken={1})

    def freeze(pipeline, item):
        item.current_build_set.fail_fast = True
        jobs, errors = Collaborators.freeze_jobs(ctx, pipeline, item)
        jobs[0].voting = False
        return jobs, errors
    ctx.freeze_jobs = freeze
    mgr = ctx.manager = manager_for(_pipeline('check', 'independent'), ctx)
    item = mgr.add_change(_change(ctx, 1))
    ctx.run()
    bs = item.current_build_set
    assert bs.builds['jobA'].result == m.SUCCESS      # ran to the end
    assert ctx.reports == [(1, 'success')]            # only a non-voting job failed


def _until_builds_run(ctx, mgr, count):
    for _ in range(50):
        mgr.process_queues()
        if len(ctx.running) >= count:
            return
        if ctx.pending_merges:
            bs, numbers = ctx.pending_merges.pop(0)
            mgr.on_merge_completed(bs, MergeResult(True, {'changes': numbers}))
        elif ctx.node_requests:
            req = ctx.node_requests.pop(0)
            mgr.on_nodes_provisioned(req.item, req.job, req, f'nodes-{req.job}', False)
    raise AssertionError(f'{count} builds never ran')


def test_fail_fast_acts_when_a_build_pre_fails_and_reports_when_it_ends():
    ctx = _FailFast(jobs=('job1', 'jobA', 'jobB'), deps={'jobB': ['jobA']})
    mgr = ctx.manager = manager_for(_pipeline('check', 'independent'), ctx)
    item = mgr.add_change(_change(ctx, 1))
    _until_builds_run(ctx, mgr, 2)
    bs = item.current_build_set
    failing = bs.builds['job1']
    failing.pre_fail = True            # failure-output matched; it still runs
    mgr.on_build_pre_fail(failing)
    assert bs.builds['jobA'].canceled and bs.builds['jobA'].result == m.CANCELED
    assert 'job1 is failing' in bs.skipped['jobB']
    assert not failing.canceled and failing.result is None
    mgr.process_queues()
    assert ctx.reports == []           # reported once the failing build has ended
    mgr.on_build_completed(failing, m.FAILURE)
    mgr.process_queues()
    assert ctx.reports == [(1, 'failure')]


def test_a_pre_fail_without_fail_fast_cancels_nothing():
    ctx = Collaborators(jobs=('job1', 'jobA'))
    mgr = ctx.manager = manager_for(_pipeline('check', 'independent'), ctx)
    item = mgr.add_change(_change(ctx, 1))
    _until_builds_run(ctx, mgr, 2)
    bs = item.current_build_set
    bs.builds['job1'].pre_fail = True
    mgr.on_build_pre_fail(bs.builds['job1'])
    assert not bs.builds['jobA'].canceled and bs.skipped == {}


def test_a_merge_reported_off_the_loop_holds_the_gate_head_without_resetting_behind():
    """A connection that merges on its own worker (GitHub) answers
    REPORT_PENDING: the item stays at the head, the items behind keep
    their builds, and the outcome arriving later completes the report."""
    ctx, manager = _setup(_pipeline())
    pending = []
    plain_report = ctx.report

    def report(pipeline, item, action):
        if action == 'success':
            ctx.reports.append((item.change.number, action))
            pending.append(item)
            return m.REPORT_PENDING
        return plain_report(pipeline, item, action)
    ctx.report = report
    for n in (1, 2, 3):
        manager.add_change(_change(ctx, n))
    ctx.run()
    assert [i.change.number for i in pending] == [1]
    head = pending[0]
    assert [i.change.number for i in manager.all_items()] == [1, 2, 3]
    builds = {i.change.number: i.current_build_set for i in manager.all_items()}
    # A closed event for the change being merged does not take it out.
    merged = replace(ctx.changes[1], status='MERGED')
    assert manager.recheck_change(merged) == []
    ctx.run()
    assert {i.change.number: i.current_build_set for i in manager.all_items()} == builds
    manager.on_report_completed(head, True)
    ctx.run()
    assert [n for n, action in ctx.reports if action == 'success'] == [1, 2]
    assert [i.change.number for i in pending] == [1, 2]
    assert len([h for h in ctx.history if h[2][-1] == 2]) == 1    # not tested again
    # GitHub refuses the second: it is reported so, the third is tested
    # again without it, then merges.
    manager.on_report_completed(pending[1], False)
    ctx.run()
    assert (2, 'merge-failure') in ctx.reports
    assert pending[-1].change.number == 3
    assert 2 not in [h for h in ctx.history if h[2][-1] == 3][-1][2]
    manager.on_report_completed(pending[-1], True)
    ctx.run()
    assert not list(manager.all_items())


# -- per-branch shared queues ----------------------------------------------------

def test_per_branch_queue_tests_a_stable_change_alone_behind_nothing():
    """``- queue: {name: integrated, per-branch: true}``: the scheduler
    names the queue with the branch; a stable change does not join the
    master change's queue (it is tested alone and merges while the master
    change is still running, and is not reset when that one fails)."""
    ctx, manager = _setup(_pipeline(), queues={'integrated': ['org/a', 'org/b']},
                          broken={1}, nodes=True)
    ctx.get_queue_config = lambda pipeline, change: (
        f'integrated:{change.branch}', ['org/a', 'org/b'])
    ctx.queue_settings = lambda pipeline, change: SimpleNamespace(per_branch=True)
    master = _change(ctx, 1, 'org/a')
    stable = Change('gerrit', 'org/b', 'refs/changes/02/2/1', number=2, patchset=1,
                    branch_name='stable/1')
    ctx.changes[2] = stable
    manager.add_change(master)
    manager.add_change(stable)
    assert [(q.name, q.branch, [i.change.number for i in q.queue])
            for q in manager.queues] == [('integrated:master', 'master', [1]),
                                         ('integrated:stable/1', 'stable/1', [2])]
    _running(ctx, manager)
    assert sorted(b.tested for b in ctx.running) == [[1], [2]]
    # the stable change finishes first and merges; the master one is running
    stable_build = next(b for b in ctx.running if b.tested == [2])
    manager.on_build_completed(stable_build, m.SUCCESS)
    manager.process_queues()
    assert ctx.reports == [(2, 'success')] and stable.status == 'MERGED'
    master_build = next(b for b in ctx.running if b.tested == [1])
    assert not master_build.finished
    manager.on_build_completed(master_build, m.FAILURE)
    manager.process_queues()
    assert ctx.reports == [(2, 'success'), (1, 'failure')]
    assert len(ctx.merges) == 2      # nobody was re-merged: no reset


def test_shared_queue_without_per_branch_holds_every_branch():
    ctx, manager = _setup(_pipeline(), queues={'integrated': ['org/a', 'org/b']})
    manager.add_change(_change(ctx, 1, 'org/a'))
    stable = Change('gerrit', 'org/b', 'refs/changes/02/2/1', number=2, patchset=1,
                    branch_name='stable/1')
    ctx.changes[2] = stable
    manager.add_change(stable)
    assert [(q.name, [i.change.number for i in q.queue]) for q in manager.queues] == \
        [('integrated', [1, 2])]


# -- the early gate reset ---------------------------------------------------------

def test_gate_resets_the_items_behind_as_soon_as_a_job_ahead_fails():
    """The first failing voting job of an item makes it failing at once:
    the items behind are re-tested without it right then, while its other
    jobs still run (they are not waited for), and it is reported only when
    they end."""
    ctx, manager = _setup(_pipeline(), jobs=('job1', 'job2'), nodes=True)
    for n in (1, 2, 3):
        manager.add_change(_change(ctx, n))
    _running(ctx, manager)
    first = {b.job.name: b for b in ctx.running if b.tested == [1]}
    behind = [b for b in ctx.running if b.tested != [1]]
    assert sorted(b.tested for b in behind) == [[1, 2], [1, 2], [1, 2, 3], [1, 2, 3]]
    merges_before = len(ctx.merges)
    manager.on_build_completed(first['job1'], m.FAILURE)
    manager.process_queues()
    # reset now: the builds behind are canceled, new merges without 1
    assert all(b.canceled for b in behind)
    assert ctx.merges[merges_before:] == [[2], [2, 3]]
    assert not first['job2'].finished and not first['job2'].canceled
    assert ctx.reports == []                 # item 1 waits for its job2
    _running(ctx, manager)
    assert sorted(b.tested for b in ctx.running if not b.finished and not b.canceled
                  and b.tested != [1]) == [[2], [2], [2, 3], [2, 3]]
    manager.on_build_completed(first['job2'], m.SUCCESS)
    manager.process_queues()
    assert ctx.reports == [(1, 'failure')]
