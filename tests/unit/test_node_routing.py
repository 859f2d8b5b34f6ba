"""Routing node requests per label (seed 001, "Upgrade Process") against a
real ZooKeeper: labels a tenant defines with ``label`` objects go to
zuul-launcher's tree under their canonical names, the others to Nodepool's;
mixed nodesets are split and joined; ``use-nodepool: false`` never reaches
Nodepool; and the live layouts' providers are published for zuul-launcher.

A "launcher" here is the test writing records the way a launcher would
(nodes ``ready`` and allocated, the request ``fulfilled``), so the
requestor side runs unmodified on either tree."""

from __future__ import annotations

import json
import queue
import types
import uuid

import pytest

from nodepool.zk.api import NodepoolZooKeeper, RecordGoneError
from nodepool.zk.paths import NODEPOOL
from nodepool.zk.paths import ZUUL_LAUNCHER as LAUNCHER_TREE
from nodepool.zk.records import FAILED, FULFILLED, HOLD, IN_USE, READY, USED, Node
from nodepool.zk.requestor import NodeRequestClient
from tests.harness.waiting import wait_for
from zuul.model import item as m
from zuul.model.launcher import ResolvedLabel, ResolvedProvider
from zuul.model.tenant import Tenant
from zuul.scheduler.nodes import (
    NODEPOOL as NODEPOOL_SYSTEM,
)
from zuul.scheduler.nodes import (
    ZUUL_LAUNCHER,
    NodesAdapter,
    ProviderPublisher,
    RoutingError,
    route_labels,
)
from zuul.zk import launcher_config

CANONICAL = 'review.example.org/org/images/'


class FakeScheduler:
    """What NodesAdapter needs of the scheduler: the tenants' live
    layouts and a result-event sink."""

    def __init__(self):
        self.tenants = {}
        self.events: queue.Queue = queue.Queue()

    def add_result_event(self, kind, **args):
        self.events.put((kind, args))

    def next_event(self, timeout=30):
        kind, args = self.events.get(timeout=timeout)
        assert kind == 'nodes-provisioned'
        return args


def make_layout(tenant='example', labels=(), use_nodepool=True, providers=None):
    layout = types.SimpleNamespace(
        tenant=Tenant(name=tenant, use_nodepool=use_nodepool), tenant_name=tenant,
        labels={name: types.SimpleNamespace(name=name, canonical_name=CANONICAL + name)
                for name in labels})
    if providers is not None:
        layout.resolved_providers = providers
    return layout


def add_tenant(scheduler, layout):
    """A tenant whose one pipeline holds one queue; returns a queue item."""
    q = object()
    manager = types.SimpleNamespace(queues=[q])
    scheduler.tenants[layout.tenant.name] = types.SimpleNamespace(
        layout=layout, managers={'check': manager})
    bs = types.SimpleNamespace(uuid=uuid.uuid4().hex, layout=layout)
    return types.SimpleNamespace(queue=q, event_id='ev-1', current_build_set=bs)


def job(*nodes, name='tox'):
    return types.SimpleNamespace(name=name, nodes=tuple(nodes))


PIPELINE = types.SimpleNamespace(precedence='normal')


@pytest.fixture
def trees(zk_chroot):
    """(adapter, scheduler, nodepool zk, launcher zk) over one session."""
    zk = NodepoolZooKeeper(zk_chroot.client())
    launcher_zk = zk.sibling(LAUNCHER_TREE)
    nodepool_client = NodeRequestClient(zk, requestor='zuul-scheduler')
    launcher_client = NodeRequestClient(launcher_zk, requestor='zuul-scheduler')
    nodepool_client.start()
    launcher_client.start()
    scheduler = FakeScheduler()
    adapter = NodesAdapter(nodepool_client, scheduler, launcher_client=launcher_client)
    try:
        yield adapter, scheduler, zk, launcher_zk
    finally:
        nodepool_client.stop()
        launcher_client.stop()


def only_request(zk):
    ids = zk.get_request_ids()
    assert len(ids) == 1, ids
    return zk.get_request(ids[0])


