"""Uploading changes to the development code-review server as to Gerrit:
a real ``git clone`` / ``scp`` / ``git push origin HEAD:refs/for/master``
over its SSH port, then ``gerrit review`` with each documented flag."""

import json
import os
import queue
import shlex
import subprocess
import threading

import pytest

from tests.functional.system_support import zuul_system  # noqa: F401 - fixture
from tests.harness.waiting import wait_for
from zuul.devtools.gerrit import hooks
from zuul.devtools.gerrit.store import ReviewError, footer_change_id

SSH_OPTS = '-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes'


class Client:
    """A developer's checkout, talking to the server with OpenSSH and git."""

    def __init__(self, gerrit, root, user='dev'):
        self.gerrit = gerrit
        self.user = user
        self.port = gerrit.server.port
        self.dir = str(root / 'work')
        self.env = dict(os.environ, GIT_SSH_COMMAND=f'ssh -i {gerrit.key_path} {SSH_OPTS}',
                        GIT_AUTHOR_NAME='Dev', GIT_AUTHOR_EMAIL='dev@example.com',
                        GIT_COMMITTER_NAME='Dev', GIT_COMMITTER_EMAIL='dev@example.com',
                        GIT_CONFIG_NOSYSTEM='1', HOME=str(root))

    def run(self, *argv, check=True, cwd=None):
        proc = subprocess.run(argv, cwd=cwd or self.dir, env=self.env, capture_output=True,
                              text=True, timeout=60)
        if check and proc.returncode:
            raise AssertionError(f'{argv}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}')
        return proc

    def git(self, *args, check=True):
        return self.run('git', *args, check=check)

    def clone(self, project='org/project'):
        self.run('git', 'clone', f'ssh://{self.user}@127.0.0.1:{self.port}/{project}',
                 self.dir, cwd=os.path.dirname(self.dir))

    def scp_hook(self, *extra):
        gitdir = os.path.join(self.dir, '.git')
        self.run('scp', *extra, '-p', '-P', str(self.port), '-i', self.gerrit.key_path,
                 *shlex.split(SSH_OPTS), f'{self.user}@127.0.0.1:hooks/commit-msg',
                 f'{gitdir}/hooks/')
        return os.path.join(gitdir, 'hooks', 'commit-msg')

    def commit(self, path, content, message, *extra):
        with open(os.path.join(self.dir, path), 'w') as f:
            f.write(content)
        self.git('add', path)
        # No message: amend keeping the old one (and its Change-Id).
        how = ['--amend', '--no-edit'] if message is None else ['-m', message]
        self.git('commit', '-q', *extra, *how)
        return self.head()

    def head(self):
        return self.git('rev-parse', 'HEAD').stdout.strip()

    def push(self, ref='HEAD:refs/for/master', check=True):
        return self.git('push', 'origin', ref, check=check)

    def ssh(self, *command, user=None, check=True):
        remote = ' '.join(shlex.quote(c) for c in command)
        return self.run('ssh', '-p', str(self.port), '-i', self.gerrit.key_path,
                        *shlex.split(SSH_OPTS), f'{user or self.user}@127.0.0.1', remote,
                        check=check)

    def query(self, *terms):
        out = self.ssh('gerrit', 'query', '--format', 'JSON', '--current-patch-set',
                       '--patch-sets', '--files', *terms).stdout
        rows = [json.loads(line) for line in out.splitlines()]
        assert rows[-1]['type'] == 'stats'
        return rows[:-1]


