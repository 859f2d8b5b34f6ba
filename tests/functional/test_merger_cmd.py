# ruff: noqa: F811 - pytest fixtures imported from test_merger_support
"""The zuul-merger daemon: zuul.conf in, merges over Gearman, SIGTERM out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.functional.test_merger_support import change_ref, upstream  # noqa: F401
from tests.harness.waiting import wait_for
from zuul.merger.client import MergeClient
from zuul.merger.protocol import MergeItem

CONF = """\
[gearman]
server=127.0.0.1
port={port}

[merger]
git_dir={git_dir}
git_user_name=Daemon Merger
git_user_email=daemon@example.org

[connection "gerrit"]
driver=git
baseurl={upstream}
"""


def test_daemon_merges_and_stops_on_sigterm(tmp_path, gearman_server, upstream):
    upstream.create('org/project', {'a.txt': 'a\n'})
    upstream.add_change('org/project', 1, {'b.txt': 'b\n'})
    upstream.add_change('org/project', 2, {'c.txt': 'c\n'})
    conf = tmp_path / 'zuul.conf'
    conf.write_text(CONF.format(port=gearman_server.port, git_dir=tmp_path / 'git',
                                upstream=upstream.root))
    proc = subprocess.Popen([sys.executable, '-m', 'zuul.cmd.merger', '-c', str(conf), '-d'],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    client = MergeClient('127.0.0.1', gearman_server.port)
    try:
        items = [MergeItem('gerrit', 'org/project', 'master', change_ref(n), n, 1)
                 for n in (1, 2)]
        result = client.merge_items(items, None, event_id='ev-daemon').wait(120)
        assert result is not None and result.merged, result
        repo = os.path.join(tmp_path, 'git', 'gerrit', 'org/project')
        assert os.path.isdir(repo)
        identity = subprocess.run(['git', 'log', '-1', '--format=%cn <%ce>', result.commit],
                                  cwd=repo, capture_output=True, text=True).stdout.strip()
        assert identity == 'Daemon Merger <daemon@example.org>'
    finally:
        client.stop()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert b'[e: ev-daemon]' in out


def test_daemon_refuses_a_missing_config(tmp_path):
    proc = subprocess.run([sys.executable, '-m', 'zuul.cmd.merger', '-c',
                           str(tmp_path / 'nope.conf'), '-d'], capture_output=True, text=True)
    assert proc.returncode == 2
    assert 'nope.conf' in proc.stderr


def test_command_socket_pause_resume_and_stop(tmp_path, gearman_server, upstream):
    import time
    upstream.create('org/project', {'a.txt': 'a\n'})
    upstream.add_change('org/project', 1, {'b.txt': 'b\n'})
    conf = tmp_path / 'zuul.conf'
    conf.write_text(CONF.format(port=gearman_server.port, git_dir=tmp_path / 'git',
                                upstream=upstream.root))
    top = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    cmd = [sys.executable, '-m', 'zuul.cmd.merger', '-c', str(conf)]
    assert subprocess.run(cmd + ['pause'], capture_output=True, cwd=top).returncode == 1
    proc = subprocess.Popen(cmd + ['-d'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            cwd=top)
    client = MergeClient('127.0.0.1', gearman_server.port)
    try:
        socket = tmp_path / 'merger.socket'
        deadline = time.monotonic() + 60
        while not socket.exists():
            assert time.monotonic() < deadline and proc.poll() is None, 'no command socket'
            time.sleep(0.05)
        out = subprocess.run(cmd + ['pause'], capture_output=True, text=True, cwd=top)
        assert (out.returncode, out.stdout.strip()) == (0, 'ok')
        item = MergeItem('gerrit', 'org/project', 'master', change_ref(1), 1, 1)
        handle = client.merge_items([item], None)
        assert handle.wait(3) is None           # paused: nobody takes the job
        assert subprocess.run(cmd + ['resume'], capture_output=True, cwd=top).returncode == 0
        result = handle.wait(120)
        assert result is not None and result.merged
        assert subprocess.run(cmd + ['stop'], capture_output=True, cwd=top).returncode == 0
        proc.wait(60)
    finally:
        client.stop()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert not socket.exists()


def test_a_second_daemon_on_the_same_git_dir_is_refused(tmp_path, gearman_server, upstream):
    conf = tmp_path / 'zuul.conf'
    conf.write_text(CONF.format(port=gearman_server.port, git_dir=tmp_path / 'git',
                                upstream=upstream.root))
    top = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    cmd = [sys.executable, '-m', 'zuul.cmd.merger', '-c', str(conf), '-d']
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=top)
    try:
        wait_for(lambda: (tmp_path / 'merger.socket').exists(), timeout=60,
                 what='the first merger serving')
        second = subprocess.run(cmd, capture_output=True, text=True, cwd=top, timeout=60)
        assert second.returncode == 2
        assert f'git_dir {tmp_path / "git"} is in use by zuul-merger (pid {proc.pid})' \
            in second.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    # Its claim ends with it: a merger starts on that git_dir again.
    (tmp_path / 'merger.socket').unlink(missing_ok=True)
    again = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=top)
    try:
        wait_for(lambda: (tmp_path / 'merger.socket').exists() or again.poll() is not None,
                 timeout=60, what='the merger started again')
        assert again.poll() is None
    finally:
        again.kill()
        again.communicate(timeout=60)
