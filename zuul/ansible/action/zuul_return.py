"""``zuul_return``: hand data back to Zuul.

``zuul_return: data: {...}`` deep-merges ``data`` into the build's result
file (``ZUUL_RESULT_FILE``, i.e. ``zuul.executor.result_data_file``); the
executor returns it with the build result.  Released Zuul keys the
executor understands: ``zuul.artifacts`` (list of ``{name, url,
metadata}``) and ``zuul.child_jobs`` (the child jobs to run; others are
skipped).  Runs inside ansible (never on a node), so it is allowed on the
implicit localhost of untrusted playbooks.
"""

from __future__ import annotations

import json
import os

from ansible.plugins.action import ActionBase


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
        current = {}
        if os.path.exists(path):
            with open(path) as f:
                current = json.load(f)
        merge_data(current, _to_native(data))
        tmp_path = path + '.tmp'
        with open(tmp_path, 'w') as f:
            json.dump(current, f)
        os.replace(tmp_path, path)
        result['changed'] = False
        return result