def fulfil(zk, request, provider='p1'):
    """Answer like a launcher: one ready node per label, allocated."""
    nodes = []
    for label in request.node_types:
        node = Node(type=label, provider=provider, state=READY, allocated_to=request.id,
                    interface_ip='192.0.2.10', username='zuul', host_keys=['ssh-ed25519 AAAA'])
        zk.store_node(node)
        nodes.append(node)
    request.state = FULFILLED
    request.nodes = [n.id for n in nodes]
    zk.store_request(request)
    return nodes


def refuse(zk, request):
    request.state = FAILED
    request.declined_by = ['launcher-1']
    zk.store_request(request)


# -- routing ---------------------------------------------------------------------


def test_route_labels_by_label_objects():
    layout = make_layout(labels=['debian'])
    assert route_labels(layout, ['debian', 'centos']) == [
        (ZUUL_LAUNCHER, CANONICAL + 'debian'), (NODEPOOL_SYSTEM, 'centos')]
    # A layout without the ``labels`` table (before label objects) routes
    # everything to Nodepool.
    bare = types.SimpleNamespace(tenant=Tenant(name='t'))
    assert route_labels(bare, ['debian']) == [(NODEPOOL_SYSTEM, 'debian')]


def test_route_labels_refuses_nodepool_when_tenant_does_not_use_it():
    layout = make_layout(labels=['debian'], use_nodepool=False)
    assert route_labels(layout, ['debian']) == [(ZUUL_LAUNCHER, CANONICAL + 'debian')]
    with pytest.raises(RoutingError, match='label "centos".*tenant example.*'
                                           'use-nodepool: false'):
        route_labels(layout, ['debian', 'centos'])


def test_unknown_label_goes_to_nodepool_tree(trees):
    adapter, scheduler, zk, launcher_zk = trees
    item = add_tenant(scheduler, make_layout(labels=['debian']))
    handle = adapter.request(item, job(('node', 'centos')), PIPELINE)
    request = only_request(zk)
    assert request.node_types == ['centos']
    assert request.requestor_data['tenant'] == 'example'
    assert zk.client.get_children(NODEPOOL.request_root) == [request.id]
    assert launcher_zk.get_request_ids() == []
    assert handle.systems() == [NODEPOOL_SYSTEM]
    adapter.cancel(handle)
    assert zk.get_request_ids() == []


def test_defined_label_goes_to_zuul_launcher_tree_with_canonical_name(trees):
    adapter, scheduler, zk, launcher_zk = trees
    item = add_tenant(scheduler, make_layout(labels=['debian']))
    handle = adapter.request(item, job(('node', 'debian')), PIPELINE)
    request = only_request(launcher_zk)
    assert request.node_types == [CANONICAL + 'debian']
    assert request.requestor_data == {'job': 'tox', 'tenant': 'example',
                                      'buildset': item.current_build_set.uuid}
    assert request.id.startswith('200-')
    assert launcher_zk.client.exists(f'/zuul/node-requests/{request.id}')
    assert zk.get_request_ids() == []
    nodes = fulfil(launcher_zk, request)
    args = scheduler.next_event()
    assert not args['failed'] and args['request'] is handle
    nodeset = args['nodeset']
    ((names, record),) = nodeset.nodes
    # The job sees the label as it wrote it; the same Node fields as
    # Nodepool's, so the inventory is built unchanged.
    assert names == ('node',) and record['type'] == 'debian'
    assert record['id'] == nodes[0].id and record['interface_ip'] == '192.0.2.10'
    assert launcher_zk.get_node(nodes[0].id).state == IN_USE
    assert launcher_zk.get_request_ids() == []
    adapter.release(nodeset)
    assert launcher_zk.get_node(nodes[0].id).state == USED
    assert not launcher_zk.is_node_locked(nodes[0].id)


def test_routing_uses_the_live_layout_not_the_items_speculative_one(trees):
    adapter, scheduler, zk, launcher_zk = trees
    item = add_tenant(scheduler, make_layout(labels=[]))
    # A proposed change that adds the label object does not route itself.
    item.current_build_set.layout = make_layout(labels=['debian'])
    handle = adapter.request(item, job(('node', 'debian')), PIPELINE)
    assert only_request(zk).node_types == ['debian']
    assert launcher_zk.get_request_ids() == []
    adapter.cancel(handle)


