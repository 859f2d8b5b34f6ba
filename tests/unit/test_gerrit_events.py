"""Gerrit event and query parsing, over every captured sample in the
shared corpus (and the deliberately malformed one)."""

import json

import pytest

from tests.harness import corpus
from zuul.driver.gerrit.changes import (
    change_from_query,
    change_number_from_url,
    depends_on_footers,
)
from zuul.driver.gerrit.events import MalformedEventError, parse_event

CORPUS = corpus.path('gerrit-events')


def _event_files(root=None):
    where = root / 'gerrit-events' if root else CORPUS
    return sorted(p for p in where.rglob('*.json') if 'query-result' not in p.name)


def _events_in(path):
    data = json.loads(path.read_text())
    return data if isinstance(data, list) else [data]


def _loadable(path):
    try:
        _events_in(path)
        return True
    except ValueError:
        return False


@pytest.mark.corpus
@pytest.mark.parametrize('path', corpus.cases(
    'Gerrit events (gerrit-events/**/*.json)',
    lambda root: [p for p in _event_files(root) if _loadable(p)]),
                         ids=lambda p: str(p.relative_to(CORPUS)))
def test_every_corpus_event_parses_or_is_ignored(path):
    for data in _events_in(path):
        event = parse_event(data, 'review')
        if event is None:
            assert data['type'] not in ('patchset-created', 'comment-added', 'change-merged')
            continue
        assert event.project
        assert event.type == data['type']
        if event.is_change_event:
            assert isinstance(event.change_number, int)
        else:
            assert event.ref.startswith('refs/')


@pytest.mark.corpus
def test_the_malformed_sample_is_rejected_as_json():
    bad = [p for p in _event_files() if not _loadable(p)]
    assert len(bad) == 1   # the corpus keeps exactly one on purpose
    with pytest.raises(ValueError):
        json.loads(bad[0].read_text())


@pytest.mark.corpus
def test_comment_added_carries_approvals_and_author():
    data = json.loads((CORPUS / 'zuul-14.3.0-sdist' / 'transcribed-from-tests_fakegerrit.py'
                       / 'comment-added-approved.json').read_text())
    event = parse_event(data, 'review')
    assert (event.change_number, event.patchset) == (1, 1)
    assert event.approvals[0]['type'] == 'Approved'
    assert event.approvals[0]['value'] == '1'
    # comment-added names the commenter "author" (Gerrit's stream-events docs)
    assert event.account == data['author']
    assert event.approvals[0]['username'] == 'reviewer_john'
    assert event.ref == 'refs/changes/01/1/1'


def test_meta_ref_updates_are_ignored_but_branch_updates_kept():
    base = {'type': 'ref-updated', 'refUpdate': {
        'oldRev': 'a' * 40, 'newRev': 'b' * 40, 'project': 'p',
        'refName': 'refs/changes/46/450446/meta'}}
    assert parse_event(base, 'review') is None
    base['refUpdate']['refName'] = 'master'   # Gerrit 2.x sent bare branch names
    event = parse_event(base, 'review')
    assert event.ref == 'refs/heads/master' and event.branch == 'master'


@pytest.mark.parametrize('data,reason', [
    ({'type': 'patchset-created'}, 'no change'),
    ({'type': 'patchset-created', 'change': {'number': 'x', 'project': 'p'}}, 'bad change'),
    ({'type': 'comment-added', 'change': {'number': 1}}, 'no project'),
    ({'type': 'ref-updated'}, 'no refUpdate'),
    ({'no': 'type'}, 'no type'),
    (['not', 'a', 'dict'], 'not an object'),
])
def test_malformed_events_raise(data, reason):
    with pytest.raises(MalformedEventError):
        parse_event(data, 'review')


@pytest.mark.corpus
def test_query_row_to_change_with_git_parent_and_footer():
    data = json.loads((CORPUS / 'zuul-14.3.0-sdist' / 'transcribed-from-tests_fakegerrit.py'
                       / 'query-result-change-with-dependsOn.json').read_text())
    change = change_from_query(data, 'review')
    assert change.number == 2 and change.patchset == 1
    assert change.project == 'org/project' and change.branch == 'master'
    assert change.is_open and change.is_current_patchset
    assert 'master-2' in change.files and '/COMMIT_MSG' not in change.files
    assert depends_on_footers(change.message) == ['https://review.example.com/1']


@pytest.mark.corpus
def test_query_pagination_fixtures_parse():
    for path in sorted((CORPUS / 'zuul-14.3.0-sdist' / 'tests' / 'fixtures' / 'gerrit').iterdir()):
        rows = [json.loads(line) for line in path.read_text().splitlines()
                if line.startswith('{')]
        for row in rows:
            if row.get('type') == 'stats':
                continue
            change = change_from_query(row, 'review')
            assert change.number > 0 and change.project


@pytest.mark.parametrize('url,number', [
    ('https://review.example.com/c/org/project/+/123', 123),
    ('https://review.example.com/c/org/project/+/123/4', 123),
    ('https://review.example.com/#/c/77/', 77),
    ('https://review.example.com/88', 88),
    ('https://review.example.com/c/55', 55),
    ('https://other.example.com/c/org/project/+/123', None),
    ('https://review.example.com/plugins/foo', None),
])
def test_change_urls(url, number):
    assert change_number_from_url(url, 'https://review.example.com') == number


def test_depends_on_footers_dedup_and_case():
    msg = 'Subject\n\nBody\n\ndepends-on: https://a/1\nDepends-On: I0123456789abcdef\n' \
          'Depends-On: https://a/1\n'
    assert depends_on_footers(msg) == ['https://a/1', 'I0123456789abcdef']


@pytest.mark.corpus
def test_corpus_dir_exists():
    assert CORPUS.is_dir()


def test_dependencies_kept_when_the_event_names_the_current_patchset():
    ps1 = {'number': 1, 'revision': 'a' * 40, 'ref': 'refs/changes/01/1/1'}
    ps2 = {'number': 2, 'revision': 'b' * 40, 'ref': 'refs/changes/01/1/2'}
    row = {'project': 'org/p', 'branch': 'master', 'id': 'I1', 'number': 1,
           'subject': 's', 'status': 'NEW', 'currentPatchSet': dict(ps2),
           'patchSets': [ps1, ps2],
           'dependsOn': [{'number': 7}], 'neededBy': [{'number': 9}]}
    current = change_from_query(row, 'review', 2)
    assert current.git_parent_changes == ['review/7']
    assert current.needed_by_changes == ['review/9']
    old = change_from_query(row, 'review', 1)
    assert old.needed_by_changes == [] and not old.is_current_patchset
