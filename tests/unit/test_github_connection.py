"""The GitHub connection against a fake GitHub speaking the REST API over
real HTTP (tests/fakes/github.py): App tokens, fallback to api_token,
pull requests as changes, ETags, rate limits, webhook checks, reporting."""

from __future__ import annotations

import json
import os
import subprocess
import time
from types import SimpleNamespace

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.fakes.github import FakeGithub
from zuul.driver.github.client import GithubError
from zuul.driver.github.connection import GithubConnection, WebhookRejectedError
from zuul.driver.github.events import sign
from zuul.driver.github.reporter import GithubReporter
from zuul.lib import jwt
from zuul.merger.repos import RepoUrlResolver

SHA = 'a' * 40


@pytest.fixture(scope='module')
def app_key():
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM,
                                serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return private, public


@pytest.fixture
def github(app_key):
    fake = FakeGithub(app_id=4242, app_public_key=app_key[1])
    fake.url = fake.start()
    fake.repo('acme/widget')
    fake.installations['acme/widget'] = 77
    fake.repo('other/lib')        # the app is not installed there
    fake.personal_tokens.add('ghp_personal')
    yield fake
    fake.stop()


@pytest.fixture
def connection(github, app_key, tmp_path):
    key_file = tmp_path / 'app.pem'
    key_file.write_text(app_key[0])
    return GithubConnection('github', {'app_id': '4242', 'app_key': str(key_file),
                                       'api_token': 'ghp_personal', 'api_url': github.url,
                                       'webhook_token': 'hooksecret', 'retries': '1'})


def _arrange_pull(github, number=7, body=''):
    github.open_pull('acme/widget', number, SHA, files=['src/a.py', 'README'], body=body)
    github.repo('acme/widget')['permissions'].update(bob='write', carol='read')
    github.add_review('acme/widget', number, 'bob', 'approved')
    github.add_review('acme/widget', number, 'carol', 'changes_requested')
    github.repo('acme/widget')['statuses'][SHA] = [
        {'state': 'success', 'context': 'acme/check', 'creator': {'login': 'zuul[bot]'}}]


def test_app_installation_tokens_are_minted_reused_and_renewed(connection, github):
    _arrange_pull(github)
    change = connection.lookup_change('acme/widget', '7')
    assert change.number == 7 and change.head_sha == SHA
    minted = [r for r in github.requests if r[1].endswith('/access_tokens')]
    assert len(minted) == 1
    assert all(kind == 'installation' for method, path, kind in github.requests
               if path.startswith('/repos/acme/widget/pulls'))
    connection.lookup_change('acme/widget', '7', refresh=True)
    assert len([r for r in github.requests if r[1].endswith('/access_tokens')]) == 1
    # A token about to expire is replaced before it is used again.
    app = connection.client.app
    token, _ = app._tokens[77]
    app._tokens[77] = (token, time.time() + 60)
    connection.lookup_change('acme/widget', '7', refresh=True)
    assert len([r for r in github.requests if r[1].endswith('/access_tokens')]) == 2


def test_repos_without_the_app_use_the_api_token(connection, github):
    github.open_pull('other/lib', 3, 'b' * 40)
    change = connection.lookup_change('other/lib', '3')
    assert change.project == 'other/lib'
    assert {kind for _, path, kind in github.requests if path.startswith('/repos/other/lib/p')} \
        == {'personal'}


def test_a_pull_request_as_a_change(connection, github):
    _arrange_pull(github, body='Fixes it.\n\nDepends-On: https://github.com/other/lib/pull/3')
    github.repo('acme/widget')['check_runs'][SHA] = [
        {'name': 'lint', 'conclusion': 'success', 'app': {'slug': 'linter'}}]
    change = connection.lookup_change('acme/widget', '7')
    assert change.files == ['src/a.py', 'README']
    assert change.branch == 'main' and change.is_open and not change.is_merged
    assert change.statuses == ['zuul[bot]:acme/check:success', 'linter:lint:success']
    reviews = {r['username']: r for r in change.reviews}
    assert reviews['bob']['type'] == 'approved' and reviews['bob']['permission'] == 'write'
    assert reviews['carol']['type'] == 'changes_requested'
    assert change.key == 'github/acme/widget/7'
    stale = connection.lookup_change('acme/widget', '7,' + 'f' * 40)
    assert not stale.is_current_patchset
    github.open_pull('other/lib', 3, 'b' * 40)
    needed = connection.get_needed_changes(change, SimpleNamespace(all=lambda: [connection]))
    assert [(c.project, c.number) for c in needed] == [('other/lib', 3)]


def test_unchanged_answers_come_back_as_304(connection, github):
    _arrange_pull(github)
    connection.lookup_change('acme/widget', '7')
    before = connection.client.not_modified
    connection.lookup_change('acme/widget', '7', refresh=True)
    assert connection.client.not_modified > before


