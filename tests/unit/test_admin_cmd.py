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
    assert out.strip().splitlines() == [
        '1 pipelines, 2 jobs, 0 project-templates, 1 projects, 0 nodesets, 0 secrets',
        '1 tenant(s), 1 project(s), 1 job(s) frozen in 1 project-pipeline(s): 0 errors, '
        '0 warnings']


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
    # app-unit's own vars come from an untrusted project: shown as the unsafe
    # text Ansible gets.
    assert 'voting: false' in out and "level: !unsafe 'app'" in out and 'timeout: 1800' in out
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


# -- freezing every project-pipeline (issue 17) ------------------------------------

PIPELINES = """
- pipeline:
    name: check
    manager: independent
    trigger:
      gerrit:
        - event: patchset-created
- pipeline:
    name: post
    manager: supercedent
    post-review: true
    trigger:
      gerrit:
        - event: ref-updated
- job:
    name: base
    parent: null
- nodeset:
    name: small
    nodes:
      - name: node
        label: small
"""


def _check_app(tmp_path, app_yaml, *extra):
    config = _repo(tmp_path, 'project-config', {'zuul.d/base.yaml': PIPELINES})
    app = _repo(tmp_path, 'app', {'.zuul.yaml': app_yaml})
    return app, _run('config-check', *extra, str(config), f'org/app={app}')


def _lines_with(out, text):
    return [line for line in out.splitlines() if text in line]


def test_a_job_graph_with_an_unknown_parent_fails(tmp_path):
    app, (rc, out) = _check_app(tmp_path, """
        - job:
            name: orphan
            parent: no-such-parent
        - project:
            check:
              jobs:
                - orphan
        """)
    assert rc == 1
    # the load error at the job, and the freeze error at the project-pipeline entry
    assert f'{app}/.zuul.yaml:2: in job "orphan": unknown parent job "no-such-parent"' in out
    [line] = _lines_with(out, 'job graph cannot be frozen')
    # a job listed by name alone: the line of the project stanza
    assert line.startswith(f'{app}/.zuul.yaml:5: in project-pipeline "org/app": check: '
                           'project org/app branch master: ')
    assert 'unknown parent "no-such-parent"' in line


def test_a_post_review_job_in_check_fails_and_runs_in_post(tmp_path):
    app, (rc, out) = _check_app(tmp_path, """
        - job:
            name: publish
            post-review: true
        - project:
            check:
              jobs:
                - publish
            post:
              jobs:
                - publish
        """)
    assert rc == 1, out
    [line] = _lines_with(out, 'job graph cannot be frozen')
    assert line.startswith(f'{app}/.zuul.yaml:5: in project-pipeline "org/app": check: ')
    assert 'Pre-review pipeline check does not allow post-review job "publish"' in line
    assert out.rstrip().endswith('1 tenant(s), 1 project(s), 1 job(s) frozen in 2 '
                                 'project-pipeline(s): 1 errors, 0 warnings')


def test_a_dependency_cycle_fails(tmp_path):
    app, (rc, out) = _check_app(tmp_path, """
        - job: {name: one}
        - job: {name: two}
        - project:
            check:
              jobs:
                - one:
                    dependencies: [two]
                - two:
                    dependencies: [one]
        """)
    assert rc == 1
    [line] = _lines_with(out, 'job graph cannot be frozen')
    assert line.startswith(f'{app}/.zuul.yaml:7: in project-pipeline "org/app": check: ')
    assert 'Dependency cycle: one -> two -> one' in line


def test_an_unknown_nodeset_set_in_the_project_pipeline_fails(tmp_path):
    app, (rc, out) = _check_app(tmp_path, """
        - job: {name: unit, nodeset: small}
        - project:
            check:
              jobs:
                - unit:
                    nodeset: huge
        """)
    assert rc == 1, out
    [line] = _lines_with(out, 'job graph cannot be frozen')
    assert line.startswith(f'{app}/.zuul.yaml:6: in project-pipeline "org/app": check: ')
    assert 'Job "unit" uses the unknown nodeset "huge"' in line


def test_a_problem_shared_by_projects_is_reported_once(tmp_path):
    config = _repo(tmp_path, 'project-config', {'zuul.d/base.yaml': PIPELINES + textwrap.dedent("""
        - job: {name: lint, post-review: true}
        - project-template:
            name: common
            check:
              jobs: [lint]
        - project: {name: org/one, templates: [common]}
        - project: {name: org/two, templates: [common]}
        """)})
    rc, out = _run('config-check', str(config))
    assert rc == 1
    [line] = _lines_with(out, 'job graph cannot be frozen')
    assert line.startswith(f'{config}/zuul.d/base.yaml:25: ')
    assert line.endswith('(and 1 other project(s))')


