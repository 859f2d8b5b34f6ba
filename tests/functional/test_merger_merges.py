# ruff: noqa: F811 - pytest fixtures imported from test_merger_support
"""Speculative merges with real git: every merge mode, conflicts,
cross-project queues, reproduction from a recorded repo state, config
file reads, changed files and fetch failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from tests.functional.test_merger_support import (  # noqa: F401 - fixtures
    Upstream,
    change_ref,
    git,
    make_merger,
    upstream,
)
from zuul.merger.merger import MergeItem, Merger
from zuul.merger.repos import RepoUrlResolver

HOST = 'review.example.org'


def item(project, number, ref, mode='merge-resolve', branch='master', patchset=1):
    return MergeItem('gerrit', project, branch, ref, number, patchset, mode)


def commit_of(merger: Merger, project: str, sha: str) -> dict:
    """Parents, identity, dates and message of a commit in the cache."""
    repo = merger.cache.get('gerrit', project)
    out = repo.git('log', '-1', '--date=raw',
                   '--format=%P%x00%an <%ae>%x00%cn <%ce>%x00%ad%x00%cd%x00%B', sha)
    parents, author, committer, adate, cdate, message = out.split('\0')
    return {'parents': parents.split(), 'author': author, 'committer': committer,
            'author_date': adate, 'committer_date': cdate, 'message': message.strip()}


def file_at(merger: Merger, project: str, sha: str, path: str) -> str | None:
    repo = merger.cache.get('gerrit', project)
    return repo.read_files(sha, [path]).get(path)


def upstream_date(up: Upstream, project: str, ref: str, fmt: str = '%cd') -> str:
    return up.git(project, 'log', '-1', '--date=raw', f'--format={fmt}', ref)


@pytest.fixture
def two_changes(upstream):
    """org/project with changes 1 (a.txt) and 2 (b.txt), both on master's
    tip (so change 2 is not a fast-forward once change 1 merged)."""
    upstream.create('org/project', {'a.txt': 'a0\n', 'b.txt': 'b0\n'})
    ref1 = upstream.add_change('org/project', 1, {'a.txt': 'a1\n'})
    ref2 = upstream.add_change('org/project', 2, {'b.txt': 'b2\n'})
    return upstream.head('org/project'), ref1, ref2


# -- merge modes ---------------------------------------------------------------
@pytest.mark.parametrize('mode', ['merge', 'merge-resolve'])
def test_merge_modes_fast_forward_then_merge_commit(make_merger, upstream, two_changes, mode):
    base, ref1, ref2 = two_changes
    merger = make_merger()
    out = merger.merge_changes([item('org/project', 1, ref1, mode),
                                item('org/project', 2, ref2, mode)])
    assert out.merged and out.conflict is None and out.error is None
    change1 = upstream.git('org/project', 'rev-parse', ref1)
    change2 = upstream.git('org/project', 'rev-parse', ref2)
    # Change 1 sits on the branch tip: a fast-forward, the change's own commit.
    assert out.item_commits[0] == change1
    merge = commit_of(merger, 'org/project', out.commit)
    assert merge['parents'] == [change1, change2]
    assert merge['message'] == 'Merge change 2,1'
    assert merge['author'] == merge['committer'] == 'Zuul Merger <zuul@example.org>'
    # The date comes from the merged change, not from the clock.
    assert merge['committer_date'] == upstream_date(upstream, 'org/project', ref2)
    assert file_at(merger, 'org/project', out.commit, 'a.txt') == 'a1\n'
    assert file_at(merger, 'org/project', out.commit, 'b.txt') == 'b2\n'
    assert out.base_state == {'gerrit': {'org/project': {'refs/heads/master': base}}}
    assert out.repo_state == {'gerrit': {'org/project': {'refs/heads/master': out.commit}}}


def test_merge_detects_renames_where_merge_resolve_conflicts(make_merger, upstream):
    upstream.create('org/project', {'old.txt': 'one\ntwo\nthree\nfour\nfive\n'})
    ref1 = upstream.add_change('org/project', 1, {'old.txt': None,
                                                  'new.txt': 'one\ntwo\nthree\nfour\nfive\n'})
    ref2 = upstream.add_change('org/project', 2, {'old.txt': 'one\ntwo\nthree\nfour\nFIVE\n'})
    merger = make_merger()
    out = merger.merge_changes([item('org/project', 1, ref1, 'merge'),
                                item('org/project', 2, ref2, 'merge')])
    assert out.merged
    assert file_at(merger, 'org/project', out.commit, 'new.txt').endswith('FIVE\n')
    assert file_at(merger, 'org/project', out.commit, 'old.txt') is None
    out = merger.merge_changes([item('org/project', 1, ref1, 'merge-resolve'),
                                item('org/project', 2, ref2, 'merge-resolve')])
    assert not out.merged and out.conflict.number == 2


def test_cherry_pick_keeps_the_author_and_linear_history(make_merger, upstream, two_changes):
    base, ref1, ref2 = two_changes
    merger = make_merger()
    out = merger.merge_changes([item('org/project', 1, ref1, 'cherry-pick'),
                                item('org/project', 2, ref2, 'cherry-pick')])
    assert out.merged
    change1 = upstream.git('org/project', 'rev-parse', ref1)
    assert out.item_commits[0] == change1  # parent is the tip: fast-forward
    picked = commit_of(merger, 'org/project', out.commit)
    assert picked['parents'] == [change1]
    assert picked['author'] == 'Dev Eloper <dev@example.org>'
    assert picked['author_date'] == upstream_date(upstream, 'org/project', ref2, '%ad')
    assert picked['committer'] == 'Zuul Merger <zuul@example.org>'
    assert picked['committer_date'] == upstream_date(upstream, 'org/project', ref2)
    assert picked['message'].startswith('Change 2')
    assert file_at(merger, 'org/project', out.commit, 'a.txt') == 'a1\n'


def test_squash_merge_makes_one_commit_of_a_change_series(make_merger, upstream, two_changes):
    base, ref1, _ = two_changes
    # Change 3 is two commits on top of the branch (a series pushed as one).
    first = upstream.commit('org/project', base, {'c.txt': 'c1\n'}, 'Series part 1')
    second = upstream.commit('org/project', first, {'c.txt': 'c2\n', 'd.txt': 'd\n'},
                             'Series part 2\n\nThe whole series.')
    upstream.git('org/project', 'update-ref', change_ref(3), second)
    merger = make_merger()
    out = merger.merge_changes([item('org/project', 1, ref1, 'squash-merge'),
                                item('org/project', 3, change_ref(3), 'squash-merge')])
    assert out.merged
    squashed = commit_of(merger, 'org/project', out.commit)
    assert len(squashed['parents']) == 1
    assert squashed['parents'] == [out.item_commits[0]]
    assert squashed['message'] == 'Series part 2\n\nThe whole series.'
    assert squashed['author'] == 'Dev Eloper <dev@example.org>'
    assert squashed['committer'] == 'Zuul Merger <zuul@example.org>'
    assert file_at(merger, 'org/project', out.commit, 'c.txt') == 'c2\n'
    assert file_at(merger, 'org/project', out.commit, 'a.txt') == 'a1\n'


def test_rebase_replays_each_commit_of_the_change(make_merger, upstream, two_changes):
    base, ref1, _ = two_changes
    first = upstream.commit('org/project', base, {'c.txt': 'c1\n'}, 'Series part 1')
    second = upstream.commit('org/project', first, {'c.txt': 'c2\n'}, 'Series part 2')
    upstream.git('org/project', 'update-ref', change_ref(3), second)
    merger = make_merger()
    out = merger.merge_changes([item('org/project', 1, ref1, 'rebase'),
                                item('org/project', 3, change_ref(3), 'rebase')])
    assert out.merged
    tip = commit_of(merger, 'org/project', out.commit)
    assert tip['message'] == 'Series part 2'
    assert tip['committer_date'] == upstream_date(upstream, 'org/project', second)
    below = commit_of(merger, 'org/project', tip['parents'][0])
    assert below['message'] == 'Series part 1'
    assert below['parents'] == [out.item_commits[0]]
    assert file_at(merger, 'org/project', out.commit, 'c.txt') == 'c2\n'


@pytest.mark.parametrize('mode', ['merge', 'merge-resolve', 'cherry-pick', 'squash-merge',
                                  'rebase'])
def test_conflict_names_the_change_and_the_cache_recovers(make_merger, upstream, mode):
    upstream.create('org/project', {'a.txt': 'zero\n'})
    ref1 = upstream.add_change('org/project', 1, {'a.txt': 'one\n'})
    ref2 = upstream.add_change('org/project', 2, {'a.txt': 'two\n'})
    ref3 = upstream.add_change('org/project', 3, {'b.txt': 'three\n'})
    merger = make_merger()
    out = merger.merge_changes([item('org/project', 1, ref1, mode),
                                item('org/project', 2, ref2, mode),
                                item('org/project', 3, ref3, mode)])
    assert not out.merged
    assert (out.conflict.number, out.conflict.project) == (2, 'org/project')
    assert out.error is None
    assert len(out.item_commits) == 1
    # Nothing is left half-merged: the next request on the same cache works.
    again = merger.merge_changes([item('org/project', 2, ref2, mode),
                                  item('org/project', 3, ref3, mode)])
    assert again.merged
    assert file_at(merger, 'org/project', again.commit, 'a.txt') == 'two\n'
    assert file_at(merger, 'org/project', again.commit, 'b.txt') == 'three\n'


def test_unknown_merge_mode_is_an_error_not_a_conflict(make_merger, upstream, two_changes):
    _, ref1, _ = two_changes
    out = make_merger().merge_changes([item('org/project', 1, ref1, 'octopus')])
    assert not out.merged and out.conflict is None
    assert 'octopus' in out.error


# -- queues across projects and reproduction -----------------------------------------
def _cross_project(upstream):
    upstream.create('org/server', {'s.txt': 's0\n'}, branches=('master', 'stable/1'))
    upstream.create('org/client', {'c.txt': 'c0\n'})
    return [
        item('org/server', 1, upstream.add_change('org/server', 1, {'s.txt': 's1\n'})),
        item('org/client', 2, upstream.add_change('org/client', 2, {'c.txt': 'c2\n'})),
        item('org/server', 3, upstream.add_change('org/server', 3, {'t.txt': 't3\n'})),
        item('org/server', 4, upstream.add_change('org/server', 4, {'u.txt': 'u4\n'},
                                                  branch='stable/1'), branch='stable/1'),
    ]


def test_cross_project_queue_records_every_branch(make_merger, upstream):
    items = _cross_project(upstream)
    merger = make_merger()
    out = merger.merge_changes(items)
    assert out.merged
    server = out.repo_state['gerrit']['org/server']
    client = out.repo_state['gerrit']['org/client']
    assert set(server) == {'refs/heads/master', 'refs/heads/stable/1'}
    assert set(client) == {'refs/heads/master'}
    master = server['refs/heads/master']
    assert file_at(merger, 'org/server', master, 's.txt') == 's1\n'
    assert file_at(merger, 'org/server', master, 't.txt') == 't3\n'
    assert file_at(merger, 'org/server', master, 'u.txt') is None
    assert file_at(merger, 'org/server', server['refs/heads/stable/1'], 'u.txt') == 'u4\n'
    assert file_at(merger, 'org/client', client['refs/heads/master'], 'c.txt') == 'c2\n'
    assert out.commit == server['refs/heads/stable/1']
    assert out.base_state['gerrit']['org/server'] == {
        'refs/heads/master': upstream.head('org/server'),
        'refs/heads/stable/1': upstream.head('org/server', 'stable/1')}


@pytest.mark.parametrize('mode', ['merge', 'merge-resolve', 'cherry-pick', 'squash-merge',
                                  'rebase'])
def test_repo_state_reproduces_identical_commits_elsewhere(make_merger, upstream, mode):
    items = _cross_project(upstream)
    for i in items:
        i.merge_mode = mode
    first = make_merger('scheduler').merge_changes(items)
    assert first.merged
    # The branches move on upstream before the executor gets to it ...
    upstream.push('org/server', {'s.txt': 'moved on\n'})
    upstream.push('org/client', {'late.txt': 'late\n'})
    # ... and an executor with its own cache, on the recorded state, gets
    # exactly the scheduler's commits.
    executor = make_merger('executor')
    second = executor.merge_changes(items, repo_state=first.base_state)
    assert second.merged
    assert second.repo_state == first.repo_state
    assert second.base_state == first.base_state
    assert second.item_commits == first.item_commits
    # Without the recorded state the merge is on the new heads: different.
    fresh = make_merger('fresh').merge_changes(items)
    assert fresh.repo_state != first.repo_state


def test_repo_state_fetches_a_recorded_commit_no_branch_holds(make_merger, upstream, two_changes):
    base, ref1, _ = two_changes
    state = make_merger('scheduler').merge_changes([item('org/project', 1, ref1)]).base_state
    # Force-push master elsewhere: the recorded base is only reachable by id
    # (the upstream still has the object, as Gerrit keeps them).
    other = upstream.commit('org/project', None, {'x.txt': 'x\n'}, 'Rewritten history')
    upstream.git('org/project', 'update-ref', 'refs/heads/master', other)
    upstream.git('org/project', 'config', 'uploadpack.allowAnySHA1InWant', 'true')
    out = make_merger('executor').merge_changes([item('org/project', 1, ref1)],
                                                repo_state=state)
    assert out.merged
    assert out.base_state == state


def test_ref_items_are_recorded_not_merged(make_merger, upstream, two_changes):
    base, ref1, _ = two_changes
    newrev = upstream.push('org/project', {'p.txt': 'p\n'})
    ref_item = MergeItem('gerrit', 'org/project', 'master', 'refs/heads/master',
                         newrev=newrev)
    out = make_merger().merge_changes([ref_item])
    assert out.merged and out.commit == newrev
    assert out.repo_state == out.base_state == {
        'gerrit': {'org/project': {'refs/heads/master': newrev}}}


# -- reading ---------------------------------------------------------------------
CONFIGS = {
    'zuul.yaml': '- job: {name: root}\n',
    'zuul.d/jobs.yaml': '- job: {name: a}\n',
    'zuul.d/sub/more.yaml': '- job: {name: b}\n',
    '.zuul.yaml': '- job: {name: hidden}\n',
    '.zuul.d/project.yaml': '- project: {check: {jobs: [a]}}\n',
    'zuul.d.txt': 'not config\n',
    'README': 'readme\n',
}


def test_cat_reads_config_files_and_directories(make_merger, upstream):
    upstream.create('org/config', CONFIGS, branches=('master', 'stable'))
    upstream.push('org/config', {'zuul.yaml': '- job: {name: master-only}\n'})
    merger = make_merger()
    commit, files = merger.cat_files('gerrit', 'org/config', 'master',
                                     ['zuul.yaml', 'zuul.d/', '.zuul.yaml', '.zuul.d/',
                                      'missing.yaml'])
    assert commit == upstream.head('org/config')
    assert files == {
        'zuul.yaml': '- job: {name: master-only}\n',
        'zuul.d/jobs.yaml': CONFIGS['zuul.d/jobs.yaml'],
        'zuul.d/sub/more.yaml': CONFIGS['zuul.d/sub/more.yaml'],
        '.zuul.yaml': CONFIGS['.zuul.yaml'],
        '.zuul.d/project.yaml': CONFIGS['.zuul.d/project.yaml'],
    }
    _, stable = merger.cat_files('gerrit', 'org/config', 'stable', ['zuul.yaml'])
    assert stable == {'zuul.yaml': CONFIGS['zuul.yaml']}


def test_merge_reads_config_files_of_the_speculative_state(make_merger, upstream):
    upstream.create('org/project', {'zuul.yaml': '- job: {name: old}\n'})
    ref = upstream.add_change('org/project', 1, {'zuul.d/new.yaml': '- job: {name: new}\n'})
    out = make_merger().merge_changes([item('org/project', 1, ref)],
                                      read_files=['zuul.yaml', 'zuul.d/'])
    assert [(f.project, f.branch, f.files) for f in out.read_files] == [
        ('org/project', 'master', {'zuul.yaml': '- job: {name: old}\n',
                                   'zuul.d/new.yaml': '- job: {name: new}\n'})]


def test_files_changed_by_a_change(make_merger, upstream):
    upstream.create('org/project', {'keep.txt': 'k\n', 'gone.txt': 'g\n', 'edit.txt': 'e\n'})
    ref1 = upstream.add_change('org/project', 1, {'ahead.txt': 'a\n'})
    ref2 = upstream.add_change('org/project', 2, {'gone.txt': None, 'edit.txt': 'E\n',
                                                  'dir/new.txt': 'n\n'}, parent=ref1)
    merger = make_merger()
    assert merger.files_changes('gerrit', 'org/project', 'master', ref2) == [
        'ahead.txt', 'dir/new.txt', 'edit.txt', 'gone.txt']
    out = merger.merge_changes([item('org/project', 1, ref1), item('org/project', 2, ref2)],
                               files_changed=True)
    # Behind change 1 in the queue, change 2 touches only its own files.
    assert out.files == ['dir/new.txt', 'edit.txt', 'gone.txt']


# -- failures ----------------------------------------------------------------------
def test_missing_project_is_reported_and_the_merger_carries_on(make_merger, upstream, two_changes):
    _, ref1, _ = two_changes
    merger = make_merger()
    out = merger.merge_changes([item('org/project', 1, ref1),
                                item('org/missing', 7, change_ref(7))])
    assert not out.merged and out.conflict is None
    assert 'org/missing' in out.error
    assert merger.merge_changes([item('org/project', 1, ref1)]).merged


def test_missing_change_ref_is_reported(make_merger, upstream, two_changes):
    out = make_merger().merge_changes([item('org/project', 9, change_ref(9))])
    assert not out.merged and 'org/project' in out.error


def test_unknown_connection_and_bad_names_are_errors(make_merger, upstream):
    merger = make_merger()
    out = merger.merge_changes([MergeItem('github', 'org/project', 'master', 'refs/pull/1',
                                          1, 'abc')])
    assert not out.merged and 'github' in out.error
    out = merger.merge_changes([item('../../etc', 1, change_ref(1))])
    assert not out.merged and 'invalid project name' in out.error


# -- workspaces ----------------------------------------------------------------------
def test_prepare_workspace_checks_out_every_branch_at_its_state(make_merger, upstream, tmp_path):
    items = _cross_project(upstream)
    upstream.tag('org/server', '1.0.0', upstream.head('org/server'))
    upstream.create('org/roles', {'roles/r/tasks/main.yaml': '[]\n'})
    merger = make_merger()
    out = merger.merge_changes(items)
    dest = str(tmp_path / 'src')
    paths = merger.prepare_workspace(
        out.repo_state,
        [('gerrit', 'org/server', 'stable/1'), ('gerrit', 'org/client', None),
         ('gerrit', 'org/roles', None)],
        dest, {'gerrit': HOST})
    server = paths[('gerrit', 'org/server')]
    assert server == os.path.join(dest, HOST, 'org/server')
    assert git(server, 'symbolic-ref', '--short', 'HEAD') == 'stable/1'
    state = out.repo_state['gerrit']['org/server']
    assert git(server, 'rev-parse', 'master') == state['refs/heads/master']
    assert git(server, 'rev-parse', 'HEAD') == state['refs/heads/stable/1']
    assert git(server, 'rev-parse', 'origin/master') == state['refs/heads/master']
    assert git(server, 'tag') == '1.0.0'
    assert open(os.path.join(server, 'u.txt')).read() == 'u4\n'
    assert git(server, 'status', '--porcelain') == ''
    # No remote that leads back to the cache or carries credentials.
    assert git(server, 'remote', 'get-url', 'origin') == 'file:///dev/null'
    client = paths[('gerrit', 'org/client')]
    assert git(client, 'symbolic-ref', '--short', 'HEAD') == 'master'
    assert open(os.path.join(client, 'c.txt')).read() == 'c2\n'
    # Not in the state: origin's current heads.
    roles = paths[('gerrit', 'org/roles')]
    assert git(roles, 'rev-parse', 'HEAD') == upstream.head('org/roles')
    # The checkout stands alone: the cache can go away.
    assert not os.path.exists(os.path.join(server, '.git', 'objects', 'info', 'alternates'))


def test_prepare_workspace_checks_out_a_tag_or_falls_back(make_merger, upstream, tmp_path):
    first = upstream.create('org/project', {'v.txt': '1\n'})
    upstream.tag('org/project', '1.0', first)
    upstream.push('org/project', {'v.txt': '2\n'})
    merger = make_merger()
    paths = merger.prepare_workspace({}, [('gerrit', 'org/project', '1.0')],
                                     str(tmp_path / 'a'), {'gerrit': HOST})
    path = paths[('gerrit', 'org/project')]
    assert open(os.path.join(path, 'v.txt')).read() == '1\n'
    paths = merger.prepare_workspace({}, [('gerrit', 'org/project', 'no-such-branch')],
                                     str(tmp_path / 'b'), {'gerrit': HOST})
    path = paths[('gerrit', 'org/project')]
    assert git(path, 'symbolic-ref', '--short', 'HEAD') == 'master'
    assert open(os.path.join(path, 'v.txt')).read() == '2\n'


# -- a real Gerrit remote over SSH ------------------------------------------------------
def test_fetch_from_gerrit_over_ssh(dev_gerrit, tmp_path):
    store = dev_gerrit.store
    store.create_project('org/remote', {'a.txt': 'a\n'})
    change = store.create_change('org/remote', 'master', 'Edit a', {'a.txt': 'A\n'})
    resolver = RepoUrlResolver({'review': {'driver': 'gerrit', 'options': {
        'server': '127.0.0.1', 'port': str(dev_gerrit.server.port), 'user': 'zuul',
        'sshkey': dev_gerrit.key_path, 'known_hosts': dev_gerrit.known_hosts}}})
    merger = Merger(str(tmp_path / 'cache'), resolver)
    ref = f'refs/changes/{change.number % 100:02d}/{change.number}/1'
    out = merger.merge_changes([MergeItem('review', 'org/remote', 'master', ref,
                                          change.number, 1)])
    assert out.merged, out.error
    assert file_at_conn(merger, 'review', 'org/remote', out.commit, 'a.txt') == 'A\n'


def file_at_conn(merger, connection, project, sha, path):
    return merger.cache.get(connection, project).read_files(sha, [path]).get(path)


# -- concurrency (an executor merges for several builds at once) -------------------------
def test_concurrent_merges_on_one_cache_do_not_interfere(make_merger, upstream, tmp_path):
    upstream.create('org/project', {'base.txt': 'base\n'})
    refs = {n: upstream.add_change('org/project', n, {f'f{n}.txt': f'{n}\n'})
            for n in range(1, 7)}
    queues = [[1, 2, 3], [4, 5], [2, 6], [6, 5, 4, 3], [3, 1]]
    queues = [[item('org/project', n, refs[n], mode) for n in q]
              for q, mode in zip(queues, ['merge-resolve', 'merge', 'cherry-pick',
                                          'squash-merge', 'rebase'])]
    expected = [make_merger(f'alone{i}').merge_changes(q).repo_state
                for i, q in enumerate(queues)]
    shared = make_merger('shared')
    results: dict = {}

    def run(index, queue):
        for attempt in range(3):
            out = shared.merge_changes(queue)
            dest = str(tmp_path / f'ws-{index}-{attempt}')
            path = shared.prepare_workspace(out.repo_state, [('gerrit', 'org/project', None)],
                                            dest, {'gerrit': HOST})[('gerrit', 'org/project')]
            present = sorted(n for n in range(1, 7)
                             if os.path.exists(os.path.join(path, f'f{n}.txt')))
            results[(index, attempt)] = (out.repo_state, present)

    threads = [threading.Thread(target=run, args=(i, q)) for i, q in enumerate(queues)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == 3 * len(queues)
    for (index, _), (state, present) in results.items():
        assert state == expected[index]
        assert present == sorted(i.number for i in queues[index])


HOSTILE_GITCONFIG = """\
[user]
    name = Someone Else
    email = else@example.com
