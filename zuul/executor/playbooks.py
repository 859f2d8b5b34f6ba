"""Playbook and role checkouts for a build.

Each playbook's project is checked out under ``ansible/trusted`` (config
projects) or ``ansible/untrusted``; roles (``roles: - zuul: <project>``)
are checked out beside it and put on ``roles_path`` following seed 000:

* a bare role (``tasks/``, ``handlers/``, ... at the root): the directory
  holding the checkout (named after the role) goes on the path;
* a repo with ``roles/`` at its root: that ``roles/`` directory;
* otherwise the repo root (each directory in it is a role).

The project holding the playbook is an implicit role repo as well.
Untrusted playbooks and roles may not bring ansible plugins (they would
run as Python inside ansible-playbook, on the executor).
"""

from __future__ import annotations

import os
import re

from zuul.executor.jobdir import JobDir, PreparedPlaybook
from zuul.executor.protocol import PlaybookSpec
from zuul.lib import safefile

ROLE_MARKERS = ('tasks', 'handlers', 'vars', 'defaults', 'meta', 'templates', 'files')

PLUGIN_DIRS = (
    'action_plugins', 'become_plugins', 'cache_plugins', 'callback_plugins',
    'cliconf_plugins', 'connection_plugins', 'filter_plugins', 'httpapi_plugins',
    'inventory_plugins', 'lookup_plugins', 'netconf_plugins', 'shell_plugins',
    'strategy_plugins', 'terminal_plugins', 'test_plugins', 'vars_plugins',
    'collections',
)


# A role name becomes a file name in the job dir: one plain component.
ROLE_NAME_RE = re.compile(r'^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,254}$')


class PlaybookError(ValueError):
    """A playbook or role cannot be prepared (missing, or refused)."""


def check_role_name(name: str) -> str:
    """``name`` if it is a plain role name; PlaybookError otherwise (a
    ``../`` or ``/`` would let config choose where the executor writes)."""
    if not isinstance(name, str) or not ROLE_NAME_RE.match(name):
        raise PlaybookError(f'Role name {name!r} is not allowed: a role name is one path '
                            'component of letters, digits, "_", "-" and "."')
    return name


def _check_inside(root: str, path: str, what: str) -> None:
    """``path`` must resolve (symlinks followed) inside ``root``."""
    if not safefile.is_within(root, path):
        raise PlaybookError(f'{what} leaves its project (resolves outside the checkout)')


def find_playbook(project_root: str, path: str) -> str:
    """The playbook file for ``path`` (``.yaml``/``.yml`` may be omitted)."""
    for candidate in (path, path + '.yaml', path + '.yml'):
        full = os.path.normpath(os.path.join(project_root, candidate))
        if not full.startswith(os.path.normpath(project_root) + os.sep):
            raise PlaybookError(f'playbook path {path} leaves its project')
        if os.path.isfile(full):
            _check_inside(project_root, full, f'playbook {path}')
            return full
    raise PlaybookError(f'playbook {path} not found')


def check_no_plugins(directory: str, what: str) -> None:
    """Refuse ansible plugin dirs in ``directory`` (untrusted content)."""
    for name in PLUGIN_DIRS:
        if os.path.exists(os.path.join(directory, name)):
            raise PlaybookError(
                f'Ansible plugin dir {name} found in {what}: not allowed in '
                'untrusted projects')


def is_bare_role(root: str) -> bool:
    return any(os.path.isdir(os.path.join(root, m)) for m in ROLE_MARKERS)


def role_search_path(checkout: str, role_name: str, link_dir: str) -> str:
    """The roles_path entry for a role repo checked out at ``checkout``."""
    if is_bare_role(checkout):
        os.makedirs(link_dir, exist_ok=True)
        link = os.path.join(link_dir, check_role_name(role_name))
        if not os.path.exists(link):
            os.symlink(checkout, link)
        return link_dir
    if os.path.isdir(os.path.join(checkout, 'roles')):
        return os.path.join(checkout, 'roles')
    return checkout


def _roles_in(path: str) -> list[str]:
    if not os.path.isdir(path):
        return []
    return [os.path.join(path, d) for d in sorted(os.listdir(path))
            if os.path.isdir(os.path.join(path, d))]


def default_role_name(project: str) -> str:
    name = project.split('/')[-1]
    prefix = 'ansible-role-'
    return name[len(prefix):] if name.startswith(prefix) else name


class PlaybookPreparer:
    """Checks out playbook and role projects and builds roles_path.

    ``checkout(repo_state, projects, dest_root)`` is the workspace call
    (the merger's ``prepare_workspace`` bound to the build's hostnames).
    Trusted content uses ``trusted_state`` (the branch tips, without the
    items' changes: config-project changes act only once merged);
    untrusted content uses the speculative ``untrusted_state``.
    """

    def __init__(self, jobdir: JobDir, checkout, trusted_state: dict,
                 untrusted_state: dict):
        self.jobdir = jobdir
        self._checkout = checkout
        self._states = {True: trusted_state, False: untrusted_state}
        self._cache: dict = {}

    def _project_root(self, trusted: bool, connection: str, project: str,
                      branch: str | None) -> str:
        key = (trusted, connection, project, branch)
        if key not in self._cache:
            dest = self.jobdir.new_checkout_root(trusted)
            paths = self._checkout(self._states[trusted], [(connection, project, branch)], dest)
            self._cache[key] = paths[(connection, project)]
        return self._cache[key]

    def prepare(self, phase: str, index: int, spec: PlaybookSpec) -> PreparedPlaybook:
        root = self._project_root(spec.trusted, spec.connection, spec.project, spec.branch)
        path = find_playbook(root, spec.path)
        if not spec.trusted:
            check_no_plugins(os.path.dirname(path), f'{spec.project}/{spec.path}')
        roles_path = []
        link_base = os.path.join(self.jobdir.playbook_dir(phase, index), 'roles')
        for n, role in enumerate(spec.roles):
            checkout = self._project_root(spec.trusted, role.connection, role.project, None)
            name = role.target_name or default_role_name(role.project)
            roles_path.append(role_search_path(checkout, name, f'{link_base}_{n}'))
        implicit = role_search_path(root, default_role_name(spec.project), f'{link_base}_self')
        if implicit not in roles_path:
            roles_path.append(implicit)
        if not spec.trusted:
            self._check_untrusted_roles(root, path, roles_path)
        return PreparedPlaybook(phase=phase, index=index, path=path, trusted=spec.trusted,
                                roles_path=roles_path, project_root=root)

    def _check_untrusted_roles(self, root: str, playbook: str, roles_path: list[str]) -> None:
        """No plugins in any role Ansible could load for an untrusted
        playbook: those on roles_path and those beside the playbook
        (``<playbook dir>/roles/<role>``, which Ansible searches too)."""
        adjacent = os.path.join(os.path.dirname(playbook), 'roles')
        for entry in roles_path + [adjacent]:
            for role_dir in _roles_in(entry):
                _check_inside(self.jobdir.untrusted_root, role_dir,
                              f'role {os.path.basename(role_dir)}')
                check_no_plugins(role_dir, f'role {os.path.basename(role_dir)}')