def test_rate_limit_is_waited_out(connection, github):
    _arrange_pull(github)
    slept = []
    connection.client._sleep = lambda s: (slept.append(s), github.__setattr__(
        'rate_limit', None))
    github.rate_limit = 0
    change = connection.lookup_change('acme/widget', '7')
    assert change.number == 7
    assert slept and 0 < slept[0] <= 4   # until X-RateLimit-Reset, not a blind retry


def test_errors_are_raised_with_status(connection, github):
    with pytest.raises(GithubError) as info:
        connection.lookup_change('acme/widget', '99')
    assert info.value.status == 404
    bad = GithubConnection('gh2', {'api_token': 'nope', 'api_url': github.url})
    with pytest.raises(GithubError) as info:
        bad.lookup_change('other/lib', '1')
    assert info.value.status == 401


def test_webhook_checks(connection):
    body = json.dumps({'action': 'opened', 'repository': {'full_name': 'acme/widget'},
                       'pull_request': {'number': 7, 'head': {'sha': SHA},
                                        'base': {'ref': 'main'}}}).encode()
    headers = {'X-GitHub-Event': 'pull_request', 'X-Hub-Signature-256':
               sign('hooksecret', body), 'X-GitHub-Delivery': 'abc-123'}
    event = connection.check_webhook(headers, body)
    assert (event.type, event.action, event.change_number) == ('pull_request', 'opened', 7)
    with pytest.raises(WebhookRejectedError, match='signature'):
        connection.check_webhook(dict(headers, **{'X-Hub-Signature-256':
                                                  sign('wrong', body)}), body)
    with pytest.raises(WebhookRejectedError, match='X-Hub-Signature'):
        connection.check_webhook({'X-GitHub-Event': 'pull_request'}, body)
    junk = b'{not json'
    with pytest.raises(WebhookRejectedError, match='unreadable'):
        connection.check_webhook(dict(headers, **{'X-Hub-Signature-256':
                                                  sign('hooksecret', junk)}), junk)
    assert connection.check_webhook(
        {'X-GitHub-Event': 'ping', 'X-Hub-Signature-256': sign('hooksecret', b'{}')},
        b'{}') is None


def _item(change, merge_mode=None):
    return SimpleNamespace(change=change, event_id='e1', tenant_name='acme-tenant',
                           merge_mode=merge_mode, current_build_set=SimpleNamespace(builds={
                               'lint': SimpleNamespace(result_data={'zuul': {
                                   'file_comments': {'src/a.py': [
                                       {'line': 3, 'message': 'unused', 'level': 'warning'}]}}})}))


def test_reporter_status_comment_labels_review_check_and_merge(connection, github):
    _arrange_pull(github)
    change = connection.lookup_change('acme/widget', '7')
    pipeline = SimpleNamespace(name='gate')
    connection.web_root = 'https://zuul.example.org/'
    GithubReporter(connection, {'status': 'pending', 'comment': False}).report(
        _item(change), pipeline, 'start', 'Starting gate jobs.')
    repo = github.repo('acme/widget')
    assert repo['statuses'][SHA][0]['context'] == 'acme-tenant/gate'
    page = f'https://zuul.example.org/t/acme-tenant/status/change/7,{SHA}'
    assert repo['statuses'][SHA][0]['target_url'] == page
    assert repo['statuses'][SHA][0]['state'] == 'pending'
    assert 7 not in repo['comments']
    GithubReporter(connection, {'check': 'success', 'label': ['merged'], 'unlabel': 'wip',
                                'review': 'approve'}).report(
        _item(change), pipeline, 'success', 'Build succeeded.')
    assert repo['comments'][7][0]['body'] == 'Build succeeded.'
    assert [x['name'] for x in repo['pulls'][7]['labels']] == ['merged']
    assert repo['reviews'][7][-1]['state'] == 'APPROVED'
    run = repo['check_runs'][SHA][0]
    assert (run['name'], run['conclusion']) == ('acme-tenant/gate', 'success')
    assert run['details_url'] == page
    assert run['output']['annotations'][0]['path'] == 'src/a.py'
    GithubReporter(connection, {'merge': True, 'comment': False}).report(
        _item(change, 'squash-merge'), pipeline, 'success', 'ok')
    assert repo['merges'] == [{'number': 7, 'method': 'squash'}]


