"""When the executor may take another build.

A hard limit on concurrent builds, and a governor that stops taking work
while the machine is busy: load average above ``load_multiplier`` x CPUs,
or available memory under ``min_avail_mem`` percent; or while too many
builds are still starting (preparing repos and playbooks, before their
first playbook): ``max_starting_builds``, by default ``load_multiplier``
x CPUs, twice that on machines with four CPUs or fewer, as released Zuul
documents (no limit when the load governor is off).  Readers of the
system's state are injectable so tests can stage any condition.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


def _read_meminfo() -> tuple[int, int]:
    """(MemAvailable, MemTotal) in kB."""
    values = {}
    with open('/proc/meminfo') as f:
        for line in f:
            key, _, rest = line.partition(':')
            values[key] = int(rest.split()[0])
    return values.get('MemAvailable', 0), values.get('MemTotal', 1)


@dataclass
class CapacityGovernor:
    """``accepting(running, starting)`` says whether to ask for another
    build and ``reason`` why not."""

    max_builds: int = 10
    load_multiplier: float = 2.5
    min_avail_mem: float = 5.0
    max_starting_builds: int | None = None
    loadavg = staticmethod(os.getloadavg)
    meminfo = staticmethod(_read_meminfo)
    cpu_count: int = os.cpu_count() or 1
    reason: str | None = None

    def accepting(self, running: int, starting: int = 0) -> bool:
        self.reason = self._why_not(running, starting)
        return self.reason is None

    def starting_limit(self) -> int | None:
        """The most builds that may be starting at once (None: no limit)."""
        if self.max_starting_builds is not None:
            return self.max_starting_builds
        if self.load_multiplier <= 0:
            return None
        limit = self.load_multiplier * self.cpu_count
        if self.cpu_count <= 4:
            limit *= 2
        return max(1, int(limit))

    def _why_not(self, running: int, starting: int) -> str | None:
        if running >= self.max_builds:
            return f'job limit reached ({running}/{self.max_builds})'
        starting_limit = self.starting_limit()
        if starting_limit is not None and starting >= starting_limit:
            return f'{starting} builds starting (max_starting_builds {starting_limit})'
        if self.load_multiplier > 0:
            load = self.loadavg()[0]
            limit = self.load_multiplier * self.cpu_count
            if load > limit:
                return f'load average {load:.2f} above {limit:.2f}'
        if self.min_avail_mem > 0:
            avail, total = self.meminfo()
            percent = 100.0 * avail / max(total, 1)
            if percent < self.min_avail_mem:
                return f'available memory {percent:.1f}% below {self.min_avail_mem}%'
        return None
