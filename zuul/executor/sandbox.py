"""Bubblewrap confinement for playbooks, untrusted and trusted.

The sandbox is built up from nothing, not carved out of the host: an
untrusted playbook's ``ansible-playbook`` sees

* the system directories Ansible and ssh need, read-only (``/usr`` and the
  ``/lib*``, ``/bin``, ``/sbin`` beside it, a handful of ``/etc`` files: name
  resolution, certificates, the dynamic linker's cache, the ssh client's
  config; a ``passwd``/``group`` written by the executor with nothing but
  the executor's own user);
* the Python installation running Ansible and Zuul's Ansible plugins,
  read-only (``readonly_paths``);
* its own build: the job dir read-only, ``work/`` and the untrusted state
  dir (its fact cache and SSH control sockets) writable;
* a fresh ``HOME``, ``/tmp``, ``/dev`` and ``/proc`` of its own;
* the paths the administrator adds (``[executor] untrusted_ro_paths``
  read-only, ``untrusted_rw_paths`` read-write), at the same place.

A trusted playbook's sandbox is the same but for its build's writable
paths (its own HOME, the trusted fact cache and control sockets) and the
administrator's ``trusted_ro_paths``/``trusted_rw_paths``
(zuul.executor.build: ``_trusted_mounts``).

Nothing else of the host exists inside: not Zuul's config, keys or state
dir, not other builds, not the trusted playbooks' SSH control sockets.  New
PID, IPC, UTS and (where available) cgroup namespaces: ``/proc`` shows only
the sandbox's own processes, and every process the playbook started dies
with it, so nothing untrusted outlives its playbook.  All capabilities are
dropped even when the executor runs as root.  The network is shared
(Ansible must reach the nodes); the SSH agent socket is the only
credential passed in: the key itself stays outside.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field

# System directories bound read-only when they exist; a symlink (merged
# /usr: /bin -> usr/bin) is recreated as the same symlink.
SYSTEM_DIRS = ('/usr', '/lib', '/lib32', '/lib64', '/libx32', '/bin', '/sbin')

# The /etc entries Ansible, Python and the ssh client read.  Not /etc/ssh
# host keys, not /etc/shadow, not anything of Zuul's.
ETC_ENTRIES = (
    '/etc/nsswitch.conf', '/etc/hosts', '/etc/host.conf', '/etc/resolv.conf',
    '/etc/gai.conf', '/etc/services', '/etc/protocols', '/etc/ld.so.cache',
    '/etc/ld.so.conf', '/etc/ld.so.conf.d', '/etc/localtime', '/etc/ssl',
    '/etc/ca-certificates', '/etc/pki', '/etc/alternatives', '/etc/mime.types',
    '/etc/ssh/ssh_config', '/etc/ssh/ssh_config.d', '/etc/crypto-policies',
)


class SandboxError(RuntimeError):
    """bubblewrap is missing or refused to start."""


@dataclass
class SandboxMounts:
    """What one sandboxed run may see of its build.

    ``readonly``: paths visible read-only (the job dir itself);
    ``writable``: paths bound read-write (``work/``, untrusted state);
    ``empty``: fresh tmpfs mounts (``HOME``, hiding sub-dirs of readonly);
    ``passwd``/``group``: files bound over /etc/passwd and /etc/group;
    ``files``: (fd, path) pairs: bubblewrap copies the fd's content into
    ``path`` (on one of the ``empty`` tmpfs mounts), read-only.
    """

    readonly: list[str] = field(default_factory=list)
    writable: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)
    passwd: str | None = None
    group: str | None = None
    files: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class BubblewrapSandbox:
    """Builds the ``bwrap`` command line around a playbook run.

    ``readonly_paths`` are host paths every sandbox needs read-only besides
    the system dirs (the Python installation, Zuul's plugin code).
    ``hidden_paths`` are covered by empty tmpfs mounts should one of the
    other mounts expose them (e.g. the state dir under a bound prefix).
    ``ro_paths``/``rw_paths`` are the administrator's extra binds; a hidden
    path inside one of them stays hidden, one named itself is shown.
    """

    hidden_paths: list[str] = field(default_factory=list)
    readonly_paths: list[str] = field(default_factory=list)
    ro_paths: list[str] = field(default_factory=list)
    rw_paths: list[str] = field(default_factory=list)
    bwrap: str = 'bwrap'

    def available(self) -> bool:
        return shutil.which(self.bwrap) is not None

    def wrap(self, command: list[str], mounts: SandboxMounts, sockets: list[str] | None = None,
             cwd: str | None = None) -> list[str]:
        """``command`` confined as the module docstring says."""
        path = shutil.which(self.bwrap)
        if path is None:
            raise SandboxError('bubblewrap (bwrap) is not installed')
        args = [path, '--die-with-parent', '--new-session', '--unshare-pid',
                '--unshare-ipc', '--unshare-uts', '--unshare-cgroup-try',
                '--cap-drop', 'ALL']
        args += _system_args()
        # Private /dev, /proc, /tmp first: the binds below may lie under
        # /tmp (a job dir there) and must stay visible.
        args += ['--dev', '/dev', '--proc', '/proc', '--tmpfs', '/tmp']
        for host_path in self.readonly_paths:
            args += _ro_bind(host_path)
        for hidden in self.hidden_paths:
            if os.path.isdir(hidden):
                args += ['--tmpfs', os.path.realpath(hidden)]
        args += self._extra_binds()
        for host_path in mounts.readonly:
            args += _ro_bind(host_path)
        for host_path in mounts.writable:
            real = os.path.realpath(host_path)
            args += ['--bind', real, real]
        for empty in mounts.empty:
            args += ['--tmpfs', os.path.realpath(empty)]
        for fd, dest in mounts.files:
            args += ['--ro-bind-data', str(fd), dest]
        if mounts.passwd:
            args += ['--ro-bind', mounts.passwd, '/etc/passwd']
        if mounts.group:
            args += ['--ro-bind', mounts.group, '/etc/group']
        for sock in sockets or []:
            if sock and os.path.exists(sock):
                args += ['--bind', sock, sock]
        args += ['--chdir', cwd or '/', '--']
        return args + list(command)


    def _extra_binds(self) -> list[str]:
        """Outer paths first, so a path named inside another keeps its own
        access."""
        binds = []
        for paths, option in ((self.ro_paths, '--ro-bind'), (self.rw_paths, '--bind')):
            for host_path in paths:
                if not os.path.exists(host_path):
                    raise SandboxError(f'{host_path} (to bind into the sandbox) does not exist')
                binds.append((os.path.realpath(host_path), option))
        args: list[str] = []
        for real, option in sorted(binds, key=lambda b: b[0].rstrip('/').count('/')):
            args += [option, real, real]
            for hidden in self.hidden_paths:
                inside = os.path.realpath(hidden)
                if inside.startswith(real.rstrip('/') + '/') and os.path.isdir(inside):
                    args += ['--tmpfs', inside]
        return args


def _ro_bind(host_path: str) -> list[str]:
    if not os.path.exists(host_path):
        return []
    real = os.path.realpath(host_path)
    return ['--ro-bind', real, real]


def _system_args() -> list[str]:
    args: list[str] = []
    for path in SYSTEM_DIRS + ETC_ENTRIES:
        if os.path.islink(path) and not path.startswith('/etc/'):
            args += ['--symlink', os.readlink(path), path]
        elif os.path.exists(path):
            args += ['--ro-bind', path, path]
    return args


def user_files(directory: str, home: str) -> tuple[str, str]:
    """``passwd`` and ``group`` files in ``directory`` naming only the
    executor's user and group, with ``home`` (ssh needs its user to exist
    and reads ``~/.ssh`` from here, not from ``$HOME``)."""
    import grp
    import pwd
    uid, gid = os.getuid(), os.getgid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = f'zuul{uid}'
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = user
    passwd_path = os.path.join(directory, 'passwd')
    group_path = os.path.join(directory, 'group')
    with open(passwd_path, 'w') as f:
        f.write(f'{user}:x:{uid}:{gid}:zuul executor:{home}:/bin/sh\n')
    with open(group_path, 'w') as f:
        f.write(f'{group}:x:{gid}:\n')
    return passwd_path, group_path
