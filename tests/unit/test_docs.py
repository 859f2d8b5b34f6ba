"""The documentation (doc/source) builds without a single Sphinx warning,
and names every command the distribution installs and every zuul.conf
section the code reads."""

from __future__ import annotations

import configparser
import importlib
import importlib.util
import os
import re
import subprocess
import sys

import pytest

from zuul.configloader.zuulconf import SECTIONS

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC_SOURCE = os.path.join(TOP, 'doc', 'source')

needs_sphinx = pytest.mark.skipif(importlib.util.find_spec('sphinx') is None,
                                  reason='sphinx is not installed (the test extra has it)')


def sphinx_build(source: str, out: str) -> subprocess.CompletedProcess:
    """``sphinx-build -W --keep-going -b html`` with this interpreter."""
    return subprocess.run(
        [sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-q', '-b', 'html',
         '-d', os.path.join(out, '.doctrees'), source, os.path.join(out, 'html')],
        capture_output=True, text=True, timeout=600)


def doc_text() -> str:
    parts = []
    for root, _, files in os.walk(DOC_SOURCE):
        for name in sorted(files):
            if name.endswith('.rst'):
                with open(os.path.join(root, name), encoding='utf-8') as f:
                    parts.append(f.read())
    return '\n'.join(parts)


def mentioned(name: str, text: str) -> bool:
    """``name`` appears as a word of its own (``zuul`` is not mentioned by
    ``zuul-web`` or ``zuul.conf``)."""
    return re.search(rf'(?<![\w.-]){re.escape(name)}(?![\w-]|\.\w)', text) is not None


def console_scripts() -> list[str]:
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(TOP, 'setup.cfg'))
    entries = cfg.get('options.entry_points', 'console_scripts')
    return [line.split('=')[0].strip() for line in entries.splitlines() if '=' in line]


def undocumented_sections(text: str) -> list[str]:
    return [name for name in SECTIONS if f'[{name}]' not in text]


# -- the build -------------------------------------------------------------------


