"""A configuration read that no merger answers (a job lost on the way) is
submitted again; one that is never answered fails with a clear error."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from zuul.scheduler.layouts import ConfigFetchError, MergerConfigFetcher


class DroppingMergeClient:
    """Drops the first ``drop`` submissions, answers the rest at once."""

    def __init__(self, drop: int):
        self.drop = drop
        self.calls = 0

    def get_files(self, connection, project, branch, paths, callback):
        self.calls += 1
        if self.calls > self.drop:
            callback(SimpleNamespace(error=None, files={'zuul.yaml': '[]'}))


def test_a_lost_read_is_submitted_again():
    client = DroppingMergeClient(drop=1)
    fetcher = MergerConfigFetcher(client, timeout=0.3, attempts=3)
    assert fetcher.files('gerrit', 'org/p', 'master', ['zuul.yaml']) == {'zuul.yaml': '[]'}
    assert client.calls == 2


def test_a_read_never_answered_fails_after_every_attempt():
    client = DroppingMergeClient(drop=10)
    fetcher = MergerConfigFetcher(client, timeout=0.3, attempts=3)
    with pytest.raises(ConfigFetchError, match='no merger answered in time'):
        fetcher.files('gerrit', 'org/p', 'master', ['zuul.yaml'])
    assert client.calls == 3