def test_mixed_nodeset_is_split_and_joined_in_nodeset_order(trees):
    adapter, scheduler, zk, launcher_zk = trees
    item = add_tenant(scheduler, make_layout(labels=['debian']))
    adapter.request(item, job(('a', 'centos'), ('b', 'debian'), ('c', 'centos')), PIPELINE)
    old, new = only_request(zk), only_request(launcher_zk)
    assert old.node_types == ['centos', 'centos']
    assert new.node_types == [CANONICAL + 'debian']
    new_nodes = fulfil(launcher_zk, new, provider='zl')
    with pytest.raises(queue.Empty):
        scheduler.events.get(timeout=0.5)       # waits for the other half
    old_nodes = fulfil(zk, old, provider='np')
    args = scheduler.next_event()
    assert not args['failed']
    nodeset = args['nodeset']
    assert [(n, r['type'], r['provider']) for (n,), r in nodeset.nodes] == [
        ('a', 'centos', 'np'), ('b', 'debian', 'zl'), ('c', 'centos', 'np')]
    assert nodeset.node_ids == [old_nodes[0].id, new_nodes[0].id, old_nodes[1].id]
    adapter.release(nodeset)
    assert {n.state for n in zk.get_nodes()} == {USED}
    assert {n.state for n in launcher_zk.get_nodes()} == {USED}


def test_mixed_nodeset_one_half_fails_the_other_is_returned(trees):
    adapter, scheduler, zk, launcher_zk = trees
    item = add_tenant(scheduler, make_layout(labels=['debian']))
    adapter.request(item, job(('a', 'centos'), ('b', 'debian')), PIPELINE)
    old, new = only_request(zk), only_request(launcher_zk)
    (node,) = fulfil(zk, old)
    wait_for(lambda: zk.get_node(node.id).state == IN_USE, what='nodepool half taken')
    refuse(launcher_zk, new)
    args = scheduler.next_event()
    assert args['failed'] and args['nodeset'] is None
    assert 'zuul-launcher could not provide the nodes' in args['error_detail']
    assert launcher_zk.get_request_ids() == [] and zk.get_request_ids() == []
    node = zk.get_node(node.id)
    assert node.state == USED and not zk.is_node_locked(node.id)


def test_cancel_withdraws_both_halves(trees):
    adapter, scheduler, zk, launcher_zk = trees
    item = add_tenant(scheduler, make_layout(labels=['debian']))
    handle = adapter.request(item, job(('a', 'centos'), ('b', 'debian')), PIPELINE)
    assert len(zk.get_request_ids()) == 1 and len(launcher_zk.get_request_ids()) == 1
    adapter.cancel(handle)
    assert zk.get_request_ids() == [] and launcher_zk.get_request_ids() == []
    assert scheduler.events.empty()


def test_use_nodepool_false_fails_without_touching_nodepool(trees):
    adapter, scheduler, zk, launcher_zk = trees
    item = add_tenant(scheduler, make_layout(labels=['debian'], use_nodepool=False))
    handle = adapter.request(item, job(('a', 'debian'), ('b', 'centos')), PIPELINE)
    args = scheduler.next_event()
    assert args['failed'] and args['request'] is handle
    assert 'label "centos"' in args['error_detail']
    assert 'use-nodepool: false' in args['error_detail']
    assert zk.get_request_ids() == [] and launcher_zk.get_request_ids() == []


