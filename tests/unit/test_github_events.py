"""GitHub webhook deliveries -> trigger events, signatures, and the trigger
filters and requirements with released Zuul's keys."""

from __future__ import annotations

import hashlib
import hmac
import json
import time

import pytest

from tests.harness import corpus
from zuul.driver.github import GithubDriver
from zuul.driver.github.events import (
    MalformedEventError,
    parse_webhook,
    sign,
    verify_signature,
)
from zuul.driver.github.filters import GithubEventFilter, GithubRequirement
from zuul.driver.github.model import PullRequest

REPO = {'full_name': 'acme/widget', 'name': 'widget', 'owner': {'login': 'acme'}}
SENDER = {'login': 'alice', 'type': 'User'}


def _pr(number=7, sha='a' * 40, branch='main'):
    return {'number': number, 'state': 'open', 'title': 'Fix', 'body': '',
            'head': {'sha': sha, 'ref': 'fix'}, 'base': {'ref': branch},
            'html_url': f'https://github.com/acme/widget/pull/{number}',
            'updated_at': '2026-11-20T10:00:00Z'}


def _delivery(action, **extra):
    return {'action': action, 'repository': REPO, 'sender': SENDER, **extra}


@pytest.mark.parametrize('action,expected', [
    ('opened', 'opened'), ('synchronize', 'changed'), ('closed', 'closed'),
    ('reopened', 'reopened'), ('edited', 'edited')])
def test_pull_request_actions_get_released_names(action, expected):
    event = parse_webhook('pull_request', _delivery(action, pull_request=_pr()), 'gh')
    assert (event.type, event.action) == ('pull_request', expected)
    assert (event.project, event.change_number, event.branch) == ('acme/widget', 7, 'main')
    assert event.patchset == event.newrev == 'a' * 40
    assert event.ref == 'refs/pull/7/head'
    assert event.account['username'] == 'alice'
    assert event.timestamp == pytest.approx(1795168800.0)  # 2026-11-20T10:00:00Z


def test_ignored_actions_and_kinds_give_nothing():
    assert parse_webhook('pull_request', _delivery('assigned', pull_request=_pr()), 'gh') \
        is None
    assert parse_webhook('ping', {'zen': 'Keep it logically awesome.'}, 'gh') is None
    assert parse_webhook('issue_comment', _delivery(
        'created', issue={'number': 3}, comment={'body': 'recheck'}), 'gh') is None


def test_labels_comments_reviews_status_and_checks():
    labeled = parse_webhook('pull_request', _delivery(
        'unlabeled', pull_request=_pr(), label={'name': 'do not test'}), 'gh')
    assert (labeled.action, labeled.label, labeled.removed) == \
        ('unlabeled', 'do not test', ['do not test'])
    comment = parse_webhook('issue_comment', _delivery(
        'created', issue={'number': 7, 'pull_request': {'url': 'x'}},
        comment={'body': 'recheck please'}), 'gh')
    assert (comment.type, comment.action, comment.comment, comment.change_number) == \
        ('pull_request', 'comment', 'recheck please', 7)
    review = parse_webhook('pull_request_review', _delivery(
        'submitted', pull_request=_pr(), review={'state': 'APPROVED'}), 'gh')
    assert (review.type, review.action, review.review_state) == \
        ('pull_request_review', 'submitted', 'approved')
    status = parse_webhook('status', {'sha': 'b' * 40, 'context': 'ci/check',
                                      'state': 'success', 'repository': REPO,
                                      'sender': {'login': 'bot[bot]'}}, 'gh')
    assert (status.action, status.status, status.newrev, status.change_number) == \
        ('status', 'bot[bot]:ci/check:success', 'b' * 40, None)
    check = parse_webhook('check_run', _delivery('requested', check_run={
        'name': 'tenant/check', 'head_sha': 'c' * 40, 'conclusion': 'failure',
        'app': {'slug': 'zuul'}, 'pull_requests': [{'number': 9, 'base': {'ref': 'dev'}}]}),
        'gh')
    assert (check.type, check.action, check.check, check.change_number, check.branch) == \
        ('check_run', 'rerequested', 'zuul:tenant/check:failure', 9, 'dev')


def test_push_and_branch_deletion():
    push = parse_webhook('push', {'ref': 'refs/heads/main', 'before': '1' * 40,
                                  'after': '2' * 40, 'repository': REPO}, 'gh')
    assert (push.type, push.branch, push.oldrev, push.newrev) == \
        ('push', 'main', '1' * 40, '2' * 40)
    gone = parse_webhook('push', {'ref': 'refs/heads/old', 'before': '1' * 40,
                                  'after': '0' * 40, 'deleted': True, 'repository': REPO},
                         'gh')
    assert gone.newrev == '0' * 40