@needs_sphinx
def test_documentation_builds_without_warnings(tmp_path):
    proc = sphinx_build(DOC_SOURCE, str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    html = tmp_path / 'html'
    for page in ('index', 'tutorial', 'security', 'reference/zuul-conf',
                 'reference/jobs', 'operations/troubleshooting'):
        assert (html / f'{page}.html').is_file(), page


@needs_sphinx
def test_a_warning_fails_the_build(tmp_path):
    """The failure path: the same command refuses a project with one
    warning (a reference to a document that does not exist)."""
    source = tmp_path / 'src'
    source.mkdir()
    (source / 'conf.py').write_text("project = 'probe'\n")
    (source / 'index.rst').write_text('Probe\n=====\n\nSee :doc:`missing-page`.\n')
    proc = sphinx_build(str(source), str(tmp_path / 'out'))
    assert proc.returncode != 0
    assert 'missing-page' in proc.stdout + proc.stderr


# -- what the documentation must cover -------------------------------------------


def test_every_console_script_is_documented():
    scripts = console_scripts()
    assert 'zuul-scheduler' in scripts and 'nodepool' in scripts
    text = doc_text()
    missing = [name for name in scripts if not mentioned(name, text)]
    assert missing == [], f'console scripts not mentioned in doc/source: {missing}'


def test_every_zuul_conf_section_is_documented():
    assert 'gearman' in SECTIONS and 'statsd' in SECTIONS
    assert undocumented_sections(doc_text()) == []


def test_the_checks_notice_what_is_missing():
    """The failure path of the two checks above."""
    assert not mentioned('zuul', 'run zuul-web with zuul.conf')
    assert mentioned('zuul', 'the ``zuul`` command')
    assert mentioned('nodepool', 'nodepool list')
    assert not mentioned('nodepool', 'nodepool-launcher only')
    assert undocumented_sections('[gearman] and nothing else') == [
        name for name in SECTIONS if name != 'gearman']


# -- every command line README.rst shows parses as printed ---------------------------
#
# The rule for what is a command line in README.rst:
#
# 1. every non-blank line of a literal block, that is the indented block after
#    a paragraph ending in ``::`` or after ``.. code-block:: console`` (or
#    ``shell``, ``bash``, ``sh``), with a leading ``$ `` prompt removed; and
# 2. every inline literal (````...````) that starts with one of the commands
#    below and has more than the bare name (````zuul-admin show-job````, not
#    ````zuul````).
#
# Each of them must be a command of this project: a console script from
# setup.cfg or a ``tools/*.sh`` script. It is run in a dry form, which
# parses its arguments exactly as the real command would and stops there:
# the console script's ``main`` from its entry point, with argparse's
# ``parse_args`` made to stop after a successful parse (appending ``--help``
# would not do: argparse prints the help and exits 0 before it reports an
# unknown flag placed earlier); for ``tools/test.sh`` (which hands its
# arguments to pytest) ``pytest --collect-only`` with those arguments; for
# ``tools/quickstart.sh`` (which hands them to tools/quickstart.py) that
# script's ``main``, stopped the same way.

README = os.path.join(TOP, 'README.rst')
_LITERAL_DIRECTIVE = re.compile(r'^\s*\.\. code-block::\s*(console|shell|bash|sh)\s*$')
_INLINE = re.compile(r'``(.+?)``')


def literal_block_lines(text: str) -> list[str]:
    return [re.sub(r'^\$ ', '', text.splitlines()[i].strip())
            for i in _literal_block_indices(text)]


def _literal_block_indices(text: str) -> list[int]:
    """Indices of the non-blank lines of every literal block."""
    lines = text.splitlines()
    found = []
    i = 0
    while i < len(lines):
        opens = lines[i].rstrip().endswith('::') and not lines[i].lstrip().startswith('..') \
            or _LITERAL_DIRECTIVE.match(lines[i])
        i += 1
        if not opens:
            continue
        # Directive options, then the blank line before the block.
        while i < len(lines) and re.match(r'^\s+:\w[\w-]*:', lines[i]):
            i += 1
        while i < len(lines) and not lines[i].strip():
            i += 1
        while i < len(lines) and (not lines[i].strip() or lines[i][:1].isspace()):
            if lines[i].strip():
                found.append(i)
            i += 1
    return found


def project_commands() -> list[str]:
    tools = sorted(f'tools/{n}' for n in os.listdir(os.path.join(TOP, 'tools'))
                   if n.endswith('.sh'))
    return console_scripts() + tools


def readme_command_lines(text: str) -> list[str]:
    commands = project_commands()
    found = literal_block_lines(text)
    in_blocks = set(_literal_block_indices(text))   # counted above
    prose = ' '.join(line for i, line in enumerate(text.splitlines()) if i not in in_blocks)
    for literal in _INLINE.findall(prose):
        words = literal.split()
        if len(words) > 1 and words[0] in commands:
            found.append(literal)
    return list(dict.fromkeys(found))


class _ArgumentsParsedError(Exception):
    pass


def _dry_main(main, argv: list[str]) -> int:
    """``main(argv)`` up to and including argument parsing: 0 when the
    arguments parse (or ``--help`` was asked for), argparse's exit status
    (2) when they do not."""
    import argparse
    from unittest import mock

    real = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        real(self, args, namespace)
        raise _ArgumentsParsedError
    with mock.patch.object(argparse.ArgumentParser, 'parse_args', parse_then_stop):
        try:
            main(argv)
        except _ArgumentsParsedError:
            return 0
        except SystemExit as e:
            return e.code or 0
    raise AssertionError('main() returned without parsing its arguments')


def _entry_point(script: str):
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(TOP, 'setup.cfg'))
    for line in cfg.get('options.entry_points', 'console_scripts').splitlines():
        name, _, target = line.partition('=')
        if name.strip() == script:
            module, _, func = target.strip().partition(':')
            return getattr(importlib.import_module(module), func)
    raise KeyError(script)


