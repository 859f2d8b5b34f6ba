"""What GitHub gating relies on, against the fake GitHub over real HTTP and
real git: merges as GitHub performs them (and the driver's message,
method and retries), GitHub's refusals and the driver's answer to them,
can-merge before the gate, rate limits, installations that change, and
the ordered per-installation workers."""

from __future__ import annotations

import subprocess
import threading
import time
from types import SimpleNamespace

import pytest

from tests.fakes.github import FakeGithub
from zuul.driver.github import merges
from zuul.driver.github.connection import GithubConnection
from zuul.driver.github.reporter import GithubReporter
from zuul.lib.keyed_workers import KeyedWorkers

REPO = 'acme/widget'


@pytest.fixture
def github():
    fake = FakeGithub()
    fake.url = fake.start()
    fake.repo(REPO)['permissions'].update(core='write', other='write', guest='read')
    fake.personal_tokens.add('tok')
    yield fake
    fake.stop()


@pytest.fixture
def connection(github):
    conn = GithubConnection('github', {'api_token': 'tok', 'api_url': github.url,
                                       'retries': '0'})
    yield conn
    conn.stop()


def _git(cwd, *args) -> str:
    return subprocess.run(['git', '-c', 'user.name=Alice', '-c', 'user.email=alice@example.org',
                           *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def work(github, tmp_path):
    """A clone with main pushed to the fake's bare repository."""
    bare = github.bare_repo(REPO)
    path = tmp_path / 'work'
    path.mkdir()
    _git(path, 'init', '-q', '-b', 'main')
    (path / 'README').write_text('widget\n')
    _git(path, 'add', '-A')
    _git(path, 'commit', '-q', '-m', 'Initial')
    _git(path, 'push', '-q', bare, 'main')
    return SimpleNamespace(path=path, bare=bare)


def _pull(github, work, number, commits, title='Add things', body='Why.', base='main',
          **kw) -> dict:
    """A pull request of ``commits`` ([(file, text, message)]) off ``base``."""
    _git(work.path, 'checkout', '-q', '-B', f'pr{number}', base)
    for name, text, message in commits:
        (work.path / name).write_text(text)
        _git(work.path, 'add', '-A')
        _git(work.path, 'commit', '-q', '-m', message)
    sha = _git(work.path, 'rev-parse', 'HEAD')
    _git(work.path, 'push', '-q', work.bare, f'HEAD:refs/pull/{number}/head')
    _git(work.path, 'checkout', '-q', base)
    return github.open_pull(REPO, number, sha, title=title, body=body,
                            files=[c[0] for c in commits], **kw)


def _log(work, fmt='%s', *rev) -> list[str]:
    return subprocess.run(['git', '-C', work.bare, 'log', f'--format={fmt}', *(rev or ['main'])],
                          capture_output=True, text=True, check=True).stdout.split('\n')


def _change(connection, number):
    return connection.lookup_change(REPO, str(number), refresh=True)


# -- merges as GitHub performs them -----------------------------------------

def test_merge_squash_and_rebase_as_github_does_them(github, connection, work):
    _pull(github, work, 1, [('a.txt', '1\n', 'First a'), ('b.txt', '1\n', 'Then b')],
          title='Merge me', body='The body.')
    github.add_review(REPO, 1, 'core', 'approved')
    connection.merge(_change(connection, 1), 'merge-resolve')
    parents = _log(work, '%P')[0].split()
    assert len(parents) == 2                          # a merge commit
    message = '\n'.join(_log(work, '%B', '-1', 'main'))
    assert message.startswith('Merge me\n\nThe body.')
    assert 'Reviewed-by: core' in message

    _pull(github, work, 2, [('c.txt', '1\n', 'One'), ('d.txt', '1\n', 'Two')],
          title='Squash me', body='Squashed body.')
    connection.merge(_change(connection, 2), 'squash-merge')
    assert len(_log(work, '%P')[0].split()) == 1      # one commit, one parent
    assert _log(work)[0] == 'Squash me'
    assert _log(work, '%an')[0] == 'Alice'            # the PR's author
    assert {'c.txt', 'd.txt'} <= set(_log(work, '', '--name-only', '-1', 'main'))

    _pull(github, work, 3, [('e.txt', '1\n', 'Rebased one'), ('f.txt', '1\n', 'Rebased two')],
          title='Rebase me')
    head = github.repo(REPO)['pulls'][3]['head']['sha']
    connection.merge(_change(connection, 3), 'rebase')
    subjects = _log(work)[:2]
    assert subjects == ['Rebased two', 'Rebased one']  # replayed, messages kept
    assert _log(work, '%H')[0] != head                # new commits on the branch
    assert _log(work, '%cn')[0] == 'GitHub' and _log(work, '%an')[0] == 'Alice'
    assert [m['method'] for m in github.repo(REPO)['merges']] == ['merge', 'squash', 'rebase']


def test_cherry_pick_and_disallowed_methods_are_refused(github, connection, work):
    _pull(github, work, 1, [('a.txt', '1\n', 'A')])
    change = _change(connection, 1)
    with pytest.raises(merges.MergeRefusedError, match='cherry-pick is not supported'):
        connection.merge(change, 'cherry-pick')
    github.repo(REPO)['settings']['allow_squash_merge'] = False
    with pytest.raises(merges.MergeRefusedError,
                       match='Squash merges are not allowed on this repository'):
        connection.merge(change, 'squash-merge')
    assert connection.allowed_merge_modes(REPO) == {
        'merge', 'merge-resolve', 'merge-recursive', 'merge-ort', 'rebase'}
    assert github.repo(REPO)['merges'] == []


def test_a_merge_refused_because_the_base_moved_is_tried_again(github, connection, work,
                                                               monkeypatch):
    monkeypatch.setattr(merges, 'RETRY_DELAY', 0.01)
    _pull(github, work, 1, [('a.txt', '1\n', 'A')])
    github.repo(REPO)['fail_merges'] = [
        (405, 'Base branch was modified. Review and try the merge again.')]
    connection.merge(_change(connection, 1))
    assert github.repo(REPO)['pulls'][1]['merged']
    # Any other refusal is final.
    _pull(github, work, 2, [('b.txt', '1\n', 'B')])
    github.repo(REPO)['fail_merges'] = [(405, 'Something else'), (405, 'Again')]
    with pytest.raises(merges.MergeRefusedError, match='Something else'):
        connection.merge(_change(connection, 2))
    assert github.repo(REPO)['fail_merges'] == [(405, 'Again')]


def test_the_fake_refuses_drafts_conflicts_and_unmet_protection(github, connection, work):
    _pull(github, work, 1, [('README', 'theirs\n', 'Edit README')])
    _pull(github, work, 2, [('README', 'ours\n', 'Also edit README')])
    _pull(github, work, 3, [('x.txt', '1\n', 'X')], draft=True)
    connection.merge(_change(connection, 1))
    with pytest.raises(merges.MergeRefusedError, match='Pull Request is not mergeable'):
        connection.merge(_change(connection, 2))
    with pytest.raises(merges.MergeRefusedError, match='Pull Request is still a draft'):
        connection.merge(_change(connection, 3))
    _pull(github, work, 4, [('y.txt', '1\n', 'Y')])
    github.repo(REPO)['protected']['main'] = {'contexts': ['ci'], 'reviews': 1}
    with pytest.raises(merges.MergeRefusedError,
                       match='Required status check "ci" is expected'):
        connection.merge(_change(connection, 4))
    sha = github.repo(REPO)['pulls'][4]['head']['sha']
    github.repo(REPO)['statuses'][sha] = [{'state': 'success', 'context': 'ci'}]
    with pytest.raises(merges.MergeRefusedError, match='At least 1 approving review'):
        connection.merge(_change(connection, 4))
    github.add_review(REPO, 4, 'guest', 'approved')      # no write access
    with pytest.raises(merges.MergeRefusedError, match='approving review'):
        connection.merge(_change(connection, 4))
    github.add_review(REPO, 4, 'core', 'approved')
    connection.merge(_change(connection, 4))
    assert [m['number'] for m in github.repo(REPO)['merges']] == [1, 4]


def test_a_refused_merge_is_reported_with_githubs_reason(github, connection, work):
    """The driver's response to a refusal, not the fake's: the reporter
    keeps GitHub's message for the merge-failure report, and the change
    is not taken for merged."""
    _pull(github, work, 7, [('a.txt', '1\n', 'A')])
    github.repo(REPO)['protected']['main'] = ['acme-tenant/check']
    change = _change(connection, 7)
    item = SimpleNamespace(change=change, event_id='e', tenant_name='acme-tenant',
                           merge_mode=None,
                           current_build_set=SimpleNamespace(builds={}, merge_error=None))
    GithubReporter(connection, {'merge': True, 'comment': False}).report(
        item, SimpleNamespace(name='gate'), 'success', 'Build succeeded.')
    assert item.current_build_set.merge_error == \
        'GitHub refused the merge: Required status check "acme-tenant/check" is expected.'
    assert not connection.is_merged(change)


# -- can merge, before the gate ----------------------------------------------

def test_can_merge_names_githubs_reason(github, connection, work):
    _pull(github, work, 1, [('README', 'a\n', 'A')])
    _pull(github, work, 2, [('README', 'b\n', 'B')])
    connection.merge(_change(connection, 1))
    _change(connection, 2)
    assert connection.can_merge(_change(connection, 2)) == \
        'the pull request has merge conflicts with its branch'
    _pull(github, work, 3, [('d.txt', '1\n', 'D')], draft=True)
    assert connection.can_merge(_change(connection, 3)) == 'the pull request is a draft'
    _pull(github, work, 4, [('e.txt', '1\n', 'E')])
    github.repo(REPO)['protected']['main'] = {'contexts': ['ci', 't/gate'], 'reviews': 2}
    connection._forget_protection(REPO, 'main')
    change = _change(connection, 4)
    assert connection.can_merge(change, {'t/gate'}) == 'required status check "ci" is expected'
    sha = change.head_sha
    github.repo(REPO)['statuses'][sha] = [{'state': 'failure', 'context': 'ci',
                                           'creator': {'login': 'ci'}}]
    assert connection.can_merge(_change(connection, 4), {'t/gate'}) == \
        'required status check "ci" is failure'
    github.repo(REPO)['statuses'][sha] = [{'state': 'success', 'context': 'ci',
                                           'creator': {'login': 'ci'}}]
    github.add_review(REPO, 4, 'core', 'approved')
    assert 'approving review' in connection.can_merge(_change(connection, 4), {'t/gate'})
    github.add_review(REPO, 4, 'other', 'approved')
    assert connection.can_merge(_change(connection, 4), {'t/gate'}) is None
    # The gate's own context is required too: without allowing it, no.
    assert connection.can_merge(_change(connection, 4)) == \
        'required status check "t/gate" is expected'
    github.repo(REPO)['protected']['main'] = {'contexts': [], 'lock': True}
    connection._forget_protection(REPO, 'main')
    assert connection.can_merge(_change(connection, 4)) == 'branch main is locked'
    assert connection.locked_branches(REPO) == ['main']


def test_mergeable_unknown_while_github_computes_it_is_not_a_refusal(github, connection,
                                                                    work):
    _pull(github, work, 1, [('README', 'a\n', 'A')])
    _pull(github, work, 2, [('README', 'b\n', 'B')])
    connection.merge(_change(connection, 1))
    first = _change(connection, 2)          # GitHub starts computing
    assert first.mergeable is None and connection.can_merge(first) is None
    later = _change(connection, 2)          # the next event's read has it
    assert later.mergeable is False
    assert 'merge conflicts' in connection.can_merge(later)


# -- rate limits, installations, workers ------------------------------------

def test_the_primary_rate_limit_answer_is_githubs(github, connection):
    github.rate_limit = 0
    github.rate_reset_after = 3600
    connection.client.max_rate_wait = 0.05
    calls = []
    connection.client._sleep = calls.append
    threading.Timer(0.2, lambda: setattr(github, 'rate_limit', None)).start()
    from zuul.driver.github.client import GithubError
    try:
        connection.client.get(f'/repos/{REPO}')
    except GithubError:
        pass
    assert calls and calls[0] <= 0.05      # waited as told (capped), not at once


def test_a_secondary_rate_limit_is_waited_out_with_retry_after(github, connection):
    github.open_pull(REPO, 5, 'a' * 40)
    waits = []
    connection.client._sleep = lambda s: (waits.append(s),
                                          setattr(github, 'secondary_concurrency', None))
    github.secondary_concurrency = 0
    github.secondary_retry_after = 7
    assert connection.client.get(f'/repos/{REPO}/pulls/5')['number'] == 5
    assert waits == [7.0]
    # Without Retry-After GitHub asks for at least a minute.
    github.secondary_concurrency = 0
    github.secondary_retry_after = None
    assert connection.client.get(f'/repos/{REPO}/pulls/5', params={'x': 1})['number'] == 5
    assert waits == [7.0, 60.0]


def test_an_app_installed_after_start_is_used_at_once(tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    (tmp_path / 'app.pem').write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    fake = FakeGithub(app_id=9, app_public_key=public)
    url = fake.start()
    try:
        fake.repo(REPO)
        fake.open_pull(REPO, 1, 'a' * 40)
        conn = GithubConnection('github', {'app_id': '9', 'app_key': str(tmp_path / 'app.pem'),
                                           'api_url': url, 'retries': '0'})
        assert conn.client.auth_for(REPO) is None              # not installed yet
        fake.installations[REPO] = 44
        assert conn.client.auth_for(REPO) is None              # cached answer
        from tests.fakes.github_payloads import installation_event
        conn.installation_changed(installation_event('added', 44, [REPO]))
        assert conn.client.auth_for(REPO).startswith('token ghs_')
        assert conn.lookup_change(REPO, '1').number == 1
        # Uninstalled: its token is dropped and the API token (none) used.
        del fake.installations[REPO]
        conn.installation_changed(installation_event('removed', 44, [REPO]))
        assert 44 not in conn.client.app._tokens
        assert conn.client.auth_for(REPO) is None
    finally:
        fake.stop()


def test_keyed_workers_deliver_in_order_and_keep_keys_apart():
    got = []
    release = threading.Event()
    workers = KeyedWorkers(lambda result, tag: got.append((tag, result)), threads=3,
                           name='t')

    def work(n, delay):
        time.sleep(delay)
        return n

    def blocked():
        release.wait(10)
        return 'late'
    try:
        workers.submit('a', work, 1, 0.2, tag='a1')
        workers.submit('a', work, 2, 0.0, tag='a2')
        workers.submit('b', blocked, tag='b1')
        workers.submit('c', work, 3, 0.0, tag='c1')
        deadline = time.time() + 10
        while len(got) < 3 and time.time() < deadline:
            time.sleep(0.01)
        # a's results in submission order; b waiting holds up only b.
        assert [t for t, _ in got] in (['c1', 'a1', 'a2'], ['a1', 'c1', 'a2'],
                                       ['a1', 'a2', 'c1'])
        assert [t for t, _ in got if t.startswith('a')] == ['a1', 'a2']
        assert workers.busy() == 1
        release.set()
        while len(got) < 4 and time.time() < deadline:
            time.sleep(0.01)
        assert got[-1] == ('b1', 'late')
    finally:
        release.set()
        workers.stop()


def test_repo_cache_is_fetched_from_and_retried_until_it_has_the_commit(tmp_path):
    """``repo_cache``: a mirror that lags GitHub; a commit it does not
    have yet is fetched again until ``repo_retry_timeout``."""
    from zuul.merger.repos import Repo, RepoUrlResolver
    origin = tmp_path / 'origin'
    origin.mkdir()
    _git(origin, 'init', '-q', '-b', 'main')
    _git(origin, 'commit', '-q', '--allow-empty', '-m', 'one')
    mirror = tmp_path / 'mirror' / 'acme' / 'widget.git'
    subprocess.run(['git', 'clone', '-q', '--bare', str(origin), str(mirror)], check=True)
    _git(origin, 'commit', '-q', '--allow-empty', '-m', 'two')
    new = _git(origin, 'rev-parse', 'HEAD')
    options = {'server': 'github.example.com', 'repo_cache': f'file://{tmp_path}/mirror',
               'repo_retry_timeout': '20'}
    remote = RepoUrlResolver({'github': {'driver': 'github', 'options': options}}).remote(
        'github', REPO)
    assert remote.url == f'file://{tmp_path}/mirror/{REPO}.git'
    assert remote.retry_timeout == 20
    default = RepoUrlResolver({'github': {'driver': 'github', 'options': {
        'repo_cache': 'mirror.example.com'}}}).remote('github', REPO)
    assert (default.url, default.retry_timeout) == (f'https://mirror.example.com/{REPO}.git',
                                                   600)
    # The mirror catches up a moment later.
    threading.Timer(1.5, lambda: subprocess.run(
        ['git', '-C', str(mirror), 'fetch', '-q', str(origin), 'main:main'],
        check=True)).start()
    repo = Repo(str(tmp_path / 'cache'), remote, REPO)
    repo.ensure_commits([new])
    assert repo.has_commit(new)


def test_depends_on_both_ways_and_reverse_dependencies(github, connection, work):
    url = 'https://github.com/acme/widget/pull/{}'
    _pull(github, work, 1, [('a.txt', '1\n', 'A')], body=f'Depends-On: {url.format(2)}')
    _pull(github, work, 2, [('b.txt', '1\n', 'B')], body=f'Depends-On: {url.format(1)}')
    _pull(github, work, 3, [('c.txt', '1\n', 'C')], body=f'Needs it.\nDepends-On: {url.format(1)}')
    connections = SimpleNamespace(all=lambda: [connection])
    one, two = _change(connection, 1), _change(connection, 2)
    assert [c.number for c in connection.get_needed_changes(one, connections)] == [2]
    assert [c.number for c in connection.get_needed_changes(two, connections)] == [1]
    # A cycle: each needs the other (the scheduler groups them into one).
    from zuul.manager.cycles import dependency_groups
    groups = dependency_groups(one, lambda c: connection.get_needed_changes(c, connections))
    assert sorted(c.number for c in groups[-1]) == [1, 2]
    # Reverse: who depends on #1 (GitHub's search of open pull requests).
    assert sorted(connection.changes_depending_on(one)) == ['github/acme/widget/2',
                                                           'github/acme/widget/3']
    github.touch(REPO, 3, state='closed')
    assert connection.changes_depending_on(one) == ['github/acme/widget/2']


def test_a_merge_mode_github_cannot_do_is_a_config_error(github, connection):
    from zuul.model.layout import Layout
    from zuul.model.project import ProjectConfig
    from zuul.model.tenant import Tenant, TenantProject
    from zuul.scheduler.merge_modes import merge_mode_errors
    github.repo(REPO)['settings']['allow_rebase_merge'] = False
    tenant = Tenant(name='t', projects=[TenantProject('github', REPO, trusted=False)])
    for mode, allowed in (('cherry-pick', False), ('rebase', False), ('squash-merge', True),
                          (None, True)):
        layout = Layout()
        layout.project_configs[REPO] = [ProjectConfig(name=REPO, merge_mode=mode)]
        errors = merge_mode_errors(layout, tenant, {'github': connection})
        assert (not errors) == allowed, mode
        if errors:
            assert f'merge-mode {mode} is not supported by project {REPO}' in errors[0].reason
