"""``zuul_return``: hand data back to Zuul.

``zuul_return: data: {...}`` deep-merges ``data`` into the build's result
file (``ZUUL_RESULT_FILE``, i.e. ``zuul.executor.result_data_file``); the
executor returns it with the build result.  Released Zuul keys the
executor understands: ``zuul.artifacts`` (list of ``{name, url,
metadata}``) and ``zuul.child_jobs`` (the child jobs to run; others are
skipped).  Runs inside ansible (never on a node), so it is allowed on the
implicit localhost of untrusted playbooks.

The result file lives in the build's ``work/`` (``ZUUL_WORK_ROOT``, else
the result file's directory), which untrusted playbooks can write to; it
is read and replaced below that root without following any symlink
(``zuul.lib.safefile``).  A planted symlink fails the task; its target is
never written.
"""

from __future__ import annotations

import json
import os

from ansible.plugins.action import ActionBase

from zuul.lib import safefile


def merge_data(target: dict, update: dict) -> dict:
    """Deep-merge ``update`` into ``target``: dicts merge, the rest replaces."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            merge_data(target[key], value)
        else:
            target[key] = value
    return target


def _to_native(value):
    return json.loads(json.dumps(value, default=str))


class ActionModule(ActionBase):
    """Merge ``data`` into the result file."""

    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        data = self._task.args.get('data')
        if not isinstance(data, dict):
            return dict(result, failed=True, msg='zuul_return: data must be a dict')
        path = self._task.args.get('file')
        if path and os.environ.get('ZUUL_UNTRUSTED') == '1':
            return dict(result, failed=True,
                        msg='zuul_return: file may not be set in untrusted playbooks')
        if not path:
            path = os.environ.get('ZUUL_RESULT_FILE') or (
                task_vars.get('zuul', {}).get('executor', {}).get('result_data_file'))
        if not path:
            return dict(result, failed=True, msg='zuul_return: no result file known')
        path = os.path.abspath(path)
        root = safefile.root_for(path, os.environ.get('ZUUL_WORK_ROOT'))
        name = os.path.basename(path)
        try:
            rel = safefile.relative_to(root, path)  # messages name no executor paths
            # nothing untrusted runs beside a playbook: no race with a swap
            safefile.check_root(root)
            current = {}
            try:
                with safefile.open_regular_file_beneath(root, rel, 'r') as f:
                    current = json.load(f)
            except FileNotFoundError:
                pass
            except ValueError as exc:
                return dict(result, failed=True,
                            msg=f'zuul_return: the result file {name} is not valid JSON: {exc}')
            if not isinstance(current, dict):
                return dict(result, failed=True,
                            msg=f'zuul_return: the result file {name} is not a JSON object')
            merge_data(current, _to_native(data))
            safefile.write_beneath(root, rel, json.dumps(current).encode('utf-8'))
        except OSError as exc:
            return dict(result, failed=True,
                        msg=f'zuul_return: refusing to write the result file {name}: {exc}')
        result['changed'] = False
        return result
