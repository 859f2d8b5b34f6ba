"""Refuse execution on the executor from untrusted playbooks.

Installed inside ``ansible-playbook`` (by the zuul_stream callback, which
ansible loads before any task runs and before the worker processes are
forked) when ``ZUUL_UNTRUSTED=1``; in trusted playbooks
(``ZUUL_TRUSTED=1``) only the executor pin below is installed.

Every playbook, trusted or not: a task that runs on the executor (over a
local connection) runs with the executor's own interpreter and no
privilege escalation, shell or executable chosen by a variable: extra
vars, secrets and job vars rank above the implicit localhost's own, so a
variable an uploader managed to set would otherwise pick the program the
executor runs (zuul.lib.ansiblevars).  The check sits where every task passes
after its connection is chosen (``TaskExecutor._set_connection_options``),
so it sees the final host, delegation and connection whatever spelling the
playbook used: ``delegate_to: localhost`` / ``127.0.0.1`` / a templated
name, ``local_action``, ``connection: local`` or ``ansible.builtin.local``,
``ansible_connection`` in play/host vars, ``add_host`` of localhost.

Rules for untrusted playbooks:

* a task may be delegated only to a host of the inventory;
* on an inventory host the connection must be the node's own (no
  ``local``), with the node's address and no ssh options that run local
  commands (``ProxyCommand`` via ``ansible_ssh_common_args`` etc.);
* on the implicit localhost only actions that run inside ansible itself
  (debug, set_fact, assert, zuul_return, ...) are allowed;
* ``add_host`` may not add localhost, and adds only hosts reached over
  ssh (the build's known hosts decide whether they answer) with no
  connection settings of its own; ``set_fact`` may not set connection or
  execution variables; on an inventory host no connection variable may
  differ from the inventory's, whatever set it (host or group vars files,
  include_vars, play vars);
* lookups that run commands (``pipe``, ``lines``) or reach the network
  (``url``) are refused;
* no module and no command ever runs over a local connection (a second
  line behind the rules above: a module from an untrusted ``library/``
  runs on the nodes, never on the executor);
* Ansible loads plugin code only from its own package, Zuul's plugin
  dir and the collections installed with it (site-packages), so nothing
  a playbook wrote (even into its own work dir, at run time) is ever
  imported;
* files read on the executor (``copy``/``template``/``script`` sources,
  ``include_vars``, file lookups) must resolve inside ``ZUUL_READ_ROOTS``
  (the work dir, the untrusted checkouts and the administrator's
  ``untrusted_ro_paths``/``untrusted_rw_paths``), and ``fetch`` writes
  only inside the work dir and ``ZUUL_WRITE_ROOTS``
  (``untrusted_rw_paths``).
"""

from __future__ import annotations

import os
import sys

from zuul.lib import ansiblevars, safefile

REFUSED = 'Executing local code is prohibited in untrusted playbooks'

LOCALHOST_NAMES = frozenset({'localhost', '127.0.0.1', '::1', 'localhost.localdomain'})

# Actions that never execute a module or touch the executor's files.
SAFE_LOCAL_ACTIONS = frozenset({
    'debug', 'set_fact', 'set_stats', 'assert', 'fail', 'meta', 'pause',
    'zuul_return', 'add_host', 'group_by', 'include_tasks', 'import_tasks',
    'include_role', 'import_role', 'include_vars', 'end_play',
})

COMMAND_LOOKUPS = frozenset({'pipe', 'lines'})
NETWORK_LOOKUPS = frozenset({'url'})

PINNED = 'may not be changed on the executor'

# The connections untrusted content may use for a host: ssh, whose options
# are pinned in ansible.cfg (the build's known hosts, no proxy commands).
SSH_CONNECTIONS = frozenset({'', 'ssh', 'smart'})

# Connection variables the inventory itself sets for every node.
_INVENTORY_CONNECTION_VARS = frozenset({'ansible_host', 'ansible_port', 'ansible_user',
                                        'ansible_connection'})

_SSH_OPTION_VARS = (
    'ansible_ssh_common_args', 'ansible_ssh_extra_args', 'ansible_ssh_args',
    'ansible_ssh_executable', 'ansible_sftp_extra_args', 'ansible_scp_extra_args',
    'ansible_ssh_private_key_file', 'ansible_private_key_file',
)

_installed = False


class RestrictedError(Exception):
    """Raised (as an AnsibleError) for a refused task."""


def short_name(name) -> str:
    """``ansible.builtin.command`` / ``ansible.legacy.command`` -> ``command``."""
    name = str(name or '')
    for prefix in ('ansible.builtin.', 'ansible.legacy.'):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def is_local_connection(connection) -> bool:
    names = {str(getattr(connection, 'transport', '')),
             str(getattr(connection, '_load_name', ''))}
    return any(short_name(n) == 'local' for n in names)


def _fail(message: str):
    from ansible.errors import AnsibleError
    raise AnsibleError(f'{REFUSED}: {message}')


def _fail_pinned(message: str):
    from ansible.errors import AnsibleError
    raise AnsibleError(message)


