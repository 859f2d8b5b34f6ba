"""Gerrit connection and reporter keys that change behaviour, against the
development Gerrit: event_delay, max_dependencies, gitweb_url_template,
poll_interval with ref_filter, and the reporter's notify."""

import queue
import time
import types

import pytest
import voluptuous as vs

from tests.harness.waiting import wait_for
from zuul.driver.gerrit import GerritDriver
from zuul.driver.gerrit.gerrit_connection import GerritConnection
from zuul.driver.gerrit.gerrit_reporter import GerritReporter
from zuul.model.events import TriggerEvent


def _options(dev_gerrit, **extra):
    return dict({'server': '127.0.0.1', 'port': dev_gerrit.server.port, 'user': 'zuul',
                 'sshkey': dev_gerrit.key_path, 'known_hosts': dev_gerrit.known_hosts,
                 'baseurl': dev_gerrit.store.canonical_url}, **extra)


@pytest.fixture
def make_connection(dev_gerrit):
    made = []

    def make(start=True, clock=None, **extra):
        conn = GerritConnection('review', _options(dev_gerrit, **extra))
        if clock is not None:
            conn.clock = clock
        conn.events = queue.Queue()
        made.append(conn)
        if start:
            conn.start(conn.events.put)
            assert conn.stream.connected.wait(30)
            wait_for(lambda: dev_gerrit.server.stream_count() == 1, what='stream')
        else:
            conn.on_event = conn.events.put
        return conn

    yield make
    for conn in made:
        conn.stop()


def _drain(q):
    out = []
    while True:
        try:
            out.append(q.get_nowait())
        except queue.Empty:
            return out


# -- event_delay ------------------------------------------------------------

def test_event_delay_holds_events_until_the_clock_passes_it(dev_gerrit, make_connection):
    now = [1000.0]
    conn = make_connection(event_delay='5', clock=lambda: now[0])
    store = dev_gerrit.store
    store.create_project('org/project')
    change = store.create_change('org/project', 'master', 'A', {'a': '1'})
    # The event arrived and is held (the injected clock has not moved).
    wait_for(lambda: len(conn._delayed) == 1, what='event held')
    time.sleep(0.3)
    assert conn.events.empty()
    now[0] += 4.9
    time.sleep(0.3)
    assert conn.events.empty(), 'handed on before event_delay had passed'
    now[0] += 0.2
    event = conn.events.get(timeout=30)
    assert (event.type, event.change_number) == ('patchset-created', change.number)


def test_without_event_delay_events_are_not_held(dev_gerrit, make_connection):
    conn = make_connection(clock=lambda: 0.0)  # a clock that never moves
    dev_gerrit.store.create_project('org/project')
    dev_gerrit.store.create_change('org/project', 'master', 'A', {'a': '1'})
    assert conn.events.get(timeout=30).type == 'patchset-created'


# -- max_dependencies -------------------------------------------------------

def test_max_dependencies_ignores_events_of_changes_with_too_many(dev_gerrit,
                                                                   make_connection):
    conn = make_connection(max_dependencies='1')
    store = dev_gerrit.store
    store.create_project('org/a')
    store.create_project('org/b')
    a = store.create_change('org/a', 'master', 'A', {'a': '1'})
    b = store.create_change('org/a', 'master', 'B', {'b': '1'}, parent=a)
    c = store.create_change('org/a', 'master', 'C', {'c': '1'}, parent=b)  # 2 deps
    other = store.create_change('org/b', 'master', 'O', {'o': '1'})
    d = store.create_change('org/b', 'master', 'D', {'d': '1'},
                            footer=f'Depends-On: {store.change_url(other)}\n'
                                   f'Depends-On: {store.change_url(a)}')  # 2 deps
    last = store.create_change('org/b', 'master', 'E', {'e': '1'})
    got = []
    while not got or got[-1] != last.number:
        got.append(conn.events.get(timeout=30).change_number)
    assert got == [a.number, b.number, other.number, last.number]
    assert c.number not in got and d.number not in got


def test_max_dependencies_zero_and_merged_dependencies(dev_gerrit, make_connection):
    conn = make_connection(max_dependencies='0')
    store = dev_gerrit.store
    store.create_project('org/a')
    a = store.create_change('org/a', 'master', 'A', {'a': '1'})
    b = store.create_change('org/a', 'master', 'B', {'b': '1'}, parent=a)
    sentinel = store.create_change('org/a', 'master', 'S', {'s': '1'})
    got = []
    while not got or got[-1].change_number != sentinel.number:
        got.append(conn.events.get(timeout=30))
    assert [e.change_number for e in got] == [a.number, sentinel.number]  # B: 1 dep
    store.submit(a)  # a merged dependency needs nothing enqueued: not counted
    store.comment(b, 'recheck')
    while not (got[-1].change_number == b.number and got[-1].type == 'comment-added'):
        got.append(conn.events.get(timeout=30))


