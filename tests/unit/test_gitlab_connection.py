"""The GitLab connection against the GitLab stand-in (its own process,
REST API v4 and git over HTTP, tests/fakes/gitlab): merge requests as
changes, Depends-On, reporting (notes, approvals, labels, merges with
each merge method), refusals, retries and rate limits, connection
pooling, clones with the documented ``cloneurl`` forms."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from types import SimpleNamespace

import pytest

from tests.fakes.gitlab.process import DEVELOPER, MAINTAINER, GitlabStandIn
from tests.harness.waiting import wait_for
from zuul.driver.gitlab.client import GitlabClient, GitlabError
from zuul.driver.gitlab.connection import GitlabConnection
from zuul.driver.gitlab.model import MergeRequest
from zuul.driver.gitlab.reporter import GitlabReporter
from zuul.merger.repos import RepoUrlResolver, gitlab_remote
from zuul.model.events import TriggerEvent
from zuul.scheduler.connections import ConnectionRegistry

WIDGET = 'acme/widget'
LIB = 'acme/lib'


@pytest.fixture(scope='module')
def gitlab(tmp_path_factory):
    standin = GitlabStandIn(str(tmp_path_factory.mktemp('gitlab')))
    for user in ('dev', 'core', 'zuul', 'outsider'):
        standin.add_user(user)
    members = {'dev': DEVELOPER, 'core': MAINTAINER, 'zuul': MAINTAINER}
    for name in (WIDGET, LIB):
        standin.add_project(name, members=members)
        standin.commit(name, 'main', {'README': f'{name}\n'}, 'Initial')
    yield standin
    standin.stop()


def connect(gitlab, user='zuul', sleeps=None, **options) -> GitlabConnection:
    sleeps = sleeps if sleeps is not None else []
    return GitlabConnection('gitlab', {'server': 'gitlab.example.org', 'baseurl': gitlab.url,
                                       'api_token': gitlab.tokens[user],
                                       'api_token_name': user, 'webhook_token': 'hook',
                                       **options}, sleep=sleeps.append)


def test_a_merge_request_is_a_change(gitlab):
    mr = gitlab.open_mr(WIDGET, 'Add a feature', {'feature.txt': 'x\n', 'README': None},
                        description='Because.\n\nDepends-On: nothing-here')
    conn = connect(gitlab)
    change = conn.lookup_change(WIDGET, str(mr['iid']))
    assert isinstance(change, MergeRequest)
    assert (change.number, change.patchset, change.branch, change.project) == \
        (mr['iid'], mr['sha'], 'main', WIDGET)
    assert change.ref == f'refs/merge-requests/{mr["iid"]}/head'
    assert change.key == f'gitlab/{WIDGET}/{mr["iid"]}' and change.is_open
    assert change.title == 'Add a feature' and 'Depends-On: nothing-here' in change.message
    assert sorted(change.files) == ['README', 'feature.txt']
    assert not change.approved and change.owner['username'] == 'dev'
    assert change.url == f'{gitlab.url}/{WIDGET}/-/merge_requests/{mr["iid"]}'
    gitlab.approve(WIDGET, mr['iid'])
    gitlab.label(WIDGET, mr['iid'], add=['gate'])
    conn.client.calls_by_route.clear()
    again = conn.lookup_change(WIDGET, f'{mr["iid"]},{mr["sha"][:10]}')
    assert again.approved and again.approved_by == ['core'] and again.labels == ['gate']
    assert again.is_current_patchset
    # The head's files are known already: the request and its approvals only.
    assert sorted(conn.client.calls_by_route) == [
        'GET /projects/:id/merge_requests/:iid',
        'GET /projects/:id/merge_requests/:iid/approvals']
    stale = conn.lookup_change(WIDGET, f'{mr["iid"]},{"0" * 12}')
    assert not stale.is_current_patchset
    with pytest.raises(LookupError):
        conn.lookup_change(WIDGET, '999')
    with pytest.raises(LookupError):
        conn.lookup_change(WIDGET, 'x,1')


def test_depends_on_within_gitlab_and_across_connections(gitlab):
    dep = gitlab.open_mr(LIB, 'Lib change', {'lib.txt': '1\n'})
    merged = gitlab.open_mr(LIB, 'Merged already', {'old.txt': '1\n'})
    gitlab.request('PUT', gitlab.mr_path(LIB, merged['iid']) + '/merge', {}, user='zuul')
    elsewhere = SimpleNamespace(name='gerrit', change_for_url=lambda url: SimpleNamespace(
        is_merged=False, url=url) if url.startswith('https://review.example.org/') else None)
    text = (f'Needs things.\n\nDepends-On: {dep["web_url"]}\n'
            f'Depends-On: {gitlab.url}/{LIB}/merge_requests/{merged["iid"]}\n'
            'Depends-On: https://review.example.org/c/org/lib/+/12\n'
            'Depends-On: https://unknown.example.org/x/1\n')
    mr = gitlab.open_mr(WIDGET, 'Needs lib', {'w.txt': '1\n'}, description=text)
    conn = connect(gitlab)
    registry = ConnectionRegistry([conn, elsewhere])
    change = conn.lookup_change(WIDGET, str(mr['iid']))
    needed = conn.get_needed_changes(change, registry)
    assert [getattr(n, 'key', None) or n.url for n in needed] == [
        f'gitlab/{LIB}/{dep["iid"]}', 'https://review.example.org/c/org/lib/+/12']
    assert conn.change_for_url(f'{gitlab.url}/{LIB}/-/merge_requests/{dep["iid"]}/').number \
        == dep['iid']
    assert conn.change_for_url('https://gitlab.com/acme/lib/-/merge_requests/1') is None


def test_reporting_notes_approvals_and_labels(gitlab):
    mr = gitlab.open_mr(WIDGET, 'Report on me', {'r.txt': '1\n'})
    conn = connect(gitlab)
    change = conn.lookup_change(WIDGET, str(mr['iid']))
    item = SimpleNamespace(change=change, event_id='e1')
    GitlabReporter(conn, {'comment': True, 'approval': True, 'label': 'verified',
                          'unlabel': 'gate'}).report(item, None, 'success', 'Build succeeded.')
    # Reported twice (a restart): approving again is not an error.
    GitlabReporter(conn, {'comment': False, 'approval': True}).report(item, None, 'success',
                                                                      'again')
    assert gitlab.notes(WIDGET, mr['iid'], by='zuul') == ['Build succeeded.']
    assert gitlab.approved_by(WIDGET, mr['iid']) == ['zuul']
    assert gitlab.mr(WIDGET, mr['iid'])['labels'] == ['verified']
    for _ in range(2):
        GitlabReporter(conn, {'approval': False, 'comment': False}).report(
            item, None, 'failure', 'Build failed.')
    assert gitlab.approved_by(WIDGET, mr['iid']) == []
    # A push is reported by no GitLab reporter action; another
    # connection's change is not touched.
    GitlabReporter(conn, {}).report(SimpleNamespace(change=SimpleNamespace(
        connection='gitlab', project=WIDGET)), None, 'success', 'ignored')
    approval = GitlabReporter(connect(gitlab, user='outsider'), {'approval': True})
    with pytest.raises(GitlabError) as refused:
        approval.report(item, None, 'success', '')
    assert refused.value.status == 404   # not a member: the project is not there


def test_merging_honours_the_merge_mode_and_gitlabs_refusals(gitlab):
    conn = connect(gitlab)
    first = gitlab.open_mr(WIDGET, 'Merge me', {'m1.txt': '1\n', 'm1b.txt': '2\n'})
    squash = gitlab.open_mr(WIDGET, 'Squash me', {'s1.txt': '1\n'})
    gitlab.commit(WIDGET, squash['source_branch'], {'s2.txt': '2\n'}, 'Second commit',
                  base=f'origin/{squash["source_branch"]}', user='dev')
    stale = conn.lookup_change(WIDGET, str(squash['iid']))
    with pytest.raises(GitlabError) as moved:
        conn.merge(SimpleNamespace(**{**stale.__dict__, 'patchset': squash['sha']}))
    assert moved.value.status == 409
    conn.merge(conn.lookup_change(WIDGET, str(first['iid'])), 'merge-resolve')
    conn.merge(stale, 'squash-merge')
    log = gitlab.branch_log(WIDGET)
    assert log[0].endswith(f"|Merge branch '{squash['source_branch']}' into 'main'")
    squashed = gitlab.branch_log(WIDGET, rev='origin/main^2')
    assert squashed[0].endswith('|Squash me') and len(squashed[0].split('|')[0].split()) == 1
    assert log[1].endswith(f"|Merge branch '{first['source_branch']}' into 'main'")
    assert {'m1.txt', 's1.txt', 's2.txt'} <= set(gitlab.branch_files(WIDGET))
    with pytest.raises(GitlabError) as again:
        conn.merge(stale)
    assert again.value.status == 405         # merged already
    draft = gitlab.open_mr(WIDGET, 'Draft: not yet', {'d.txt': '1\n'})
    with pytest.raises(GitlabError) as drafted:
        conn.merge(conn.lookup_change(WIDGET, str(draft['iid'])))
    assert drafted.value.status == 405
    dev = gitlab.open_mr(WIDGET, 'By a developer', {'dev.txt': '1\n'})
    with pytest.raises(GitlabError) as unauthorized:
        connect(gitlab, user='dev').merge(conn.lookup_change(WIDGET, str(dev['iid'])))
    assert unauthorized.value.status == 401   # main is protected: Maintainers merge


def test_fast_forward_projects_are_rebased_before_merging(gitlab):
    gitlab.add_project('acme/linear', members={'dev': DEVELOPER, 'zuul': MAINTAINER},
                       merge_method='ff')
    gitlab.commit('acme/linear', 'main', {'README': 'linear\n'}, 'Initial')
    conn = connect(gitlab)
    one = gitlab.open_mr('acme/linear', 'One', {'one.txt': '1\n'})
    two = gitlab.open_mr('acme/linear', 'Two', {'two.txt': '2\n'})
    conn.merge(conn.lookup_change('acme/linear', str(one['iid'])), 'merge-resolve')
    # Two is no longer on top of main: GitLab would refuse a fast-forward;
    # the connection has it rebased, then merges.
    conn.merge(conn.lookup_change('acme/linear', str(two['iid'])), 'merge-resolve')
    log = gitlab.branch_log('acme/linear')
    assert [line.split('|')[1] for line in log] == ['Two', 'One', 'Initial']
    assert all(len(line.split('|')[0].split()) <= 1 for line in log)   # no merge commit
    assert gitlab.mr('acme/linear', two['iid'])['state'] == 'merged'


def test_api_errors_and_rate_limits_are_retried_with_back_off(gitlab):
    mr = gitlab.open_mr(WIDGET, 'Flaky API', {'flaky.txt': '1\n'})
    sleeps = []
    conn = connect(gitlab, sleeps=sleeps, retries='3')
    path = rf'^GET /projects/[^/]+/merge_requests/{mr["iid"]}$'
    gitlab.fault(path, status=502, count=2)
    assert conn.lookup_change(WIDGET, str(mr['iid'])).number == mr['iid']
    assert sleeps == [0.5, 1.0] and conn.client.retried == 2
    sleeps.clear()
    gitlab.fault(path, status=429, count=1, retry_after=7)
    conn.lookup_change(WIDGET, str(mr['iid']))
    assert sleeps == [7.0]
    sleeps.clear()
    gitlab.fault(path, status=500, count=4)
    with pytest.raises(GitlabError) as failed:
        conn.lookup_change(WIDGET, str(mr['iid']))
    assert failed.value.status == 500 and sleeps == [0.5, 1.0, 2.0]
    sleeps.clear()
    with pytest.raises(GitlabError) as bad:
        connect(gitlab, sleeps=sleeps, api_token='wrong').lookup_change(WIDGET, '1')
    assert bad.value.status == 401 and sleeps == []   # not retried
    unreachable = GitlabClient('http://127.0.0.1:9', retries=2, sleep=sleeps.append)
    with pytest.raises(GitlabError) as down:
        unreachable.get('/projects/1')
    assert down.value.status == 0 and sleeps == [0.5, 1.0]


def test_a_rate_limited_project_holds_up_only_its_own_lane(gitlab):
    """Events are read ahead and reports sent on per-project lanes: while
    GitLab rate-limits the reads for one project (its back-off held
    here), another project's merge request is read meanwhile and its
    report goes out; events still reach the scheduler in the order they
    came, the later one at once after the held one, with its change
    cached (the scheduler's lookup asks GitLab nothing)."""
    slow = gitlab.open_mr(WIDGET, 'Rate limited', {'rl.txt': '1\n'})
    fast = gitlab.open_mr(LIB, 'Not limited', {'nl.txt': '1\n'})
    backing_off, resume = threading.Event(), threading.Event()

    def sleep(seconds):
        backing_off.set()
        assert resume.wait(60)
    conn = connect(gitlab, event_workers='4')
    conn.client._sleep = sleep
    assert conn.report_key(WIDGET) != conn.report_key(LIB)
    conn.wants_event = lambda event: True
    got = []
    conn.start(got.append)
    try:
        gitlab.fault(rf'^GET /projects/acme%2Fwidget/merge_requests/{slow["iid"]}$',
                     status=429, count=1, retry_after=600)
        gitlab.clear_requests()
        events = [TriggerEvent(type='gl_merge_request', connection='gitlab', project=project,
                               change_number=mr['iid'], action='opened')
                  for project, mr in ((WIDGET, slow), (LIB, fast))]
        for event in events:
            conn.deliver(event)
        assert backing_off.wait(30)
        lib_mr = f'/projects/acme%2Flib/merge_requests/{fast["iid"]}'
        wait_for(lambda: getattr(events[1], 'prepared', False), 30,
                 what="the other project's request read")
        assert any(r['path'] == lib_mr for r in gitlab.api_requests(user='zuul'))
        reported = []
        item = SimpleNamespace(change=conn.lookup_change(LIB, str(fast['iid'])),
                               event_id='e1')
        reporter = GitlabReporter(conn, {'comment': True})
        assert reporter.can_report_off_loop()
        reporter.report_off_loop(item, None, 'success', 'Build succeeded', reported.append)
        wait_for(lambda: reported == [False], 30, what="the other project's report")
        assert gitlab.notes(LIB, fast['iid'], by='zuul') == ['Build succeeded']
        assert got == [] and conn.workers_busy() == 2
        resume.set()
        wait_for(lambda: len(got) == 2, 30, what='both events')
        assert got == events and events[0].prepared and conn.workers_busy() == 0
        gitlab.clear_requests()
        change = conn.get_change_for_event(events[1])
        assert change.title == 'Not limited' and gitlab.api_requests(user='zuul') == []
    finally:
        resume.set()
        conn.stop()


def test_connections_are_pooled_and_kept_alive_as_configured(gitlab):
    for options, expected in (({}, 1), ({'disable_connection_pool': 'true'}, 5)):
        conn = connect(gitlab, **options)
        made = []
        real = conn.client._connect
        conn.client._connect = lambda: made.append(1) or real()
        for _ in range(5):
            conn._project_info.clear()
            conn.project_info(WIDGET)
        assert len(made) == expected, options
        conn.stop()
    for keepalive, probing in (('60', 1), ('0', 0)):
        conn = connect(gitlab, keepalive=keepalive)
        sock = conn.client._connect().sock
        assert bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)) == bool(probing)
        if probing:
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 60
        sock.close()


