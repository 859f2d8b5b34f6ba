"""Webhook deliveries through zuul-web's receiver into ZooKeeper and on to
the scheduler's connection (real ZooKeeper): stored before the answer,
taken in order, none lost while no scheduler listens, bad ones refused."""

from __future__ import annotations

import json
import threading

from tests.harness.waiting import wait_for
from zuul.driver.github.connection import GithubConnection
from zuul.driver.github.events import sign
from zuul.web.webhooks import WebhookReceiver

SECRET = 'hooksecret'


def _connection(zk_client):
    conn = GithubConnection('github', {'webhook_token': SECRET, 'api_token': 'x',
                                       'api_url': 'http://127.0.0.1:9', 'retries': '0'})
    conn.attach_zookeeper(zk_client)
    return conn


def _delivery(number, action='opened', secret=SECRET, kind='pull_request'):
    body = json.dumps({'action': action, 'repository': {'full_name': 'acme/widget'},
                       'sender': {'login': 'alice'},
                       'pull_request': {'number': number, 'head': {'sha': 'a' * 40},
                                        'base': {'ref': 'main'}}}).encode()
    return {'X-GitHub-Event': kind, 'X-GitHub-Delivery': f'd-{number}-{action}',
            'X-Hub-Signature-256': sign(secret, body)}, body


def test_deliveries_wait_in_zookeeper_until_a_scheduler_takes_them(zk_client):
    web = WebhookReceiver({'github': _connection(zk_client), 'gerrit': object()})
    for number in (1, 2, 3):
        assert web.receive('github', 'POST', *_delivery(number)) == (200, {'stored': True})
    # Nothing listens yet; a ping and an ignored action are not stored.
    ping_body = b'{"zen": "hi"}'
    assert web.receive('github', 'POST', {'X-GitHub-Event': 'ping', 'X-Hub-Signature-256':
                                          sign(SECRET, ping_body)}, ping_body) == \
        (200, {'stored': False})
    assert web.receive('github', 'POST', *_delivery(9, action='assigned')) == \
        (200, {'stored': False})
    scheduler_side = _connection(zk_client)
    got = []
    scheduler_side.start(got.append)
    try:
        wait_for(lambda: len(got) == 3, 10, what='the stored deliveries')
        assert [e.change_number for e in got] == [1, 2, 3]
        wait_for(lambda: not scheduler_side.queue.pending(), 10, what='acknowledged deliveries')
        # A delivery arriving while it runs comes through at once.
        web.receive('github', 'POST', *_delivery(4, action='synchronize'))
        wait_for(lambda: len(got) == 4, 10, what='the live delivery')
        assert (got[-1].action, got[-1].change_number) == ('changed', 4)
    finally:
        scheduler_side.stop()


def test_bad_deliveries_are_refused_and_not_stored(zk_client):
    conn = _connection(zk_client)
    web = WebhookReceiver({'github': conn})
    headers, body = _delivery(5, secret='not-the-secret')
    status, answer = web.receive('github', 'POST', headers, body)
    assert status == 401 and 'signature' in answer['message']
    headers, body = _delivery(5)
    del headers['X-Hub-Signature-256']
    assert web.receive('github', 'POST', headers, body)[0] == 401
    assert web.receive('github', 'GET', *_delivery(5))[0] == 405
    assert web.receive('nope', 'POST', *_delivery(5))[0] == 404
    assert conn.queue.pending() == []


def test_a_stored_delivery_that_cannot_be_read_is_dropped(zk_client):
    conn = _connection(zk_client)
    conn.queue.put({'kind': 'pull_request', 'delivery': 'x',
                    'payload': {'action': 'opened', 'repository': {'full_name': 'a/b'}}})
    WebhookReceiver({'github': conn}).receive('github', 'POST', *_delivery(6))
    got = []
    conn._on_event = got.append
    conn._stopped = threading.Event()
    assert conn.process_deliveries() == 1
    assert [e.change_number for e in got] == [6]
    assert conn.queue.pending() == []


def test_zuul_web_takes_deliveries_for_the_github_connections_of_zuul_conf(zk_chroot,
                                                                            tmp_path):
    from zuul.cmd.web import webhook_receiver
    conf = tmp_path / 'zuul.conf'
    conf.write_text(f'[zookeeper]\nhosts = {zk_chroot.hosts}\n\n'
                    '[connection review]\ndriver = gerrit\nserver = review.example.org\n\n'
                    f'[connection gh]\ndriver = github\nwebhook_token = {SECRET}\n'
                    'api_token = x\n')
    receiver, zk = webhook_receiver(str(conf))
    try:
        assert sorted(receiver.connections) == ['gh']
        headers, body = _delivery(8)
        assert receiver.receive('gh', 'POST', headers, body) == (200, {'stored': True})
        assert receiver.receive('review', 'POST', headers, body)[0] == 404
        stored = zk_chroot.client().get_children('/zuul/events/connection/gh')
        assert len(stored) == 1
    finally:
        zk.close()
    plain = tmp_path / 'plain.conf'
    plain.write_text('[connection review]\ndriver = gerrit\nserver = review.example.org\n')
    assert webhook_receiver(str(plain)) == (None, None)