@pytest.mark.parametrize('kind,payload', [
    ('pull_request', {'action': 'opened', 'repository': REPO}),
    ('pull_request', {'action': 'opened', 'pull_request': _pr()}),
    ('pull_request', {'action': 'opened', 'repository': REPO,
                      'pull_request': {'title': 'no number'}}),
    ('push', {'repository': REPO}),
    ('status', {'repository': REPO, 'state': 'success'}),
])
def test_malformed_payloads_are_refused(kind, payload):
    with pytest.raises(MalformedEventError):
        parse_webhook(kind, payload, 'gh')


def test_signatures():
    # GitHub's documented example ("Validating webhook deliveries"):
    # secret "It's a Secret to Everybody", payload "Hello, World!".
    secret, body = "It's a Secret to Everybody", b'Hello, World!'
    documented = 'sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17'
    assert verify_signature(secret, body, documented)
    assert sign(secret, body) == documented
    assert not verify_signature('other', body, documented)
    assert not verify_signature(secret, body + b' ', documented)
    assert not verify_signature(secret, body, documented[:-1] + '0')
    # X-Hub-Signature: HMAC-SHA1, computed here without the module.
    sha1 = 'sha1=' + hmac.new(secret.encode(), body, hashlib.sha1).hexdigest()
    assert verify_signature(secret, body, sha1)
    assert not verify_signature(secret, body, 'sha1=' + '0' * 40)
    assert not verify_signature(secret, body, 'md5=' + hashlib.md5(body).hexdigest())
    assert not verify_signature(secret, body, None)
    assert not verify_signature(secret, body, 'sha256=')


def test_closed_dismissed_and_abort_actions_trigger():
    closed = parse_webhook('pull_request', _delivery('closed', pull_request=_pr()), 'gh')
    assert _filter(action='closed').matches(closed)
    assert not _filter(action='opened').matches(closed)
    dismissed = parse_webhook('pull_request_review', _delivery(
        'dismissed', pull_request=_pr(), review={'state': 'dismissed'}), 'gh')
    assert _filter(event='pull_request_review', action='dismissed').matches(dismissed)
    assert not _filter(event='pull_request_review', action='submitted').matches(dismissed)
    abort = parse_webhook('check_run', _delivery(
        'requested_action', check_run={'name': 't/check', 'head_sha': 'c' * 40,
                                       'pull_requests': [{'number': 7}]},
        requested_action={'identifier': 'abort'}), 'gh')
    assert (abort.action, abort.comment, abort.abort) == ('requested_action', 'abort',
                                                           't/check')
    other = parse_webhook('check_run', _delivery(
        'requested_action', check_run={'name': 't/check', 'head_sha': 'c' * 40},
        requested_action={'identifier': 'lgtm'}), 'gh')
    assert getattr(other, 'abort', None) is None
    assert _filter(debug=True).debug and not _filter().debug


def _filter(**conf):
    conf.setdefault('event', 'pull_request')
    return GithubEventFilter(conf, 'gh')


def test_trigger_filters():
    comment = parse_webhook('issue_comment', _delivery(
        'created', issue={'number': 7, 'pull_request': {}}, comment={'body': 'recheck'}),
        'gh')
    assert _filter(action='comment', comment=r'(?i)^\s*recheck\s*$').matches(comment)
    assert not _filter(action='comment', comment='^rebuild$').matches(comment)
    assert not _filter(action=['opened', 'changed']).matches(comment)
    labeled = parse_webhook('pull_request', _delivery(
        'labeled', pull_request=_pr(), label={'name': 'review/approved'}), 'gh')
    assert _filter(action='labeled', label=['review/approved']).matches(labeled)
    assert not _filter(action='labeled', label=['gate']).matches(labeled)
    assert not _filter(unlabel=['review/approved']).matches(labeled)
    status = parse_webhook('status', {'sha': 'b' * 40, 'context': 'acme/check',
                                      'state': 'success', 'repository': REPO,
                                      'sender': {'login': 'vexxhost-ci[bot]'}}, 'gh')
    assert _filter(action='status', status=r'vexxhost-ci\[bot\]:.*/check:success') \
        .matches(status)
    assert not _filter(action='status', status=r'.*:failure').matches(status)
    review = parse_webhook('pull_request_review', _delivery(
        'submitted', pull_request=_pr(), review={'state': 'approved'}), 'gh')
    assert _filter(event='pull_request_review', action='submitted',
                   state=['approved']).matches(review)
    assert not _filter(event='pull_request_review', state=['changes_requested']) \
        .matches(review)
    assert not _filter(event='pull_request', branch='^stable/').matches(review)
    check = parse_webhook('check_run', _delivery('rerequested', check_run={
        'name': 'acme/gate', 'head_sha': 'c' * 40, 'app': {'slug': 'zuul'}}), 'gh')
    assert _filter(event='check_run', action='requested', check='.*/gate:.*').matches(check)
    assert not _filter(event='check_run', check='.*/check:.*').matches(check)
    assert not GithubEventFilter({'event': 'pull_request'}, 'other').matches(comment)