def test_warnings_are_printed_and_fail_only_with_strict(tmp_path):
    # a config project (zuul.d/) may use a regex RE2 does not take: a warning
    config = _repo(tmp_path, 'project-config', {'zuul.d/base.yaml': PIPELINES + textwrap.dedent("""
        - job:
            name: unit
            files: ['(?<=x)y']
        - project:
            name: org/project-config
            check:
              jobs: [unit]
        """)})
    rc, out = _run('config-check', str(config))
    warnings = _lines_with(out, ': warning: ')
    assert rc == 0 and warnings, out
    assert out.rstrip().endswith(f'0 errors, {len(warnings)} warnings')
    rc, out = _run('config-check', '--strict', str(config))
    assert rc == 1 and _lines_with(out, ': warning: ')


def test_a_project_checked_alone_is_untrusted_and_names_what_the_tenant_defines(tmp_path):
    """A project's own repository (.zuul.yaml) checked without its tenant:
    its playbooks are untrusted, and what only the tenant's config project
    can define (a nodeset here) is a warning, not an error."""
    app = _repo(tmp_path, 'app', {'.zuul.yaml': """
        - job:
            name: base
            parent: null
        - job:
            name: unit
            nodeset: two-nodes
            run: playbooks/unit.yaml
        - job:
            name: broken
            attempts: many
        """})
    rc, out = _run('config-check', f'org/app={app}')
    [warning] = _lines_with(out, 'unknown nodeset')
    assert ': warning: in job "unit": unknown nodeset "two-nodes" (not in the checkouts ' \
        'given' in warning
    assert rc == 1 and _lines_with(out, 'in job "broken"')    # a real error stays one
    rc, out = _run('show-job', '--project', 'org/app', 'unit', f'org/app={app}')
    assert 'trusted: false' in out and 'trusted: true' not in out, out


def test_a_directory_without_configuration_fails(tmp_path):
    empty = tmp_path / 'empty'
    (empty / 'src').mkdir(parents=True)
    rc, out = _run('config-check', str(empty))
    assert rc == 1
    assert out.strip() == (f'zuul-admin config-check: {empty}: no configuration files found '
                           '(looked for zuul.yaml, zuul.d/, .zuul.yaml and .zuul.d/)')


def test_a_tenant_without_configuration_fails(tmp_path):
    _tenant_setup(tmp_path)
    rc, out = _run('-c', str(tmp_path / 'zuul.conf'), 'config-check', '--tenant', 'example',
                   '--src-root', str(tmp_path / 'nowhere'))
    assert rc == 1
    assert 'tenant example: no configuration files found' in out


def test_every_tenant_is_checked(tmp_path):
    src = _tenant_setup(tmp_path)
    conf = str(tmp_path / 'zuul.conf')
    rc, out = _run('-c', conf, 'config-check', '--src-root', str(src))
    assert rc == 1       # the untrusted pipeline "sneaky"
    assert 'tenant example: 1 pipelines, 2 jobs' in out
    assert out.rstrip().endswith('1 tenant(s), 2 project(s), 1 job(s) frozen in 1 '
                                 'project-pipeline(s): 1 errors, 0 warnings')
    (src / 'org' / 'app' / '.zuul.yaml').write_text(textwrap.dedent(APP))
    rc, out = _run('-c', conf, 'config-check', '--src-root', str(src))
    assert rc == 0, out
    assert out.rstrip().endswith('1 tenant(s), 2 project(s), 1 job(s) frozen in 1 '
                                 'project-pipeline(s): 0 errors, 0 warnings')
    # tenant-conf-check: the tenant file, then (with --src-root) the same check
    rc, out = _run('-c', conf, 'tenant-conf-check', '--src-root', str(src))
    assert rc == 0, out
    assert out.splitlines()[0].endswith('1 tenant(s) OK')
    assert out.rstrip().endswith('0 errors, 0 warnings')
    (src / 'org' / 'app' / '.zuul.yaml').write_text(textwrap.dedent(APP).replace(
        '- app-unit:', '- app-unit:\n            dependencies: [missing]'))
    rc, out = _run('-c', conf, 'tenant-conf-check', '--src-root', str(src))
    assert rc == 1
    [line] = _lines_with(out, 'job graph cannot be frozen')
    assert line.startswith(f'{src}/org/app/.zuul.yaml:')
    assert 'project org/app branch master' in line
    assert 'depends on "missing"' in line
