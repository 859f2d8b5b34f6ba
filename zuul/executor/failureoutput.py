"""A job's ``failure-output``: anticipate the failure from the console.

While a ``run`` playbook runs, :class:`FailureOutputWatcher` follows the
build's job-output.txt and matches every new line against the job's
``failure-output`` regexes (RE2: they come from repository config).  On
the first match it calls ``on_match`` once: the executor then tells the
scheduler (a WORK_DATA packet with ``pre_fail``), which counts the item as
failing at once, so a dependent pipeline re-tests the items behind it
without waiting for the build to end.  The build's result is FAILURE even
if its playbooks end up succeeding, as released Zuul documents.

The log lives in ``work/``, which untrusted playbooks can write to: it is
opened below the work root without following symlinks; anything else
there is simply not read.
"""

from __future__ import annotations

import logging
import threading

from zuul.lib import safefile
from zuul.lib.regex import Regex, RegexError, compile_regex

log = logging.getLogger('zuul.executor.failureoutput')

# ansible appends to the log from another process; nothing wakes us on a
# write, so the watcher looks again after this long.
POLL_INTERVAL = 0.2
CHUNK = 65536


class FailureOutputError(ValueError):
    """A ``failure-output`` pattern that cannot be used."""


def compile_patterns(patterns: list[str]) -> list[Regex]:
    """The job's patterns compiled with RE2; FailureOutputError names the
    one that is not valid."""
    compiled = []
    for pattern in patterns:
        try:
            regex, _ = compile_regex(pattern, trusted=False)
        except RegexError as exc:
            raise FailureOutputError(f'failure-output: {exc}') from None
        compiled.append(regex)
    return compiled


def line_matches(regexes: list[Regex], line: str) -> bool:
    """Whether a job-output.txt line matches.  Lines are
    ``<timestamp> | [<host> | ]<text>``: each pattern is searched in the
    line without its timestamp and in the text alone, so ``^`` anchors at
    the start of what a command printed."""
    parts = line.split(' | ', 1)
    body = parts[1] if len(parts) == 2 else line
    candidates = [body]
    rest = body.split(' | ', 1)
    if len(rest) == 2:
        candidates.append(rest[1])
    return any(r.search(text) for r in regexes for text in candidates)


class FailureOutputWatcher:
    """Follows ``path`` (below ``root``) from ``offset`` in a thread;
    ``stop()`` reads what is left, then ends the thread.  ``matched`` is
    the first matching line, or None."""

    def __init__(self, regexes: list[Regex], root: str, path: str, offset: int, on_match):
        self.regexes = regexes
        self.root = root
        self.path = path
        self.offset = offset
        self.on_match = on_match
        self.matched: str | None = None
        self._partial = b''
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name='failure-output', daemon=True)

    def start(self) -> FailureOutputWatcher:
        self._thread.start()
        return self

    def stop(self) -> str | None:
        self._stop.set()
        self._thread.join()
        self._scan(final=True)
        return self.matched

    def _run(self) -> None:
        while not self._stop.wait(POLL_INTERVAL):
            self._scan()
            if self.matched is not None:
                return

    def _scan(self, final: bool = False) -> None:
        with self._lock:
            if self.matched is not None:
                return
            data = self._read_new()
            lines = (self._partial + data).split(b'\n')
            self._partial = lines.pop()
            if final and self._partial:
                lines.append(self._partial)
                self._partial = b''
            for raw in lines:
                line = raw.decode('utf-8', 'replace')
                if line_matches(self.regexes, line):
                    self.matched = line
                    break
        if self.matched is not None:
            try:
                self.on_match(self.matched)
            except Exception:  # the build goes on; the result says FAILURE anyway
                log.exception('Error announcing the early failure')

    def _read_new(self) -> bytes:
        try:
            with safefile.open_regular_file_beneath(self.root, self.path, 'rb') as f:
                f.seek(self.offset)
                data = f.read(CHUNK * 16)
        except OSError:
            return b''
        self.offset += len(data)
        return data


def log_size(root: str, path: str) -> int:
    """Where the watcher starts: the log's current end (0 if missing)."""
    try:
        with safefile.open_regular_file_beneath(root, path, 'rb') as f:
            return f.seek(0, 2)
    except OSError:
        return 0