def _forwards(script: str, target: str) -> bool:
    """The shell script's last command hands its arguments to ``target``."""
    with open(os.path.join(TOP, script)) as f:
        last = [line for line in f.read().splitlines() if line.strip()][-1]
    return target in last and '"$@"' in last


def dry_run(line: str) -> tuple[int, str]:
    """(exit status, what went wrong) for one README command line."""
    import contextlib
    import io
    import shlex
    argv = shlex.split(line)
    command, args = argv[0], argv[1:]
    err = io.StringIO()
    if command == 'tools/test.sh':
        assert _forwards(command, '-m pytest')
        proc = subprocess.run([sys.executable, '-m', 'pytest', '-p', 'no:cacheprovider',
                               '--collect-only', '-q', *args], cwd=TOP, capture_output=True,
                              text=True, timeout=300)
        return proc.returncode, proc.stdout[-2000:] + proc.stderr[-2000:]
    if command == 'tools/quickstart.sh':
        assert _forwards(command, 'tools/quickstart.py')
        spec = importlib.util.spec_from_file_location(
            'quickstart_tool', os.path.join(TOP, 'tools', 'quickstart.py'))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        main = module.main
    elif command in console_scripts():
        main = _entry_point(command)
    else:
        return 127, f'{command}: not a command of this project (no dry form known)'
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = _dry_main(main, args)
    return status, err.getvalue()


README_COMMANDS = readme_command_lines(open(README, encoding='utf-8').read())


def test_readme_shows_commands():
    """The list below is not empty, and holds the commands we know are
    there (so a change to the extraction rule cannot silently drop them)."""
    assert len(README_COMMANDS) >= 8, README_COMMANDS
    assert 'tools/test.sh' in README_COMMANDS
    assert 'tools/quickstart.sh' in README_COMMANDS
    assert 'zuul-admin -c zuul.conf tenant-conf-check' in README_COMMANDS
    assert 'nodepool -c nodepool.yaml config-validate' in README_COMMANDS


def test_readme_puts_the_quickstart_first():
    """A new user runs the system before its test suite: the quickstart
    comes first, and its time is a measured figure, not a promise."""
    assert README_COMMANDS.index('tools/quickstart.sh') < README_COMMANDS.index('tools/test.sh')
    text = open(README, encoding='utf-8').read()
    assert 'well under two minutes' not in text
    assert re.search(r'(?i)measured', text[text.index('tools/quickstart.sh'):
                                       text.index('tools/test.sh')])


@pytest.mark.parametrize('line', README_COMMANDS)
def test_readme_command_parses_as_printed(line):
    status, why = dry_run(line)
    assert status == 0, f'README.rst shows `{line}`, which is refused:\n{why}'


def test_the_readme_check_catches_wrong_flags():
    """The failure path: the forms the README used to show are refused, and
    a block line that is not one of our commands is reported."""
    assert dry_run('nodepool config-validate -c nodepool.yaml')[0] == 2
    assert dry_run('zuul-admin tenant-conf-check --no-such-flag')[0] == 2
    assert dry_run('zuul-scheduler -c zuul.conf no-such-command')[0] == 2
    assert dry_run('tools/quickstart.sh --no-such-flag')[0] == 2
    assert dry_run('tools/test.sh --no-such-pytest-flag')[0] != 0
    assert dry_run('rm -rf /')[0] == 127
    # both orders of zuul-admin's -c are accepted
    assert dry_run('zuul-admin config-check --connections zuul.conf .')[0] == 0
    assert dry_run('zuul-admin --connections zuul.conf config-check .')[0] == 0


def test_the_extraction_rule():
    text = ('Intro::\n\n    tools/test.sh -k x\n    $ zuul -h\n\nProse ``zuul-web -d`` and '
            '``zuul`` and ``enqueue``.\n\n.. code-block:: console\n\n   $ nodepool list\n')
    assert readme_command_lines(text) == ['tools/test.sh -k x', 'zuul -h', 'nodepool list',
                                          'zuul-web -d']
