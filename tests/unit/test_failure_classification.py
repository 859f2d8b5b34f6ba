"""Failure classification on the scheduler side (zuul/scheduler/classify.py)
and its tenant keys: node failures retried only with ``retry-node-failure``,
RETRY results kept (classified) for the history, test failures never
retried, bad ``infra-failure-patterns`` refused with the pattern named."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.unit.pipeline_support import Collaborators, _change, _pipeline, _setup
from zuul.configloader.tenant import TenantConfigError, parse_tenant
from zuul.executor.protocol import BuildResult
from zuul.model import item as m
from zuul.scheduler.classify import classify_result


def _tenant_ctx(ctx: Collaborators, retry: bool) -> None:
    ctx.tenant = SimpleNamespace(name='t', layout=SimpleNamespace(
        tenant=SimpleNamespace(retry_node_failure=retry)))


@pytest.mark.parametrize('result,expected', [
    (None, 'infra:executor-lost'),
    (BuildResult(result=None), 'infra:executor-lost'),
    (BuildResult(result='RETRY', failure_class='infra:unreachable'), 'infra:unreachable'),
    (BuildResult(result='RETRY'), 'infra:pre-run'),
    (BuildResult(result='FAILURE'), 'test'),
    (BuildResult(result='POST_FAILURE'), 'test'),
    (BuildResult(result='TIMED_OUT'), 'test'),
    (BuildResult(result='SUCCESS'), None),
])
def test_classify_result(result, expected):
    assert classify_result(result) == expected


def test_node_failure_not_retried_by_default():
    ctx, manager = _setup(_pipeline('check', 'independent'), nodes=True, failed_nodes={1})
    _tenant_ctx(ctx, retry=False)
    manager.add_change(_change(ctx, 1))
    requests = []
    real = ctx.request_nodes
    ctx.request_nodes = lambda *a: requests.append(1) or real(*a)
    ctx.run()
    assert len(requests) == 1
    assert ctx.reports == [(1, 'failure')]


def test_node_failure_retried_up_to_attempts_when_the_tenant_asks():
    ctx, manager = _setup(_pipeline('check', 'independent'), nodes=True, failed_nodes={1})
    _tenant_ctx(ctx, retry=True)
    item = manager.add_change(_change(ctx, 1))
    requests = []
    real = ctx.request_nodes
    ctx.request_nodes = lambda *a: requests.append(1) or real(*a)
    ctx.run()
    assert len(requests) == 3          # the job's attempts (3)
    assert ctx.reports == [(1, 'failure')]
    bs = item.current_build_set
    assert bs.builds['job1'].result == m.NODE_FAILURE
    assert bs.builds['job1'].failure_class == 'infra:node-failure'
    assert [b.failure_class for b in bs.retried_builds] == ['infra:node-failure'] * 2


def test_a_node_failure_then_nodes_succeeds():
    ctx, manager = _setup(_pipeline('check', 'independent'), nodes=True, failed_nodes={1})
    _tenant_ctx(ctx, retry=True)
    item = manager.add_change(_change(ctx, 1))
    real = ctx.request_nodes

    def request_nodes(*args):
        if ctx.failed_nodes and item.current_build_set.retried_builds:
            ctx.failed_nodes.clear()      # the second request gets nodes
        return real(*args)
    ctx.request_nodes = request_nodes
    ctx.run()
    assert ctx.reports == [(1, 'success')]
    assert ctx.history == [('job1', m.SUCCESS, (1,))]


def test_retry_results_are_kept_and_test_failures_are_not_retried():
    ctx, manager = _setup(_pipeline('check', 'independent'))
    item = manager.add_change(_change(ctx, 1))
    manager.process_queues()
    ctx.manager.on_merge_completed(ctx.pending_merges.pop(0)[0], _merged())
    manager.process_queues()
    first = ctx.running.pop()
    first.failure_class = 'infra:unreachable'
    manager.on_build_completed(first, m.RETRY)
    assert first.result == m.RETRY and item.current_build_set.retried_builds == [first]
    manager.process_queues()
    second = ctx.running.pop()
    assert second is not first
    second.failure_class = 'test'
    manager.on_build_completed(second, m.FAILURE)
    manager.process_queues()
    assert not ctx.running             # a test failure is final
    assert ctx.reports == [(1, 'failure')]


def _merged():
    return SimpleNamespace(merged=True, repo_state={}, commit='c', merged_state={})


def test_tenant_keys_parse_and_bad_patterns_are_refused():
    tenant = parse_tenant({'name': 't', 'infra-failure-patterns': ['mirror .* 503', 'OOM'],
                           'retry-node-failure': True})
    assert tenant.infra_failure_patterns == ['mirror .* 503', 'OOM']
    assert tenant.retry_node_failure is True
    default = parse_tenant({'name': 'd'})
    assert default.infra_failure_patterns == [] and default.retry_node_failure is False
    with pytest.raises(TenantConfigError, match=r'infra-failure-patterns.*\(\?<=x\)y'):
        parse_tenant({'name': 't', 'infra-failure-patterns': ['(?<=x)y']})


def test_a_lost_executor_is_classed_and_retried():
    from zuul.scheduler.builds import ExecutorAdapter
    events = []
    scheduler = SimpleNamespace(add_result_event=lambda kind, **args: events.append((kind,
                                                                                      args)))
    adapter = ExecutorAdapter(client=None, scheduler=scheduler, canonical_hostnames={},
                              job_spec_for=None)
    item = m.QueueItem(change=_change(Collaborators(), 1))
    build = m.Build(m.JobRef('j'), item.current_build_set)
    adapter._completed(build, None, 'http://stream')
    assert build.failure_class == 'infra:executor-lost'
    assert events[0][0] == 'build-completed' and events[0][1]['result'] == m.RETRY
    tested = m.Build(m.JobRef('j'), item.current_build_set)
    adapter._completed(tested, BuildResult(result='FAILURE', failure_class='test'), None)
    assert tested.failure_class == 'test' and events[1][1]['result'] == m.FAILURE
