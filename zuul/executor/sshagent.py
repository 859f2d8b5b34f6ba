"""The executor's ssh-agent: the node key is usable, never readable.

Untrusted playbooks run in a sandbox that hides the executor's state dir,
where the private key lives; ssh inside reaches the key through the agent
socket only.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess


class SshAgentError(RuntimeError):
    pass


class SshAgent:
    """``start()`` runs ``ssh-agent -a <socket>`` and adds ``key_file``."""

    def __init__(self, socket_path: str):
        self.socket_path = socket_path
        self.pid: int | None = None

    def start(self, key_file: str | None = None) -> SshAgent:
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        # Without -D the agent prints its pid once the socket is bound and
        # detaches: no waiting for the socket to appear.
        out = subprocess.run(['ssh-agent', '-s', '-a', self.socket_path],
                             capture_output=True, text=True, check=True).stdout
        match = re.search(r'SSH_AGENT_PID=(\d+)', out)
        if not match:
            raise SshAgentError(f'unexpected ssh-agent output: {out!r}')
        self.pid = int(match.group(1))
        if key_file:
            self.add(key_file)
        return self

    def add(self, key_file: str) -> None:
        env = dict(os.environ, SSH_AUTH_SOCK=self.socket_path)
        proc = subprocess.run(['ssh-add', key_file], env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SshAgentError(f'ssh-add {key_file} failed: {proc.stderr.strip()}')

    def stop(self) -> None:
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            self.pid = None