def test_clones_with_the_token_and_the_merge_request_ref(gitlab, tmp_path):
    mr = gitlab.open_mr(WIDGET, 'Fetch me', {'fetch.txt': '1\n'})
    options = {'baseurl': gitlab.url, 'api_token': gitlab.tokens['zuul'],
               'api_token_name': 'zuul'}
    remote = gitlab_remote(options, WIDGET)
    assert remote.url == f'{gitlab.url}/{WIDGET}.git'
    assert gitlab.tokens['zuul'] not in remote.url
    resolved = RepoUrlResolver({'gitlab': {'driver': 'gitlab', 'options': options}})
    assert resolved.remote('gitlab', WIDGET) == remote
    out = subprocess.run(['git', 'ls-remote', remote.url,
                          f'refs/merge-requests/{mr["iid"]}/head'],
                         env={**os.environ, **remote.env}, capture_output=True, text=True,
                         check=True).stdout
    assert out.split()[0] == mr['sha']
    # Without the token the private project is not served.
    anonymous = subprocess.run(['git', 'ls-remote', remote.url], capture_output=True,
                               env={**os.environ, 'GIT_TERMINAL_PROMPT': '0'})
    assert anonymous.returncode != 0


@pytest.mark.parametrize('options,url,auth', [
    ({'server': 'gitlab.example.org'}, 'https://gitlab.example.org/acme/widget.git', None),
    ({'server': 'gl', 'baseurl': 'https://gl.example.org/gitlab', 'api_token': 'glpat-x',
      'api_token_name': 'zuul'}, 'https://gl.example.org/gitlab/acme/widget.git',
     'zuul:glpat-x'),
    ({'cloneurl': 'https://bot:p%40ss@git.example.org', 'api_token': 'glpat-x',
      'api_token_name': 'zuul'}, 'https://git.example.org/acme/widget.git', 'bot:p@ss'),
    ({'cloneurl': 'ssh://git@gitlab.example.org', 'sshkey': '/k'},
     'ssh://git@gitlab.example.org/acme/widget.git', None),
    ({'cloneurl': 'git@gitlab.example.org:', 'sshkey': '/k'},
     'git@gitlab.example.org:acme/widget.git', None),
])
def test_cloneurl_forms(options, url, auth):
    import base64
    remote = gitlab_remote(options, WIDGET)
    assert remote.url == url
    if auth:
        header = remote.env['GIT_CONFIG_VALUE_0']
        assert base64.b64decode(header.split()[-1]).decode() == auth
        assert auth.split(':')[1] not in remote.url
    if url.startswith(('ssh', 'git@')):
        assert '-i /k' in remote.env['GIT_SSH_COMMAND']
