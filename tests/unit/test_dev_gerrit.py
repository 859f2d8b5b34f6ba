"""The development Gerrit speaks the protocol real clients expect:
checked with OpenSSH and git as clients and against captured events."""

import json
import os
import queue
import shlex
import subprocess
import threading

import pytest

from tests.harness import corpus

CORPUS = corpus.path('gerrit-events', 'cdevents+community', 'rfc',
                     'gerrit-cdevents.md.extracted')


def _ssh(gerrit, *command, user='zuul', check=True):
    # ssh joins its arguments with spaces: quote them as a real client must
    remote = ' '.join(shlex.quote(c) for c in command)
    proc = subprocess.run(gerrit.ssh_args(user) + [remote], capture_output=True,
                          text=True, timeout=60)
    if check and proc.returncode:
        raise AssertionError(f'{command}: {proc.returncode} {proc.stderr}')
    return proc


class _Stream:
    def __init__(self, gerrit):
        self.proc = subprocess.Popen(gerrit.ssh_args() + ['gerrit', 'stream-events'],
                                     stdout=subprocess.PIPE, text=True)
        self.events: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.events.put(json.loads(line))
        self.events.put(None)

    def next(self, kind=None, timeout=30):
        while True:
            event = self.events.get(timeout=timeout)
            if event is None or kind is None or event['type'] == kind:
                return event

    def close(self):
        self.proc.kill()
        self.proc.wait()


def _wait_streams(gerrit, n):
    from tests.harness.waiting import wait_for
    wait_for(lambda: gerrit.server.stream_count() == n, what='stream-events session')


def _corpus(name):
    with open(os.path.join(CORPUS, name)) as f:
        return json.load(f)


def _shape(d):
    if isinstance(d, dict):
        return {k: _shape(v) for k, v in d.items()}
    return type(d).__name__


def test_version(dev_gerrit):
    assert _ssh(dev_gerrit, 'gerrit', 'version').stdout.startswith('gerrit version ')


@pytest.mark.corpus
def test_events_have_the_shape_of_real_gerrit(dev_gerrit):
    store = dev_gerrit.store
    store.create_project('org/project')
    stream = _Stream(dev_gerrit)
    try:
        _wait_streams(dev_gerrit, 1)
        change = store.create_change('org/project', 'master', 'Add a file', {'a.txt': 'a\n'})
        created = stream.next('patchset-created')
        real = _corpus('06-patchset-created.json')
        assert set(created) == set(real)
        assert set(created['change']) >= set(real['change'])
        assert set(created['patchSet']) >= set(real['patchSet']) - {'sizeInsertions',
                                                                      'sizeDeletions'}
        assert created['change']['number'] == change.number
        assert created['patchSet']['ref'] == f'refs/changes/{change.number:02d}/' \
                                              f'{change.number}/1'
        store.submit(change)
        merged = stream.next('change-merged')
        assert set(merged) == set(_corpus('10-change-merged.json'))
        updated = stream.next('ref-updated')
        assert _shape(updated) == _shape(_corpus('04-ref-updated-heads_test_branch.json'))
        assert updated['refUpdate']['newRev'] == store.branch_head('org/project', 'master')
    finally:
        stream.close()


def test_query_json_with_dependencies(dev_gerrit):
    store = dev_gerrit.store
    store.create_project('org/project')
    a = store.create_change('org/project', 'master', 'A', {'a': '1'})
    b = store.create_change('org/project', 'master', 'B', {'b': '1'}, parent=a,
                            footer='Depends-On: https://review.example.com/c/other/+/9')
    out = _ssh(dev_gerrit, 'gerrit', 'query', '--format', 'JSON', '--current-patch-set',
               '--dependencies', '--commit-message', '--files', f'change:{b.number}').stdout
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[-1]['type'] == 'stats' and lines[-1]['rowCount'] == 1
    row = lines[0]
    assert row['number'] == b.number and row['open'] is True and row['status'] == 'NEW'
    assert row['dependsOn'][0]['number'] == a.number
    assert 'Depends-On: https://review.example.com/c/other/+/9' in row['commitMessage']
    assert {'file': 'b', 'type': 'ADDED'} in row['currentPatchSet']['files']
    out = _ssh(dev_gerrit, 'gerrit', 'query', '--format', 'JSON', '--dependencies',
               f'change:{a.number}').stdout
    assert json.loads(out.splitlines()[0])['neededBy'][0]['number'] == b.number


