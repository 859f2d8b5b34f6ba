"""Bubblewrap confinement for untrusted playbooks.

The playbook's ``ansible-playbook`` sees the system read-only, a private
/tmp, its own job dir writable, and nothing of the executor's state dir
(keys, other builds) or the executor user's home.  The SSH agent socket is
the only credential passed in: the key itself stays outside.  The network
is shared (ansible must reach the nodes), and so is the PID namespace so
that SSH control masters outlive one playbook and serve the next.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field


class SandboxError(RuntimeError):
    """bubblewrap is missing or refused to start."""


@dataclass
class BubblewrapSandbox:
    """Builds the ``bwrap`` command line around a playbook run.

    ``hidden_paths`` are covered by empty tmpfs mounts (state dir, job
    root, home directories); ``readonly_paths`` are re-exposed read-only
    inside them (e.g. the code when it lives under a hidden path).
    """

    hidden_paths: list[str] = field(default_factory=list)
    readonly_paths: list[str] = field(default_factory=list)
    bwrap: str = 'bwrap'

    def available(self) -> bool:
        return shutil.which(self.bwrap) is not None

    def wrap(self, command: list[str], jobdir_root: str, sockets: list[str] | None = None,
             cwd: str | None = None, readonly_within: list[str] | None = None) -> list[str]:
        """``command`` run confined to ``jobdir_root`` (writable except for
        ``readonly_within``)."""
        path = shutil.which(self.bwrap)
        if path is None:
            raise SandboxError('bubblewrap (bwrap) is not installed')
        args = [path, '--die-with-parent', '--unshare-ipc', '--unshare-uts',
                '--ro-bind', '/', '/', '--dev', '/dev', '--proc', '/proc',
                '--tmpfs', '/tmp']
        for hidden in self.hidden_paths:
            if os.path.isdir(hidden):
                args += ['--tmpfs', os.path.realpath(hidden)]
        for readonly in self.readonly_paths:
            if os.path.exists(readonly):
                real = os.path.realpath(readonly)
                args += ['--ro-bind', real, real]
        real_jobdir = os.path.realpath(jobdir_root)
        args += ['--bind', real_jobdir, real_jobdir]
        for readonly in readonly_within or []:
            real = os.path.realpath(readonly)
            args += ['--ro-bind', real, real]
        for sock in sockets or []:
            if sock and os.path.exists(sock):
                args += ['--bind', sock, sock]
        args += ['--chdir', cwd or real_jobdir, '--']
        return args + list(command)
