"""Gerrit's checks plugin: the development Gerrit's endpoints, pending
checks polled into pending-check events, the trigger's ``uuid`` and
``scheme``, and the ``checks-api`` reporter."""

from __future__ import annotations

import logging
import queue
import types

import pytest
import voluptuous as vs

from zuul.devtools.gerrit.checks import checks_for
from zuul.devtools.gerrit.store import ReviewError
from zuul.driver.gerrit import GerritDriver
from zuul.driver.gerrit.filters import GerritEventFilter
from zuul.driver.gerrit.gerrit_connection import GerritConnection
from zuul.driver.gerrit.gerrit_reporter import GerritReporter
from zuul.driver.gerrit.rest import GerritHTTPError
from zuul.model.events import TriggerEvent


def _options(gerrit, **extra):
    return dict({'server': '127.0.0.1', 'port': gerrit.server.port, 'user': 'zuul',
                 'sshkey': gerrit.key_path, 'known_hosts': gerrit.known_hosts,
                 'baseurl': gerrit.http_url, 'password': gerrit.http_password}, **extra)


@pytest.fixture
def setup(dev_gerrit_http):
    """Projects org/a and org/b, checkers zuul-check:a (org/a),
    zuul-check:b (org/b) and other:a (org/a), a connection not started."""
    store = dev_gerrit_http.store
    store.create_project('org/a')
    store.create_project('org/b')
    plugin = checks_for(store)
    for uuid, repo in (('zuul-check:a', 'org/a'), ('zuul-check:b', 'org/b'),
                       ('other:a', 'org/a')):
        plugin.create_checker(uuid, repo)
    conn = GerritConnection('review', _options(dev_gerrit_http))
    conn.events = queue.Queue()
    conn.on_event = conn.events.put
    return types.SimpleNamespace(gerrit=dev_gerrit_http, store=store, plugin=plugin,
                                 conn=conn)


def _pending(conn, query):
    return conn.rest.get('plugins/checks/checks.pending/', {'query': query})


# -- the development Gerrit's checks plugin ------------------------------------

def test_pending_checks_by_checker_scheme_and_state(setup):
    store, conn = setup.store, setup.conn
    a = store.create_change('org/a', 'master', 'A', {'a': '1'})
    b = store.create_change('org/b', 'master', 'B', {'b': '1'})
    assert _pending(conn, 'checker:zuul-check:a') == [{
        'patch_set': {'repository': 'org/a', 'change_number': a.number, 'patch_set_id': 1},
        'pending_checks': {'zuul-check:a': {'state': 'NOT_STARTED'}}}]
    by_scheme = _pending(conn, 'scheme:zuul-check')
    assert [(p['patch_set']['change_number'], sorted(p['pending_checks'])) for p in
            by_scheme] == [(a.number, ['zuul-check:a']), (b.number, ['zuul-check:b'])]
    conn.checks.report(conn.query_change(a.number), 'zuul-check:a', 'SCHEDULED', 'queued')
    assert _pending(conn, 'checker:zuul-check:a') == []
    assert len(_pending(conn, 'checker:zuul-check:a (state:NOT_STARTED OR '
                              'state:SCHEDULED)')) == 1
    store.add_patchset(a, {'a': '2'})  # a new patch set: pending again
    assert [p['patch_set']['patch_set_id'] for p in
            _pending(conn, 'checker:zuul-check:a')] == [2]
    store.abandon(a)
    assert _pending(conn, 'checker:zuul-check:a') == []
    setup.plugin.set_checker_status('zuul-check:b', 'DISABLED')
    assert _pending(conn, 'scheme:zuul-check') == []


def test_check_endpoints_refuse_bad_input(setup):
    store, conn = setup.store, setup.conn
    a = store.create_change('org/a', 'master', 'A', {'a': '1'})
    for query, status in (('status:open', 400), ('checker:nope:x', 404),
                          ('checker:zuul-check:a state:DONE', 400)):
        with pytest.raises(GerritHTTPError) as e:
            _pending(conn, query)
        assert e.value.status == status
    for data, status in (({'state': 'RUNNING'}, 400),
                         ({'checker_uuid': 'zuul-check:a', 'state': 'GREAT'}, 400),
                         ({'checker_uuid': 'nope:x', 'state': 'RUNNING'}, 404)):
        with pytest.raises(GerritHTTPError) as e:
            conn.rest.post(f'changes/{a.number}/revisions/1/checks/', data)
        assert e.value.status == status
    with pytest.raises(GerritHTTPError) as e:
        conn.rest.post(f'changes/{a.number}/revisions/7/checks/',
                       {'checker_uuid': 'zuul-check:a', 'state': 'RUNNING'})
    assert e.value.status == 404
    with pytest.raises(ReviewError, match='expected <scheme>:<id>'):
        setup.plugin.create_checker('no-scheme', 'org/a')