def test_held_nodes_of_both_trees(trees):
    adapter, scheduler, zk, launcher_zk = trees
    item = add_tenant(scheduler, make_layout(labels=['debian']))
    adapter.request(item, job(('a', 'centos'), ('b', 'debian')), PIPELINE)
    fulfil(zk, only_request(zk))
    fulfil(launcher_zk, only_request(launcher_zk))
    nodeset = scheduler.next_event()['nodeset']
    autohold = types.SimpleNamespace(id='0000000001', reason='debug',
                                     node_hold_expiration=3600)
    adapter.hold(nodeset, 'tox', autohold)
    for tree in (zk, launcher_zk):
        (node,) = tree.get_nodes()
        assert node.state == HOLD and node.hold_job == 'tox'
        assert node.comment == 'autohold 0000000001: debug'
        assert not tree.is_node_locked(node.id)
    adapter.release(nodeset)            # held nodes are not released
    assert {n.state for n in zk.get_nodes() + launcher_zk.get_nodes()} == {HOLD}


def test_lost_launcher_request_is_resubmitted_to_the_same_tree(trees):
    adapter, scheduler, zk, launcher_zk = trees
    item = add_tenant(scheduler, make_layout(labels=['debian']))
    adapter.request(item, job(('a', 'debian')), PIPELINE)
    first = only_request(launcher_zk)
    launcher_zk.delete_request(first)   # as if the session had expired
    wait_for(lambda: launcher_zk.get_request_ids() not in ([], [first.id]),
             what='request submitted again')
    again = only_request(launcher_zk)
    assert again.id != first.id and again.node_types == [CANONICAL + 'debian']
    assert zk.get_request_ids() == []
    fulfil(launcher_zk, again)
    assert not scheduler.next_event()['failed']


def test_no_launcher_client_fails_clearly(zk_chroot):
    zk = NodepoolZooKeeper(zk_chroot.client())
    client = NodeRequestClient(zk)
    scheduler = FakeScheduler()
    adapter = NodesAdapter(client, scheduler)
    item = add_tenant(scheduler, make_layout(labels=['debian']))
    adapter.request(item, job(('a', 'debian')), PIPELINE)
    args = scheduler.next_event()
    assert args['failed'] and 'no zuul-launcher client' in args['error_detail']
    assert zk.get_request_ids() == []


# -- publishing ----------------------------------------------------------------------


def provider(name, labels, project='review.example.org/org/providers'):
    return ResolvedProvider(
        canonical_name=f'{project}/{name}', name=name, section=f'{project}/sec',
        connection='netns', settings={'quota': {'instances': 2}},
        labels={CANONICAL + label: ResolvedLabel(CANONICAL + label, label, None, None)
                for label in labels})


def test_publisher_merges_tenants_and_writes_only_changes(zk_client):
    scheduler = FakeScheduler()
    shared = provider('shared', ['debian'])
    add_tenant(scheduler, make_layout('a', providers={shared.canonical_name: shared}))
    add_tenant(scheduler, make_layout('b', providers={
        shared.canonical_name: provider('shared', ['debian']),
        CANONICAL + 'x': provider('only-b', ['centos'])}))
    add_tenant(scheduler, make_layout('c'))      # before label objects: nothing
    publisher = ProviderPublisher(zk_client)
    publisher.publish(scheduler.tenants)
    published = launcher_config.read_all(zk_client)
    assert sorted(published) == sorted([shared.canonical_name,
                                        'review.example.org/org/providers/only-b'])
    assert published[shared.canonical_name].tenants == ['a', 'b']
    assert published[shared.canonical_name].label_by_name('debian') is not None
    # The layouts' own objects are not changed by merging.
    assert shared.tenants == []
    path = launcher_config.provider_path(shared.canonical_name)
    _, stat = zk_client.get(path)
    publisher.publish(scheduler.tenants)
    assert zk_client.get(path)[1].mzxid == stat.mzxid
    # Tenant b's config drops its provider: it is removed.
    scheduler.tenants['b'].layout.resolved_providers = {}
    publisher.publish(scheduler.tenants)
    published = launcher_config.read_all(zk_client)
    assert list(published) == [shared.canonical_name]
    assert published[shared.canonical_name].tenants == ['a']
    raw, _ = zk_client.get(path)
    assert json.loads(raw)['schema_version'] == 1


