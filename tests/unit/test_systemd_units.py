"""The systemd units in etc/systemd: each starts a console script we
ship, in the foreground, and stops its daemon the way that loses nothing
(scheduler: SIGTERM saves the state; executor: graceful)."""

from __future__ import annotations

import configparser
import glob
import os
import shlex

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _units() -> dict:
    units = {}
    for path in sorted(glob.glob(os.path.join(TOP, 'etc', 'systemd', '*.service'))):
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        parser.optionxform = str
        parser.read(path)
        units[os.path.basename(path)] = parser
    return units


def _console_scripts() -> set:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(os.path.join(TOP, 'setup.cfg'))
    return {line.split('=')[0].strip()
            for line in parser['options.entry_points']['console_scripts'].splitlines()
            if line.strip()}


def test_every_unit_runs_a_shipped_daemon_in_the_foreground():
    scripts = _console_scripts()
    units = _units()
    assert len(units) >= 7
    for name, unit in units.items():
        argv = shlex.split(unit['Service']['ExecStart'])
        assert os.path.basename(argv[0]) in scripts, name
        assert '-d' in argv or '--foreground' in argv, name
        assert unit['Service'].get('Restart') == 'on-failure', name


def test_scheduler_stops_with_sigterm_and_executor_gracefully():
    from zuul.cmd import executor
    units = _units()
    assert units['zuul-scheduler.service']['Service']['KillSignal'] == 'SIGTERM'
    service = units['zuul-executor.service']['Service']
    assert service['KillSignal'] == 'SIGUSR1'
    assert 'SIGUSR1 is a graceful stop' in executor.__doc__
