"""The corpus tier: tests over third-party files that are not in this repository.

The corpus (real Zuul and Nodepool configurations, captured Gerrit events)
lives outside the checkout; CI keeps it at ``../shared/corpus``. Tests that
read it carry ``@pytest.mark.corpus`` and find it through this module, from
``GATEKEEP_CORPUS=DIR``:

- unset: every corpus test is skipped with ``REASON``, and the terminal
  summary says how many did not run;
- set to a directory that does not exist: a usage error;
- set: the tests run, and a parameter list that finds no files fails.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable, Iterable

import pytest

ENV = 'GATEKEEP_CORPUS'
REASON = f'needs the third-party corpus: set {ENV}=DIR (CI uses ../shared/corpus)'


def root() -> pathlib.Path | None:
    """The corpus directory, or None when ``GATEKEEP_CORPUS`` is unset."""
    value = os.environ.get(ENV)
    if not value:
        return None
    path = pathlib.Path(value).expanduser().resolve()
    if not path.is_dir():
        raise pytest.UsageError(f'{ENV}={value}: no such directory')
    return path


def path(*parts: str) -> pathlib.Path:
    """A path inside the corpus. Without the corpus it names the unset
    variable, so a test reading it without the marker fails saying why."""
    base = root()
    return (base if base is not None else pathlib.Path(f'${ENV}')).joinpath(*parts)


def cases(what: str, find: Callable[[pathlib.Path], Iterable]) -> list:
    """Parameters for a test over corpus files: ``find(root)`` lists them.

    Without the corpus: one placeholder, skipped like any corpus test.
    With it, finding nothing is a failure, never a test of zero cases."""
    base = root()
    if base is None:
        return [pytest.param(None, id='no-corpus', marks=pytest.mark.corpus)]
    try:
        found = list(find(base))
    except FileNotFoundError:
        found = []
    if not found:
        return [pytest.param(None, id='corpus-empty',
                             marks=pytest.mark.corpus(empty=f'no {what} found in {base}'))]
    return [pytest.param(x, marks=pytest.mark.corpus) for x in found]


def pytest_configure(config):
    root()   # a GATEKEEP_CORPUS naming no directory stops the run here


def pytest_collection_modifyitems(config, items):
    if root() is not None:
        return
    skip = pytest.mark.skip(reason=REASON)
    for item in items:
        if item.get_closest_marker('corpus'):
            item.add_marker(skip)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    for mark in pyfuncitem.iter_markers('corpus'):
        if 'empty' in mark.kwargs:
            pytest.fail(f'corpus parameters: {mark.kwargs["empty"]}', pytrace=False)


def _corpus_skip(report) -> bool:
    longrepr = report.longrepr
    return isinstance(longrepr, tuple) and len(longrepr) == 3 and REASON in str(longrepr[2])


def pytest_terminal_summary(terminalreporter):
    skipped = sum(1 for r in terminalreporter.stats.get('skipped', []) if _corpus_skip(r))
    if skipped:
        terminalreporter.write_line(
            f'{skipped} corpus test(s) did not run: set {ENV}=DIR to the third-party '
            f'corpus to run them (CI uses ../shared/corpus)')
