"""zuul.merger.gitdir: one daemon per git cache."""

import pytest

from zuul.merger.gitdir import LOCK_NAME, GitDirClaim, GitDirInUseError


def test_a_claimed_git_dir_is_refused_to_a_second_claim_until_released(tmp_path):
    path = str(tmp_path / 'git')
    first = GitDirClaim(path, 'zuul-executor')
    assert 'zuul-executor (pid ' in (tmp_path / 'git' / LOCK_NAME).read_text()
    with pytest.raises(GitDirInUseError, match=r'in use by zuul-executor \(pid \d+\).*'
                                               r'\[merger\] git_dir, \[executor\] git_dir'):
        GitDirClaim(path, 'zuul-merger')
    first.release()
    second = GitDirClaim(path, 'zuul-merger')
    assert 'zuul-merger' in (tmp_path / 'git' / LOCK_NAME).read_text()
    second.release()


def test_another_directory_is_free(tmp_path):
    a = GitDirClaim(str(tmp_path / 'a'), 'zuul-merger')
    b = GitDirClaim(str(tmp_path / 'b'), 'zuul-executor')
    a.release()
    b.release()
