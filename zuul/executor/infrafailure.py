"""Why a build should be retried: the infrastructure failure classes.

A build that did not get to test the change -- a pre-run playbook failed,
a node was unreachable, the console shows a known infrastructure problem
(the tenant's ``infra-failure-patterns``) -- is retried on fresh nodes up
to the job's ``attempts``. The class travels with the result
(``BuildResult.failure_class``) so the scheduler records it and the build
page shows it. A failing test is never one of these.

The console (job-output.txt) lives in ``work/``, which untrusted
playbooks can write to: it is opened below the work root without
following symlinks.
"""

from __future__ import annotations

from zuul.lib import safefile
from zuul.lib.regex import Regex, RegexError, compile_regex

PRE_RUN = 'infra:pre-run'
# The executor stopped (SIGTERM, ``zuul-executor stop``) while the build
# ran: the build is retried and this attempt does not count.
EXECUTOR_STOPPED = 'infra:executor-stopped'
UNREACHABLE = 'infra:unreachable'
PATTERN_PREFIX = 'infra:pattern:'
TEST = 'test'

# Lines of a console that are looked at, at most: a runaway log is not
# read in full for a retry decision.
MAX_LINES = 200_000


class PatternError(ValueError):
    """An ``infra-failure-patterns`` entry that is not valid RE2."""


def compile_patterns(patterns) -> list[Regex]:
    """RE2 regexes of ``patterns``; PatternError names the bad one."""
    compiled = []
    for pattern in patterns or ():
        try:
            regex, _ = compile_regex(pattern, trusted=False)
        except RegexError as exc:
            raise PatternError(f'infra-failure-patterns: {exc}') from None
        compiled.append(regex)
    return compiled


def first_matching_pattern(regexes: list[Regex], root: str, path: str) -> str | None:
    """The first pattern (in configuration order) that a console line of
    ``path`` (below ``root``) matches, searched anywhere in the line;
    None when none does or the console cannot be read."""
    if not regexes:
        return None
    try:
        with safefile.open_regular_file_beneath(root, path, 'rb') as f:
            for number, raw in enumerate(f):
                if number >= MAX_LINES:
                    break
                line = raw.decode('utf-8', 'replace')
                for regex in regexes:
                    if regex.search(line):
                        return regex.pattern
    except OSError:
        return None
    return None


# How the zuul_stream callback reports a task on an unreachable host.
UNREACHABLE_MARK = b'| UNREACHABLE: Runtime: '


def console_shows_unreachable(root: str, path: str, offset: int) -> bool:
    """Whether the console from ``offset`` on reports an unreachable
    host (ansible-playbook's exit code 4 also means a playbook it could
    not load)."""
    try:
        with safefile.open_regular_file_beneath(root, path, 'rb') as f:
            f.seek(offset)
            for number, raw in enumerate(f):
                if number >= MAX_LINES:
                    break
                if UNREACHABLE_MARK in raw:
                    return True
    except OSError:
        return False
    return False


def pattern_class(pattern: str) -> str:
    return PATTERN_PREFIX + pattern
