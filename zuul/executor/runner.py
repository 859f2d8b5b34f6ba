"""One ``ansible-playbook`` process: start, wait, time out, abort.

The process gets its own session (process group); a timeout or an abort
kills the whole group, so ansible's forked workers and the ssh clients
die with it.  Output goes to a file, never a pipe: an SSH control master
forked by ansible keeps inherited descriptors open after it exits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

# Outcome of one playbook run, before it is mapped to a build result.
NORMAL = 'NORMAL'
TIMED_OUT = 'TIMED_OUT'
ABORTED = 'ABORTED'

# ansible-playbook exit codes (TaskQueueManager RUN_*).
RC_OK = 0
RC_FAILED_HOSTS = 2
RC_UNREACHABLE = 4


@dataclass
class PlaybookOutcome:
    """``status`` NORMAL/TIMED_OUT/ABORTED; ``returncode`` of ansible."""

    status: str
    returncode: int | None
    elapsed: float

    @property
    def unreachable(self) -> bool:
        return self.status == NORMAL and self.returncode == RC_UNREACHABLE

    @property
    def ok(self) -> bool:
        return self.status == NORMAL and self.returncode == RC_OK


class PlaybookProcessRunner:
    """Runs playbook processes one after another for a build; ``abort()``
    may be called from any thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self.aborted = False

    def run(self, command: list[str], env: dict, cwd: str, log_path: str,
            timeout: float | None, pass_fds: tuple = ()) -> PlaybookOutcome:
        start = time.monotonic()
        with self._lock:
            if self.aborted:
                return PlaybookOutcome(ABORTED, None, 0.0)
            with open(log_path, 'ab') as log:
                self._proc = subprocess.Popen(
                    command, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                    pass_fds=pass_fds)
        proc = self._proc
        try:
            returncode = proc.wait(timeout=timeout if timeout and timeout > 0 else None)
        except subprocess.TimeoutExpired:
            self._kill(proc)
            return PlaybookOutcome(TIMED_OUT, None, time.monotonic() - start)
        finally:
            with self._lock:
                self._proc = None
        status = ABORTED if self.aborted else NORMAL
        return PlaybookOutcome(status, returncode, time.monotonic() - start)

    def abort(self) -> None:
        with self._lock:
            self.aborted = True
            proc = self._proc
        if proc is not None:
            self._kill(proc)

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
