"""GitLab webhook deliveries (sent by the GitLab stand-in, its own
process) through zuul-web's receiver into ZooKeeper and on to the
scheduler's connection (real ZooKeeper): the X-Gitlab-Token check,
malformed deliveries refused or dropped, and the events GitLab could not
deliver while no zuul-web listened made up again from the API."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.fakes.gitlab.process import DEVELOPER, MAINTAINER, GitlabStandIn
from tests.harness.waiting import wait_for
from zuul.driver.gitlab.connection import GitlabConnection
from zuul.web.webhooks import WebhookReceiver

TOKEN = 'hook-secret'
PROJECT = 'acme/widget'


def _connection(url='http://127.0.0.1:9', token='x'):
    return GitlabConnection('gitlab', {'baseurl': url, 'api_token': token,
                                       'webhook_token': TOKEN})


def _hook(action='open', iid=1, token=TOKEN, body=None):
    payload = body if body is not None else json.dumps({
        'object_kind': 'merge_request', 'project': {'path_with_namespace': PROJECT},
        'user': {'username': 'alice'},
        'object_attributes': {'iid': iid, 'action': action, 'target_branch': 'main',
                              'last_commit': {'id': 'a' * 40}}}).encode()
    headers = {'X-Gitlab-Event': 'Merge Request Hook', 'X-Gitlab-Event-UUID': f'u-{iid}',
               'Content-Type': 'application/json'}
    if token is not None:
        headers['X-Gitlab-Token'] = token
    return headers, payload


def test_deliveries_are_checked_stored_and_handed_over(zk_client, caplog):
    web_side = _connection()
    web_side.attach_zookeeper(zk_client)
    web = WebhookReceiver({'gitlab': web_side})
    assert web.receive('gitlab', 'POST', *_hook(token='forged'))[0] == 401
    assert web.receive('gitlab', 'POST', *_hook(token=None))[0] == 401
    assert 'Rejected delivery u-1 for gitlab: X-Gitlab-Token does not match' in caplog.text
    assert web.receive('gitlab', 'POST', *_hook(body=b'{not json'))[0] == 400
    status, answer = web.receive('gitlab', 'POST', *_hook(body=json.dumps(
        {'object_kind': 'merge_request', 'object_attributes': {'iid': 1}}).encode()))
    assert (status, answer['message']) == (400, 'unreadable Merge Request Hook payload: '
                                                'payload has no project')
    assert web.receive('gitlab', 'POST', *_hook(body=b'{"object_kind": "pipeline"}')) == \
        (200, {'stored': False})
    assert web.receive('gitlab', 'GET', *_hook())[0] == 405
    for iid in (1, 2):
        assert web.receive('gitlab', 'POST', *_hook(iid=iid)) == (200, {'stored': True})
    # A delivery stored by another version that this one cannot read:
    # logged and dropped, the ones after it still handed over.
    web_side.deliveries.put({'kind': 'Merge Request Hook', 'delivery': 'old',
                             'payload': {'object_kind': 'merge_request'}})
    web.receive('gitlab', 'POST', *_hook(action='update', iid=3))   # nothing changed
    web.receive('gitlab', 'POST', *_hook(action='merge', iid=4))
    scheduler_side = _connection()
    scheduler_side.attach_zookeeper(zk_client)
    got = []
    scheduler_side.start(got.append)
    try:
        wait_for(lambda: len(got) == 3, 10, what='the stored deliveries')
        assert [(e.action, e.change_number) for e in got] == \
            [('opened', 1), ('opened', 2), ('merged', 4)]
        assert got[0].event_id == 'u1' and got[0].account['username'] == 'alice'
        wait_for(lambda: not scheduler_side.deliveries.queue.pending(), 10,
                 what='acknowledged deliveries')
        assert 'dropping malformed Merge Request Hook delivery old' in caplog.text
    finally:
        scheduler_side.stop()


class _Web:
    """zuul-web's webhook route, as far as GitLab sees it: an HTTP server
    handing each POST to a WebhookReceiver (its own ZooKeeper session, as
    a zuul-web process has)."""

    def __init__(self, zk_chroot, gitlab_url, port=0):
        self.client = zk_chroot.client()
        connection = _connection(gitlab_url)
        connection.attach_zookeeper(self.client)
        connection.register_receiver()
        receiver = WebhookReceiver({'gitlab': connection})

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers['Content-Length']))
                status, answer = receiver.receive('gitlab', 'POST', dict(self.headers), body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(('127.0.0.1', port), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f'http://127.0.0.1:{self.httpd.server_address[1]}/api/connection/gitlab/' \
                   'payload'
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.client.stop()
        self.client.close()


@pytest.fixture
def gitlab(tmp_path):
    standin = GitlabStandIn(str(tmp_path / 'gitlab'))
    for user in ('dev', 'core', 'zuul'):
        standin.add_user(user)
    standin.add_project(PROJECT, members={'dev': DEVELOPER, 'core': MAINTAINER,
                                          'zuul': MAINTAINER})
    yield standin
    standin.stop()


def test_events_missed_while_no_zuul_web_listened_are_made_up_from_the_api(
        zk_chroot, gitlab):
    web = _Web(zk_chroot, gitlab.url)
    gitlab.add_hook(PROJECT, web.url, TOKEN)
    scheduler_zk = zk_chroot.client()
    scheduler_side = _connection(gitlab.url, gitlab.tokens['zuul'])
    scheduler_side.attach_zookeeper(scheduler_zk)
    scheduler_side.watch([PROJECT])
    got = []
    scheduler_side.start(got.append)
    try:
        wait_for(lambda: scheduler_side.catchup.checked_until is not None, 10,
                 what='the watermark set')
        gitlab.commit(PROJECT, 'main', {'README': 'widget\n'}, 'Initial')
        before = gitlab.open_mr(PROJECT, 'Delivered', {'a.txt': '1\n'})
        wait_for(lambda: [e.action for e in got] == [None, None, 'opened'], 20,
                 what='the deliveries (pushes of main and the branch, the request)')
        web.stop()                               # no zuul-web takes deliveries now
        wait_for(lambda: not scheduler_side.receivers.started(), 10, what='no receiver')
        missed = gitlab.open_mr(PROJECT, 'Missed', {'b.txt': '1\n'})
        gitlab.commit(PROJECT, missed['source_branch'], {'b.txt': '2\n'}, 'More',
                      base=f'origin/{missed["source_branch"]}', user='dev')
        gitlab.commit(PROJECT, before['source_branch'], {'a.txt': '2\n'}, 'More',
                      base=f'origin/{before["source_branch"]}', user='dev')
        gitlab.comment(PROJECT, missed['iid'], 'recheck')
        gitlab.approve(PROJECT, missed['iid'])
        gitlab.label(PROJECT, before['iid'], add=['gate'])
        gitlab.request('POST', f'/projects/{PROJECT.replace("/", "%2F")}/repository/tags',
                       {'tag_name': 'v1.0', 'ref': 'main'})
        gitlab.wait_deliveries()
        assert {d["status"] for d in gitlab.deliveries()[3:]} == {None}   # refused
        assert len(got) == 3
        web = _Web(zk_chroot, gitlab.url, web.port)          # zuul-web is back
        wait_for(lambda: scheduler_side.catchup.passes == 1, 30, what='a catch-up pass')
        made_up = sorted(((e.type, e.action, e.change_number or e.ref) for e in got[3:]),
                         key=str)
        iid, old = missed['iid'], before['iid']
        branch = f'refs/heads/{missed["source_branch"]}'
        # Opened during the outage: one "opened" for its current head (no
        # "changed" for the commit pushed after it).
        assert made_up == sorted([
            ('gl_merge_request', 'opened', iid), ('gl_merge_request', 'changed', old),
            ('gl_merge_request', 'comment', iid), ('gl_merge_request', 'approved', iid),
            ('gl_merge_request', 'labeled', old),
            ('gl_push', None, branch), ('gl_push', None, branch),    # created, pushed to
            ('gl_push', None, f'refs/heads/{before["source_branch"]}'),
            ('gl_push', None, 'refs/tags/v1.0')], key=str), made_up
        assert next(e for e in got if e.action == 'opened' and e.change_number == iid
                    ).newrev == gitlab.mr(PROJECT, iid)['sha']
        # In the order they happened.
        assert [e.timestamp for e in got[3:]] == sorted(e.timestamp for e in got[3:])
        comment = next(e for e in got if e.action == 'comment')
        assert comment.comment == 'recheck' and comment.account['username'] == 'dev'
        labeled = next(e for e in got if e.action == 'labeled')
        assert labeled.added == ['gate']
        # The request delivered before the outage (inside the margin) was
        # not made up again.
        assert [e.change_number for e in got if e.action == 'opened'] == \
            [before['iid'], iid]
        assert not [e for e in got if e.type == 'gl_push' and e.ref == 'refs/heads/main'][1:]
        count = len(got)
        # The scheduler goes (its successor knows from ZooKeeper what was
        # handed over), and zuul-web restarts once more with nothing missed:
        # nothing is made up twice.
        scheduler_side.stop()
        scheduler_side = _connection(gitlab.url, gitlab.tokens['zuul'])
        scheduler_side.attach_zookeeper(scheduler_zk)
        scheduler_side.watch([PROJECT])
        scheduler_side.start(got.append)
        web.stop()
        web = _Web(zk_chroot, gitlab.url, web.port)
        wait_for(lambda: scheduler_side.catchup.passes == 1, 30, what='a second pass')
        assert len(got) == count, got[count:]
        # And deliveries flow again.
        gitlab.comment(PROJECT, iid, 'after')
        wait_for(lambda: got[-1].comment == 'after', 20, what='a live delivery')
    finally:
        scheduler_side.stop()
        web.stop()
        scheduler_zk.stop()
        scheduler_zk.close()
