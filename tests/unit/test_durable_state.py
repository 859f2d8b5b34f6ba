"""Durable scheduler state: the ZooKeeper store (real ZooKeeper), build
records, and snapshot/restore of pipeline managers (driven through the
deterministic collaborators of test_pipeline_managers)."""

from __future__ import annotations

import json
import os
import threading

import pytest

from tests.unit.pipeline_support import MergeResult, _change, _pipeline, _setup
from zuul.manager import manager_for
from zuul.model import item as m
from zuul.scheduler.state import (
    Restorer,
    encode_snapshot,
    event_data,
    event_from_data,
    snapshot,
)
from zuul.zk import pipeline_state as ps
from zuul.zk.builds import BuildRecords

# -- the store -----------------------------------------------------------------


def test_state_round_trips_and_unchanged_state_is_not_written(zk_chroot):
    store = ps.PipelineStateStore(zk_chroot.client())
    state = {'version': 1, 'queues': [{'name': 'q', 'items': [{'id': 'a'}]}]}
    assert store.save('tenant one', 'gate', state)
    assert not store.save('tenant one', 'gate', state)       # same digest: no write
    assert store.writes == 1
    other = ps.PipelineStateStore(zk_chroot.client())
    assert other.load('tenant one', 'gate') == state
    assert other.load('tenant one', 'check') is None
    assert other.pipelines('tenant one') == ['gate']


def test_large_state_is_sharded_and_old_generations_removed(zk_chroot, monkeypatch):
    monkeypatch.setattr(ps, 'SHARD_SIZE', 1024)
    client = zk_chroot.client()
    store = ps.PipelineStateStore(client)
    blob = os.urandom(6000).hex()        # incompressible: several shards
    store.save('t', 'p', {'blob': blob, 'n': 1})
    store.save('t', 'p', {'blob': blob, 'n': 2})
    path = store.path('t', 'p')
    header = json.loads(client.get(path)[0])
    assert header['generation'] == 2 and header['shards'] > 3
    children = client.get_children(path)
    assert children and all(c.startswith('2-') for c in children)
    assert ps.PipelineStateStore(client).load('t', 'p') == {'blob': blob, 'n': 2}


def test_a_writer_with_a_stale_view_writes_again_from_the_header(zk_chroot):
    first = ps.PipelineStateStore(zk_chroot.client())
    second = ps.PipelineStateStore(zk_chroot.client())
    first.save('t', 'p', {'n': 1})
    second.load('t', 'p')
    second.save('t', 'p', {'n': 2})          # first's generation is now stale
    assert first.save('t', 'p', {'n': 3})
    assert ps.PipelineStateStore(zk_chroot.client()).load('t', 'p') == {'n': 3}
    client = zk_chroot.client()
    assert len(client.get_children(first.path('t', 'p'))) == 1   # old shards gone


def test_save_many_sends_the_changed_pipelines_together_and_skips_the_rest(zk_chroot):
    """One save of every pipeline: the changed ones' transactions are all
    sent before any answer is awaited (one round trip, not one each),
    unchanged ones are not written; one whose view is stale (another
    writer) is written again from the header."""
    client = zk_chroot.client()
    store = ps.PipelineStateStore(client)
    assert store.save_many([('t', 'check', {'n': 1}), ('t', 'gate', {'n': 1}),
                            ('t', 'post', {'n': 1})]) == 3
    steps = []
    real_transaction = client.transaction

    def transaction():
        tx = real_transaction()
        real_async = tx.commit_async

        def commit_async():
            steps.append('send')
            pending = real_async()
            real_get = pending.get

            def get(*a, **kw):
                steps.append('answer')
                return real_get(*a, **kw)
            pending.get = get
            return pending
        tx.commit_async = commit_async
        return tx
    client.transaction = transaction
    assert store.save_many([('t', 'check', {'n': 1}), ('t', 'gate', {'n': 2}),
                            ('t', 'post', {'n': 3})]) == 2
    assert steps == ['send', 'send', 'answer', 'answer']    # check unchanged: not sent
    assert store.writes == 5
    # gate's view goes stale under another writer: written again.
    other = ps.PipelineStateStore(zk_chroot.client())
    other.load('t', 'gate')
    other.save('t', 'gate', {'n': 5})
    assert store.save_many([('t', 'gate', {'n': 6})]) == 1
    fresh = ps.PipelineStateStore(zk_chroot.client())
    assert [fresh.load('t', p) for p in ('check', 'gate', 'post')] == \
        [{'n': 1}, {'n': 6}, {'n': 3}]
    assert len(client.get_children(store.path('t', 'gate'))) == 1   # old shards gone


