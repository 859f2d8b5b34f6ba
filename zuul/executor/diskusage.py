"""``[executor] disk_limit_per_job``: how much disk a build's job dir uses,
and a watcher that stops the build once it passes the limit.

Usage is counted as ``du`` does (allocated blocks, so a sparse file counts
what it really takes), every inode once.  A file hard-linked from outside
the job dir (the executor's git cache, from which checkouts link their
objects) is not the build's: an inode counts only when all its links are
inside the job dir, so linking a big file several times inside the job dir
does not hide it.
"""

from __future__ import annotations

import logging
import os
import stat
import threading

log = logging.getLogger('zuul.executor.diskusage')

MB = 1024 * 1024


def job_dir_usage(root: str) -> int:
    """Bytes used below ``root`` (see the module docstring); entries that
    vanish while it is walked are skipped."""
    total = 0
    linked: dict[tuple[int, int], list[int]] = {}  # inode -> [nlink, seen, bytes]
    stack = [root]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            size = st.st_blocks * 512
            if stat.S_ISDIR(st.st_mode):
                stack.append(entry.path)
                total += size
            elif st.st_nlink > 1:
                record = linked.setdefault((st.st_dev, st.st_ino), [st.st_nlink, 0, size])
                record[1] += 1
            else:
                total += size
    return total + sum(size for nlink, seen, size in linked.values() if seen >= nlink)


class DiskLimitWatcher:
    """Measures ``root`` every ``interval`` seconds from a thread of its
    own (and whenever ``check()`` is called); calls ``exceeded(used)`` once,
    the first time more than ``limit_mb`` MB are used."""

    def __init__(self, root: str, limit_mb: int, interval: float, exceeded):
        self.root = root
        self.limit = limit_mb * MB
        self.interval = interval
        self._exceeded = exceeded
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.tripped = False
        self._thread: threading.Thread | None = None

    def start(self) -> DiskLimitWatcher:
        self._thread = threading.Thread(target=self._loop, name='disk-limit', daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def check(self) -> bool:
        """Measure now; True if the limit is (or was) passed."""
        with self._lock:
            if self.tripped:
                return True
            used = job_dir_usage(self.root)
            if used <= self.limit:
                return False
            self.tripped = True
        self._exceeded(used)
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                if self.check():
                    return
            except Exception:  # keep the build going rather than crash here
                log.exception('Measuring %s failed', self.root)