# -- gitweb_url_template ----------------------------------------------------

def _ref_event(sha):
    return TriggerEvent(type='ref-updated', connection='review', project='org/a',
                        branch='master', ref='refs/heads/master', oldrev='0' * 40,
                        newrev=sha)


def test_gitweb_url_template_builds_ref_urls(dev_gerrit):
    sha = 'a' * 40
    conn = GerritConnection('review', _options(
        dev_gerrit, gitweb_url_template='https://cgit.example.com/{project.name}/commit/'
                                        '?id={sha}&from={baseurl}'))
    ref = conn.get_change_for_event(_ref_event(sha))
    assert ref.url == ('https://cgit.example.com/org/a/commit/?id=' + sha +
                       '&from=' + dev_gerrit.store.canonical_url.rstrip('/'))
    default = GerritConnection('review', _options(dev_gerrit, baseurl='https://r.example'))
    assert default.get_change_for_event(_ref_event(sha)).url == \
        f'https://r.example/gitweb?p=org/a.git;a=commitdiff;h={sha}'


# -- poll_interval and ref_filter --------------------------------------------

def test_polling_finds_refs_moved_without_an_event_and_honours_ref_filter(
        dev_gerrit, make_connection):
    store = dev_gerrit.store
    store.create_project('org/a', branches=('master', 'stable/1'))
    conn = make_connection(start=False, ref_filter='^refs/heads/stable/.*')
    everything = make_connection(start=False)  # default filter: heads and tags
    assert conn.poll_refs() == [] and everything.poll_refs() == []  # baseline
    old = store.branch_head('org/a', 'stable/1')
    store.push_branch('org/a', 'master', {'m': '1'})  # nobody hears the event
    new = store.push_branch('org/a', 'stable/1', {'s': '1'})
    events = conn.poll_refs()
    assert [(e.type, e.project, e.ref, e.branch, e.oldrev, e.newrev) for e in events] == \
        [('ref-updated', 'org/a', 'refs/heads/stable/1', 'stable/1', old, new)]
    assert _drain(conn.events) == events
    assert sorted(e.ref for e in everything.poll_refs()) == \
        ['refs/heads/master', 'refs/heads/stable/1']
    assert conn.poll_refs() == []  # nothing moved since


def test_poll_interval_runs_the_poller(dev_gerrit, make_connection):
    store = dev_gerrit.store
    store.create_project('org/a')
    dev_gerrit.server.accept_streams = False  # the stream never delivers
    conn = GerritConnection('review', _options(dev_gerrit, poll_interval='1'))
    events = queue.Queue()
    conn.start(events.put)
    try:
        wait_for(lambda: conn._ref_heads is not None, what='first poll')
        new = store.push_branch('org/a', 'master', {'m': '1'})
        event = events.get(timeout=30)
        assert (event.type, event.ref, event.newrev) == ('ref-updated', 'refs/heads/master',
                                                         new)
    finally:
        conn.stop()
    idle = GerritConnection('review', _options(dev_gerrit))
    assert idle.poll_interval is None


def test_stream_ref_updated_is_not_repeated_by_the_poller(dev_gerrit, make_connection):
    store = dev_gerrit.store
    store.create_project('org/a')
    conn = make_connection()
    conn.poll_refs()
    store.push_branch('org/a', 'master', {'m': '1'})
    assert conn.events.get(timeout=30).type == 'ref-updated'
    assert conn.poll_refs() == []


# -- reporter notify --------------------------------------------------------

@pytest.mark.parametrize('notify', ['NONE', 'OWNER', 'OWNER_REVIEWERS', 'ALL', None])
def test_reporter_notify_reaches_gerrit(dev_gerrit, make_connection, notify):
    conn = make_connection(start=False)
    store = dev_gerrit.store
    store.create_project('org/a')
    change = store.create_change('org/a', 'master', 'A', {'a': '1'})
    config = {'Verified': 1}
    if notify:
        config['notify'] = notify
    GerritDriver().get_reporter_schema()(config)
    reporter = GerritReporter(conn, config)
    item = types.SimpleNamespace(change=conn.query_change(change.number), event_id='e1')
    reporter.report(item, types.SimpleNamespace(name='check'), 'success', 'Build succeeded.')
    entry = store.review_log[-1]
    assert (entry['change'], entry['labels'], entry['notify']) == \
        (change.number, {'Verified': 1}, notify)


def test_reporter_notify_schema_rejects_unknown_values():
    with pytest.raises(vs.Invalid):
        GerritDriver().get_reporter_schema()({'notify': 'EVERYONE'})
