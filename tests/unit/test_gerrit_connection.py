"""The live Gerrit connection against the development Gerrit: events in,
changes and dependencies looked up, reports out, outages caught up."""

import json
import queue

import pytest

from tests.harness.waiting import wait_for
from zuul.driver.gerrit.gerrit_connection import GerritConnection
from zuul.scheduler.connections import ConnectionRegistry


@pytest.fixture
def gerrit_connection(dev_gerrit):
    conn = GerritConnection('review', {
        'server': '127.0.0.1', 'port': dev_gerrit.server.port, 'user': 'zuul',
        'sshkey': dev_gerrit.key_path, 'known_hosts': dev_gerrit.known_hosts,
        'baseurl': dev_gerrit.store.canonical_url})
    events = queue.Queue()
    conn.start(events.put)
    conn.events = events
    assert conn.stream.connected.wait(30)
    wait_for(lambda: dev_gerrit.server.stream_count() == 1, what='stream')
    try:
        yield conn
    finally:
        conn.stop()


def _record_queries(connection, with_thread: bool = False) -> list:
    """Every query ``connection`` makes from now on (with the thread that
    made it), in the order made."""
    import threading
    queries = []
    real_query = connection.ssh.query

    def query(q):
        queries.append((q, threading.current_thread().name) if with_thread else q)
        return real_query(q)
    connection.ssh.query = query
    return queries


def test_stream_events_become_trigger_events(dev_gerrit, gerrit_connection):
    store = dev_gerrit.store
    store.create_project('org/project')
    change = store.create_change('org/project', 'master', 'A', {'a': '1'})
    event = gerrit_connection.events.get(timeout=30)
    assert (event.type, event.connection, event.project) == \
        ('patchset-created', 'review', 'org/project')
    assert (event.change_number, event.patchset) == (change.number, 1)
    looked_up = gerrit_connection.get_change_for_event(event)
    assert looked_up.newrev == change.current.revision and looked_up.is_open


def test_approval_during_outage_is_synthesized(dev_gerrit, gerrit_connection):
    store = dev_gerrit.store
    store.create_project('org/project')
    change = store.create_change('org/project', 'master', 'A', {'a': '1'})
    assert gerrit_connection.events.get(timeout=30).type == 'patchset-created'
    dev_gerrit.server.accept_streams = False
    dev_gerrit.server.drop_stream_connections()
    wait_for(lambda: not gerrit_connection.stream.connected.is_set(), what='outage')
    store.approve(change, 'Workflow', 1, who='core')
    dev_gerrit.server.accept_streams = True
    event = gerrit_connection.events.get(timeout=60)
    assert event.type == 'comment-added'
    assert {'type': 'Workflow', 'description': 'Workflow', 'value': '1',
            'username': 'core'} in event.approvals
    assert event.change_number == change.number


def test_dependencies_git_parent_and_depends_on_url(dev_gerrit, gerrit_connection):
    store = dev_gerrit.store
    store.create_project('org/a')
    store.create_project('org/b')
    parent = store.create_change('org/a', 'master', 'parent', {'p': '1'})
    other = store.create_change('org/b', 'master', 'other', {'o': '1'})
    child = store.create_change('org/a', 'master', 'child', {'c': '1'}, parent=parent,
                                footer=f'Depends-On: {store.change_url(other)}')
    registry = ConnectionRegistry([gerrit_connection])
    c = gerrit_connection.query_change(child.number)
    needed = gerrit_connection.get_needed_changes(c, registry)
    assert [(n.project, n.number) for n in needed] == [('org/a', parent.number),
                                                      ('org/b', other.number)]


