"""Which ``ansible-playbook`` runs a job: the job's ``ansible-version``
(else the tenant's ``default-ansible-version``, else zuul.conf's
``[scheduler] default_ansible_version``) picks one of the Ansible installs
on the executor; no version asked for runs the executor's default.

A version is named as released Zuul names it, by the major version of the
Ansible community package (``9``), or by the ``major.minor`` of the
ansible-core it brings (``2.16``). Besides the executor's own Ansible,
``zuul-manage-ansible`` installs each supported version into a virtual
environment ``<root>/<ansible-core major.minor>/``; the executor looks in
``<prefix>/lib/zuul/ansible`` (the command's default root) and then in
``[executor] ansible_root`` (default ``<state_dir>/ansible-bin``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from functools import lru_cache

# Ansible community package major -> the ansible-core it is built on.
SUPPORTED = {'8': '2.15', '9': '2.16', '10': '2.17', '11': '2.18', '12': '2.19'}

# Written into an install's directory once it is complete: a directory
# without it is a failed or running install and is never used.
INSTALLED_MARKER = '.zuul-ansible-installed'


class UnknownAnsibleVersionError(Exception):
    """The job asks for an Ansible version this executor does not have."""


class InstallError(Exception):
    """zuul-manage-ansible could not install a version."""


def core_version(version) -> str:
    """The ansible-core ``major.minor`` that ``version`` names.
    Raises UnknownAnsibleVersionError for a version Zuul does not support."""
    text = str(version).strip()
    if text in SUPPORTED:
        return SUPPORTED[text]
    if text in SUPPORTED.values():
        return text
    raise UnknownAnsibleVersionError(
        f'Ansible {text} is not a supported version (supported: {supported_text()})')


def supported_text() -> str:
    return ', '.join(f'{major} (ansible-core {core})' for major, core in SUPPORTED.items())


def default_install_root() -> str:
    """Where ``zuul-manage-ansible`` installs when given no ``-r``."""
    return os.path.join(sys.prefix, 'lib', 'zuul', 'ansible')


def install_roots(settings) -> list[str]:
    """Where the executor looks for installs, in order."""
    configured = getattr(settings, 'ansible_root', None) or \
        os.path.join(settings.state_dir, 'ansible-bin')
    return [default_install_root(), configured]


def install_dir(root: str, core: str) -> str:
    return os.path.join(root, core)


def is_installed(path: str) -> bool:
    """Whether ``path`` holds a complete install."""
    return os.path.isfile(os.path.join(path, INSTALLED_MARKER)) and \
        os.access(os.path.join(path, 'bin', 'ansible-playbook'), os.X_OK)


def find_install(settings, core: str) -> str | None:
    """The first complete install of ``core`` under the install roots."""
    for root in install_roots(settings):
        path = install_dir(root, core)
        if is_installed(path):
            return path
    return None


def installed_versions(settings) -> list[str]:
    """ansible-core versions available besides the executor's own."""
    return [core for core in SUPPORTED.values() if find_install(settings, core)]


def playbook_command(settings, version: str | None) -> str:
    """Path of the ``ansible-playbook`` for ``version`` (None: default)."""
    if not version:
        return settings.ansible_playbook
    core = core_version(version)
    own = _own_version(settings.ansible_playbook)
    if own == core:
        return settings.ansible_playbook
    path = find_install(settings, core)
    if path is not None:
        return os.path.join(path, 'bin', 'ansible-playbook')
    others = ', '.join(installed_versions(settings)) or 'none'
    raise UnknownAnsibleVersionError(
        f'Ansible {version} (ansible-core {core}) is not installed on this executor '
        f'(its own is {own or "unknown"}; installed by zuul-manage-ansible: {others}; '
        f'looked in {", ".join(install_roots(settings))})')


def _own_version(ansible_playbook: str) -> str:
    try:
        stamp = os.stat(_resolve(ansible_playbook)).st_mtime_ns
    except OSError:
        stamp = 0
    return _version_of(ansible_playbook, stamp)