class Stream:
    """``gerrit stream-events`` over a real ssh client."""

    def __init__(self, client):
        self.proc = subprocess.Popen(
            ['ssh', '-p', str(client.port), '-i', client.gerrit.key_path,
             *shlex.split(SSH_OPTS), 'zuul@127.0.0.1', 'gerrit stream-events'],
            stdout=subprocess.PIPE, text=True)
        self.events: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        wait_for(lambda: client.gerrit.server.stream_count() == 1, what='stream-events')

    def _read(self):
        for line in self.proc.stdout:
            self.events.put(json.loads(line))

    def next(self, kind, timeout=30):
        while True:
            event = self.events.get(timeout=timeout)
            if event['type'] == kind:
                return event

    def close(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def client(dev_gerrit, tmp_path):
    dev_gerrit.store.create_project('org/project', {'README': 'hello\n'})
    c = Client(dev_gerrit, tmp_path)
    c.clone()
    return c


@pytest.fixture
def stream(client):
    s = Stream(client)
    try:
        yield s
    finally:
        s.close()


def test_push_for_review_creates_a_change_then_a_patch_set(client, stream):
    hook = client.scp_hook()
    assert os.access(hook, os.X_OK)
    with open(hook, 'rb') as f:
        assert f.read() == hooks.COMMIT_MSG_HOOK.encode()
    sha1 = client.commit('a.txt', 'one\n', 'Add a file\n\nWith a body.')
    message = client.git('log', '-1', '--format=%B').stdout
    change_id = footer_change_id(sha1, message)

    push = client.push()
    assert 'SUCCESS' in push.stderr and '[NEW]' in push.stderr
    assert '/c/org/project/+/1 Add a file' in push.stderr
    [row] = client.query('status:open', 'project:org/project')
    assert row['number'] == 1 and row['id'] == change_id
    assert row['subject'] == 'Add a file' and row['branch'] == 'master'
    assert row['owner']['username'] == 'dev'
    ps = row['currentPatchSet']
    assert ps['number'] == 1 and ps['revision'] == sha1
    assert ps['ref'] == 'refs/changes/01/1/1'
    assert {'file': 'a.txt', 'type': 'ADDED'} in ps['files']
    created = stream.next('patchset-created')
    assert created['change']['number'] == 1 and created['patchSet']['revision'] == sha1
    assert created['uploader']['username'] == 'dev'

    # The same commit again: nothing new.
    again = client.push(check=False)
    assert again.returncode != 0 and '(no new changes)' in again.stderr

    # Amend it (the hook keeps the Change-Id): patch set 2.
    sha2 = client.commit('a.txt', 'two\n', None)
    assert footer_change_id(sha2, client.git('log', '-1', '--format=%B').stdout) == change_id
    push = client.push()
    assert 'updated: 1' in push.stderr
    [row] = client.query('change:1')
    assert [p['number'] for p in row['patchSets']] == [1, 2]
    assert row['currentPatchSet']['revision'] == sha2
    assert row['currentPatchSet']['ref'] == 'refs/changes/01/1/2'
    created = stream.next('patchset-created')
    assert created['patchSet']['number'] == 2 and created['patchSet']['revision'] == sha2
    assert created['change']['id'] == change_id

    # Anyone can fetch the patch set back.
    client.git('fetch', '-q', 'origin', 'refs/changes/01/1/2')
    assert client.git('rev-parse', 'FETCH_HEAD').stdout.strip() == sha2
    # The branch itself did not move.
    assert client.gerrit.store.branch_head('org/project', 'master') == \
        client.git('rev-parse', 'origin/master').stdout.strip()


def test_push_without_change_id_is_rejected_with_the_hook_hint(client):
    sha = client.commit('a.txt', 'one\n', 'No footer here')
    push = client.push(check=False)
    assert push.returncode != 0
    assert f'! [remote rejected] HEAD -> refs/for/master (commit {sha[:7]}: missing ' \
           'Change-Id in message footer)' in push.stderr
    assert f'scp -p -P {client.port} dev@127.0.0.1:hooks/commit-msg' in push.stderr
    assert 'git commit --amend --no-edit' in push.stderr
    assert client.gerrit.store.changes == {}
    # Following the hint works (here with scp's original protocol).
    client.scp_hook('-O')
    client.git('commit', '-q', '--amend', '--no-edit')
    assert 'Change-Id: I' in client.git('log', '-1', '--format=%B').stdout
    client.push()
    assert list(client.gerrit.store.changes) == [1]


def test_chains_topics_and_refusals(client):
    client.scp_hook()
    a = client.commit('a.txt', 'a\n', 'First')
    b = client.commit('b.txt', 'b\n', 'Second')
    push = client.push('HEAD:refs/for/master%topic=feature')
    assert 'new: 2' in push.stderr
    first, second = sorted(client.query('topic:feature'), key=lambda r: r['number'])
    assert (first['currentPatchSet']['revision'], second['currentPatchSet']['revision']) \
        == (a, b)
    out = client.ssh('gerrit', 'query', '--format', 'JSON', '--dependencies',
                     f'change:{second["number"]}').stdout
    assert json.loads(out.splitlines()[0])['dependsOn'][0]['number'] == first['number']

    # A branch only moves by submit.
    direct = client.push('HEAD:refs/heads/master', check=False)
    assert direct.returncode != 0
    assert 'prohibited by Gerrit: not permitted: update' in direct.stderr
    assert 'refs/for/master' in direct.stderr
    created = client.push('HEAD:refs/heads/new-branch', check=False)
    assert 'not permitted: create' in created.stderr
    assert client.gerrit.store.branch_head('org/project', 'new-branch') is None
    nobranch = client.push('HEAD:refs/for/nope', check=False)
    assert nobranch.returncode != 0 and 'branch nope not found' in nobranch.stderr

    # A merged change takes no more patch sets.
    store = client.gerrit.store
    store.submit(store.get_change(first['number']))
    client.git('reset', '-q', '--hard', 'HEAD~1')
    client.commit('a.txt', 'again\n', None)
    closed = client.push(check=False)
    assert closed.returncode != 0 and 'closed' in closed.stderr


def test_review_flags(client, stream):
    client.scp_hook()
    sha = client.commit('a.txt', 'a\n', 'Reviewed change')
    client.push()
    stream.next('patchset-created')

    def review(*args, user='core', check=True):
        return client.ssh('gerrit', 'review', *args, user=user, check=check)

    def approvals():
        [row] = client.query('change:1')
        return {(a['type'], a['value'], a['by']['username'])
                for a in row['currentPatchSet'].get('approvals', [])}

    review('--code-review', '+2', '--message', 'Looks good', '1,1')
    event = stream.next('comment-added')
    assert event['author']['username'] == 'core'
    assert event['approvals'] == [{'type': 'Code-Review', 'description': 'Code-Review',
                                   'value': '2'}]
    assert event['comment'] == 'Patch Set 1:\n\nLooks good'
    review('--verified', '1', '-m', 'Tests pass', sha, user='ci')
    assert stream.next('comment-added')['approvals'][0]['type'] == 'Verified'
    review('--label', 'Code-Review=-1', '--label', 'Verified=-1', sha[:8], user='other')
    event = stream.next('comment-added')
    assert {a['type']: a['value'] for a in event['approvals']} == {
        'Code-Review': '-1', 'Verified': '-1'}
    assert approvals() == {('Code-Review', '2', 'core'), ('Verified', '1', 'ci'),
                           ('Code-Review', '-1', 'other'), ('Verified', '-1', 'other')}
    # A plain comment (recheck) is a comment-added without votes.
    review('-m', 'recheck', '--project', 'org/project', '--branch', 'master', '1,1',
           user='dev')
    event = stream.next('comment-added')
    assert event['approvals'] == [] and event['comment'].endswith('\n\nrecheck')

    # Errors, worded as Gerrit's.
    bad = review('--frobnicate', '1,1', check=False)
    assert bad.returncode == 1 and '"--frobnicate" is not a valid option' in bad.stderr
    assert 'Argument "{COMMIT | CHANGE,PATCHSET}" is required' in \
        review('-m', 'x', check=False).stderr
    assert 'not a valid value for "Code-Review"' in \
        review('--code-review', '3', '1,1', check=False).stderr
    assert 'not a valid value for "Workflow"' in \
        review('--workflow', '2', '1,1', check=False).stderr
    assert 'not found' in review('--project', 'other/project', '1,1', check=False).stderr
    assert 'not found' in review('--branch', 'stable', sha, check=False).stderr
    assert 'not found' in review('1,7', check=False).stderr
    assert 'takes an operand' in review('1,1', '--message', check=False).stderr
    assert 'mutually exclusive' in review('--abandon', '--restore', '1,1',
                                          check=False).stderr

    review('--abandon', '-m', 'Not now', '1,1', user='dev')
    event = stream.next('change-abandoned')
    assert event['reason'] == 'Not now'
    assert client.query('change:1')[0]['status'] == 'ABANDONED'
    review('--restore', '1,1', user='dev')
    stream.next('change-restored')
    assert client.query('change:1')[0]['status'] == 'NEW'

    # Approve as a core reviewer would, then submit.
    review('--code-review', '2', '--workflow', '1', '1,1')
    event = stream.next('comment-added')
    assert {a['type']: a['value'] for a in event['approvals']} == {
        'Code-Review': '2', 'Workflow': '1'}
    review('--verified', '2', '--submit', '1,1', user='zuul')
    assert stream.next('change-merged')['change']['number'] == 1
    assert client.query('change:1')[0]['status'] == 'MERGED'
    assert client.gerrit.store.branch_head('org/project', 'master') == sha


@pytest.mark.parametrize('message,error', [
    ('Subject\n\nChange-Id: I' + 'a' * 40 + '\n', None),
    ('Subject\n\nBody\n\nSigned-off-by: X <x@y>\nChange-Id: I' + 'b' * 40 + '\n', None),
    ('Subject only\n', 'missing Change-Id in message footer'),
    ('Subject\n\nChange-Id: I' + 'a' * 40 + '\n\nLater paragraph\n',
     'Change-Id must be in message footer'),
    ('Change-Id: I' + 'a' * 40 + '\n', 'missing subject'),
    ('Subject\n\nChange-Id: Ixyz\n', 'invalid Change-Id line format'),
    ('Subject\n\nChange-Id: I' + 'a' * 40 + '\nChange-Id: I' + 'b' * 40 + '\n',
     'multiple Change-Id lines'),
])
def test_change_id_footer(message, error):
    if error is None:
        assert footer_change_id('0' * 40, message).startswith('I')
    else:
        with pytest.raises(ReviewError, match=error):
            footer_change_id('1234567' + '0' * 33, message)


def test_review_json_from_stdin(client, stream):
    client.scp_hook()
    client.commit('a.txt', 'a\n', 'Reviewed with JSON')
    client.push()
    review = {'message': 'Build succeeded.', 'labels': {'Verified': 1}, 'tag': 'autogenerated'}
    proc = subprocess.run(['ssh', '-p', str(client.port), '-i', client.gerrit.key_path,
                           *shlex.split(SSH_OPTS), 'zuul@127.0.0.1',
                           'gerrit review --json 1,1'], input=json.dumps(review),
                          capture_output=True, text=True, timeout=60, env=client.env)
    assert proc.returncode == 0, proc.stderr
    event = stream.next('comment-added')
    assert event['approvals'][0]['type'] == 'Verified'
    assert event['comment'].endswith('Build succeeded.')


def test_pushed_change_is_checked_and_gated(zuul_system, tmp_path):  # noqa: F811
    """The newcomer's path through a running Zuul: push, fix, approve."""
    system = zuul_system
    system.create_projects()
    system.start()
    dev = Client(system.gerrit, tmp_path)
    dev.clone('org/app')
    dev.scp_hook()
    dev.commit('FAIL', 'yes\n', 'My change')
    dev.push()
    change = system.store.get_change(1)
    wait_for(lambda: system.verified(change) == -1, timeout=240, what='check -1 on PS1')
    # Fix it: the amended commit is patch set 2, checked again.
    dev.git('rm', '-q', 'FAIL')
    fixed = dev.commit('app.py', 'ok\n', None)
    dev.push()
    assert change.current.number == 2 and change.current.revision == fixed
    wait_for(lambda: system.verified(change) == 1, timeout=240, what='check +1 on PS2')
    dev.ssh('gerrit', 'review', '--code-review', '2', '--workflow', '1', fixed, user='core')
    wait_for(lambda: change.status == 'MERGED', timeout=300, what='gate merge')
    dev.git('pull', '-q', '--ff-only', 'origin', 'master')
    assert dev.head() == system.store.branch_head('org/app', 'master')
    assert os.path.exists(os.path.join(dev.dir, 'app.py'))
