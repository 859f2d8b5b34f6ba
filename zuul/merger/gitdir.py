"""One daemon per git cache.

A zuul-merger and a zuul-executor on one host each keep a git cache
(``[merger] git_dir``, ``[executor] git_dir``). Two daemons pointed at
the same directory run git in the same repositories at once and their
merges fail now and then ("does not merge"), a misconfiguration that is
otherwise hard to see. Each daemon claims its directory at start with an
exclusive ``flock`` on a file in it; the kernel drops the claim when the
process ends, however it ends, so a killed daemon leaves nothing stale.
"""

from __future__ import annotations

import fcntl
import os

LOCK_NAME = '.zuul-git-dir.lock'


class GitDirInUseError(Exception):
    """Another running daemon holds this git_dir."""


class GitDirClaim:
    """Held for the daemon's life; the file says who holds it."""

    def __init__(self, path: str, daemon: str):
        self.path = path
        self.daemon = daemon
        os.makedirs(path, exist_ok=True)
        self._file = open(os.path.join(path, LOCK_NAME), 'a+')
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.seek(0)
            holder = self._file.read().strip() or 'another process'
            self._file.close()
            raise GitDirInUseError(
                f'git_dir {path} is in use by {holder}: every zuul-merger and '
                f'zuul-executor on a host needs a git_dir of its own ([merger] git_dir, '
                f'[executor] git_dir)') from None
        self.refresh()

    def refresh(self) -> None:
        """Write the holder's name and pid (again after a daemon forks)."""
        self._file.seek(0)
        self._file.truncate()
        self._file.write(f'{self.daemon} (pid {os.getpid()})\n')
        self._file.flush()

    def release(self) -> None:
        if not self._file.closed:
            self._file.close()