def _resolve(command: str) -> str:
    if os.sep in command:
        return command
    return shutil.which(command) or command


@lru_cache(maxsize=16)
def _version_of(ansible_playbook: str, stamp: int) -> str:
    # Cached per file version: ``ansible-playbook --version`` takes a
    # second, and it changes only when the install is upgraded.
    from zuul.executor.vars import installed_ansible_version
    return installed_ansible_version(ansible_playbook)


# -- installing (zuul-manage-ansible) ---------------------------------------------------

def extra_packages(core: str, environ=os.environ) -> list[str]:
    """``ANSIBLE_EXTRA_PACKAGES`` and ``ANSIBLE_<VERSION>_EXTRA_PACKAGES``
    (VERSION as ``-l`` lists it, without dots: ``ANSIBLE_9_...`` or
    ``ANSIBLE_216_...``), space-separated pip requirements."""
    major = next(m for m, c in SUPPORTED.items() if c == core)
    names = ['ANSIBLE_EXTRA_PACKAGES', f'ANSIBLE_{major}_EXTRA_PACKAGES',
             f'ANSIBLE_{core.replace(".", "")}_EXTRA_PACKAGES']
    return [pkg for name in names for pkg in environ.get(name, '').split()]


def install(root: str, versions=None, upgrade: bool = False, python: str = sys.executable,
            report=print, verbose: bool = False) -> list[str]:
    """Install each of ``versions`` (default: every supported one) into
    ``<root>/<ansible-core major.minor>``; an existing install is left
    alone unless ``upgrade``, then it gets the newest bugfix release.
    Returns the install dirs. Raises InstallError."""
    cores = [core_version(v) for v in versions] if versions else list(SUPPORTED.values())
    done = []
    for core in dict.fromkeys(cores):
        path = install_dir(root, core)
        if is_installed(path) and not upgrade:
            report(f'ansible-core {core}: already installed in {path}')
        else:
            _install_one(path, core, python, verbose)
            report(f'ansible-core {core}: {_read_marker(path)} installed in {path}')
        done.append(path)
    return done


def _install_one(path: str, core: str, python: str, verbose: bool) -> None:
    if os.path.isdir(path) and not is_installed(path):
        shutil.rmtree(path)     # an earlier install that did not finish
    fresh = not os.path.isdir(path)
    try:
        if fresh:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            _run([python, '-m', 'venv', path], verbose)
        _run([os.path.join(path, 'bin', 'python'), '-m', 'pip', 'install', '--upgrade',
              f'ansible-core=={core}.*', *extra_packages(core)], verbose)
        full = _check_version(path, core)
    except InstallError:
        if fresh:
            shutil.rmtree(path, ignore_errors=True)
        raise
    with open(os.path.join(path, INSTALLED_MARKER), 'w') as f:
        f.write(full + '\n')


def _run(command: list[str], verbose: bool) -> None:
    try:
        proc = subprocess.run(command, capture_output=not verbose, text=True)
    except OSError as exc:
        raise InstallError(f'{command[0]}: {exc}') from exc
    if proc.returncode != 0:
        tail = '\n'.join(((proc.stderr or '') + (proc.stdout or '')).splitlines()[-15:])
        raise InstallError(f'{" ".join(command)} failed (exit {proc.returncode})'
                           + (f':\n{tail}' if tail else ''))


def _check_version(path: str, core: str) -> str:
    """The full ansible-core version the install runs; it must be ``core``."""
    command = os.path.join(path, 'bin', 'ansible-playbook')
    try:
        text = subprocess.run([command, '--version'], capture_output=True, text=True,
                              timeout=120).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise InstallError(f'{command} does not run: {exc}') from exc
    match = re.search(r'core (\d+\.\d+)\.(\S+)\]', text)
    if not match or match.group(1) != core:
        raise InstallError(f'{command} is not ansible-core {core}: {text.strip()[:200]!r}')
    return f'{match.group(1)}.{match.group(2)}'


def _read_marker(path: str) -> str:
    with open(os.path.join(path, INSTALLED_MARKER)) as f:
        return f.read().strip()
