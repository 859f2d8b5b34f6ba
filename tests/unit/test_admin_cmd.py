"""``zuul-admin config-check`` / ``show-job`` / ``tenant-conf-check`` on
local checkouts."""

from __future__ import annotations

import io
import textwrap

from zuul.cmd.admin import main

BASE = """
- pipeline:
    name: check
    manager: independent
    trigger:
      gerrit:
        - event: patchset-created
- job:
    name: base
    parent: null
    timeout: 1800
    vars: {level: base}
- job:
    name: base
    branches: stable/.*
    vars: {level: stable-base}
"""

APP = """
- job:
    name: app-unit
    vars: {level: app}
    run: playbooks/unit.yaml
- project:
    check:
      jobs:
        - app-unit:
            voting: false
"""


def _repo(root, name, files):
    path = root / name
    for rel, text in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(textwrap.dedent(text))
    return path


def _run(*argv):
    out = io.StringIO()
    rc = main(list(argv), out=out)
    return rc, out.getvalue()


def test_config_check_clean_checkouts(tmp_path):
    config = _repo(tmp_path, 'project-config', {'zuul.d/base.yaml': BASE})
    app = _repo(tmp_path, 'app', {'.zuul.yaml': APP})
    rc, out = _run('config-check', str(config), f'org/app={app}')
    assert rc == 0, out
    assert out.strip() == ('1 pipelines, 2 jobs, 0 project-templates, 1 projects, '
                           '0 nodesets, 0 secrets: 0 errors, 0 warnings')


def test_config_check_reports_file_line_object_and_reason(tmp_path):
    app = _repo(tmp_path, 'app', {'zuul.d/jobs.yaml': """
        - job:
            name: ok
        - job:
            name: broken
            attempts: many
        """})
    rc, out = _run('config-check', str(app))
    assert rc == 1
    assert f'{app}/zuul.d/jobs.yaml:4: in job "broken": ' in out
    assert '"attempts"' in out
    assert out.rstrip().endswith('1 errors, 0 warnings')


def _tenant_setup(tmp_path):
    src = tmp_path / 'src'
    _repo(src, 'org/project-config', {'zuul.yaml': BASE})
    _repo(src, 'org/app', {'.zuul.yaml': APP + textwrap.dedent("""
        - pipeline:
            name: sneaky
            manager: independent
        """)})
    (tmp_path / 'main.yaml').write_text(textwrap.dedent("""
        - tenant:
            name: example
            source:
              gerrit:
                config-projects:
                  - org/project-config
                untrusted-projects:
                  - org/app
        """))
    (tmp_path / 'zuul.conf').write_text(textwrap.dedent(f"""
        [scheduler]
        tenant_config = {tmp_path / 'main.yaml'}

        [connection gerrit]
        driver = gerrit
        server = review.example.org
        user = zuul
        """))
    return src


def test_config_check_as_a_tenant(tmp_path):
    src = _tenant_setup(tmp_path)
    rc, out = _run('-c', str(tmp_path / 'zuul.conf'), 'config-check', '--tenant', 'example',
                   '--src-root', str(src))
    assert rc == 1
    assert f'{src}/org/app/.zuul.yaml:12: in pipeline "sneaky": pipelines may only be ' \
        'defined in config projects' in out
    rc, out = _run('-c', str(tmp_path / 'zuul.conf'), 'config-check', '--tenant', 'nope',
                   '--src-root', str(src))
    assert rc == 2


def test_show_job_prints_the_inheritance_path(tmp_path):
    src = _tenant_setup(tmp_path)
    common = ['-c', str(tmp_path / 'zuul.conf'), 'show-job', '--tenant', 'example',
              '--src-root', str(src), '--project', 'org/app']
    rc, out = _run(*common, '--pipeline', 'check', 'app-unit')
    assert rc == 0, out
    path = [line.split('@')[0].strip() for line in out.splitlines() if line.startswith('  - ')]
    assert path == ['- variant job base', '- variant job app-unit',
                    '- project-pipeline variant job app-unit']
    assert 'voting: false' in out and 'level: app' in out and 'timeout: 1800' in out
    rc, out = _run(*common, '--branch', 'stable/1', 'app-unit')
    assert rc == 0
    assert [line.split('@')[0].strip() for line in out.splitlines()
            if line.startswith('  - ')][:2] == ['- variant job base', '- variant job base']
    rc, out = _run(*common, 'no-such-job')
    assert rc == 1 and 'not defined' in out


def test_config_check_of_single_files_as_one_layout(tmp_path):
    config = _repo(tmp_path, 'project-config', {'zuul.d/base.yaml': BASE})
    app = _repo(tmp_path, 'app', {'.zuul.yaml': APP.replace('app-unit:', 'app-unitt:')})
    rc, out = _run('--connections', '/nonexistent.conf', 'config-check',
                   str(config / 'zuul.d' / 'base.yaml'))
    assert rc == 2
    rc, out = _run('config-check', str(config / 'zuul.d' / 'base.yaml'),
                   str(app / '.zuul.yaml'))
    assert rc == 1
    assert f'{app}/.zuul.yaml:6: in project "app": check: job "app-unitt" is not ' \
        'defined' in out


def test_tenant_conf_check_command(tmp_path):
    _tenant_setup(tmp_path)
    rc, out = _run('-c', str(tmp_path / 'zuul.conf'), 'tenant-conf-check')
    assert rc == 0 and '1 tenant(s) OK' in out