def test_jwt_round_trip_and_refusals(app_key):
    token = jwt.encode({'iss': '1', 'exp': time.time() + 60}, app_key[0])
    assert jwt.decode(token, app_key[1])['iss'] == '1'
    with pytest.raises(jwt.TokenError, match='expired'):
        jwt.decode(jwt.encode({'exp': time.time() - 10}, app_key[0]), app_key[1])
    with pytest.raises(jwt.TokenError, match='not accepted'):
        jwt.decode(jwt.encode({'a': 1}, 'secret', 'HS256'), app_key[1])
    shared = jwt.encode({'sub': 'admin'}, 'secret', 'HS256')
    assert jwt.decode(shared, 'secret', algorithms=('HS256',))['sub'] == 'admin'
    with pytest.raises(jwt.TokenError, match='signature'):
        jwt.decode(shared, 'other', algorithms=('HS256',))
    head, claims, sig = token.split('.')
    with pytest.raises(jwt.TokenError):
        jwt.decode(f'{head}.{jwt._b64encode(b"{}")}.{sig}', app_key[1])


def _push_pull_head(github, repo: str, number: int, tmp_path) -> str:
    """A commit on main and one at refs/pull/<n>/head, as GitHub keeps them."""
    bare = github.bare_repo(repo)
    work = tmp_path / 'work'
    run = lambda *a: subprocess.run(a, cwd=work, check=True, capture_output=True,  # noqa: E731
                                    text=True).stdout.strip()
    work.mkdir()
    run('git', 'init', '-q', '-b', 'main')
    run('git', '-c', 'user.name=a', '-c', 'user.email=a@b', 'commit', '-q',
        '--allow-empty', '-m', 'base')
    run('git', 'push', '-q', bare, 'main')
    run('git', '-c', 'user.name=a', '-c', 'user.email=a@b', 'commit', '-q',
        '--allow-empty', '-m', 'the change')
    sha = run('git', 'rev-parse', 'HEAD')
    run('git', 'push', '-q', bare, f'HEAD:refs/pull/{number}/head')
    return sha


def test_mergers_clone_with_the_installation_token(github, app_key, tmp_path):
    github.repo('acme/widget')['private'] = True
    sha = _push_pull_head(github, 'acme/widget', 7, tmp_path)
    key_file = tmp_path / 'app.pem'
    key_file.write_text(app_key[0])
    options = {'app_id': '4242', 'app_key': str(key_file), 'api_url': github.url,
               'git_host': github.url, 'server': 'github.example.com'}
    resolver = RepoUrlResolver({'github': {'driver': 'github', 'options': options}})
    remote = resolver.remote('github', 'acme/widget')
    assert remote.url == f'{github.url}/acme/widget.git'
    refs = subprocess.run(['git', 'ls-remote', remote.url], env={**os.environ, **remote.env},
                          capture_output=True, text=True, check=True).stdout
    assert f'{sha}\trefs/pull/7/head' in refs
    assert ('GIT', '/acme/widget.git/info/refs', 'token') in github.requests
    # Without credentials a private repository is refused.
    anonymous = RepoUrlResolver({'github': {'driver': 'github', 'options': {
        'git_host': github.url}}}).remote('github', 'acme/widget')
    denied = subprocess.run(['git', 'ls-remote', anonymous.url], capture_output=True,
                            text=True, env={**os.environ, 'GIT_TERMINAL_PROMPT': '0'})
    assert denied.returncode != 0


def test_a_status_event_finds_its_pull_request_by_head(connection, github):
    from zuul.driver.github.events import parse_webhook
    _arrange_pull(github)
    event = parse_webhook('status', {'sha': SHA, 'context': 'ci/x', 'state': 'success',
                                     'repository': {'full_name': 'acme/widget'},
                                     'sender': {'login': 'ci[bot]'}}, 'github')
    change = connection.get_change_for_event(event)
    assert (change.number, event.change_number) == (7, 7)
    orphan = parse_webhook('status', {'sha': 'e' * 40, 'context': 'ci/x',
                                      'state': 'success',
                                      'repository': {'full_name': 'acme/widget'}}, 'github')
    assert connection.get_change_for_event(orphan) is None
    push = parse_webhook('push', {'ref': 'refs/heads/main', 'before': '1' * 40,
                                  'after': '2' * 40,
                                  'repository': {'full_name': 'acme/widget'}}, 'github')
    ref = connection.get_change_for_event(push)
    assert (ref.ref, ref.newrev, ref.branch) == ('refs/heads/main', '2' * 40, 'main')


def test_the_merge_method_follows_the_projects_merge_mode(connection, github):
    _arrange_pull(github)
    change = connection.lookup_change('acme/widget', '7')
    connection.merge_mode_for = lambda item: 'rebase'
    item = SimpleNamespace(change=change, event_id='e', tenant_name='t',
                           current_build_set=SimpleNamespace(builds={}))
    GithubReporter(connection, {'merge': True, 'comment': False}).report(
        item, SimpleNamespace(name='gate'), 'success', 'ok')
    assert github.repo('acme/widget')['merges'] == [{'number': 7, 'method': 'rebase'}]