def test_scheduler_publishes_after_each_reconfiguration(zk_client):
    from zuul.scheduler.scheduler import Scheduler
    layouts_by_tenant = {'a': make_layout('a', providers={})}

    class Layouts:
        def load(self, tenant_names=None, projects=None):
            return {n: la for n, la in layouts_by_tenant.items()
                    if tenant_names is None or n in tenant_names}

        def pipelines(self, layout):
            return []

    for layout in layouts_by_tenant.values():
        layout.tenant.projects = []
    scheduler = Scheduler(Layouts(), types.SimpleNamespace(get=lambda name: None),
                          None, None, None)
    scheduler.provider_publisher = ProviderPublisher(zk_client)
    scheduler.reconfigure()
    assert launcher_config.read_all(zk_client) == {}
    p = provider('p', ['debian'])
    layout = make_layout('a', providers={p.canonical_name: p})
    layout.tenant.projects = []
    layouts_by_tenant['a'] = layout
    scheduler.reconfigure(tenant_names=['a'])
    assert list(launcher_config.read_all(zk_client)) == [p.canonical_name]
    # A tenant main.yaml no longer has publishes nothing.
    Layouts.tenant_config = types.SimpleNamespace(tenants={'b': None})
    scheduler.reconfigure(tenant_names=[])
    assert launcher_config.read_all(zk_client) == {}


def test_node_failure_carries_the_reason_to_the_build():
    """The scheduler puts the adapter's explanation on the NODE_FAILURE
    build, so the report line says why."""
    from zuul.scheduler.scheduler import Scheduler
    scheduler = Scheduler(None, None, None, None, None)
    bs = types.SimpleNamespace(builds={})
    item = types.SimpleNamespace(current_build_set=bs, queue=None)

    class Manager:
        def on_nodes_provisioned(self, item, job_name, request, nodeset, failed):
            bs.builds[job_name] = m.Build(m.JobRef(job_name), bs, result=m.NODE_FAILURE)
    scheduler._manager_of = lambda item: Manager()
    scheduler.handle_result(m_event('nodes-provisioned', item=item, job_name='tox',
                                    request=object(), nodeset=None, failed=True,
                                    error_detail='(label "x" is not defined)'))
    assert bs.builds['tox'].error_detail == '(label "x" is not defined)'


def m_event(kind, **args):
    from zuul.model.events import ResultEvent
    return ResultEvent(kind, args)


def test_both_halves_answering_at_once_never_deadlocks(trees):
    """The two requestor threads answer at the same moment, in both
    orders and with one half failing: every request gets exactly one
    answer and no node stays taken after a failure."""
    adapter, scheduler, zk, launcher_zk = trees
    item = add_tenant(scheduler, make_layout(labels=['debian']))
    for i in range(10):
        adapter.request(item, job(('a', 'centos'), ('b', 'debian')), PIPELINE)
        old, new = only_request(zk), only_request(launcher_zk)
        fail_one = i % 2 == 1
        if fail_one:
            refuse(zk, old)
        else:
            fulfil(zk, old)
        try:
            fulfil(launcher_zk, new)
        except RecordGoneError:
            assert fail_one     # already withdrawn after the other half failed
        args = scheduler.next_event(timeout=10)
        assert args['failed'] == fail_one
        if args['nodeset'] is not None:
            adapter.release(args['nodeset'])
        wait_for(lambda: not [n for tree in (zk, launcher_zk) for n in tree.get_nodes()
                              if n.state == IN_USE or tree.is_node_locked(n.id)],
                 what='no node left taken')
        wait_for(lambda: not zk.get_request_ids() and not launcher_zk.get_request_ids(),
                 what='requests gone')
        assert scheduler.events.empty()
        for tree in (zk, launcher_zk):
            for node in tree.get_nodes():
                tree.delete_node(node)