def _check_add_host(args: dict) -> None:
    name = str(args.get('name') or args.get('hostname') or args.get('host') or '')
    host = str(args.get('ansible_host') or args.get('ansible_ssh_host') or '')
    conn = short_name(args.get('ansible_connection') or args.get('connection') or '')
    if name.lower() in LOCALHOST_NAMES or host.lower() in LOCALHOST_NAMES:
        _fail(f'add_host may not add the executor ({name or host})')
    if conn == 'local':
        _fail(f'add_host may not add {name} with a local connection')
    if conn not in SSH_CONNECTIONS:
        _fail(f'add_host may not add {name} with the {conn} connection '
              '(only the ssh connection)')
    for key in _SSH_OPTION_VARS:
        if key in args:
            _fail(f'add_host may not set {key}')
    settings = [k for k in args if k not in _INVENTORY_CONNECTION_VARS and (
        ansiblevars.is_connection_variable(k) or ansiblevars.is_execution_variable(k))]
    if settings:
        _fail(f'add_host may not set {", ".join(sorted(settings))} '
              '(only the ssh connection, with the build\'s known hosts)')


def _check_set_fact(args: dict) -> None:
    names = [k for k in args or {} if ansiblevars.is_connection_variable(k)
             or ansiblevars.is_execution_variable(k)]
    if names:
        _fail(f'set_fact may not set {", ".join(sorted(names))}')


def _check_inventory_host(executor, target: str, cvars: dict) -> None:
    inventory = executor._variable_manager._inventory
    host = inventory.hosts[target]
    if is_local_connection(executor._connection):
        _fail(f'a local connection to {target} is not allowed')
    for key in _SSH_OPTION_VARS:
        if key in cvars:
            _fail(f'{key} may not be set for {target}')
    conn = short_name(getattr(executor._connection, '_load_name', '') or '')
    if conn not in SSH_CONNECTIONS and conn != short_name(host.vars.get('ansible_connection')):
        _fail(f'the {conn} connection to {target} is not allowed (only the ssh connection)')
    for key in cvars:
        if not ansiblevars.is_connection_variable(key):
            continue
        wanted = host.vars.get(key)
        if key in _INVENTORY_CONNECTION_VARS and wanted is None:
            continue    # a host add_host added over plain ssh
        if wanted is None or str(cvars[key]) != str(wanted):
            _fail(f'{key} of {target} may not be changed')


def _same_program(path, program: str) -> bool:
    try:
        return os.path.realpath(str(path)) == os.path.realpath(program)
    except (TypeError, ValueError):
        return False


def check_executor_task(executor, cvars: dict) -> None:
    """Every playbook: a task on the executor itself keeps the executor's
    interpreter and runs no program a variable chose."""
    if not is_local_connection(getattr(executor, '_connection', None)):
        return
    for key in cvars:
        if not ansiblevars.is_execution_variable(key):
            continue
        value = cvars[key]
        if key == 'ansible_python_interpreter' and _same_program(value, sys.executable):
            continue    # the implicit localhost's own
        if key == 'ansible_become' and not value:
            continue
        _fail_pinned(f'{key} {PINNED} (a task on {executor._host.name} runs with the '
                     'executor\'s own interpreter and user)')


def check_task(executor, cvars: dict) -> None:
    """Raise an AnsibleError if this task would run code on the executor."""
    task = executor._task
    action = short_name(task.action)
    inventory_hosts = set(executor._variable_manager._inventory.hosts)
    if action == 'add_host':
        _check_add_host(dict(task.args or {}))
    if action == 'set_fact':
        _check_set_fact(dict(task.args or {}))
    if short_name(task.connection) == 'local':
        _fail('connection: local')
    delegate = task.delegate_to
    if delegate and str(delegate) not in inventory_hosts:
        _fail(f'delegate_to {delegate} (only hosts of the inventory are allowed)')
    target = str(delegate) if delegate else executor._host.name
    if target in inventory_hosts:
        _check_inventory_host(executor, target, cvars)
    elif action not in SAFE_LOCAL_ACTIONS:
        _fail(f'action {action} on {target} (the executor)')


def _restricted_lookup_get(original):
    def get(name, *args, **kwargs):
        if short_name(name) in COMMAND_LOOKUPS:
            _fail(f'lookup {name} runs a command on the executor')
        if short_name(name) in NETWORK_LOOKUPS:
            _fail(f'lookup {name} reaches the network from the executor')
        return original(name, *args, **kwargs)
    return get


def _roots(variable: str) -> list[str]:
    return [os.path.realpath(p) for p in os.environ.get(variable, '').split(':') if p]


def check_read_path(path) -> None:
    """Refuse reading ``path`` on the executor unless it resolves inside
    one of ``ZUUL_READ_ROOTS``."""
    if path is None:
        return
    if not any(safefile.is_within(r, os.fsdecode(path)) for r in _roots('ZUUL_READ_ROOTS')):
        _fail(f'reading {path} on the executor (only files in the work dir are allowed)')


def _work_root() -> str:
    return os.environ.get('ZUUL_WORK_ROOT') or '/nonexistent'


