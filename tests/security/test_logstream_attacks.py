"""Issue 14: symlinks planted in a build's ``work/`` by an untrusted playbook.

``work/`` is writable inside the sandbox, so an untrusted playbook can turn
``work/logs/job-output.txt`` (or ``logs/``, or ``work/`` itself),
``job-output.json`` or ``results.json`` into a symlink to a file of the
executor.  Neither the live log streamer (anonymous HTTP readers) nor a
later trusted playbook's callback or ``zuul_return`` (unconfined on the
executor) may follow it: the target is never served, nor written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from zuul.executor.logstream import REFUSED_LINE, LogStreamServer

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CANARY = 'CANARY-executor-secret-6f1d2c\n'
TIMEOUT = 10


@pytest.fixture
def canary(tmp_path):
    """A host file outside every job dir that must never be read or written."""
    secret_dir = tmp_path / 'executor-private'
    secret_dir.mkdir()
    path = secret_dir / 'secret.txt'
    path.write_text(CANARY)
    return path


def _jobdir(tmp_path, uuid):
    root = tmp_path / 'builds' / uuid
    (root / 'work' / 'logs').mkdir(parents=True)
    return root


# -- the live log streamer ---------------------------------------------------

@pytest.fixture
def streamer():
    server = LogStreamServer('127.0.0.1', 0)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _fetch(server, uuid):
    """(status, body) of a GET of ``uuid``'s live log."""
    try:
        with urllib.request.urlopen(server.url(uuid), timeout=TIMEOUT) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _register(server, uuid, root, by_root):
    path = str(root / 'work' / 'logs' / 'job-output.txt')
    if by_root:  # as the executor does: the job dir (the sandbox's mount point)
        server.register(uuid, path, root=str(root))
    else:  # the default root: work/
        server.register(uuid, path)


@pytest.mark.parametrize('by_root', [True, False], ids=['jobdir-root', 'default-root'])
def test_symlinked_log_file_is_not_served(streamer, tmp_path, canary, by_root):
    root = _jobdir(tmp_path, 'b1')
    os.symlink(canary, root / 'work' / 'logs' / 'job-output.txt')
    _register(streamer, 'b1', root, by_root)
    status, body = _fetch(streamer, 'b1')
    assert status == 404
    assert CANARY.strip().encode() not in body
    assert canary.read_text() == CANARY


@pytest.mark.parametrize('by_root', [True, False], ids=['jobdir-root', 'default-root'])
def test_symlinked_logs_dir_is_not_served(streamer, tmp_path, canary, by_root):
    root = _jobdir(tmp_path, 'b2')
    (canary.parent / 'job-output.txt').write_text(CANARY)
    os.rmdir(root / 'work' / 'logs')
    os.symlink(canary.parent, root / 'work' / 'logs')
    _register(streamer, 'b2', root, by_root)
    status, body = _fetch(streamer, 'b2')
    assert status == 404
    assert CANARY.strip().encode() not in body


@pytest.mark.parametrize('by_root', [True, False], ids=['jobdir-root', 'default-root'])
def test_symlinked_work_dir_is_not_served(streamer, tmp_path, canary, by_root):
    root = _jobdir(tmp_path, 'b3')
    fake_work = canary.parent / 'work'
    (fake_work / 'logs').mkdir(parents=True)
    (fake_work / 'logs' / 'job-output.txt').write_text(CANARY)
    os.rename(root / 'work', root / 'old-work')
    os.symlink(fake_work, root / 'work')
    _register(streamer, 'b3', root, by_root)
    status, body = _fetch(streamer, 'b3')
    assert status == 404
    assert CANARY.strip().encode() not in body


def test_fifo_log_is_refused_without_hanging(streamer, tmp_path):
    root = _jobdir(tmp_path, 'b4')
    os.mkfifo(root / 'work' / 'logs' / 'job-output.txt')
    _register(streamer, 'b4', root, True)
    assert _fetch(streamer, 'b4')[0] == 404


