"""Smoke test of benchmarks/gate_simulation.py (``--quick``): the real
system with its simulated executor runs a few changes through the gate,
released and with every issue-21 mode, and finds no untested merge."""

from __future__ import annotations

import os
import re
import subprocess
import sys

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_gate_simulation_quick_run():
    run = subprocess.run([sys.executable, '-m', 'benchmarks.gate_simulation', '--quick'],
                         cwd=TOP, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = {line.split()[1]: line.split() for line in run.stdout.splitlines()
            if line.startswith('15%')}
    assert set(rows) == {'released', 'all'}
    for cells in rows.values():
        assert 'yes' in cells            # no untested merge
        merged, failed = (int(x) for x in next(
            c for c in cells if re.fullmatch(r'\d+/\d+', c)).split('/'))
        assert merged + failed == 12 and merged >= 9
    assert 'UNTESTED MERGE' not in run.stdout


def test_untested_merge_is_detected():
    from benchmarks.gate_simulation import untested_merges
    ok = [(1, 'success', 0, [('j', 'SUCCESS', [1, 2])]),
          (2, 'success', 0, [('j', 'SUCCESS', [1, 2])])]
    assert untested_merges(ok, [1, 2], bad=set()) == []
    # 2 merged, but its run also held 3, which did not merge.
    wrong = [(2, 'success', 0, [('j', 'SUCCESS', [2, 3])])]
    assert untested_merges(wrong, [2], bad=set())
    assert untested_merges([(1, 'success', 0, [('j', 'SUCCESS', [1])])], [1], bad={1}) == \
        ['bad change 1 merged']
