"""What Zuul adds to every command, shell and script task (installed
inside ``ansible-playbook`` by the zuul_stream callback, before the
worker processes fork).

Ansible's ``command`` and ``shell`` actions run the module
``ansible.legacy.command``, which is Zuul's (zuul/ansible/library/
command.py).  Every call of it, whatever the task's spelling
(``command``, ``ansible.builtin.shell``, ``argv:``, ``cmd:``), passes
``ActionBase._execute_module``; there the module gets:

* ``zuul_ansible_split_streams``: the job's ``ansible-split-streams``
  (``ZUUL_ANSIBLE_SPLIT_STREAMS=1``).  False, the default, merges the
  command's stderr into its stdout at the source, in the order written
  (``stderr`` empty), as released Zuul does;
* ``zuul_log_id``: the console log id (zuul.ansible.nodeconsole) for a
  task on a node, so every line it prints is streamed live.  Not for a
  local connection (the executor itself), a fire-and-forget ``async``
  task (its output comes with no result to wait for), nor a ``no_log``
  task (its output must appear nowhere).

``script`` tasks run their script through the same module (a shell
command, output kept byte for byte), so their output streams too.
"""

from __future__ import annotations

import os

from zuul.ansible import nodeconsole

SPLIT_ENV = 'ZUUL_ANSIBLE_SPLIT_STREAMS'
COMMAND_MODULES = frozenset({'command', 'ansible.builtin.command', 'ansible.legacy.command'})

_installed = False


def _is_local(action) -> bool:
    connection = getattr(action, '_connection', None)
    names = {str(getattr(connection, 'transport', '')), str(getattr(connection, '_load_name', ''))}
    return any(n.rsplit('.', 1)[-1] == 'local' for n in names)


def streams(action) -> bool:
    """Whether this task's command output is streamed from its node
    (never a ``no_log`` task's: its output is not even written there)."""
    task = getattr(action, '_task', None)
    if task is None or _is_local(action) or getattr(task, 'no_log', False):
        return False
    if getattr(task, 'async_val', 0) and not getattr(task, 'poll', 0):
        return False
    return True


def zuul_args(action, task_vars, split: bool) -> dict:
    """The arguments Zuul adds to a command module call."""
    args = {'zuul_ansible_split_streams': split}
    task = action._task
    host = (task_vars or {}).get('inventory_hostname')
    if host and streams(action):
        args['zuul_log_id'] = nodeconsole.module_log_id(
            str(task._uuid), str(host), bool(task.loop or getattr(task, 'loop_with', None)))
    return args


def _adding_args(original_execute, split: bool):
    def execute_module(self, module_name=None, module_args=None, *args, **kwargs):
        name = module_name or getattr(self._task, 'action', None)
        if str(name) not in COMMAND_MODULES:
            return original_execute(self, module_name, module_args, *args, **kwargs)
        source = module_args if module_args is not None else (self._task.args or {})
        task_vars = kwargs.get('task_vars')
        if task_vars is None and len(args) >= 2:
            task_vars = args[1]     # (tmp, task_vars, ...) positionally
        new_args = dict(source)
        new_args.update(zuul_args(self, task_vars, split))
        return original_execute(self, module_name, new_args, *args, **kwargs)
    return execute_module


def _streaming_script(original_run, original_low_level):
    """The script action runs the transferred script with one
    low-level command (the one given ``chdir``); run that command through
    the command module instead, so its output is streamed."""
    def run(self, tmp=None, task_vars=None):
        self._zuul_task_vars = task_vars
        return original_run(self, tmp, task_vars)

    def low_level(self, cmd, *args, **kwargs):
        if 'chdir' not in kwargs or kwargs.get('in_data') or not streams(self) \
                or getattr(self._connection._shell, '_IS_WINDOWS', False):
            return original_low_level(self, cmd, *args, **kwargs)
        module_args = {'_raw_params': cmd, '_uses_shell': True, 'strip_empty_ends': False}
        if kwargs.get('chdir'):
            module_args['chdir'] = kwargs['chdir']
        result = self._execute_module(module_name='ansible.legacy.command',
                                      module_args=module_args,
                                      task_vars=getattr(self, '_zuul_task_vars', None) or {})
        if 'rc' not in result:      # the module could not run at all
            return original_low_level(self, cmd, *args, **kwargs)
        out, err = result.get('stdout', ''), result.get('stderr', '')
        return {'rc': result['rc'], 'stdout': out, 'stdout_lines': out.splitlines(),
                'stderr': err, 'stderr_lines': err.splitlines()}
    return run, low_level


def install(split: bool) -> None:
    """Add Zuul's arguments to every command module call from now on."""
    global _installed
    if _installed:
        return
    from ansible.plugins.action import ActionBase
    from ansible.plugins.action.script import ActionModule as ScriptAction
    ActionBase._execute_module = _adding_args(ActionBase._execute_module, split)
    ScriptAction.run, ScriptAction._low_level_execute_command = _streaming_script(
        ScriptAction.run, ScriptAction._low_level_execute_command)
    _installed = True


def install_from_environment() -> None:
    install(split=os.environ.get(SPLIT_ENV, '0') == '1')
