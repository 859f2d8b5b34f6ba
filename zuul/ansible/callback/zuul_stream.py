"""Zuul's stdout callback: job-output.txt and job-output.json.

Configured as ``stdout_callback`` for every playbook the executor runs.
Environment (set by the executor):

* ``ZUUL_JOB_OUTPUT_TXT`` -- text log, appended line by line as tasks end
  (the live log stream follows this file);
* ``ZUUL_JOB_OUTPUT_JSON`` -- a JSON list, one entry per playbook run,
  rewritten when a playbook ends;
* ``ZUUL_WORK_ROOT`` -- the build's ``work/`` directory (default: the
  directory above the text log's);
* ``ZUUL_PHASE``, ``ZUUL_PLAYBOOK``, ``ZUUL_TRUSTED`` -- labels;
* ``ZUUL_UNTRUSTED=1`` -- install the local-execution restrictions;
* ``ZUUL_ANSIBLE_SPLIT_STREAMS`` -- ``1`` keeps command tasks' stdout and
  stderr apart, anything else merges them (``zuul.ansible.streams``);
* ``ZUUL_INVENTORY_FILE`` -- the executor's inventory: the nodes whose
  console logs are streamed (``zuul.ansible.nodeconsole``).

Command, shell and script tasks on a node that runs ``zuul_console``
(zuul-jobs' ``start-zuul-console`` role) are streamed line by line as the
node prints them: each line is written at once as ``<node's time> | <host>
| <line>``, and kept with its time in the host's ``console`` entry of
job-output.json.  Output that could not be streamed (no console server on
the node, the executor itself) is written when the task ends, stamped then.

Both logs live in ``work/``, which untrusted playbooks can write to, and
this callback also runs (unconfined) in trusted playbooks: the logs are
opened below the work root without following any symlink
(``zuul.lib.safefile``).  A symlink (or anything but a regular file) there
is refused with a warning on stderr; the target is never written.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import threading
import time

from ansible.plugins.callback import CallbackBase

# The zuul package must be importable from inside ansible-playbook.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from zuul.ansible import nodeconsole, restrict, streams  # noqa: E402
from zuul.lib import safefile  # noqa: E402

restrict.install_from_environment()
# ansible-split-streams: false (the default) merges command tasks' stderr
# into their stdout.
streams.install_from_environment()

_HIDDEN_KEYS = ('invocation', '_ansible_no_log', '_ansible_verbose_always')
# Actions whose output is streamed from the node (zuul.ansible.streams).
STREAMED_ACTIONS = frozenset({'command', 'shell', 'script'})


def _now() -> str:
    return datetime.datetime.now().strftime('%Y-%m-%d %H:%M:%S.%f')


def _clean(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in _HIDDEN_KEYS}


def _root_for(path: str) -> str:
    """The directory ``path`` (a log in ``work/logs/``) is opened below."""
    work_root = os.environ.get('ZUUL_WORK_ROOT') or os.path.dirname(
        os.path.dirname(os.path.abspath(path)))
    return safefile.root_for(path, work_root)


def _warn(message: str) -> None:
    sys.stderr.write(f'[WARNING]: zuul_stream: {message}\n')
    sys.stderr.flush()


class CallbackModule(CallbackBase):
    """Writes the build's text and JSON logs."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'stdout'
    CALLBACK_NAME = 'zuul_stream'

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._txt_path = os.environ.get('ZUUL_JOB_OUTPUT_TXT')
        self._json_path = os.environ.get('ZUUL_JOB_OUTPUT_JSON')
        self._txt = self._open_text_log(self._txt_path) if self._txt_path else None
        # streamer threads write lines while the main thread does
        self._lock = threading.Lock()
        self._playbook = {
            'phase': os.environ.get('ZUUL_PHASE'),
            'playbook': os.environ.get('ZUUL_PLAYBOOK'),
            'trusted': os.environ.get('ZUUL_TRUSTED') == '1',
            'plays': [],
        }
        self._task_start = 0.0
        self._nodes = nodeconsole.inventory_addresses()
        # the task being run: (uuid, start count, loops, streamed action)
        self._task = None
        self._streamers: dict[str, nodeconsole.ConsoleStreamer] = {}

    # -- text ------------------------------------------------------------
    @staticmethod
    def _open_text_log(path: str):
        root = _root_for(path)
        try:
            # nothing untrusted runs while a playbook runs, so checking the
            # root before opening below it cannot race with a swap
            safefile.check_root(root)
            rel = safefile.relative_to(root, path)  # messages name no executor paths
            return safefile.open_regular_file_beneath(root, rel, 'a', buffering=1,
                                                      make_dirs=True)
        except OSError as exc:
            _warn(f'refusing to write the text log {os.path.basename(path)}: {exc}')
            return None

    def _line(self, text: str, host: str | None = None, stamp: str | None = None) -> None:
        prefix = f'{stamp or _now()} | '
        if host:
            prefix += f'{host} | '
        out = ''.join(prefix + line + '\n' for line in str(text).splitlines() or [''])
        with self._lock:
            if self._txt:
                self._txt.write(out)
            else:
                sys.stdout.write(out)

    def _streamed_line(self, host: str, stamp: str, text: str) -> None:
        """A line a node printed, with the node's time (streamer threads)."""
        self._line(text, host, stamp)

    # -- plays and tasks -------------------------------------------------
    def v2_playbook_on_play_start(self, play):
        name = play.get_name().strip()
        self._line('')
        self._line(f'PLAY [{name}]')
        now = _now()
        self._end_play()
        self._playbook['plays'].append({'play': {'name': name, 'start': now,
                                                 'id': str(getattr(play, '_uuid', '')),
                                                 'duration': {'start': now}},
                                        'tasks': []})

    def _end_play(self) -> None:
        plays = self._playbook['plays']
        if plays and 'end' not in plays[-1]['play']['duration']:
            plays[-1]['play']['duration']['end'] = _now()

    def v2_playbook_on_task_start(self, task, is_conditional):
        name = task.get_name().strip()
        self._stop_streamers()
        self._line('')
        self._line(f'TASK [{name}]')
        self._task_start = time.monotonic()
        uuid = str(task._uuid)
        count = nodeconsole.task_started(uuid)
        loops = bool(task.loop or getattr(task, 'loop_with', None))
        self._task = (uuid, count, loops,
                      restrict.short_name(task.action) in STREAMED_ACTIONS)
        if self._playbook['plays']:
            now = _now()
            self._playbook['plays'][-1]['tasks'].append(
                {'task': {'name': name, 'action': str(task.action), 'start': now, 'id': uuid,
                          'duration': {'start': now}},
                 'hosts': {}})

    def v2_playbook_on_handler_task_start(self, task):
        self.v2_playbook_on_task_start(task, False)

    def v2_runner_on_start(self, host, task):
        """A host starts the task: follow its console log if it streams."""
        if self._task is None or str(task._uuid) != self._task[0] or not self._task[3] \
                or task.no_log:
            return
        uuid, count, loops, _ = self._task
        name = host.get_name()
        target = name
        if task.delegate_to:
            target = str(task.delegate_to)
        address = self._nodes.get(target)
        if address is None or name in self._streamers:
            return      # not a node of the build's inventory: no live stream
        self._streamers[name] = nodeconsole.ConsoleStreamer(
            name, address, uuid, count, self._streamed_line, loop=loops).start()

    def _finish_stream(self, host: str, data: dict, ran: bool = True):
        """Stop following ``host``'s console: the streamer (drained) or None."""
        streamer = self._streamers.pop(host, None)
        if streamer is None:
            return None
        if not ran:
            streamer.abandon()
            return streamer
        results = data.get('results')
        streamer.stop(len(results) if isinstance(results, list) else None)
        if not streamer.join():
            self._line('[Zuul] Log stream did not terminate', host)
        return streamer

    def _stop_streamers(self) -> None:
        for host in list(self._streamers):
            self._finish_stream(host, {})

    def _record(self, result, status: str) -> None:
        data = dict(result.result) if hasattr(result, 'result') else dict(result._result)
        # ansible-core 2.18's TaskResult has only the private ._host.
        host = (getattr(result, 'host', None) or result._host).get_name()
        delegated = data.get('_ansible_delegated_vars', {}).get('ansible_delegated_host')
        label = f'{host} -> {delegated}' if delegated else host
        streamer = self._finish_stream(host, data,
                                       ran=status not in ('skipping', 'UNREACHABLE'))
        self._output_at_end(data, label, streamer)
        if data.get('msg') and status != 'ok':
            self._line(str(data['msg']), label)
        elapsed = time.monotonic() - self._task_start
        self._line(f'{status}: Runtime: {elapsed:.3f}s', label)
        plays = self._playbook['plays']
        if plays and plays[-1]['tasks']:
            entry = _clean(data)
            entry['status'] = status
            if streamer is not None and streamer.streamed:
                entry['console'] = streamer.lines
            task = plays[-1]['tasks'][-1]
            task['hosts'][host] = entry
            task['task']['duration']['end'] = _now()

    def _output_at_end(self, data: dict, label: str, streamer) -> None:
        """The output that was not streamed whole, now."""
        done = streamer.done if streamer is not None else set()
        results = data.get('results')
        if isinstance(results, list):
            outputs = [(i, item) for i, item in enumerate(results) if isinstance(item, dict)]
        else:
            outputs = [(0, data)]
        for index, output in outputs:
            if index in done:
                continue
            if streamer is not None and streamer.streamed and (output.get('stdout') or
                                                               output.get('stderr')):
                self._line('[Zuul] Not all of this output was streamed live: here it is '
                           'whole', label)
            for key in ('stdout', 'stderr'):
                if output.get(key):
                    self._line(output[key], label)

    def v2_runner_on_ok(self, result):
        self._record(result, 'changed' if result.is_changed() else 'ok')

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, 'FAILED (ignored)' if ignore_errors else 'FAILED')

    def v2_runner_on_unreachable(self, result):
        self._record(result, 'UNREACHABLE')

    def v2_runner_on_skipped(self, result):
        self._record(result, 'skipping')

    # -- end -------------------------------------------------------------
    def v2_playbook_on_stats(self, stats):
        self._stop_streamers()
        self._end_play()
        self._line('')
        self._line('PLAY RECAP')
        summary = {}
        for host in sorted(stats.processed.keys()):
            counts = stats.summarize(host)
            summary[host] = counts
            text = ' '.join(f'{k}: {counts.get(k, 0)}' for k in (
                'ok', 'changed', 'unreachable', 'failures', 'skipped', 'rescued', 'ignored'))
            self._line(text, host)
        self._line('')
        self._playbook['stats'] = summary
        self._write_json()

    def _write_json(self) -> None:
        if not self._json_path:
            return
        root = _root_for(self._json_path)
        try:
            safefile.check_root(root)
            rel = safefile.relative_to(root, self._json_path)
            entries = []
            try:
                with safefile.open_regular_file_beneath(root, rel, 'r') as f:
                    entries = json.load(f)
            except FileNotFoundError:
                pass
            except ValueError:
                entries = []
            if not isinstance(entries, list):
                entries = []
            entries.append(self._playbook)
            data = json.dumps(entries, indent=2, default=str).encode('utf-8')
            safefile.write_beneath(root, rel, data)
        except OSError as exc:
            message = (f'refusing to write the JSON log '
                       f'{os.path.basename(self._json_path)}: {exc}')
            _warn(message)
            if self._txt:
                self._line(f'WARNING: {message}')
