"""The documentation (doc/source) builds without a single Sphinx warning,
and names every command the distribution installs and every zuul.conf
section the code reads."""

from __future__ import annotations

import configparser
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