def test_state_of_another_format_version_is_refused(zk_chroot):
    client = zk_chroot.client()
    store = ps.PipelineStateStore(client)
    store.save('t', 'p', {'x': 1})
    path = store.path('t', 'p')
    header = json.loads(client.get(path)[0])
    header['version'] = 99
    client.set(path, json.dumps(header).encode())
    with pytest.raises(ValueError, match='format version 99'):
        ps.PipelineStateStore(client).load('t', 'p')


def test_trigger_events_are_kept_in_order_until_acknowledged(zk_chroot):
    from zuul.model.events import TriggerEvent
    queue = ps.TriggerEventQueue(zk_chroot.client())
    events = [TriggerEvent(type='patchset-created', connection='gerrit', project='p',
                           change_number=n, patchset=1) for n in (3, 1, 2)]
    for event in events:
        queue.put(event_data(event))
    pending = queue.pending()
    assert [event_from_data(d).change_number for _, d in pending] == [3, 1, 2]
    assert event_from_data(pending[0][1]).event_id == events[0].event_id
    queue.ack(pending[0][0])
    assert [d['change_number'] for _, d in queue.pending()] == [1, 2]
    # A batch where one was acknowledged already still removes the rest.
    queue.ack_many([pending[0][0], pending[1][0], pending[2][0]])
    assert queue.pending() == []


def test_last_saved_mark(zk_chroot):
    client = zk_chroot.client()
    assert ps.last_saved(client) is None
    ps.mark_saved(client, 1234.5, {'gerrit': 1200.0})
    assert ps.last_saved(client) == {'time': 1234.5, 'connections': {'gerrit': 1200.0},
                                     'recent': {}}


# -- build records ----------------------------------------------------------------


def _follow(records, uuid):
    got, done = [], threading.Event()

    def on_done(record):
        got.append(record)
        done.set()
    records.follow(uuid, on_done)
    return got, done


def test_followed_build_reports_its_result_when_it_ends(zk_chroot):
    executor = BuildRecords(zk_chroot.client())
    executor.register_executor('ex1')
    scheduler = BuildRecords(zk_chroot.client())
    executor.started('b1', 'ex1', 'finger://ex1/b1')
    got, done = _follow(scheduler, 'b1')
    assert not done.wait(0.5)                        # still running on a live executor
    executor.completed('b1', 'ex1', json.dumps({'result': 'SUCCESS'}))
    assert done.wait(10)
    assert got[0]['state'] == 'completed' and got[0]['result']['result'] == 'SUCCESS'
    assert len(got) == 1


def test_followed_build_is_lost_when_its_executor_goes(zk_chroot):
    executor_client = zk_chroot.client()
    executor = BuildRecords(executor_client)
    executor.register_executor('ex2')
    executor.started('b2', 'ex2', None)
    scheduler = BuildRecords(zk_chroot.client())
    got, done = _follow(scheduler, 'b2')
    assert not done.wait(0.3)
    zk_chroot.expire_session(executor_client)        # the executor died
    assert done.wait(10)
    assert got == [None]


def test_build_without_a_record_is_lost_at_once(zk_chroot):
    got, done = _follow(BuildRecords(zk_chroot.client()), 'never-started')
    assert done.wait(1) and got == [None]


# -- snapshot and restore ---------------------------------------------------------


class _Connections:
    def __init__(self, changes):
        self.changes = changes

    def get(self, name):
        return self

    def lookup_change(self, project, spec):
        number = int(spec.split(',')[0])
        return self.changes[number]


class _Executor:
    def __init__(self):
        self.followed = []

    def follow(self, build, lost_detail=None):
        self.followed.append(build.uuid)


def _gate_mid_run():
    """A gate of three with merges done and builds running."""
    ctx, mgr = _setup(_pipeline(), jobs=('job1', 'job2'))
    changes = [_change(ctx, n) for n in (1, 2, 3)]
    for change in changes:
        mgr.add_change(change)
    for _ in range(20):       # merges complete, builds start, none finishes
        mgr.process_queues()
        if ctx.pending_merges:
            bs, numbers = ctx.pending_merges.pop(0)
            mgr.on_merge_completed(bs, MergeResult(True, {'changes': numbers}, commit='c'))
    return ctx, mgr, changes


