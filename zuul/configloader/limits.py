"""Limits on untrusted configuration, per project-branch.

Anyone who can propose a change to an untrusted project can make Zuul
load that change's configuration (speculatively, before review). These
bounds keep one such change from costing the scheduler unbounded time or
memory. They are generous: OpenDev's largest repositories use about 3%
of the byte budget and 7% of the job budget. Config projects are
reviewed and are not limited here.

A project-branch over a limit is not loaded at all; one error names the
file (and line) where the limit was crossed, and is reported on a change
that introduces it like any other configuration error.

The per-file limits on YAML itself (nesting depth, alias expansion) are
in zuul.lib.yamlutil, and on inheritance depth in zuul.model.freeze.
"""

from __future__ import annotations

from dataclasses import dataclass

from zuul.model.errors import ConfigError

# Total size of the configuration files of one untrusted project-branch.
MAX_CONFIG_BYTES = 10 * 1024 * 1024
# ``- job:`` stanzas (variants) in one untrusted project-branch.
MAX_JOBS = 5000


def _key(cf) -> tuple | None:
    tp = cf.project
    if tp is None or tp.trusted:
        return None
    return (tp.connection, tp.name, cf.branch)


@dataclass
class ConfigLimits:
    max_bytes: int = MAX_CONFIG_BYTES
    max_jobs: int = MAX_JOBS

    def drop_oversized(self, files) -> tuple[list, list[ConfigError]]:
        """(files to read, errors): the files of an untrusted project-branch
        whose configuration is larger than ``max_bytes`` are not read."""
        totals: dict[tuple, int] = {}
        errors: dict[tuple, ConfigError] = {}
        for cf in files:
            key = _key(cf)
            if key is None:
                continue
            totals[key] = totals.get(key, 0) + len(cf.text.encode('utf-8', 'replace'))
            if totals[key] > self.max_bytes and key not in errors:
                errors[key] = ConfigError(
                    '', path=cf.path, project=cf.project.name, branch=cf.branch)
        for key, error in errors.items():
            error.reason = (f'the configuration of this project-branch is {totals[key]} '
                            f'bytes, more than the limit of {self.max_bytes} bytes for an '
                            f'untrusted project-branch (crossed in this file); none of it '
                            'was loaded')
        kept = [cf for cf in files if _key(cf) not in errors]
        return kept, list(errors.values())

    def drop_excess_jobs(self, buckets: dict) -> list[ConfigError]:
        """Remove from ``buckets`` (object type -> [(conf, source context,
        line)]) every object of an untrusted project-branch that defines
        more than ``max_jobs`` jobs; returns the errors."""
        counts: dict[tuple, int] = {}
        errors: dict[tuple, ConfigError] = {}
        for conf, sc, line in buckets.get('job', ()):
            if sc.trusted or not sc.project:
                continue
            key = (sc.connection, sc.project, sc.branch)
            counts[key] = counts.get(key, 0) + 1
            if counts[key] > self.max_jobs and key not in errors:
                errors[key] = ConfigError(
                    '', path=sc.path, line=line, object_type='job',
                    project=sc.project, branch=sc.branch)
        if not errors:
            return []
        for key, error in errors.items():
            error.reason = (f'this project-branch defines {counts[key]} jobs, more than '
                            f'the limit of {self.max_jobs} for an untrusted project-branch '
                            f'(crossed here); none of its configuration was loaded')
        for kind, entries in buckets.items():
            buckets[kind] = [e for e in entries if (e[1].connection, e[1].project,
                                                    e[1].branch) not in errors]
        return list(errors.values())