def _may_write_in(directory: str) -> bool:
    """Inside ``ZUUL_WORK_ROOT`` or one of ``ZUUL_WRITE_ROOTS`` (the
    administrator's ``untrusted_rw_paths``)."""
    roots = [_work_root(), *_roots('ZUUL_WRITE_ROOTS')]
    return any(safefile.is_within(r, directory) for r in roots)


def check_write_path(path) -> None:
    """Refuse writing ``path`` on the executor outside ``ZUUL_WORK_ROOT``
    and ``ZUUL_WRITE_ROOTS``."""
    path = os.path.abspath(os.fsdecode(path))
    if os.path.islink(path) or not _may_write_in(os.path.dirname(path)):
        _fail(f'writing {path} on the executor (only the work dir is allowed)')


def _plugin_roots() -> list[str]:
    """Where untrusted playbooks' plugins may come from: Ansible's own
    package, Zuul's plugin dir and the collections installed with that
    Ansible (``site-packages/ansible_collections`` beside ``ansible``,
    put there by zuul-manage-ansible: the administrator's, as released
    Zuul allows them).  Never a collection found anywhere else (beside a
    playbook, in a role, in a dir a playbook wrote to)."""
    import ansible
    here = os.path.dirname(os.path.abspath(__file__))
    package = os.path.realpath(os.path.dirname(ansible.__file__))
    return [package, os.path.realpath(here),
            os.path.join(os.path.dirname(package), 'ansible_collections')]


def _guard_plugin_source(original):
    roots = _plugin_roots()

    def load(self, *args, **kwargs):
        path = kwargs.get('path', args[1] if len(args) > 1 else None)
        if not path or not any(safefile.is_within(r, os.fsdecode(path)) for r in roots):
            _fail(f'loading the Ansible plugin {path}: untrusted content may not bring plugins')
        return original(self, *args, **kwargs)
    return load


def _guard_local(original, what: str):
    def run(self, *args, **kwargs):
        if is_local_connection(getattr(self, '_connection', None)):
            _fail(f'{what} over a local connection')
        return original(self, *args, **kwargs)
    return run


def _guard_find_needle(original):
    def find(self, dirname, needle):
        found = original(self, dirname, needle)
        check_read_path(found)
        return found
    return find


def _guard_lookup_file(original):
    def find(self, myvars, subdir, needle, ignore_missing=False):
        found = original(self, myvars, subdir, needle, ignore_missing)
        check_read_path(found)
        return found
    return find


def _guard_fetch(original):
    def fetch_file(self, in_path, out_path, *args, **kwargs):
        check_write_path(out_path)
        return original(self, in_path, out_path, *args, **kwargs)
    return fetch_file


def _guard_makedirs(original):
    def makedirs(path, *args, **kwargs):
        if not _may_write_in(os.fsdecode(path)):
            _fail(f'writing to {path} on the executor (only the work dir is allowed)')
        return original(path, *args, **kwargs)
    return makedirs


_pinned = False


def install_executor_pin() -> None:
    """Every playbook: check_executor_task before each task (idempotent)."""
    global _pinned
    if _pinned:
        return
    from ansible.executor.task_executor import TaskExecutor
    original = TaskExecutor._set_connection_options

    def pinned_set_connection_options(self, variables, templar):
        check_executor_task(self, variables)
        return original(self, variables, templar)

    TaskExecutor._set_connection_options = pinned_set_connection_options
    _pinned = True


def install() -> None:
    """Patch ansible in this process (idempotent)."""
    global _installed
    if _installed:
        return
    install_executor_pin()
    from ansible.executor.task_executor import TaskExecutor
    from ansible.plugins.action import ActionBase
    from ansible.plugins.action import fetch as fetch_action
    from ansible.plugins.connection import paramiko_ssh, ssh
    from ansible.plugins.loader import PluginLoader, lookup_loader
    from ansible.plugins.lookup import LookupBase

    original = TaskExecutor._set_connection_options

    def checked_set_connection_options(self, variables, templar):
        check_task(self, variables)
        return original(self, variables, templar)

    TaskExecutor._set_connection_options = checked_set_connection_options
    lookup_loader.get = _restricted_lookup_get(lookup_loader.get)
    PluginLoader._load_module_source = _guard_plugin_source(PluginLoader._load_module_source)
    ActionBase._execute_module = _guard_local(ActionBase._execute_module, 'running a module')
    ActionBase._low_level_execute_command = _guard_local(
        ActionBase._low_level_execute_command, 'running a command')
    ActionBase._find_needle = _guard_find_needle(ActionBase._find_needle)
    LookupBase.find_file_in_search_path = _guard_lookup_file(
        LookupBase.find_file_in_search_path)
    fetch_action.makedirs_safe = _guard_makedirs(fetch_action.makedirs_safe)
    for module in (ssh, paramiko_ssh):
        module.Connection.fetch_file = _guard_fetch(module.Connection.fetch_file)
    _installed = True


def install_from_environment() -> None:
    if os.environ.get('ZUUL_UNTRUSTED') == '1':
        install()
    elif os.environ.get('ZUUL_TRUSTED') == '1':
        install_executor_pin()