def test_restored_gate_keeps_order_merges_and_running_builds():
    ctx, mgr, changes = _gate_mid_run()
    assert len(ctx.running) == 6
    first = next(iter(mgr.all_items()))
    first.current_build_set.builds['job1'].result = m.SUCCESS      # one already ended
    saved = json.loads(json.dumps(snapshot(mgr)))                  # through JSON, as stored
    new_mgr = manager_for(mgr.pipeline, ctx)
    ctx.manager = new_mgr
    executor = _Executor()
    restorer = Restorer(new_mgr, _Connections({c.number: c for c in changes}), executor)
    assert restorer.restore(saved) == 3
    restorer.follow_builds()
    items = list(new_mgr.all_items())
    assert [i.change.number for i in items] == [1, 2, 3]
    assert [i.id for i in items] == [i.id for i in mgr.all_items()]
    assert all(i.reported_start for i in items)
    assert [i.item_ahead for i in items] == [None, items[0], items[1]]
    assert items[2].current_build_set.dependent_items == (items[0], items[1])
    bs = items[0].current_build_set
    assert bs.merge_state == m.MERGE_COMPLETE and bs.commit == 'c'
    assert bs.builds['job1'].result == m.SUCCESS
    assert len(executor.followed) == 5               # the unfinished ones are followed
    assert bs.jobs is None                           # frozen again on the next pass
    new_mgr.process_queues()
    assert bs.builds['job1'].job is bs.job('job1')   # bound to the frozen job
    assert not ctx.merges[3:]                        # no merge requested again


def test_the_encoded_state_is_the_snapshot_and_only_changed_items_are_encoded_again():
    """A save encodes each item once and again only when its data
    changed: the bytes are always those of the snapshot encoded whole."""
    def whole(mgr):
        return json.dumps(snapshot(mgr), separators=(',', ':')).encode('utf8')
    ctx, mgr, changes = _gate_mid_run()
    assert encode_snapshot(mgr) == whole(mgr)
    items = list(mgr.all_items())
    encoded = [i._saved_json[1] for i in items]
    assert encode_snapshot(mgr) == whole(mgr)
    assert [i._saved_json[1] for i in items] == encoded
    assert all(i._saved_json[1] is e for i, e in zip(items, encoded)), \
        'an unchanged item was encoded again'
    # A build of the second item ends: that item alone is encoded again.
    build = items[1].current_build_set.builds['job1']
    build.result, build.result_data = m.SUCCESS, {'zuul': {'log_url': 'http://x/'}}
    raw = encode_snapshot(mgr)
    assert raw == whole(mgr) and b'http://x/' in raw
    assert items[0]._saved_json[1] is encoded[0] and items[2]._saved_json[1] is encoded[2]
    assert items[1]._saved_json[1] is not encoded[1]
    # The pipeline's and the queues' own fields (a list changed in place
    # too) and an item leaving are in the bytes too.
    queue = mgr.queues[0]
    queue.window += 1
    queue.projects.append('org/joined')
    assert encode_snapshot(mgr) == whole(mgr)
    assert b'org/joined' in encode_snapshot(mgr)
    mgr.disabled = True
    mgr.remove_item(items[0])
    assert encode_snapshot(mgr) == whole(mgr)
    assert json.loads(encode_snapshot(mgr))['disabled'] is True


def test_restore_drops_items_whose_change_merged_meanwhile():
    ctx, mgr, changes = _gate_mid_run()
    saved = snapshot(mgr)
    changes[0].status = 'MERGED'
    new_mgr = manager_for(mgr.pipeline, ctx)
    restorer = Restorer(new_mgr, _Connections({c.number: c for c in changes}), _Executor())
    assert restorer.restore(saved) == 2
    items = list(new_mgr.all_items())
    assert [i.change.number for i in items] == [2, 3]
    # Built on a change that is no longer ahead: tested afresh.
    assert items[1].current_build_set.merge_state == m.MERGE_NEW


def test_restored_pipeline_finishes_with_one_report_per_change():
    ctx, mgr, changes = _gate_mid_run()
    saved = snapshot(mgr)
    reports_before = list(ctx.reports)
    new_mgr = manager_for(mgr.pipeline, ctx)
    ctx.manager = new_mgr
    ctx.running.clear()             # the old process's builds: results come through records
    executor = _Executor()
    restorer = Restorer(new_mgr, _Connections({c.number: c for c in changes}), executor)
    restorer.restore(saved)
    for item in new_mgr.all_items():
        for build in item.current_build_set.builds.values():
            new_mgr.on_build_completed(build, m.SUCCESS)
    ctx.run()
    assert ctx.reports[len(reports_before):] == [(1, 'success'), (2, 'success'),
                                                 (3, 'success')]
    assert not ctx.running                          # nothing was launched again
    assert [n for n, a in ctx.notices if a == 'start'] == [1, 2, 3]   # before the restart only


