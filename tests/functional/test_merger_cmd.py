# ruff: noqa: F811 - pytest fixtures imported from test_merger_support
"""The zuul-merger daemon: zuul.conf in, merges over Gearman, SIGTERM out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.functional.test_merger_support import change_ref, upstream  # noqa: F401
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
