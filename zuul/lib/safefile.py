"""Open files inside a directory tree that untrusted code can write to.

A build's ``work/`` directory is writable by untrusted playbooks: they can
replace any file or directory in it with a symlink pointing anywhere.  Code
running outside the sandbox (the executor, the log streamer, trusted
playbooks' callbacks) must never follow such a link.  ``open_beneath``
walks from ``root`` one component at a time with ``O_NOFOLLOW`` (through
directory file descriptors, so nothing can be swapped between the check
and the open) and refuses symlinks, ``..`` and absolute paths.
"""

from __future__ import annotations

import fcntl
import os
import stat


class UnsafePathError(OSError):
    """The path leaves its root or passes through a symlink."""


def _components(relpath: str) -> list[str]:
    if os.path.isabs(relpath):
        raise UnsafePathError(f'absolute path {relpath!r} not allowed here')
    parts = [p for p in relpath.split('/') if p not in ('', '.')]
    if not parts or any(p == '..' for p in parts):
        raise UnsafePathError(f'path {relpath!r} leaves its directory')
    return parts


def relative_to(root: str, path: str) -> str:
    """``path`` (absolute, or relative to ``root``) as a path below ``root``;
    raises UnsafePathError if it is not (lexically) inside it."""
    root = os.path.abspath(root)
    full = os.path.normpath(os.path.join(root, path))
    if full == root or not full.startswith(root + os.sep):
        raise UnsafePathError(f'{path!r} is outside {root}')
    return os.path.relpath(full, root)


def open_beneath(root: str, path: str, flags: int = os.O_RDONLY, mode: int = 0o644,
                 make_dirs: bool = False) -> int:
    """An fd for ``path`` below ``root`` (absolute or relative to it),
    opened without following any symlink.  ``make_dirs`` creates missing
    intermediate directories.  Raises UnsafePathError (or OSError)."""
    parts = _components(relative_to(root, path))
    dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW |
                                  os.O_CLOEXEC, dir_fd=dir_fd)
            except FileNotFoundError:
                if not make_dirs:
                    raise
                os.mkdir(part, 0o755, dir_fd=dir_fd)
                next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW |
                                  os.O_CLOEXEC, dir_fd=dir_fd)
            except OSError as exc:
                raise UnsafePathError(f'{path!r}: {part!r} is not a plain directory '
                                      f'({exc.strerror})') from None
            os.close(dir_fd)
            dir_fd = next_fd
        try:
            return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                           dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == 40:  # ELOOP: the last component is a symlink
                raise UnsafePathError(f'{path!r} is a symlink; not followed') from None
            raise
    finally:
        os.close(dir_fd)


_MODE_FLAGS = {
    'r': os.O_RDONLY, 'rb': os.O_RDONLY,
    'a': os.O_WRONLY | os.O_CREAT | os.O_APPEND,
    'ab': os.O_WRONLY | os.O_CREAT | os.O_APPEND,
    'w': os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
    'wb': os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
}


def open_file_beneath(root: str, path: str, mode: str = 'r', **kw):
    """``open()``-like wrapper of ``open_beneath`` for 'r', 'rb', 'a', 'ab',
    'w', 'wb'."""
    flags = _MODE_FLAGS[mode]
    make_dirs = kw.pop('make_dirs', False)
    fd = open_beneath(root, path, flags, make_dirs=make_dirs)
    return os.fdopen(fd, mode, **kw)


def write_beneath(root: str, path: str, data: bytes) -> None:
    """Replace ``path`` below ``root`` atomically (temp file + rename in
    the same, verified, directory)."""
    rel = relative_to(root, path)
    parent, name = os.path.split(rel)
    dir_fd = (open_beneath(root, parent, os.O_RDONLY | os.O_DIRECTORY) if parent
              else os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    tmp = f'.{name}.{os.getpid()}.tmp'
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644, dir_fd=dir_fd)
        with os.fdopen(fd, 'wb') as f:
            f.write(data)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def is_within(root: str, path: str) -> bool:
    """Whether ``path``, with every symlink resolved, is ``root`` or below it."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root + os.sep)


def check_root(root: str) -> None:
    """Refuse a ``root`` whose last component is a symlink (or not a
    directory).  ``open_beneath`` follows links in ``root`` itself (it is the
    trusted prefix); use this when the root's parent is writable by
    untrusted code, e.g. a job dir's ``work/``.  Only safe against a swap
    when nothing untrusted runs concurrently; otherwise use the enclosing
    directory as root."""
    st = os.lstat(root)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(f'{os.path.basename(root)!r} is a symlink; not followed')
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f'{os.path.basename(root)!r} is not a directory')


def open_regular_beneath(root: str, path: str, flags: int = os.O_RDONLY, mode: int = 0o644,
                         make_dirs: bool = False) -> int:
    """``open_beneath`` that also refuses anything but a regular file (a
    FIFO would block its reader or writer, a device could be anything).
    The open is non-blocking so a planted FIFO cannot hang the caller; the
    returned fd is blocking again."""
    fd = open_beneath(root, path, flags | os.O_NONBLOCK, mode, make_dirs=make_dirs)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafePathError(f'{path!r} is not a regular file')
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular_file_beneath(root: str, path: str, mode: str = 'r', **kw):
    """``open_file_beneath`` for regular files only (see
    ``open_regular_beneath``)."""
    flags = _MODE_FLAGS[mode]
    make_dirs = kw.pop('make_dirs', False)
    fd = open_regular_beneath(root, path, flags, make_dirs=make_dirs)
    return os.fdopen(fd, mode, **kw)


def root_for(path: str, root: str | None = None) -> str:
    """``root`` if ``path`` lies (lexically) below it, else the directory
    of ``path``: the root to open ``path`` beneath."""
    if root:
        try:
            relative_to(root, path)
            return os.path.abspath(root)
        except UnsafePathError:
            pass
    return os.path.dirname(os.path.abspath(path))
