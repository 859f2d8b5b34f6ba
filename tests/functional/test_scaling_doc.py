"""doc/source/operations/scaling.rst as printed: the zuul.conf fragment
for several active schedulers loads with ``standby`` off, and the
benchmark command runs as printed (with the sizes made small: the flags,
the module and the table are the page's)."""

from __future__ import annotations

import shlex

from tests.harness.docs import code_blocks

PAGE = 'doc/source/operations/scaling.rst'


def test_active_schedulers_conf_fragment_loads(tmp_path):
    from zuul.configloader.zuulconf import load_zuul_conf
    from zuul.driver.registry import default_registry
    (ini,) = code_blocks(PAGE, 'ini')
    path = tmp_path / 'zuul.conf'
    path.write_text(ini + '\n[zookeeper]\nhosts = 127.0.0.1:2181\n')
    conf = load_zuul_conf(str(path), default_registry())
    assert conf.scheduler.standby is False
    default = tmp_path / 'default.conf'
    default.write_text('[zookeeper]\nhosts = 127.0.0.1:2181\n')
    assert load_zuul_conf(str(default), default_registry()).scheduler.standby is True


def test_benchmark_command_runs_as_printed(capfd):
    from benchmarks import schedulers
    (console,) = code_blocks(PAGE, 'console')
    argv = shlex.split(console.strip().lstrip('$ '))
    assert argv[:3] == ['.venv/bin/python', '-m', 'benchmarks.schedulers']
    args = argv[3:]
    assert '--active' in args
    small = {'--projects': '4', '--changes': '2', '--schedulers': '2', '--tenants': '2'}
    for flag, value in small.items():
        args[args.index(flag) + 1] = value
    schedulers.main(args)
    out = capfd.readouterr().out
    assert '2 scheduler(s)' in out
    row = next(line for line in out.splitlines() if line.startswith('schedulers active'))
    assert row.split()[-1] == '2'
    cpu = next(line for line in out.splitlines() if line.startswith('loop CPU by scheduler'))
    # Both schedulers' loops did work.
    assert all(float(v) > 0 for v in cpu.split('(s)')[1].split('/')), cpu
