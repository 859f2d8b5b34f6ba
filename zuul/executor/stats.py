"""An executor's metrics, under released Zuul's documented names
(``zuul.executor.<executor>``, the executor's hostname with ``.`` as
``_``):

- ``builds`` (counter): a build started;
- ``starting_builds`` (gauge, and a timer of how long each build was
  starting: until its first playbook), ``running_builds`` (gauge,
  starting ones included), ``paused_builds`` (gauge);
- ``phase.<phase>.<result>`` (counter): each playbook's end, ``<phase>``
  one of ``pre``, ``run``, ``post``, ``cleanup``, ``<result>`` Ansible's
  outcome (``RESULT_NORMAL``, ``RESULT_FAILED``, ``RESULT_TIMED_OUT``,
  ``RESULT_UNREACHABLE``, ``RESULT_ABORTED``);
- ``load_average`` (one-minute load x 100), ``pct_used_ram`` (RAM used,
  buffers and cache not counted), ``pct_used_hdd`` and
  ``pct_used_inodes`` (of the file system of ``job_dir``) -- percentages
  x 100 -- and ``pause`` (1 while paused) (gauges);
- ``merger.<result>`` (counter, ``SUCCESS``/``FAILURE``): the merges of
  its merger functions (zuul.merger.server).
"""

from __future__ import annotations

import os

from nodepool.driver.metrics import Metrics, key_part

PHASE_NAMES = {'pre_run': 'pre', 'run': 'run', 'post_run': 'post', 'cleanup_run': 'cleanup'}


def executor_key(hostname: str) -> str:
    return f'zuul.executor.{key_part(hostname)}'


class ExecutorStats:
    def __init__(self, metrics: Metrics | None, hostname: str, job_dir: str):
        self.metrics = metrics or Metrics(None)
        self.key = executor_key(hostname)
        self.job_dir = job_dir

    def build_started(self) -> None:
        self.metrics.incr(f'{self.key}.builds')

    def starting_ended(self, seconds: float) -> None:
        self.metrics.timing(f'{self.key}.starting_builds', seconds * 1000)

    def playbook_ended(self, phase: str, result: str) -> None:
        self.metrics.incr(f'{self.key}.phase.{PHASE_NAMES.get(phase, phase)}.{result}')

    def report(self, running: int, starting: int, paused: bool) -> None:
        """The gauges: the builds, then how loaded the host is."""
        m, key = self.metrics, self.key
        m.gauge(f'{key}.running_builds', running)
        m.gauge(f'{key}.starting_builds', starting)
        m.gauge(f'{key}.paused_builds', 0)
        m.gauge(f'{key}.pause', 1 if paused else 0)
        for name, value in host_figures(self.job_dir).items():
            m.gauge(f'{key}.{name}', value)


def host_figures(path: str) -> dict[str, int]:
    """load_average and the pct_used_* gauges (x 100), those that can be
    read here."""
    out = {}
    try:
        out['load_average'] = int(os.getloadavg()[0] * 100)
    except OSError:
        pass
    ram = _pct_used_ram()
    if ram is not None:
        out['pct_used_ram'] = ram
    try:
        st = os.statvfs(path)
        if st.f_blocks:
            out['pct_used_hdd'] = int((st.f_blocks - st.f_bfree) * 10000 / st.f_blocks)
        if st.f_files:
            out['pct_used_inodes'] = int((st.f_files - st.f_ffree) * 10000 / st.f_files)
    except OSError:
        pass
    return out


def _pct_used_ram() -> int | None:
    try:
        with open('/proc/meminfo') as f:
            info = {line.split(':')[0]: int(line.split()[1]) for line in f if ':' in line}
        total, available = info['MemTotal'], info['MemAvailable']
    except (OSError, KeyError, ValueError, IndexError):
        return None
    return int((total - available) * 10000 / total) if total else None