def test_checks_of_a_revision_by_every_change_and_revision_id(setup):
    store, conn = setup.store, setup.conn
    a = store.create_change('org/a', 'master', 'A', {'a': '1'})
    sha = a.current.revision
    for change_id in (a.number, f'org%2Fa~{a.number}', f'org%2Fa~master~{a.change_id}'):
        for rev in ('1', 'current', sha):
            checks = conn.rest.get(f'changes/{change_id}/revisions/{rev}/checks')
            assert sorted(c['checker_uuid'] for c in checks) == ['other:a', 'zuul-check:a']
    one = conn.rest.get(f'changes/{a.number}/revisions/1/checks/zuul-check:a')
    assert (one['state'], one['repository']) == ('NOT_STARTED', 'org/a')


# -- polling: pending-check events -------------------------------------------------

def test_poll_makes_one_event_per_newly_pending_check(setup):
    store, conn = setup.store, setup.conn
    a = store.create_change('org/a', 'master', 'A', {'a': '1'})
    events = conn.poll_checks()
    assert sorted((e.type, e.change_number, e.patchset, e.data['uuid'], e.data['scheme'],
                   e.project, e.branch) for e in events) == [
        ('pending-check', a.number, 1, 'other:a', 'other', 'org/a', 'master'),
        ('pending-check', a.number, 1, 'zuul-check:a', 'zuul-check', 'org/a', 'master')]
    assert all(e.ref == a.current.ref and e.newrev == a.current.revision for e in events)
    delivered = [conn.events.get_nowait() for _ in events]
    assert delivered == events
    assert conn.poll_checks() == []  # still pending, already announced
    change = conn.query_change(a.number)
    conn.checks.report(change, 'zuul-check:a', 'FAILED')
    assert conn.poll_checks() == []
    # Re-run from Gerrit's UI: NOT_STARTED again, a new event.
    conn.rest.post(f'changes/{a.number}/revisions/1/checks/',
                   {'checker_uuid': 'zuul-check:a', 'state': 'NOT_STARTED'})
    assert [e.data['uuid'] for e in conn.poll_checks()] == ['zuul-check:a']


def test_started_connection_polls_checks_every_poll_interval(setup):
    conn = GerritConnection('review', _options(setup.gerrit, poll_interval='1'))
    events = queue.Queue()
    conn.start(events.put)
    try:
        a = setup.store.create_change('org/b', 'master', 'B', {'b': '1'})
        seen = []
        while not any(e.type == 'pending-check' for e in seen):
            seen.append(events.get(timeout=60))
        check = next(e for e in seen if e.type == 'pending-check')
        assert (check.change_number, check.data['uuid']) == (a.number, 'zuul-check:b')
    finally:
        conn.stop()


def test_poll_without_http_password_is_an_error(dev_gerrit_http):
    conn = GerritConnection('review', {'server': '127.0.0.1'})
    with pytest.raises(RuntimeError, match='no HTTP password'):
        conn.poll_checks()


# -- trigger uuid and scheme --------------------------------------------------------

def _check_event(uuid, kind='pending-check'):
    return TriggerEvent(type=kind, connection='review', project='org/a', branch='master',
                        change_number=1, patchset=1,
                        data={'uuid': uuid, 'scheme': uuid.split(':')[0]})


@pytest.mark.parametrize('conf,uuid,matches', [
    ({'uuid': 'zuul-check:a'}, 'zuul-check:a', True),
    ({'uuid': 'zuul-check:a'}, 'zuul-check:b', False),
    ({'scheme': 'zuul-check'}, 'zuul-check:b', True),
    ({'scheme': 'zuul-check'}, 'other:a', False),
    ({'scheme': 'zuul'}, 'zuul-check:a', False),   # the whole scheme, not a prefix
    ({}, 'other:a', True),
])
def test_trigger_uuid_and_scheme_select_the_checker(conf, uuid, matches):
    config = dict(conf, event='pending-check')
    GerritDriver().get_trigger_schema()(config)
    (f,) = GerritDriver().get_trigger('review', config)
    assert f.matches_event(_check_event(uuid)) is matches


def test_trigger_uuid_does_not_match_other_events():
    f = GerritEventFilter({'event': ['patchset-created', 'pending-check'],
                           'scheme': 'zuul-check'}, 'review')
    event = TriggerEvent(type='patchset-created', connection='review', project='org/a',
                         change_number=1, patchset=1)
    assert not f.matches_event(event)
    assert f.matches_event(_check_event('zuul-check:a'))


def test_trigger_debug_is_not_a_gerrit_trigger_key():
    with pytest.raises(vs.Invalid):
        GerritDriver().get_trigger_schema()({'event': 'pending-check', 'debug': True})


# -- reporter checks-api ----------------------------------------------------------

def _item(conn, change, event=None, builds=()):
    build_set = types.SimpleNamespace(builds={b.job.name: b for b in builds})
    return types.SimpleNamespace(change=conn.query_change(change.number), event_id='e1',
                                 event=event, current_build_set=build_set)