def test_state_of_an_unknown_version_is_not_restored():
    ctx, mgr, _ = _gate_mid_run()
    with pytest.raises(ValueError):
        Restorer(manager_for(mgr.pipeline, ctx), _Connections({})).restore({'version': 0})


def test_independent_items_come_back_in_queues_of_their_own():
    ctx, mgr = _setup(_pipeline('check', 'independent'), needs={2: [1]})
    changes = {n: _change(ctx, n) for n in (1, 2, 3)}
    mgr.add_change(changes[2])            # tested on top of 1 (not live)
    mgr.add_change(changes[3])
    saved = json.loads(json.dumps(snapshot(mgr)))
    new_mgr = manager_for(mgr.pipeline, ctx)
    Restorer(new_mgr, _Connections(changes)).restore(saved)
    assert [[(i.change.number, i.live) for i in q.queue] for q in new_mgr.queues] == \
        [[(1, False), (2, True)], [(3, True)]]


def test_item_being_dequeued_is_not_restored():
    ctx, mgr, changes = _gate_mid_run()
    items = list(mgr.all_items())
    items[1].reporting = 'dequeue'
    new_mgr = manager_for(mgr.pipeline, ctx)
    Restorer(new_mgr, _Connections({c.number: c for c in changes})).restore(snapshot(mgr))
    assert [i.change.number for i in new_mgr.all_items()] == [1, 3]


def test_item_being_reported_for_a_lost_requirement_is_not_restored():
    """Its failure report is the dequeue: a scheduler killed while sending
    it must not bring the unapproved change back into the gate."""
    ctx, mgr, changes = _gate_mid_run()
    items = list(mgr.all_items())
    items[1].reporting = 'failure'
    items[1].dequeued_missing_requirements = True
    items[2].reporting = 'failure'          # an ordinary failure report: restored
    new_mgr = manager_for(mgr.pipeline, ctx)
    Restorer(new_mgr, _Connections({c.number: c for c in changes})).restore(snapshot(mgr))
    assert [i.change.number for i in new_mgr.all_items()] == [1, 3]


def test_retry_counts_survive_a_restore_and_attempts_still_bound_the_job():
    """A build set whose job was already retried keeps its tries through
    a restart: the next RETRY of a job with ``attempts: 3`` is its last."""
    ctx, mgr, changes = _gate_mid_run()
    first = next(iter(mgr.all_items()))
    bs = first.current_build_set
    assert bs.tries == {'job1': 1, 'job2': 1}
    job = bs.job('job1')
    mgr.on_build_completed(bs.builds['job1'], m.RETRY)      # try 1 lost
    mgr.process_queues()                                    # try 2 starts
    assert bs.tries['job1'] == 2
    new_mgr = manager_for(mgr.pipeline, ctx)
    ctx.manager = new_mgr
    Restorer(new_mgr, _Connections({c.number: c for c in changes})).restore(snapshot(mgr))
    restored = next(iter(new_mgr.all_items())).current_build_set
    assert restored.tries == {'job1': 2, 'job2': 1}
    new_mgr.process_queues()                                # jobs frozen, builds bound
    build = restored.builds['job1']
    assert restored.job('job1').attempts == job.attempts == 3
    new_mgr.on_build_completed(build, m.RETRY)              # try 2 lost: try 3 starts
    new_mgr.process_queues()
    assert restored.tries['job1'] == 3
    new_mgr.on_build_completed(restored.builds['job1'], m.RETRY)
    assert restored.result_of('job1') == m.RETRY_LIMIT      # never a 4th try


class _FlakyConnections(_Connections):
    """Lookups fail with a connection error ``failures`` times first."""

    def __init__(self, changes, failures):
        super().__init__(changes)
        self.failures = failures

    def lookup_change(self, project, spec):
        if self.failures > 0:
            self.failures -= 1
            raise OSError('Channel closed.')
        return super().lookup_change(project, spec)


def test_restore_retries_lookups_that_failed_on_the_way(monkeypatch):
    from zuul.scheduler import state
    monkeypatch.setattr(state, 'LOOKUP_THREADS', 1)
    ctx, mgr, changes = _gate_mid_run()
    new_mgr = manager_for(mgr.pipeline, ctx)
    flaky = _FlakyConnections({c.number: c for c in changes}, failures=2)
    assert Restorer(new_mgr, flaky).restore(snapshot(mgr)) == 3


