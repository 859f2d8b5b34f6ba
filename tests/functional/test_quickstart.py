"""The README's "run the system" command, non-interactively: the whole
system comes up on embedded defaults and the scenario ends with the good
changes merged and the broken one rejected."""

from __future__ import annotations

import os
import subprocess
import sys

from nodepool.zk.localserver import free_port

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_quickstart_scenario(tmp_path):
    proc = subprocess.run(
        [sys.executable, os.path.join(TOP, 'tools', 'quickstart.py'), '--no-wait',
         '--state-dir', str(tmp_path / 'state'), '--web-port', str(free_port())],
        capture_output=True, text=True, timeout=900)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert 'Status page: http://127.0.0.1:' in out
    assert 'check: change 2 "Break the tests" got Verified -1' in out
    assert 'gate: 2,1 on top of 1,1' in out     # tested speculatively
    assert 'gate: change 1 "Add a feature": MERGED' in out
    assert 'gate: change 2 "Break the tests": NEW (Verified -2)' in out
    assert 'gate: change 3 "Add documentation": MERGED' in out
    assert 'The good changes merged and the broken one was rejected.' in out
    # ZooKeeper (the secrets keys live there) is served over TLS only, and
    # the keys in it are encrypted with a keystore password.
    state = tmp_path / 'state'
    zoo_cfg = (state / 'zookeeper' / 'conf' / 'zoo.cfg').read_text()
    assert 'secureClientPort=' in zoo_cfg and 'clientPort=' not in zoo_cfg.replace(
        'secureClientPort=', '')
    zuul_conf = (state / 'zuul.conf').read_text()
    assert 'tls_cert = ' in zuul_conf and 'tls_ca = ' in zuul_conf
    password = [line for line in zuul_conf.splitlines() if line.startswith('password = ')]
    assert len(password) == 1 and len(password[0]) > len('password = ') + 20
    assert 'zookeeper-tls:' in (state / 'nodepool.yaml').read_text()


def test_quickstart_cleans_up_when_terminated_midway(tmp_path):
    import signal

    proc = subprocess.Popen(
        [sys.executable, os.path.join(TOP, 'tools', 'quickstart.py'),
         '--state-dir', str(tmp_path / 'state'), '--web-port', str(free_port())],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if 'Proposing three changes' in line:
                proc.send_signal(signal.SIGTERM)
                break
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, ''.join(seen) + out
    assert 'Interrupted: stopping everything' in out
    # the scheduler's intake stops first: a build the executor abandons gets no vote
    assert 'stopping: scheduler and Gearman server, zuul-web, zuul-executor, zuul-merger' in out
    from tests.functional.test_quickstart_loop import _our_processes
    assert _our_processes([str(tmp_path / 'state')]) == []
    namespaces = subprocess.run(['ip', 'netns', 'list'], capture_output=True,
                                text=True).stdout
    assert 'quickstart-netns-' not in namespaces
    links = subprocess.run(['ip', 'link', 'show'], capture_output=True, text=True).stdout
    assert 'qsbr0' not in links