def test_needed_changes_are_read_ahead_with_the_event(dev_gerrit, gerrit_connection):
    """An event's change comes with the changes it needs (git parent,
    Depends-On by URL and by Change-Id, and what an open one needs in
    turn; a merged one is not followed): enqueueing it asks Gerrit
    nothing on the scheduler's loop. Read once per change object;
    ``forget_needed`` reads again (a dependency may have merged)."""
    store = dev_gerrit.store
    for name in ('org/a', 'org/b', 'org/c'):
        store.create_project(name)
    base = store.create_change('org/a', 'master', 'base', {'m': '1'})
    store.approve(base, 'Code-Review', 2, who='core')
    store.approve(base, 'Verified', 1, who='core')
    store.approve(base, 'Workflow', 1, who='core')
    store.submit(base)
    below = store.create_change('org/c', 'master', 'below', {'w': '1'})
    parent = store.create_change('org/a', 'master', 'parent', {'p': '1'},
                                 footer=f'Depends-On: {below.change_id}')
    other = store.create_change('org/b', 'master', 'other', {'o': '1'})
    gerrit_connection.wants_event = lambda e: e.change_number not in (
        base.number, below.number, parent.number, other.number)
    child = store.create_change('org/a', 'master', 'child', {'c': '1'}, parent=parent,
                                footer=f'Depends-On: {store.change_url(other)}')
    wait_for(lambda: store.get_change(parent.number).current.parents, what='parent')
    event = None
    while event is None or event.change_number != child.number:
        event = gerrit_connection.events.get(timeout=30)
    assert event.needed_data is not None
    queries = _record_queries(gerrit_connection)
    from zuul.scheduler.state import event_data, event_from_data
    routed = event_from_data(json.loads(json.dumps(event_data(event))))
    registry = ConnectionRegistry([gerrit_connection])
    change = gerrit_connection.get_change_for_event(routed)
    needed = gerrit_connection.get_needed_changes(change, registry)
    assert [(n.project, n.number) for n in needed] == [('org/a', parent.number),
                                                      ('org/b', other.number)]
    # What the open parent needs came too; the merged base is not followed.
    below_parent = gerrit_connection.get_needed_changes(needed[0], registry)
    assert [(n.number, n.is_merged) for n in below_parent] == [
        (base.number, True), (below.number, False)]
    assert gerrit_connection.get_needed_changes(needed[1], registry) == []
    assert queries == []
    # Read again only when asked to.
    gerrit_connection.forget_needed(change)
    again = gerrit_connection.get_needed_changes(change, registry)
    assert [n.number for n in again] == [parent.number, other.number]
    assert queries == [f'change:{parent.number}', f'change:{other.number}']
    queries.clear()
    gerrit_connection.get_needed_changes(change, registry)
    assert queries == []


def test_a_merged_parent_is_asked_for_once(dev_gerrit, gerrit_connection):
    """Nearly every change is based on a merged change: a merged change
    stays merged, so its row is kept and the next change based on it
    costs one query (its own), not two."""
    store = dev_gerrit.store
    store.create_project('org/a')
    store.create_project('org/b')
    gerrit_connection.wants_event = lambda e: e.type == 'patchset-created'
    base = store.create_change('org/a', 'master', 'base', {'m': '1'})
    store.submit(base)
    while gerrit_connection.events.get(timeout=30).type != 'change-merged':
        pass    # the base's events, before counting
    queries = _record_queries(gerrit_connection)
    first = store.create_change('org/a', 'master', 'first', {'f': '1'})
    events = {}
    while first.number not in events:   # (the base's ref-updated may come first)
        event = gerrit_connection.events.get(timeout=30)
        if event.type == 'patchset-created':
            events[event.change_number] = event
    second = store.create_change('org/a', 'master', 'second', {'s': '1'})
    # An open parent is asked for each time (it may merge, or change).
    open_parent = store.create_change('org/b', 'master', 'open', {'o': '1'})
    third = store.create_change('org/b', 'master', 'third', {'t': '1'}, parent=open_parent)
    fourth = store.create_change('org/b', 'master', 'fourth', {'u': '1'}, parent=open_parent)
    while len(events) < 5:
        event = gerrit_connection.events.get(timeout=30)
        if event.type == 'patchset-created':
            events[event.change_number] = event
    # (Read side by side: in any order.)
    assert sorted(queries) == sorted([
        f'change:{first.number}', f'change:{base.number}', f'change:{second.number}',
        f'change:{open_parent.number}',
        f'change:{third.number}', f'change:{open_parent.number}',
        f'change:{fourth.number}', f'change:{open_parent.number}'])
    for number in (first.number, second.number):
        assert [(r['number'], r['status']) for r in events[number].needed_data] == \
            [(base.number, 'MERGED')]