def test_restore_of_an_unreachable_source_stops_rather_than_drops(monkeypatch):
    from zuul.scheduler import state
    monkeypatch.setattr(state, 'LOOKUP_TRIES', 2)
    ctx, mgr, changes = _gate_mid_run()
    new_mgr = manager_for(mgr.pipeline, ctx)
    down = _FlakyConnections({c.number: c for c in changes}, failures=10 ** 6)
    with pytest.raises(state.RestoreError, match='Channel closed'):
        Restorer(new_mgr, down).restore(snapshot(mgr))


# -- dependency cycles -------------------------------------------------------------


def _cycle_mid_run(jobs=('job1', 'job2')):
    """A gate holding a cycle of two changes of one project (its job1 is
    deduplicated: it runs once for both; job2 runs for each), merges
    done, builds running."""
    ctx, mgr = _setup(_pipeline(), jobs=jobs, allow_cycles=True, needs={1: [2], 2: [1]},
                      job_attrs={'job1': {'name': 'job1'},
                                 'job2': {'name': 'job2', 'deduplicate': False}})
    changes = [_change(ctx, n) for n in (1, 2)]
    mgr.add_change(changes[0])
    for _ in range(20):
        mgr.process_queues()
        if ctx.pending_merges:
            bs, numbers = ctx.pending_merges.pop(0)
            mgr.on_merge_completed(bs, MergeResult(True, {'changes': numbers}, commit='c'))
    return ctx, mgr, changes


def test_a_bundle_and_its_deduplicated_jobs_survive_a_restart():
    ctx, mgr, changes = _cycle_mid_run()
    first, second = mgr.all_items()
    assert second.current_build_set.deduplicated['job1'] is first.current_build_set
    assert sorted(b.job.name for b in ctx.running) == ['job1', 'job2', 'job2']
    saved = json.loads(json.dumps(snapshot(mgr)))
    assert saved['version'] == 2
    new_mgr = manager_for(mgr.pipeline, ctx)
    ctx.manager = new_mgr
    ctx.running.clear()
    restorer = Restorer(new_mgr, _Connections({c.number: c for c in changes}), _Executor())
    assert restorer.restore(saved) == 2
    one, two = new_mgr.all_items()
    assert one.bundle is not None and one.bundle is two.bundle
    assert one.bundle.id == first.bundle.id and one.bundle.items == [one, two]
    assert two.current_build_set.deduplicated == {'job1': one.current_build_set}
    assert two.current_build_set.dependent_items == (one,)
    assert one.current_build_set.dependent_items == (two,)
    for item in (one, two):
        for build in item.current_build_set.builds.values():
            new_mgr.on_build_completed(build, m.SUCCESS)
    ctx.run()
    assert sorted(ctx.reports) == [(1, 'success'), (2, 'success')]
    assert not ctx.running and not ctx.merges[2:]    # nothing launched or merged again


def test_state_of_version_1_without_bundles_is_still_restored():
    ctx, mgr, changes = _gate_mid_run()
    saved = json.loads(json.dumps(snapshot(mgr)))
    saved['version'] = 1
    for queue in saved['queues']:
        for item in queue['items']:
            del item['bundle']
            del item['buildset']['deduplicated']
    new_mgr = manager_for(mgr.pipeline, ctx)
    assert Restorer(new_mgr, _Connections({c.number: c for c in changes}),
                    _Executor()).restore(saved) == 3
    assert all(i.bundle is None for i in new_mgr.all_items())


def test_an_event_noted_while_the_mark_is_written_is_in_the_next_mark(zk_chroot, monkeypatch):
    """A connection thread notes an event while the loop writes the mark:
    the next save writes it (a mark without it would have a successor
    synthesize that event a second time: a change tested twice)."""
    from zuul.model.events import TriggerEvent
    from zuul.scheduler.scheduler import Scheduler
    client = zk_chroot.client()
    scheduler = Scheduler(None, None, None, None, None)
    scheduler.state_store = ps.PipelineStateStore(client)

    def event(number):
        return TriggerEvent(type='patchset-created', connection='gerrit',
                            change_number=number, patchset=1, timestamp=100.0)
    real = ps.mark_saved
    during = [event(2)]

    def mark_saved(*args, **kwargs):
        if during:
            scheduler._note_latest(during.pop())    # meanwhile, on another thread
        real(*args, **kwargs)
    monkeypatch.setattr(ps, 'mark_saved', mark_saved)
    scheduler._note_latest(event(1))
    scheduler.save_state()
    assert [s['change'] for s in ps.last_saved(client)['recent']['gerrit']] == [1]
    scheduler.save_state()
    assert [s['change'] for s in ps.last_saved(client)['recent']['gerrit']] == [1, 2]
