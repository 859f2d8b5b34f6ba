"""``[scheduler] relative_priority``: the real Scheduler, pipeline
managers and Layouts (merger and executor client are stand-ins, builds
end when the test says) request nodes over a real ZooKeeper from a real
nodepool-launcher (simulated provider, one server at a time).

With the key, each request carries its item's position among the live
items of its project in the (independent) pipeline, 0 first; the
launcher serves by precedence, relative priority, then age; and a
waiting request moves up (its relative priority rewritten in ZooKeeper)
when an item ahead leaves.  Without it every request has 0 and they are
served in submission order."""

from __future__ import annotations

import threading
import types

import pytest

from nodepool.zk.api import NodepoolZooKeeper
from nodepool.zk.priority import relative_priority, request_order
from nodepool.zk.records import NodeRequest
from nodepool.zk.requestor import NodeRequestClient
from tests.functional import test_nodepool_support as support
from tests.functional.test_nodepool_support import sim_config
from tests.harness.waiting import wait_for
from tests.unit.scheduler_support import enqueue_ref, start_system
from zuul.scheduler.nodes import NodesAdapter

launchers = support.launchers

MAIN = """
- tenant:
    name: t1
    source:
      gerrit:
        config-projects: [org/config]
        untrusted-projects: [org/a, org/b]
"""

CONFIG = """
- pipeline:
    name: check
    manager: independent
    trigger: {}
- job:
    name: base
    parent: null
    nodeset:
      nodes: [{name: node, label: small}]
- project:
    name: ^org/.*$
    check:
      jobs: [base]
"""

REPOS = {'org/config': {'master': CONFIG},
         'org/a': {'master': '', 'stable': ''},
         'org/b': {'master': ''}}

# Submission order: a@master, a@stable, b@master.
ITEMS = [('org/a', 'master'), ('org/a', 'stable'), ('org/b', 'master')]


@pytest.fixture
def system(tmp_path, zk_chroot):
    """make(relative_priority) -> (scheduler, executor, zk)."""
    started = []

    def make(relative: bool):
        scheduler, executor = start_system(tmp_path, MAIN, REPOS)
        signal_builds(executor)
        zk = NodepoolZooKeeper(zk_chroot.client())
        client = NodeRequestClient(zk, requestor='zuul-scheduler')
        client.start()
        started.append((scheduler, client))
        scheduler.nodes = NodesAdapter(client, scheduler, relative_priority=relative)
        return scheduler, executor, zk
    yield make
    for scheduler, client in started:
        scheduler.stop()
        client.stop()


def signal_builds(executor) -> None:
    """``executor.started`` is notified whenever a build starts."""
    executor.started = threading.Condition()
    execute = executor.execute

    def notifying(*args, **kw):
        with executor.started:
            handle = execute(*args, **kw)
            executor.started.notify_all()
        return handle
    executor.execute = notifying


def next_build(executor):
    """The one running build, once there is one."""
    wait_for(lambda: executor.running, condition=executor.started, what='a build')
    [(request, _, _)] = executor.running
    return request


def enqueue_all(scheduler, zk) -> list[NodeRequest]:
    """The three items, each waiting for its node request (in
    submission order)."""
    for project, branch in ITEMS:
        enqueue_ref(scheduler, 't1', 'check', project, branch)
    requests = zk.get_requests()
    assert len(requests) == 3
    return requests


def build_of(request) -> tuple[str, str]:
    item = request.items[-1]
    return item.project, item.branch


def serve_in_turn(scheduler, executor, count: int) -> list[tuple[str, str]]:
    """Let the launcher (one server) serve ``count`` requests, finishing
    each build as it starts; the order the builds started in."""
    order = []
    while len(order) < count:
        request = next_build(executor)
        order.append(build_of(request))
        executor.finish(request)
        assert scheduler.loop.wait_idle(60)
    return order


def test_relative_priority_orders_requests_by_position_in_the_project(
        system, launchers):
    scheduler, executor, zk = system(True)
    requests = enqueue_all(scheduler, zk)
    assert [relative_priority(r) for r in requests] == [0, 1, 0]
    assert [r.id for r in sorted(requests, key=request_order)] == \
        [requests[0].id, requests[2].id, requests[1].id]

    launchers.make(sim_config(max_servers=1))
    assert serve_in_turn(scheduler, executor, 1) == [('org/a', 'master')]
    # org/a's first item left: its second one is first of its project now.
    waiting = zk.get_request(requests[1].id)
    assert waiting is not None and relative_priority(waiting) == 0
    # org/b's first change was served before org/a's second one.
    assert serve_in_turn(scheduler, executor, 2) == [('org/b', 'master'),
                                                     ('org/a', 'stable')]


def test_without_the_key_every_request_is_0_and_served_in_order(system, launchers):
    scheduler, executor, zk = system(False)
    requests = enqueue_all(scheduler, zk)
    assert [relative_priority(r) for r in requests] == [0, 0, 0]
    launchers.make(sim_config(max_servers=1))
    assert serve_in_turn(scheduler, executor, 3) == ITEMS


def test_revise_leaves_a_request_a_launcher_took_alone(zk_chroot):
    zk = NodepoolZooKeeper(zk_chroot.client())
    client = NodeRequestClient(zk, requestor='zuul-scheduler')
    client.start()
    try:
        handle = client.submit(['small'], priority=200, relative_priority=3)
        assert relative_priority(zk.get_request(handle.id)) == 3
        assert client.revise(handle, 1)
        assert relative_priority(zk.get_request(handle.id)) == 1
        # A launcher accepted it: it keeps its place.
        request = zk.get_request(handle.id)
        request.set_state('pending')
        zk.store_request(request)
        assert not client.revise(handle, 0)
        assert relative_priority(zk.get_request(handle.id)) == 1
        client.cancel(handle)
        assert not client.revise(handle, 0)
    finally:
        client.stop()


def test_position_in_a_dependent_pipeline_is_in_the_shared_queue():
    def item(project, live=True):
        return types.SimpleNamespace(change=types.SimpleNamespace(project=project),
                                     live=live, queue=None)
    a1, b1, a2 = item('org/a'), item('org/b'), item('org/a')
    queue = types.SimpleNamespace(queue=[a1, b1, a2])
    for i in (a1, b1, a2):
        i.queue = queue
    manager = types.SimpleNamespace(dependent=True, queues=[queue],
                                    all_items=lambda: [a1, b1, a2])
    scheduler = types.SimpleNamespace(
        tenants={'t1': types.SimpleNamespace(managers={'gate': manager})})
    adapter = NodesAdapter(None, scheduler, relative_priority=True)
    # Shared queue: positions across projects.
    assert [adapter.queue_position(i) for i in (a1, b1, a2)] == [0, 1, 2]
    manager.dependent = False
    # Independent: positions among the project's own items.
    assert [adapter.queue_position(i) for i in (a1, b1, a2)] == [0, 0, 1]