def _change(**kw):
    base = dict(connection='gh', project='acme/widget', ref='refs/pull/7/head', number=7,
                patchset='a' * 40, head_sha='a' * 40)
    base.update(kw)
    return PullRequest(**base)


def test_requirements_and_rejections():
    now = time.time()
    approved = _change(labels=['review/approved'],
                       statuses=['vexxhost-ci[bot]:acme/check:success'],
                       reviews=[{'type': 'approved', 'username': 'bob', 'email': '',
                                 'permission': 'write', 'submitted_at': now - 7200}])
    require = GithubRequirement({'open': True, 'current-patchset': True,
                                 'label': ['review/approved'],
                                 'status': r'vexxhost-ci\[bot\]:.*/check:success',
                                 'review': [{'type': 'approved', 'permission': 'write'}]})
    assert require.matches(approved)
    assert not require.matches(_change(labels=['review/approved']))
    assert not GithubRequirement({'review': {'permission': 'admin'}}).matches(approved)
    assert GithubRequirement({'review': {'older-than': '1h'}}).matches(approved)
    assert not GithubRequirement({'review': {'newer-than': '1h'}}).matches(approved)
    assert not GithubRequirement({'merged': True}).matches(approved)
    assert not GithubRequirement({'draft': True}).matches(approved)
    assert GithubRequirement({'draft': True}, reject=True).matches(_change(draft=True))
    assert not GithubRequirement({'label': 'do-not-merge'}, reject=True).matches(approved)
    closed = _change(state='closed')
    assert GithubRequirement({'open': False}, reject=True).matches(closed)
    trigger = _filter(action='labeled', require={'status': '.*:success'},
                      reject={'label': 'do-not-merge'})
    event = parse_webhook('pull_request', _delivery(
        'labeled', pull_request=_pr(), label={'name': 'x'}), 'gh')
    assert trigger.matches(event, approved)
    assert not trigger.matches(event, _change(statuses=['a:b:success'],
                                              labels=['do-not-merge']))
    legacy = _filter(**{'require-status': ['.*:success']})
    assert not legacy.matches(event, _change())


def test_schemas_take_released_keys():
    driver = GithubDriver()
    driver.get_trigger_schema()([
        {'event': 'pull_request', 'action': ['opened', 'changed', 'reopened']},
        {'event': 'pull_request', 'action': 'comment', 'comment': r'(?i)^\s*recheck\s*$'},
        {'event': 'pull_request_review', 'action': 'submitted', 'state': ['approved']},
        {'event': 'check_run', 'action': 'rerequested', 'check': '.*/gate:.*'},
        {'event': 'push', 'ref': '^refs/tags/.*$'}])
    driver.get_reporter_schema()({'status': 'success', 'merge': True, 'comment': False,
                                  'label': ['merged'], 'review': 'approve'})
    driver.get_require_schema()({'status': 'x:y:success', 'open': True,
                                 'current-patchset': True, 'label': ['review/approved'],
                                 'review': [{'type': 'approved', 'permission': 'write'}]})
    with pytest.raises(Exception):
        driver.get_trigger_schema()({'event': 'patchset-created'})
    with pytest.raises(Exception):
        driver.get_reporter_schema()({'status': 'maybe'})


def _webhook_files(root):
    return sorted(p for p in (root / 'github-webhooks').rglob('*.json'))


CORPUS = corpus.path('github-webhooks')


@pytest.mark.corpus
@pytest.mark.parametrize('path', corpus.cases('GitHub webhooks (github-webhooks/**/*.json)',
                                              _webhook_files),
                         ids=lambda p: str(p.relative_to(CORPUS)) if p else 'none')
def test_every_corpus_webhook_parses_or_is_ignored(path):
    payload = json.loads(path.read_text())
    kind = path.parent.name
    event = parse_webhook(kind, payload, 'github')
    acted_on = {('pull_request', a) for a in ('opened', 'synchronize', 'closed', 'reopened',
                                             'labeled', 'unlabeled', 'edited')}
    if event is None:
        assert (kind, payload.get('action')) not in acted_on
        assert kind not in ('push', 'status')
        return
    assert event.project == payload['repository']['full_name']
    if kind in ('pull_request', 'pull_request_review'):
        assert event.change_number == payload['pull_request']['number']
        assert event.newrev == payload['pull_request']['head']['sha']
    if kind == 'push':
        assert event.ref == payload['ref']
