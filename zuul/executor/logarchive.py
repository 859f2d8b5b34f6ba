"""Keep a finished build's logs: copy ``work/logs`` to ``<log_root>/<uuid>/``.

The live log stream forgets a build when it ends and the job dir is
removed, so after the playbooks have run the executor copies the build's
log tree to ``[executor] log_root``, where zuul-web serves it
(``/logs/<uuid>/``) and the retention cleaner ages it out.

``work/logs`` is writable by untrusted playbooks, so the copy trusts
nothing in it:

* every directory and file is opened through ``zuul.lib.safefile`` below
  the job dir, one component at a time, never following a symlink;
* only regular files and directories are copied; symlinks, FIFOs, sockets
  and devices are skipped (and logged), and a file is checked again after
  it is opened, so a swap between listing and opening is caught;
* copies get fresh permissions (0644 files, 0755 directories) and are
  written below a fresh temporary directory that is renamed into place
  when complete, so zuul-web never serves half a copy;
* ``max_bytes``, ``MAX_ENTRIES`` and ``MAX_DEPTH`` bound what one build
  can store; past them the copy stops and ``TRUNCATED_NOTE`` says so.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass, field

from zuul.lib import safefile

log = logging.getLogger('zuul.executor.logarchive')

MAX_ENTRIES = 100_000
MAX_DEPTH = 32
CHUNK = 1 << 20
TRUNCATED_NOTE = 'zuul-logs-truncated.txt'
# Build uuids are hex (uuid4().hex); anything else is never a directory
# name below the log root.
BUILD_DIR_RE = re.compile(r'^[0-9A-Za-z][0-9A-Za-z_-]{0,127}$')
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY


class LogArchiveError(Exception):
    """The logs could not be archived at all."""


@dataclass
class CopyReport:
    """What ``copy_logs`` did: byte and file counts, the paths it skipped
    (relative to the log dir) and why it stopped early, if it did."""

    files: int = 0
    directories: int = 0
    bytes: int = 0
    skipped: list[str] = field(default_factory=list)
    truncated: str | None = None


def log_url_for(template: str, uuid: str) -> str:
    """``[executor] log_url`` for one build: ``{build}`` and ``{uuid}``
    become the build's uuid; a template without either gets the uuid
    appended as a directory (``http://host/logs/`` -> ``.../logs/<uuid>/``)."""
    if '{build}' in template or '{uuid}' in template:
        return template.replace('{build}', uuid).replace('{uuid}', uuid)
    return template.rstrip('/') + f'/{uuid}/'


def archive_build_logs(job_root: str, uuid: str, log_root: str,
                       max_bytes: int) -> CopyReport:
    """Copy ``<job_root>/work/logs`` to ``<log_root>/<uuid>/`` (replacing
    an earlier copy of the same build).  Raises LogArchiveError when
    nothing could be copied."""
    if not BUILD_DIR_RE.match(uuid):
        raise LogArchiveError(f'{uuid!r} is not a build uuid')
    os.makedirs(log_root, exist_ok=True)
    tmp = os.path.join(log_root, f'.{uuid}.tmp-{os.getpid()}')
    final = os.path.join(log_root, uuid)
    shutil.rmtree(tmp, ignore_errors=True)
    os.mkdir(tmp, 0o755)
    try:
        report = copy_logs(job_root, 'work/logs', tmp, max_bytes)
        if os.path.isdir(final) and not os.path.islink(final):
            shutil.rmtree(final)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    os.utime(final)  # retention counts from when the build finished
    return report


def copy_logs(root: str, rel: str, dest: str, max_bytes: int) -> CopyReport:
    """Copy the tree ``rel`` below ``root`` into the existing directory
    ``dest``, regular files and directories only, never following a
    symlink (in ``rel`` itself or anywhere below it)."""
    report = CopyReport()
    try:
        safefile.check_root(root)
        os.close(safefile.open_beneath(root, rel, _DIR_FLAGS))
    except OSError as exc:
        raise LogArchiveError(f'{rel} is not a plain directory: {exc}') from None
    copier = _Copier(root, dest, max_bytes, report)
    copier.copy_dir(rel, '', 0)
    if report.truncated:
        _write_note(dest, report)
    return report


class _Copier:
    def __init__(self, root: str, dest: str, max_bytes: int, report: CopyReport):
        self.root = root
        self.dest = dest
        self.max_bytes = max_bytes
        self.report = report

    def copy_dir(self, src_rel: str, dest_rel: str, depth: int) -> None:
        try:
            fd = safefile.open_beneath(self.root, src_rel, _DIR_FLAGS)
        except OSError as exc:
            self._skip(dest_rel, f'not opened as a directory: {exc}')
            return
        try:
            entries = sorted(os.listdir(fd))
            for name in entries:
                if self.report.truncated:
                    return
                self._copy_entry(fd, src_rel, dest_rel, name, depth)
        finally:
            os.close(fd)

    def _copy_entry(self, dir_fd: int, src_rel: str, dest_rel: str, name: str,
                    depth: int) -> None:
        out_rel = f'{dest_rel}/{name}' if dest_rel else name
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError as exc:
            self._skip(out_rel, f'not readable: {exc.strerror}')
            return
        if self.report.files + self.report.directories >= MAX_ENTRIES:
            self.report.truncated = f'more than {MAX_ENTRIES} files and directories'
            return
        if stat.S_ISDIR(st.st_mode):
            if depth + 1 > MAX_DEPTH:
                self._skip(out_rel, f'nested deeper than {MAX_DEPTH} directories')
                return
            try:
                os.mkdir(os.path.join(self.dest, out_rel), 0o755)
            except OSError as exc:  # e.g. a path too long for the log root
                self._skip(out_rel, f'not created: {exc.strerror}')
                return
            self.report.directories += 1
            self.copy_dir(f'{src_rel}/{name}', out_rel, depth + 1)
        elif stat.S_ISREG(st.st_mode):
            self._copy_file(f'{src_rel}/{name}', out_rel, st.st_size)
        else:
            self._skip(out_rel, f'a {_kind(st.st_mode)}, not a regular file; not copied')

    def _copy_file(self, src_rel: str, out_rel: str, size: int) -> None:
        budget = self.max_bytes - self.report.bytes
        if size > budget:
            self.report.truncated = (f'{out_rel} ({size} bytes) would pass the limit of '
                                     f'{self.max_bytes} bytes')
            return
        try:
            src = safefile.open_regular_beneath(self.root, src_rel)
        except OSError as exc:
            self._skip(out_rel, f'not opened as a regular file: {exc}')
            return
        try:
            try:
                out = os.open(os.path.join(self.dest, out_rel),
                              os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW |
                              os.O_CLOEXEC, 0o644)
            except OSError as exc:
                self._skip(out_rel, f'not created: {exc.strerror}')
                return
            try:
                copied = _copy_fd(src, out, budget)
            finally:
                os.close(out)
        finally:
            os.close(src)
        self.report.files += 1
        self.report.bytes += copied
        if copied >= budget and copied > size:
            # It grew while we copied (something still writing to it).
            self.report.truncated = f'{out_rel} grew past the limit of {self.max_bytes} bytes'

    def _skip(self, out_rel: str, why: str) -> None:
        log.warning('Not archiving log %s: %s', out_rel, why)
        self.report.skipped.append(out_rel)


def _copy_fd(src: int, out: int, limit: int) -> int:
    copied = 0
    while copied < limit:
        data = os.read(src, min(CHUNK, limit - copied))
        if not data:
            break
        view = memoryview(data)
        while view:
            view = view[os.write(out, view):]
        copied += len(data)
    return copied


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return 'symlink'
    if stat.S_ISFIFO(mode):
        return 'FIFO'
    if stat.S_ISSOCK(mode):
        return 'socket'
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return 'device'
    return 'special file'


def _write_note(dest: str, report: CopyReport) -> None:
    text = (f'Zuul stopped archiving these logs: {report.truncated}.\n'
            f'Copied {report.files} files ({report.bytes} bytes); the rest were left out.\n')
    path = os.path.join(dest, TRUNCATED_NOTE)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(path, flags, 0o644), 'w') as f:
        f.write(text)


def remove_expired(log_root: str, retention_days: float, now: float | None = None) -> list[str]:
    """Delete build log dirs (and abandoned temporary copies) below
    ``log_root`` last modified more than ``retention_days`` ago; returns
    the names removed.  Anything that is not a plain directory with a
    build-uuid name is left alone."""
    if retention_days <= 0 or not os.path.isdir(log_root):
        return []
    cutoff = (time.time() if now is None else now) - retention_days * 86400
    removed = []
    for name in sorted(os.listdir(log_root)):
        bare = name[1:].split('.tmp-')[0] if name.startswith('.') else name
        if not BUILD_DIR_RE.match(bare):
            continue
        path = os.path.join(log_root, name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_mtime >= cutoff:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(name)
    if removed:
        log.info('Removed %d build log dirs older than %s days from %s', len(removed),
                 retention_days, log_root)
    return removed