def test_a_message_full_of_depends_on_is_not_read_ahead(dev_gerrit, gerrit_connection):
    """The commit message is the uploader's: a change naming more changes
    than ``READ_AHEAD_MAX_LOOKUPS`` is not followed by the read workers
    (they stop at the bound); its dependencies are looked up when the
    change is enqueued, as without read-ahead."""
    import zuul.driver.gerrit.gerrit_connection as gc
    store = dev_gerrit.store
    store.create_project('org/a')
    footer = '\n'.join(f'Depends-On: I{n:040x}' for n in range(500))
    queries = _record_queries(gerrit_connection)
    hostile = store.create_change('org/a', 'master', 'many', {'h': '1'}, footer=footer)
    event = gerrit_connection.events.get(timeout=30)
    assert event.change_number == hostile.number
    assert event.change_data and event.needed_data is None
    assert len(queries) <= 1 + gc.READ_AHEAD_MAX_LOOKUPS
    # Asked for on enqueue, every footer is looked up (none names a change).
    change = gerrit_connection.get_change_for_event(event)
    assert gerrit_connection.get_needed_changes(
        change, ConnectionRegistry([gerrit_connection])) == []


def test_lookup_change_errors(dev_gerrit, gerrit_connection):
    dev_gerrit.store.create_project('org/a')
    with pytest.raises(LookupError, match='Malformed'):
        gerrit_connection.lookup_change('org/a', '1,x')
    with pytest.raises(LookupError, match='not found'):
        gerrit_connection.lookup_change('org/a', '42,1')


def test_report_and_submit(dev_gerrit, gerrit_connection):
    store = dev_gerrit.store
    store.create_project('org/a')
    change = store.create_change('org/a', 'master', 'A', {'a': '1'})
    c = gerrit_connection.query_change(change.number)
    gerrit_connection.report(c, 'Build succeeded (gate pipeline).', {'Verified': 2},
                             submit=True)
    assert gerrit_connection.is_merged(c) and c.is_merged


def test_catch_up_after_a_restart_skips_what_the_previous_scheduler_had(
        dev_gerrit, gerrit_connection):
    """A successor's catch-up synthesizes events from the second of the
    newest one the previous scheduler held on, less those it held
    (Gerrit's times are whole seconds)."""
    from zuul.zk.pipeline_state import event_signature
    store = dev_gerrit.store
    store.create_project('org/project')
    change = store.create_change('org/project', 'master', 'A', {'a': '1'})
    created = gerrit_connection.events.get(timeout=30)
    store.approve(change, 'Code-Review', 2, who='core')
    voted = gerrit_connection.events.get(timeout=30)
    held = [event_signature(e) for e in (created, voted)]
    since = max(created.timestamp, voted.timestamp)
    while not gerrit_connection.events.empty():
        gerrit_connection.events.get()
    if created.timestamp == voted.timestamp:
        # Both held, both in the newest second: nothing to synthesize.
        assert gerrit_connection.catch_up_since(since, held) == 0
    assert gerrit_connection.catch_up_since(since + 1, []) == 0     # nothing newer
    # What happened later (a vote nobody heard) is synthesized, once.
    import time
    time.sleep(1.1)
    late = time.time()
    store.approve(change, 'Workflow', 1, who='core')
    while not gerrit_connection.events.empty():
        gerrit_connection.events.get()          # the stream's own copy
    assert gerrit_connection.catch_up_since(int(late), held) == 1
    event = gerrit_connection.events.get(timeout=10)
    assert event.type == 'comment-added'
    assert [(a['type'], a['value']) for a in event.approvals] == [('Workflow', '1')]
    # Without the held signatures the votes of that second come again.
    assert gerrit_connection.catch_up_since(since, []) >= 1


