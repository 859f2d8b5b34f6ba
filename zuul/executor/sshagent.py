"""ssh-agents: the node key is usable, never readable.

Every build has an agent of its own (``BuildAgent``), its socket inside
the build's directory, bound into that build's sandboxes and no other:
a build can neither list, remove nor use another build's keys, and what
one build does to its agent (``ssh-add -D``) touches nobody else.  The
private key itself stays outside every sandbox.

An agent runs in the foreground as a child of the executor and is killed
with it (``PR_SET_PDEATHSIG``): a SIGKILLed executor leaves no agent
behind holding a key.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import tempfile

_PR_SET_PDEATHSIG = 1


class SshAgentError(RuntimeError):
    pass


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the thread that started it
    ends (the executor, or the build's thread, going away)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class SshAgent:
    """``start()`` runs ``ssh-agent -D -a <socket>`` and adds ``key_file``."""

    def __init__(self, socket_path: str):
        self.socket_path = socket_path
        self.pid: int | None = None
        self._proc: subprocess.Popen | None = None

    def start(self, key_file: str | None = None) -> SshAgent:
        if os.path.lexists(self.socket_path):
            os.unlink(self.socket_path)
        # -D: stays in the foreground (our child); it prints its environment
        # once the socket is bound, so reading that line is the wait.
        self._proc = subprocess.Popen(
            ['ssh-agent', '-D', '-s', '-a', self.socket_path], stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            preexec_fn=_die_with_parent)
        first = self._proc.stdout.readline()
        if not re.search(r'SSH_AUTH_SOCK=', first):
            self.stop()
            raise SshAgentError(f'ssh-agent did not start: {first!r}')
        self.pid = self._proc.pid
        if key_file:
            self.add(key_file)
        return self

    def add(self, key_file: str) -> None:
        env = dict(os.environ, SSH_AUTH_SOCK=self.socket_path)
        proc = subprocess.run(['ssh-add', key_file], env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SshAgentError(f'ssh-add {key_file} failed: {proc.stderr.strip()}')

    def add_key_text(self, private_key: str) -> None:
        """Add a PEM private key held in memory (a project's key): written
        for ssh-add to a private file on a tmpfs, removed at once."""
        directory = tempfile.mkdtemp(prefix='zuul-key-', dir=_memory_dir())
        path = os.path.join(directory, 'key')
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, 'w') as f:
                f.write(private_key if private_key.endswith('\n') else private_key + '\n')
            self.add(path)
        finally:
            if os.path.exists(path):
                os.unlink(path)
            os.rmdir(directory)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        self.pid = None
        if os.path.lexists(self.socket_path):
            try:
                os.unlink(self.socket_path)
            except OSError:
                pass


def _memory_dir() -> str:
    for candidate in ('/dev/shm', '/run/shm'):
        if os.path.isdir(candidate):
            return candidate
    raise SshAgentError('no tmpfs (/dev/shm) to hand a key to ssh-add')
