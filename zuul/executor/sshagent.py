"""ssh-agents: the node key is usable, never readable.

Every build has an agent of its own (``BuildAgent``), its socket inside
the build's directory, bound into that build's sandboxes and no other:
a build can neither list, remove nor use another build's keys, and what
one build does to its agent (``ssh-add -D``) touches nobody else.  The
private key itself stays outside every sandbox.

An agent is started with a command (``ssh-agent -a SOCK sh -c ...``):
ssh-agent runs the command and exits when the command does (it checks
every ten seconds).  The command waits for the end of its standard input,
a pipe whose other end only the executor holds: when the executor ends,
however it ends (SIGKILL included), the pipe closes and the agent goes
with it.  (ssh-agent is set-group-id on Debian, so a parent-death signal
set before its exec would be cleared.)
"""

from __future__ import annotations

import os
import signal
import subprocess

# Run by ssh-agent: says the agent's pid, then lives exactly as long as
# the executor holds the other end of its standard input.
_TIED = 'echo "$SSH_AGENT_PID"; exec cat >/dev/null'


class SshAgentError(RuntimeError):
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
        # The socket is bound before the command runs, so its first line
        # (the agent's pid) is the wait.
        self._proc = subprocess.Popen(
            ['ssh-agent', '-a', self.socket_path, 'sh', '-c', _TIED],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, close_fds=True)
        first = self._proc.stdout.readline().strip()
        if not first.isdigit():
            self.stop()
            raise SshAgentError(f'ssh-agent did not start: {first!r}')
        self.pid = int(first)
        if key_file:
            self.add(key_file)
        return self

    def add(self, key_file: str) -> None:
        env = dict(os.environ, SSH_AUTH_SOCK=self.socket_path)
        proc = subprocess.run(['ssh-add', key_file], env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SshAgentError(f'ssh-add {key_file} failed: {proc.stderr.strip()}')

    def add_key_text(self, private_key: str) -> None:
        """Add a private key held in memory (a project's key): given to
        ``ssh-add -`` on its standard input, so it is never in a file, and
        the agent lists it with the comment ``(stdin)`` -- as released Zuul
        adds it, which zuul-jobs' add-build-sshkey relies on to keep such
        keys when it removes the node key."""
        env = dict(os.environ, SSH_AUTH_SOCK=self.socket_path)
        text = private_key if private_key.endswith('\n') else private_key + '\n'
        proc = subprocess.run(['ssh-add', '-'], env=env, input=text, capture_output=True,
                              text=True)
        if proc.returncode != 0:
            raise SshAgentError(f'ssh-add of a key held in memory failed: '
                                f'{proc.stderr.strip()}')

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        if proc is not None:
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.pid = None
        if os.path.lexists(self.socket_path):
            try:
                os.unlink(self.socket_path)
            except OSError:
                pass


def add_build_keys(agent: SshAgent, keys) -> None:
    """Give the build's agent the keys its request carries besides the
    node key (``ExecuteRequest.ssh_keys``: the project key of a
    post-review job). They go into this build's agent only, never into a
    file of the build; an error names the key, never shows it."""
    for key in keys or ():
        try:
            agent.add_key_text(key.private_key)
        except SshAgentError:
            raise SshAgentError(f'unable to add the {key.name} to the ssh-agent') from None