[merge]
    ff = false
    log = true
[commit]
    gpgsign = true
[core]
    autocrlf = true
[rebase]
    autosquash = true
"""

REMOTE_MERGE = """
import json, sys
from zuul.merger.merger import MergeItem, Merger
from zuul.merger.repos import RepoUrlResolver
args = json.load(sys.stdin)
merger = Merger(args['cache'], RepoUrlResolver({'gerrit': args['upstream']}),
                git_user_email='zuul@example.org', git_user_name='Zuul Merger')
items = [MergeItem(**i) for i in args['items']]
print(json.dumps(merger.merge_changes(items, repo_state=args['state']).repo_state))
"""


@pytest.mark.parametrize('mode', ['merge', 'merge-resolve', 'cherry-pick', 'squash-merge',
                                  'rebase'])
def test_host_git_configuration_does_not_change_the_commits(make_merger, upstream, tmp_path,
                                                            mode):
    items = _cross_project(upstream)
    for i in items:
        i.merge_mode = mode
    first = make_merger().merge_changes(items)
    home = tmp_path / 'home'
    home.mkdir()
    (home / '.gitconfig').write_text(HOSTILE_GITCONFIG)
    env = dict(os.environ, HOME=str(home), TZ='Asia/Kolkata', GIT_AUTHOR_NAME='Env Author',
               GIT_COMMITTER_EMAIL='env@example.com', GIT_CONFIG_GLOBAL=str(home / '.gitconfig'))
    args = {'cache': str(tmp_path / 'other-host'), 'upstream': upstream.root,
            'items': [i.to_dict() for i in items], 'state': first.base_state}
    proc = subprocess.run([sys.executable, '-c', REMOTE_MERGE], input=json.dumps(args),
                          env=env, capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == first.repo_state
