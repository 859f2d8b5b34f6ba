"""Merge stdout and stderr of command and shell tasks (job
``ansible-split-streams: false``, the default).

Released Zuul's command tasks combine the two streams: a task's ``stdout``
holds everything the command wrote, in the order it wrote it, and its
``stderr`` is empty.  ``ansible-split-streams: true`` keeps Ansible's own
behaviour (two separate streams).  The executor says which with
``ZUUL_ANSIBLE_SPLIT_STREAMS`` (``1``: split).

Installed inside ``ansible-playbook`` by the zuul_stream callback, before
the worker processes fork.  Every command and shell task, whatever its
spelling (``command``, ``ansible.builtin.shell``, ``argv:``, ``cmd:``),
ends in one call that sends the ``command`` module to the node
(``ActionBase._execute_module``); the module's arguments are rewritten
there so that the node's operating system merges the streams (file
descriptor 2 pointed at 1), which keeps their interleaving exact:

* shell tasks: the script is run after ``exec 2>&1;`` (same line, so the
  shell's line numbers stay those of the task's script);
* command tasks: the argument vector is run as
  ``/bin/sh -c 'exec "$@" 2>&1' sh ARGV...`` (no word is re-parsed by
  the shell, so quoting and Ansible's own ``$VAR``/``~`` expansion of each
  word are unchanged).

The ``cmd`` the task result reports is put back to what the task asked
for.
"""

from __future__ import annotations

import os
import shlex

SPLIT_ENV = 'ZUUL_ANSIBLE_SPLIT_STREAMS'
SHELL_PREFIX = 'exec 2>&1; '
ARGV_WRAPPER = ['/bin/sh', '-c', 'exec "$@" 2>&1', 'sh']
COMMAND_MODULES = frozenset({'command', 'ansible.builtin.command', 'ansible.legacy.command'})

_installed = False


def merged_args(args: dict) -> tuple[dict, object] | None:
    """``(new module args, original cmd)`` that merge the streams, or None
    when these args name no command (the module then fails as usual)."""
    args = dict(args)
    if args.get('_uses_shell'):
        key = '_raw_params' if args.get('_raw_params') else 'cmd'
        script = args.get(key)
        if not isinstance(script, str) or not script:
            return None
        args[key] = SHELL_PREFIX + script
        return args, script
    raw = args.pop('_raw_params', None) or args.pop('cmd', None)
    argv = args.get('argv')
    if raw:
        argv = shlex.split(str(raw))
    if not argv or not isinstance(argv, (list, tuple)):
        return None
    original = [str(a) for a in argv]
    args['argv'] = ARGV_WRAPPER + original
    return args, original


def _restore_cmd(result, original) -> None:
    if isinstance(result, dict) and 'cmd' in result:
        result['cmd'] = original


def _merging(original_execute):
    def execute_module(self, module_name=None, module_args=None, *args, **kwargs):
        name = module_name or getattr(self._task, 'action', None)
        if str(name) not in COMMAND_MODULES:
            return original_execute(self, module_name, module_args, *args, **kwargs)
        source = module_args if module_args is not None else (self._task.args or {})
        merged = merged_args(source)
        if merged is None:
            return original_execute(self, module_name, module_args, *args, **kwargs)
        new_args, original = merged
        result = original_execute(self, module_name, new_args, *args, **kwargs)
        _restore_cmd(result, original)
        return result
    return execute_module


def install() -> None:
    """Merge the streams of every command/shell task from now on."""
    global _installed
    if _installed:
        return
    from ansible.plugins.action import ActionBase
    ActionBase._execute_module = _merging(ActionBase._execute_module)
    _installed = True


def install_from_environment() -> None:
    if os.environ.get(SPLIT_ENV, '0') != '1':
        install()
