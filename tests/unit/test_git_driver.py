"""The git connection finds ref updates by polling a real repository."""

import subprocess

from zuul.driver.git.connection import ZERO, GitConnection


def _git(cwd, *args):
    return subprocess.run(['git', *args], cwd=cwd, check=True, capture_output=True,
                          text=True, env={'GIT_AUTHOR_NAME': 'a', 'GIT_AUTHOR_EMAIL': 'a@b',
                                          'GIT_COMMITTER_NAME': 'a',
                                          'GIT_COMMITTER_EMAIL': 'a@b', 'PATH': '/usr/bin:/bin',
                                          'HOME': str(cwd)}).stdout.strip()


def test_poll_reports_new_branch_commits_and_tags(tmp_path):
    repo = tmp_path / 'org' / 'project'
    repo.mkdir(parents=True)
    _git(repo, 'init', '-q', '-b', 'master')
    (repo / 'a').write_text('1')
    _git(repo, 'add', 'a')
    _git(repo, 'commit', '-qm', 'one')
    conn = GitConnection('upstream', {'baseurl': f'file://{tmp_path}'})
    conn.watch(['org/project'])
    assert conn.poll_once() == []            # first poll only records
    old = _git(repo, 'rev-parse', 'HEAD')
    (repo / 'a').write_text('2')
    _git(repo, 'commit', '-qam', 'two')
    _git(repo, 'tag', 'v1')
    events = conn.poll_once()
    new = _git(repo, 'rev-parse', 'HEAD')
    assert [(e.type, e.ref, e.oldrev, e.newrev) for e in events] == [
        ('ref-updated', 'refs/heads/master', old, new),
        ('ref-updated', 'refs/tags/v1', ZERO, new)]
    assert events[0].branch == 'master' and events[1].branch is None
    assert conn.poll_once() == []


def test_unreachable_project_is_logged_not_fatal(tmp_path):
    conn = GitConnection('upstream', {'baseurl': f'file://{tmp_path}'})
    conn.watch(['nope'])
    assert conn.poll_once() == []


def test_trigger_filter_matches_connection_ref_and_ignores_deletes():
    from zuul.driver.git import GitDriver
    from zuul.model.events import TriggerEvent
    (flt,) = GitDriver().get_trigger('upstream', [{'event': 'ref-updated',
                                                   'ref': '^refs/heads/.*$'}])

    def event(**kw):
        base = dict(type='ref-updated', connection='upstream', project='org/p',
                    ref='refs/heads/master', oldrev='1' * 40, newrev='2' * 40)
        base.update(kw)
        return TriggerEvent(**base)
    assert flt.matches(event())
    assert not flt.matches(event(connection='other'))
    assert not flt.matches(event(ref='refs/tags/v1'))
    assert not flt.matches(event(newrev=ZERO))          # a deleted branch
    (keep,) = GitDriver().get_trigger('upstream', {'event': 'ref-updated',
                                                   'ignore-deletes': False})
    assert keep.matches(event(newrev=ZERO)) and keep.matches(event(ref='refs/tags/v1'))
    (negated,) = GitDriver().get_trigger('upstream', [{
        'event': 'ref-updated', 'ref': {'regex': '^refs/tags/', 'negate': True}}])
    assert negated.matches(event()) and not negated.matches(event(ref='refs/tags/v1'))