def test_a_failed_publication_is_retried_when_zookeeper_is_back(zk_client, monkeypatch):
    from kazoo.protocol.states import KazooState
    scheduler = FakeScheduler()
    p = provider('p', ['debian'])
    add_tenant(scheduler, make_layout('a', providers={p.canonical_name: p}))
    publisher = ProviderPublisher(zk_client)
    real = launcher_config.publish

    def down(client, providers):
        raise ConnectionError('ZooKeeper connection lost')
    monkeypatch.setattr(launcher_config, 'publish', down)
    publisher.publish(scheduler.tenants)
    assert launcher_config.read_all(zk_client) == {}
    monkeypatch.setattr(launcher_config, 'publish', real)
    publisher._session_listener(KazooState.CONNECTED)
    wait_for(lambda: list(launcher_config.read_all(zk_client)) == [p.canonical_name],
             what='published after reconnecting')
    assert publisher._pending is None


def test_tenant_found_by_the_items_queue_without_a_frozen_layout(trees):
    adapter, scheduler, zk, launcher_zk = trees
    add_tenant(scheduler, make_layout('other'))
    item = add_tenant(scheduler, make_layout(labels=['debian']))
    item.current_build_set.layout = None
    handle = adapter.request(item, job(('node', 'debian')), PIPELINE)
    assert only_request(launcher_zk).requestor_data['tenant'] == 'example'
    adapter.cancel(handle)


def test_a_single_system_failure_reports_as_before(trees):
    adapter, scheduler, zk, launcher_zk = trees
    item = add_tenant(scheduler, make_layout(labels=['debian']))
    adapter.request(item, job(('a', 'debian')), PIPELINE)
    refuse(launcher_zk, only_request(launcher_zk))
    args = scheduler.next_event()
    assert args['failed'] and args['error_detail'] is None


def test_image_validate_item_asks_zuul_launcher_for_the_upload_under_test(trees):
    from zuul.scheduler.images import ImageRef
    adapter, scheduler, zk, launcher_zk = trees
    item = add_tenant(scheduler, make_layout(labels=['debian']))
    upload = {'image': CANONICAL + 'debian', 'build': '0000000003', 'upload': 'u1',
              'provider': CANONICAL + 'cloud', 'external_id': 'img-3'}
    item.change = ImageRef(connection='gerrit', project='org/images', ref='refs/heads/master',
                           image_event='image-validate',
                           image_name='debian', image_upload=upload)
    handle = adapter.request(item, job(('node', 'debian'), ('other', 'centos')), PIPELINE)
    validating = only_request(launcher_zk)
    assert validating.image_upload == upload
    # The Nodepool half of a mixed nodeset knows nothing of uploads.
    assert only_request(zk).extra.get('image_upload') is None
    adapter.cancel(handle)
    # An ordinary item's request carries no upload.
    item.change = None
    handle = adapter.request(item, job(('node', 'debian')), PIPELINE)
    assert only_request(launcher_zk).image_upload is None
    adapter.cancel(handle)


# -- nodeset alternatives --------------------------------------------------------


def wait_for_request_of(zk, node_types):
    def requested():
        for request_id in zk.get_request_ids():
            request = zk.get_request(request_id)
            if request is not None and request.node_types == node_types:
                return True
        return False
    wait_for(requested, what=f'a request for {node_types}')


def alternatives_job(layout, value):
    """A job frozen with ``nodeset: value`` against ``layout`` (its
    ``nodesets``), as freezing leaves it: the first alternative to request
    and the rest."""
    from zuul.model.errors import SourceContext
    from zuul.model.freeze import FrozenJob, resolve_nodeset_alternatives
    sc = SourceContext(project='org/config', branch='master', path='zuul.yaml', trusted=True)
    frozen = FrozenJob(name='tox', attributes={'nodeset': value}, source_context=sc)
    resolve_nodeset_alternatives(layout, frozen)
    first = layout.nodesets[frozen.get('nodeset')]
    frozen.nodeset_object = first
    return m.JobRef('tox', nodes=tuple((n.name, n.label) for n in first.nodes), frozen=frozen)


