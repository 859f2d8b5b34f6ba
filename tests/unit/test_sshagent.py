"""One ssh-agent per build (zuul/executor/sshagent.py): it holds the key,
serves only its own socket, and dies with the executor even when the
executor is SIGKILLed (nothing is left holding a key)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(subprocess.run(['which', 'ssh-agent'],
                                               capture_output=True).returncode != 0,
                                reason='needs ssh-agent (openssh-client)')

# A stand-in executor: starts an agent from a build thread (as
# BuildExecution.run does), prints its pid, then waits to be killed.
EXECUTOR = """
import sys, threading, time
from zuul.executor.sshagent import SshAgent
done = threading.Event()
def build():
    agent = SshAgent(sys.argv[1]).start(sys.argv[2])
    print(agent.pid, flush=True)
    done.wait()
threading.Thread(target=build).start()
time.sleep(3600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().split(')')[1].split()[0] != 'Z'
    except OSError:
        return False


def _keypair(tmp_path) -> str:
    key = str(tmp_path / 'id')
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', key], check=True)
    return key


def test_agent_holds_the_key_and_stops_cleanly(tmp_path):
    from zuul.executor.sshagent import SshAgent
    agent = SshAgent(str(tmp_path / 'sock')).start(_keypair(tmp_path))
    env = dict(os.environ, SSH_AUTH_SOCK=agent.socket_path)
    listed = subprocess.run(['ssh-add', '-l'], env=env, capture_output=True, text=True)
    assert listed.returncode == 0 and 'ED25519' in listed.stdout
    pid = agent.pid
    agent.stop()
    assert not _alive(pid) and not os.path.exists(agent.socket_path)


def test_agent_dies_with_a_sigkilled_executor(tmp_path):
    proc = subprocess.Popen([sys.executable, '-c', EXECUTOR, str(tmp_path / 'sock'),
                             _keypair(tmp_path)], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    agent_pid = int(proc.stdout.readline())
    assert _alive(agent_pid)
    os.kill(proc.pid, signal.SIGKILL)     # the executor only, not its children
    proc.wait(30)
    deadline = time.monotonic() + 30   # ssh-agent checks its command every 10 s
    while _alive(agent_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(agent_pid), 'an ssh-agent holding the key outlived the executor'