def test_reports_go_out_off_the_callers_thread_in_order_with_the_merged_outcome(
        dev_gerrit, gerrit_connection):
    """A running connection sends reports on its report workers (so the
    scheduler's loop never waits on SSH): a project's reports in the order
    made, and a submitting success report hands on whether it merged."""
    import threading
    import types

    from zuul.driver.gerrit.gerrit_reporter import GerritReporter
    store = dev_gerrit.store
    store.create_project('org/a')
    change = store.create_change('org/a', 'master', 'A', {'a': '1'})
    c = gerrit_connection.query_change(change.number)
    sent = []
    real_report = gerrit_connection.report

    def report(change, message, *args, **kw):
        sent.append((message, threading.current_thread().name))
        return real_report(change, message, *args, **kw)
    gerrit_connection.report = report
    item = types.SimpleNamespace(change=c, event_id='e1')
    pipeline = types.SimpleNamespace(name='gate')
    reporter = GerritReporter(gerrit_connection, {'Verified': 2, 'submit': True})
    assert reporter.can_report_off_loop() and reporter.merged_outcome
    outcome = []
    GerritReporter(gerrit_connection, {'Verified': 0}).report_off_loop(
        item, pipeline, 'start', 'Starting gate jobs.')
    reporter.report_off_loop(item, pipeline, 'success', 'Build succeeded.', outcome.append)
    wait_for(lambda: outcome, what='the merged outcome')
    assert outcome == [True]
    assert [m for m, _ in sent] == ['Starting gate jobs.', 'Build succeeded.']
    assert all(name.startswith('gerrit-review-reports') for _, name in sent), sent
    assert store.get_change(change.number).status == 'MERGED'
    wait_for(lambda: gerrit_connection.workers_busy() == 0, what='the workers idle')
    # A connection that does not read the stream (another active
    # scheduler's) reports off the loop too.
    idle = GerritConnection('idle', {'server': '127.0.0.1'})
    assert GerritReporter(idle, {'Verified': 1}).can_report_off_loop()
    # Stopped, the connection reports on the caller's thread again.
    gerrit_connection.stop()
    assert not reporter.can_report_off_loop()


def test_change_events_are_read_ahead_off_the_schedulers_thread(dev_gerrit, gerrit_connection):
    """The change of an event a tenant wants is read from Gerrit before the
    event is handed on (in stream order), so looking it up afterwards asks
    Gerrit nothing; an event no tenant wants is not read at all."""
    store = dev_gerrit.store
    store.create_project('org/a')
    queries = _record_queries(gerrit_connection, with_thread=True)
    gerrit_connection.wants_event = lambda e: e.type == 'patchset-created'
    a = store.create_change('org/a', 'master', 'A', {'a': '1'})
    b = store.create_change('org/a', 'master', 'B', {'b': '1'})
    events = [gerrit_connection.events.get(timeout=30) for _ in range(2)]
    assert [e.change_number for e in events] == [a.number, b.number]
    assert [q for q, _ in queries] == [f'change:{a.number}', f'change:{b.number}']
    assert all(name.startswith('gerrit-review-read') for _, name in queries), queries
    queries.clear()
    # The read travels with the event (as stored in ZooKeeper for the
    # scheduler that holds the tenant), not in this connection.
    from zuul.scheduler.state import event_data, event_from_data
    routed = event_from_data(json.loads(json.dumps(event_data(events[1]))))
    change = gerrit_connection.get_change_for_event(routed)
    assert (change.number, change.patchset, change.subject) == (b.number, 1, 'B')
    assert queries == []
    # Too big to travel (ZooKeeper's znode limit): read when looked up.
    import zuul.driver.gerrit.gerrit_connection as gc
    gerrit_connection_limit = gc.READ_AHEAD_MAX_BYTES
    gc.READ_AHEAD_MAX_BYTES = 10
    try:
        big = store.create_change('org/a', 'master', 'Big', {'c': '1'})
        event = gerrit_connection.events.get(timeout=30)
        assert event.change_number == big.number and event.change_data is None
    finally:
        gc.READ_AHEAD_MAX_BYTES = gerrit_connection_limit
    # Dependencies too big to travel: the change's own row still does.
    # (A child's row is its parent's and a few hundred bytes; with its
    # parent's row it is about twice that.)
    gc.READ_AHEAD_MAX_BYTES = len(json.dumps(events[1].change_data)) * 3 // 2
    try:
        child = store.create_change('org/a', 'master', 'Child', {'d': '1'}, parent=b)
        event = gerrit_connection.events.get(timeout=30)
        assert event.change_number == child.number
        assert event.change_data and event.needed_data is None
    finally:
        gc.READ_AHEAD_MAX_BYTES = gerrit_connection_limit
    queries.clear()
    # Not wanted: handed on unread, and read when looked up.
    store.approve(a, 'Code-Review', 2, who='core')
    event = gerrit_connection.events.get(timeout=30)
    assert event.type == 'comment-added' and queries == []
    assert gerrit_connection.get_change_for_event(event).number == a.number
    assert [q for q, _ in queries] == [f'change:{a.number}']