def test_regular_log_streams(streamer, tmp_path):
    root = _jobdir(tmp_path, 'b5')
    log = root / 'work' / 'logs' / 'job-output.txt'
    log.write_text('line 1\n')
    _register(streamer, 'b5', root, True)
    response = urllib.request.urlopen(streamer.url('b5'), timeout=TIMEOUT)
    assert response.status == 200
    received = b''
    while b'line 1\n' not in received:
        received += response.read1(65536)
    with log.open('a') as f:
        f.write('line 2\n')
    streamer.finish('b5')
    received += response.read()
    assert received == b'line 1\nline 2\n'


def _stream_from_start(server, uuid):
    """Open the stream before the log exists."""
    response = urllib.request.urlopen(server.url(uuid), timeout=TIMEOUT)
    assert response.status == 200
    return response


def test_log_created_after_the_stream_started(streamer, tmp_path):
    root = _jobdir(tmp_path, 'b6')
    _register(streamer, 'b6', root, True)
    response = _stream_from_start(streamer, 'b6')
    log = root / 'work' / 'logs' / 'job-output.txt'
    log.write_text('late line\n')
    received = b''
    while b'late line\n' not in received:
        received += response.read1(65536)
    streamer.finish('b6')
    received += response.read()
    assert received == b'late line\n'


@pytest.mark.parametrize('by_root', [True, False], ids=['jobdir-root', 'default-root'])
def test_symlink_planted_after_the_stream_started(streamer, tmp_path, canary, by_root):
    root = _jobdir(tmp_path, 'b7')
    _register(streamer, 'b7', root, by_root)
    response = _stream_from_start(streamer, 'b7')
    os.symlink(canary, root / 'work' / 'logs' / 'job-output.txt')
    body = response.read()  # the stream ends on its own with an error line
    assert body == REFUSED_LINE
    assert CANARY.strip().encode() not in body


def test_register_refuses_a_path_outside_its_root(streamer, tmp_path):
    root = _jobdir(tmp_path, 'b8')
    with pytest.raises(OSError):
        streamer.register('b8', str(tmp_path / 'elsewhere.txt'), root=str(root))


# -- the callback and zuul_return in a trusted playbook ---------------------

PLAYBOOK = """\
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: say something
      debug:
        msg: hello from the playbook
    - name: return data
      zuul_return:
        data:
          zuul:
            artifacts:
              - name: docs
                url: docs/
"""


def _run_trusted_playbook(tmp_path, root, *, work_root_env=True):
    """ansible-playbook configured as the executor configures a trusted run."""
    plugins = os.path.join(REPO_ROOT, 'zuul', 'ansible')
    ansible_dir = tmp_path / 'ansible'
    home = tmp_path / 'home'
    (home / 'tmp').mkdir(parents=True, exist_ok=True)
    ansible_dir.mkdir(exist_ok=True)
    (ansible_dir / 'inventory.yaml').write_text(
        'all:\n  hosts:\n    localhost:\n      ansible_connection: local\n'
        f'      ansible_python_interpreter: {sys.executable}\n')
    (ansible_dir / 'ansible.cfg').write_text('\n'.join([
        '[defaults]',
        f'inventory = {ansible_dir / "inventory.yaml"}',
        f'local_tmp = {home / "tmp"}',
        'stdout_callback = zuul_stream',
        f'callback_plugins = {os.path.join(plugins, "callback")}',
        f'action_plugins = {os.path.join(plugins, "action")}',
        'retry_files_enabled = False',
        'interpreter_python = auto_silent',
        'deprecation_warnings = False',
        '',
    ]))
    (ansible_dir / 'playbook.yaml').write_text(PLAYBOOK)
    work = root / 'work'
    env = {
        'PATH': os.environ.get('PATH', '/usr/bin:/bin'),
        'LANG': 'C.UTF-8',
        'HOME': str(home),
        'TMPDIR': str(home / 'tmp'),
        'ANSIBLE_CONFIG': str(ansible_dir / 'ansible.cfg'),
        'ZUUL_JOB_OUTPUT_TXT': str(work / 'logs' / 'job-output.txt'),
        'ZUUL_JOB_OUTPUT_JSON': str(work / 'logs' / 'job-output.json'),
        'ZUUL_RESULT_FILE': str(work / 'results.json'),
        'ZUUL_JOBDIR': str(root),
        'ZUUL_PHASE': 'post',
        'ZUUL_PLAYBOOK': 'trusted/post.yaml',
        'ZUUL_TRUSTED': '1',
        'ZUUL_UNTRUSTED': '0',
        'PYTHONPATH': REPO_ROOT,
    }
    if work_root_env:
        env['ZUUL_WORK_ROOT'] = str(work)
    playbook_bin = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')
    return subprocess.run([playbook_bin, str(ansible_dir / 'playbook.yaml')], env=env,
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=300,
                          check=False)