def alternatives_layout():
    from zuul.configloader.nodeset import NodesetParser
    from zuul.lib import yamlutil
    from zuul.model.errors import SourceContext
    sc = SourceContext(project='org/config', branch='master', path='zuul.yaml', trusted=True)
    layout = make_layout()
    layout.nodesets = {}
    for obj in yamlutil.load('''
- nodeset: {name: fast, nodes: [{name: controller, label: fast-label}]}
- nodeset:
    name: slow
    nodes: [{name: controller, label: slow-label}, {name: worker, label: slow-label}]
    groups: [{name: all-of-them, nodes: [controller, worker]}]
- nodeset: {name: fast-or-slow, alternatives: [fast, slow]}
''', 'zuul.yaml'):
        nodeset = NodesetParser().parse(obj['nodeset'], sc)
        layout.nodesets[nodeset.name] = nodeset
    return layout


def test_failed_request_tries_the_next_alternative_nodeset(trees):
    adapter, scheduler, zk, _ = trees
    layout = alternatives_layout()
    item = add_tenant(scheduler, layout)
    tox = alternatives_job(layout, 'fast-or-slow')
    handle = adapter.request(item, tox, PIPELINE)
    first = only_request(zk)
    assert first.node_types == ['fast-label']
    refuse(zk, first)
    # No answer yet: the next alternative is requested instead.
    wait_for_request_of(zk, ['slow-label', 'slow-label'])
    assert scheduler.events.empty()
    fulfil(zk, only_request(zk))
    args = scheduler.next_event()
    assert args['request'] is handle and not args['failed']
    assert [(names, node['type']) for names, node in args['nodeset'].nodes] == [
        (('controller',), 'slow-label'), (('worker',), 'slow-label')]
    # The job runs on the alternative: its inventory groups come from it.
    assert [g.name for g in tox.frozen.nodeset_object.groups] == ['all-of-them']
    adapter.release(args['nodeset'])


def test_every_alternative_failing_is_one_node_failure(trees):
    adapter, scheduler, zk, _ = trees
    layout = alternatives_layout()
    item = add_tenant(scheduler, layout)
    handle = adapter.request(item, alternatives_job(layout, 'fast-or-slow'), PIPELINE)
    refuse(zk, only_request(zk))
    wait_for_request_of(zk, ['slow-label', 'slow-label'])
    refuse(zk, only_request(zk))
    args = scheduler.next_event()
    assert args['request'] is handle and args['failed'] and args['nodeset'] is None
    assert scheduler.events.empty() and zk.get_request_ids() == []


def test_canceling_an_alternatives_request_withdraws_the_current_one(trees):
    adapter, scheduler, zk, _ = trees
    layout = alternatives_layout()
    item = add_tenant(scheduler, layout)
    handle = adapter.request(item, alternatives_job(layout, 'fast-or-slow'), PIPELINE)
    refuse(zk, only_request(zk))
    wait_for_request_of(zk, ['slow-label', 'slow-label'])
    adapter.cancel(handle)
    assert zk.get_request_ids() == [] and scheduler.events.empty()


def test_alternatives_flatten_in_order_and_refuse_cycles_and_unknown_names():
    from zuul.model.freeze import FreezeError, FrozenJob, resolve_nodeset_alternatives
    layout = alternatives_layout()
    outer = {'alternatives': ['fast-or-slow', {'nodes': [{'name': 'n', 'label': 'x'}]}]}
    frozen = FrozenJob(name='tox', attributes={'nodeset': outer})
    resolve_nodeset_alternatives(layout, frozen)
    assert frozen.get('nodeset') == 'fast'
    assert frozen.nodeset_alternatives == ['slow', {'nodes': [{'name': 'n', 'label': 'x'}]}]
    plain = FrozenJob(name='tox', attributes={'nodeset': 'slow'})
    resolve_nodeset_alternatives(layout, plain)
    assert plain.get('nodeset') == 'slow' and plain.nodeset_alternatives == []
    layout.nodesets['loop'] = types.SimpleNamespace(alternatives=['fast', 'loop'])
    with pytest.raises(FreezeError, match='cycle: loop -> loop'):
        resolve_nodeset_alternatives(layout, FrozenJob('tox', {'nodeset': 'loop'}))
    with pytest.raises(FreezeError, match='unknown nodeset "nope"'):
        resolve_nodeset_alternatives(layout, FrozenJob('tox', {'nodeset': {
            'alternatives': ['fast', 'nope']}}))