def _build(name, result, log_url, voting=True):
    return types.SimpleNamespace(job=types.SimpleNamespace(name=name, voting=voting),
                                 result=result, log_url=log_url)


def _report(conn, config, item, action='success', message='Build succeeded.'):
    GerritDriver().get_reporter_schema()(config)
    GerritReporter(conn, config).report(item, types.SimpleNamespace(name='check'), action,
                                        message)


def test_checks_api_reports_state_message_and_times(setup):
    store, conn, plugin = setup.store, setup.conn, setup.plugin
    a = store.create_change('org/a', 'master', 'A', {'a': '1'})
    item = _item(conn, a)
    _report(conn, {'comment': False, 'checks-api': {
        'uuid': 'zuul-check:a', 'state': 'RUNNING', 'message': 'Jobs have started'}}, item)
    running = plugin.history[-1]
    assert (running['checker_uuid'], running['state'], running['message'],
            running['patch_set_id']) == ('zuul-check:a', 'RUNNING', 'Jobs have started', 1)
    assert running['started'] and 'finished' not in running
    assert store.review_log == []  # only a check state: no empty review
    item = _item(conn, a, builds=[_build('lint', 'SUCCESS', 'http://logs/lint'),
                                  _build('unit', 'FAILURE', 'http://logs/unit')])
    _report(conn, {'Verified': -1, 'checks-api': {
        'uuid': 'zuul-check:a', 'state': 'FAILED', 'message': 'Change failed'}}, item,
        action='failure', message='Build failed.')
    failed = plugin.history[-1]
    assert (failed['state'], failed['url']) == ('FAILED', 'http://logs/unit')
    assert failed['finished'] and failed['started'] == running['started']
    assert [(r['change'], r['labels'], r['message']) for r in store.review_log] == \
        [(a.number, {'Verified': -1}, 'Build failed.')]


def test_checks_api_scheme_reports_to_the_checker_of_the_event_or_repository(setup):
    store, conn, plugin = setup.store, setup.conn, setup.plugin
    a = store.create_change('org/a', 'master', 'A', {'a': '1'})
    b = store.create_change('org/b', 'master', 'B', {'b': '1'})
    plugin.create_checker('zuul-check:a2', 'org/a')
    config = {'comment': False, 'checks-api': {'scheme': 'zuul-check', 'state': 'SCHEDULED'}}
    _report(conn, config, _item(conn, a, _check_event('zuul-check:a2')))
    _report(conn, config, _item(conn, b))   # no event: the scheme's checker on org/b
    assert [(h['change_number'], h['checker_uuid']) for h in plugin.history] == \
        [(a.number, 'zuul-check:a2'), (b.number, 'zuul-check:b')]


def test_checks_api_problems_are_logged_not_raised(setup, caplog):
    store, plugin = setup.store, setup.plugin
    store.create_project('org/c')
    c = store.create_change('org/c', 'master', 'C', {'c': '1'})
    conn = setup.conn
    caplog.set_level(logging.WARNING)
    _report(conn, {'comment': False, 'checks-api': {'scheme': 'zuul-check',
                                                    'state': 'SCHEDULED'}}, _item(conn, c))
    assert 'No ENABLED checker of scheme zuul-check on org/c' in caplog.text
    no_http = GerritConnection('review', dict(_options(setup.gerrit), password=''))
    _report(no_http, {'checks-api': {'uuid': 'zuul-check:a', 'state': 'RUNNING'}},
            _item(conn, c))
    assert 'has no HTTP password' in caplog.text
    assert plugin.history == []
    # A failed REST call (unknown checker) does not stop the review.
    _report(conn, {'Verified': 1, 'checks-api': {'uuid': 'gone:x', 'state': 'SUCCESSFUL'}},
            _item(conn, c))
    assert 'Reporting check gone:x' in caplog.text
    assert store.review_log[-1]['labels'] == {'Verified': 1}


@pytest.mark.parametrize('checks_api', [
    {'state': 'RUNNING'},                                          # no checker
    {'uuid': 'a:b', 'scheme': 'a', 'state': 'RUNNING'},            # both
    {'uuid': 'a:b'},                                               # no state
    {'uuid': 'a:b', 'state': 'DONE'},                              # unknown state
    {'uuid': 'a:b', 'state': 'RUNNING', 'colour': 'green'},        # unknown key
])
def test_checks_api_schema_rejects_bad_config(checks_api):
    with pytest.raises(vs.Invalid):
        GerritDriver().get_reporter_schema()({'checks-api': checks_api})


def test_the_corpus_checks_pipeline_config_validates():
    schema = GerritDriver().get_reporter_schema()
    schema({'comment': False, 'Verified': 1, 'checks-api': {
        'scheme': 'zuul-check', 'state': 'SUCCESSFUL',
        'message': 'Change passed all voting jobs'}})