def test_trusted_playbook_writes_its_logs_and_results(tmp_path):
    """The baseline: nothing planted, everything written."""
    root = _jobdir(tmp_path, 'good')
    proc = _run_trusted_playbook(tmp_path, root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    work = root / 'work'
    text = (work / 'logs' / 'job-output.txt').read_text()
    assert 'TASK [say something]' in text and 'hello' not in proc.stderr
    entries = json.loads((work / 'logs' / 'job-output.json').read_text())
    assert entries[0]['playbook'] == 'trusted/post.yaml' and entries[0]['trusted']
    results = json.loads((work / 'results.json').read_text())
    assert results == {'zuul': {'artifacts': [{'name': 'docs', 'url': 'docs/'}]}}
    assert 'refusing' not in proc.stderr


@pytest.mark.parametrize('work_root_env', [True, False], ids=['ZUUL_WORK_ROOT', 'derived'])
def test_planted_file_symlinks_are_never_written(tmp_path, canary, work_root_env):
    root = _jobdir(tmp_path, 'evil')
    work = root / 'work'
    links = [work / 'logs' / 'job-output.txt', work / 'logs' / 'job-output.json',
             work / 'results.json']
    for link in links:
        os.symlink(canary, link)
    proc = _run_trusted_playbook(tmp_path, root, work_root_env=work_root_env)
    output = proc.stdout + proc.stderr
    assert canary.read_text() == CANARY
    for link in links:
        assert os.path.islink(link)
    assert 'refusing to write the text log job-output.txt' in proc.stderr
    assert 'refusing to write the JSON log job-output.json' in proc.stderr
    # zuul_return fails its task, with a clear message, and the playbook fails
    assert proc.returncode != 0
    assert "refusing to write the result file results.json: 'results.json' is a symlink" \
        in output


def test_planted_logs_dir_symlink_is_never_written(tmp_path, canary):
    root = _jobdir(tmp_path, 'evil-dir')
    work = root / 'work'
    for name in ('job-output.txt', 'job-output.json'):
        (canary.parent / name).write_text(CANARY)
    os.rmdir(work / 'logs')
    os.symlink(canary.parent, work / 'logs')
    proc = _run_trusted_playbook(tmp_path, root)
    for name in ('job-output.txt', 'job-output.json'):
        assert (canary.parent / name).read_text() == CANARY
    assert sorted(os.listdir(canary.parent)) == ['job-output.json', 'job-output.txt',
                                                 'secret.txt']
    assert 'refusing to write the text log' in proc.stderr
    assert 'refusing to write the JSON log' in proc.stderr
    assert proc.returncode == 0, proc.stdout + proc.stderr  # results.json was fine
    assert json.loads((work / 'results.json').read_text())['zuul']['artifacts']


def test_planted_work_dir_symlink_is_never_written(tmp_path, canary):
    root = _jobdir(tmp_path, 'evil-work')
    fake_work = canary.parent / 'work'
    (fake_work / 'logs').mkdir(parents=True)
    os.rename(root / 'work', root / 'old-work')
    os.symlink(fake_work, root / 'work')
    proc = _run_trusted_playbook(tmp_path, root)
    assert proc.returncode != 0
    assert os.listdir(fake_work / 'logs') == []
    assert sorted(os.listdir(fake_work)) == ['logs']
    assert 'refusing to write the result file results.json' in proc.stdout + proc.stderr