def test_review_votes_and_submits(dev_gerrit):
    store = dev_gerrit.store
    store.create_project('org/project')
    change = store.create_change('org/project', 'master', 'A', {'a': '1'})
    stream = _Stream(dev_gerrit)
    try:
        _wait_streams(dev_gerrit, 1)
        _ssh(dev_gerrit, 'gerrit', 'review', '--project', 'org/project', '--message',
             'Build succeeded (gate pipeline).', '--label', 'Verified=2', '--submit',
             f'{change.number},1')
        comment = stream.next('comment-added')
        assert comment['author']['username'] == 'zuul'
        assert comment['approvals'] == [{'type': 'Verified', 'description': 'Verified',
                                         'value': '2'}]
        assert 'Build succeeded' in comment['comment']
        assert stream.next('change-merged')['change']['status'] == 'MERGED'
    finally:
        stream.close()
    assert change.status == 'MERGED'
    assert store.branch_head('org/project', 'master') == change.current.revision


def test_git_clone_and_fetch_change_ref_over_ssh(dev_gerrit, tmp_path):
    store = dev_gerrit.store
    store.create_project('org/project', {'README': 'hello\n'})
    change = store.create_change('org/project', 'master', 'A', {'a.txt': 'change\n'})
    dest = tmp_path / 'clone'
    env = dev_gerrit.git_env()
    subprocess.run(['git', 'clone', '-q', dev_gerrit.git_url('org/project'), str(dest)],
                   env=env, check=True, timeout=60)
    assert (dest / 'README').read_text() == 'hello\n'
    subprocess.run(['git', '-C', str(dest), 'fetch', '-q', 'origin', change.current.ref],
                   env=env, check=True, timeout=60)
    rev = subprocess.run(['git', '-C', str(dest), 'rev-parse', 'FETCH_HEAD'],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert rev == change.current.revision


def test_errors_are_reported_not_fatal(dev_gerrit):
    store = dev_gerrit.store
    store.create_project('org/project', {'f': 'base\n'})
    assert _ssh(dev_gerrit, 'gerrit', 'frobnicate', check=False).returncode == 1
    bad = _ssh(dev_gerrit, 'gerrit', 'query', '--format', 'JSON', 'bogus:1', check=False)
    assert bad.returncode == 1 and 'unsupported query operator' in bad.stderr
    missing = _ssh(dev_gerrit, 'gerrit', 'review', '--message', 'x', '999,1', check=False)
    assert missing.returncode == 1 and 'not found' in missing.stderr
    # Two changes editing the same line: the second cannot be submitted.
    a = store.create_change('org/project', 'master', 'A', {'f': 'a\n'})
    b = store.create_change('org/project', 'master', 'B', {'f': 'b\n'})
    store.submit(a)
    conflict = _ssh(dev_gerrit, 'gerrit', 'review', '--submit', f'{b.number},1',
                    check=False)
    assert conflict.returncode == 1 and 'could not be merged' in conflict.stderr
    assert b.status == 'NEW'
    # the server still answers
    assert _ssh(dev_gerrit, 'gerrit', 'version').returncode == 0


def test_unknown_key_is_refused(dev_gerrit, tmp_path):
    other = tmp_path / 'other_key'
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', str(other)],
                   check=True)
    args = dev_gerrit.ssh_args()
    args[args.index('-i') + 1] = str(other)
    proc = subprocess.run(args + ['gerrit', 'version'], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 255
    assert 'Permission denied' in proc.stderr


def test_dropped_stream_and_refused_reconnect(dev_gerrit):
    stream = _Stream(dev_gerrit)
    try:
        _wait_streams(dev_gerrit, 1)
        dev_gerrit.server.accept_streams = False
        assert dev_gerrit.server.drop_stream_connections() == 1
        assert stream.next(timeout=30) is None
        refused = _ssh(dev_gerrit, 'gerrit', 'stream-events', check=False)
        assert refused.returncode == 1
    finally:
        stream.close()


@pytest.mark.corpus
@pytest.mark.parametrize('name', ['06-patchset-created.json', '10-change-merged.json'])
def test_corpus_samples_are_readable(name):
    assert _corpus(name)['type'] in ('patchset-created', 'change-merged')
