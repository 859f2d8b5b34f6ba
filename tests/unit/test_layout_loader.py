"""The layout loader: which files are read, in what order, what each
project may define, implicit branch matchers, and errors that name file,
line, object and reason while the rest of the tenant loads."""

from __future__ import annotations

import textwrap

import pytest

from zuul.configloader.layout import ConfigFile, LayoutLoader, select_config_files
from zuul.driver.registry import default_registry
from zuul.lib import encryption
from zuul.model.freeze import freeze_job_graph
from zuul.model.tenant import Tenant, TenantProject

PIPELINES = """
- pipeline:
    name: check
    manager: independent
    trigger:
      gerrit:
        - event: patchset-created
    success:
      gerrit:
        Verified: 1
    failure:
      gerrit:
        Verified: -1
- pipeline:
    name: gate
    manager: dependent
    post-review: true
    trigger:
      gerrit:
        - event: comment-added
          approval:
            - Workflow: 1
- job:
    name: base
    parent: null
    run: playbooks/base.yaml
- nodeset:
    name: one-node
    nodes:
      - name: ubuntu
        label: ubuntu-jammy
"""


def _tenant(*projects, **kw) -> Tenant:
    return Tenant(name='t1', projects=list(projects), **kw)


CONFIG = TenantProject('gerrit', 'org/project-config', trusted=True)
APP = TenantProject('gerrit', 'org/app', trusted=False)
LIB = TenantProject('gerrit', 'org/lib', trusted=False)


def _f(project, text, path='zuul.yaml', branch='master') -> ConfigFile:
    return ConfigFile(path=path, text=textwrap.dedent(text), project=project, branch=branch)


def _load(tenant, files, **kw):
    loader = LayoutLoader(default_registry(), connections={'gerrit': 'gerrit'},
                          canonical_hostnames={'gerrit': 'review.example.org'})
    return loader.load(tenant, files, **kw)


def _errors(layout, severity='error'):
    return [e for e in layout.errors if e.severity == severity]


def test_a_tenant_loads_and_projects_get_their_jobs():
    layout = _load(_tenant(CONFIG, APP), [
        _f(CONFIG, PIPELINES, 'zuul.d/pipelines.yaml'),
        _f(APP, """
            - job:
                name: app-unit
                nodeset: one-node
            - project:
                check:
                  jobs:
                    - app-unit
                gate:
                  queue: integrated
                  jobs:
                    - app-unit
            """, '.zuul.yaml'),
    ])
    assert not layout.errors, [str(e) for e in layout.errors]
    assert set(layout.pipelines) == {'check', 'gate'}
    assert layout.pipelines['gate'].manager == 'dependent'
    ppc = layout.get_project_pipeline_config('org/app', 'gate', 'master')
    assert ppc.job_names == ['app-unit'] and ppc.queue_name == 'integrated'
    # Canonical names find the same project.
    assert layout.get_project_pipeline_config('review.example.org/org/app', 'check',
                                              'master').job_names == ['app-unit']
    graph, errors = freeze_job_graph(layout, 'org/app', layout.pipelines['check'], 'master')
    assert errors == []
    job = graph.jobs['app-unit']
    assert [v.split('@')[0] for v in job.inheritance_path] == [
        'variant job base', 'variant job app-unit', 'project-pipeline variant job app-unit']


def test_broken_yaml_in_one_project_is_an_error_for_it_and_the_rest_loads():
    layout = _load(_tenant(CONFIG, APP, LIB), [
        _f(CONFIG, PIPELINES),
        _f(APP, "- job:\n    name: app-unit\n  bad: [\n", '.zuul.yaml'),
        _f(LIB, """
            - job:
                name: lib-unit
            - project:
                check:
                  jobs: [lib-unit]
            """),
    ])
    errors = _errors(layout)
    assert len(errors) == 1
    err = errors[0]
    assert (err.project, err.branch, err.path) == ('org/app', 'master', '.zuul.yaml')
    assert err.line == 4 and 'YAML syntax error' in err.reason   # where the parser gave up
    assert 'lib-unit' in layout.jobs
    assert layout.get_project_pipeline_config('org/lib', 'check', 'master').job_names == \
        ['lib-unit']


def test_invalid_object_error_names_file_line_object_and_attribute():
    layout = _load(_tenant(CONFIG, APP), [
        _f(CONFIG, PIPELINES),
        _f(APP, """
            - job:
                name: good
            - job:
                name: bad-job
                timeout: forever
            """),
    ])
    (err,) = _errors(layout)
    assert (err.path, err.line, err.object_type, err.object_name) == \
        ('zuul.yaml', 4, 'job', 'bad-job')
    assert '"timeout"' in err.reason
    assert str(err).startswith('zuul.yaml:4: in job "bad-job": ')
    assert 'good' in layout.jobs and 'bad-job' not in layout.jobs


def test_pipelines_only_in_config_projects_and_unknown_types_rejected():
    layout = _load(_tenant(CONFIG, APP), [
        _f(CONFIG, PIPELINES),
        _f(APP, """
            - pipeline:
                name: sneaky
                manager: independent
            - widget:
                name: w
            - just a string
            """),
    ])
    reasons = sorted((e.line, e.reason) for e in _errors(layout))
    assert reasons[0] == (2, 'pipelines may only be defined in config projects')
    assert reasons[1][0] == 5 and 'unknown configuration object type "widget"' in reasons[1][1]
    assert reasons[2][0] == 7
    assert 'sneaky' not in layout.pipelines


def test_include_and_exclude_of_object_types():
    jobs_only = TenantProject('gerrit', 'org/app', trusted=False,
                              load_classes=frozenset({'job'}))
    layout = _load(_tenant(CONFIG, jobs_only), [
        _f(CONFIG, PIPELINES),
        _f(jobs_only, """
            - job:
                name: app-unit
            - project:
                check:
                  jobs: [app-unit]
            """),
    ])
    assert not layout.errors
    assert 'app-unit' in layout.jobs
    assert layout.get_project_pipeline_config('org/app', 'check', 'master') is None


def _branch_files(project, pragma=''):
    text = pragma + """
        - job:
            name: app-unit
            vars: {{where: {branch}}}
        - project:
            check:
              jobs: [app-unit]
        """
    return [_f(project, text.format(branch=b), branch=b) for b in ('master', 'stable/1')]


def test_implicit_branch_matcher_on_untrusted_projects_with_several_branches():
    layout = _load(_tenant(CONFIG, APP), [_f(CONFIG, PIPELINES)] + _branch_files(APP))
    assert not layout.errors
    for branch in ('master', 'stable/1'):
        graph, errors = freeze_job_graph(layout, 'org/app', layout.pipelines['check'], branch)
        assert errors == []
        job = graph.jobs['app-unit']
        assert job.get('vars') == {'where': branch}


def test_pragma_turns_off_the_implicit_matcher():
    pragma = """
        - pragma:
            implicit-branch-matcher: false
        """
    layout = _load(_tenant(CONFIG, APP), [_f(CONFIG, PIPELINES)] + _branch_files(APP, pragma))
    variants = layout.jobs['app-unit']
    assert [v.branch_matchers for v in variants] == [(), ()]


def test_implied_branches_pragma():
    layout = _load(_tenant(CONFIG, APP), [_f(CONFIG, PIPELINES), _f(APP, """
        - pragma:
            implied-branches: ['master', 'feature/.*']
        - job:
            name: app-unit
        """)])
    (variant,) = layout.jobs['app-unit']
    assert variant.matches_branch('feature/x') and not variant.matches_branch('stable/1')


def test_config_projects_get_no_implicit_matcher():
    files = [_f(CONFIG, PIPELINES, branch=b) for b in ('master',)]
    files.append(_f(CONFIG, '- job:\n    name: shared\n', 'zuul.d/other.yaml',
                    branch='stable/1'))
    layout = _load(_tenant(CONFIG), files)
    assert layout.jobs['shared'][0].branch_matchers == ()


def test_a_job_belongs_to_one_project_unless_shadowed():
    zuul_jobs = TenantProject('gerrit', 'zuul/zuul-jobs', trusted=False)
    layout = _load(_tenant(CONFIG, zuul_jobs, APP), [
        _f(CONFIG, PIPELINES),
        _f(zuul_jobs, '- job:\n    name: unittests\n'),
        _f(APP, '- job:\n    name: unittests\n'),
    ])
    (err,) = _errors(layout)
    assert err.project == 'org/app'
    assert 'not permitted to shadow job "unittests" in zuul/zuul-jobs' in err.reason
    # zuul-jobs "shadow: org/project-config": project-config's base wins.
    shadowing = TenantProject('gerrit', 'zuul/zuul-jobs', trusted=False,
                              shadow=('org/project-config',))
    layout = _load(_tenant(CONFIG, shadowing), [
        _f(CONFIG, PIPELINES),
        _f(shadowing, '- job:\n    name: base\n    parent: null\n    vars: {from: zj}\n'),
    ])
    assert not layout.errors
    assert [v.source_context.project for v in layout.jobs['base']] == ['org/project-config']


def test_duplicate_objects_and_identical_ones_on_branches():
    nodeset = '- nodeset:\n    name: pair\n    nodes:\n      - {name: a, label: x}\n'
    layout = _load(_tenant(CONFIG, APP, LIB), [
        _f(CONFIG, PIPELINES),
        _f(APP, nodeset), _f(APP, nodeset, branch='stable/1'),
        _f(LIB, nodeset),
    ])
    (err,) = _errors(layout)
    assert err.project == 'org/lib'
    assert 'nodeset "pair" is already defined at org/app:master:zuul.yaml:1' in err.reason


def test_untrusted_project_may_not_configure_another():
    layout = _load(_tenant(CONFIG, APP, LIB), [
        _f(CONFIG, PIPELINES),
        _f(APP, '- project:\n    name: org/lib\n    check:\n      jobs: []\n'),
        _f(CONFIG, '- project:\n    name: org/lib\n    check:\n      jobs: [base]\n',
           'zuul.d/projects.yaml'),
    ])
    (err,) = _errors(layout)
    assert err.project == 'org/app' and 'may not configure another project' in err.reason
    assert layout.get_project_pipeline_config('org/lib', 'check', 'master').job_names == \
        ['base']


def test_unknown_pipeline_key_and_unknown_references():
    layout = _load(_tenant(CONFIG, APP), [
        _f(CONFIG, PIPELINES),
        _f(APP, """
            - project:
                templates: [missing-template]
                chek:
                  jobs: [base]
            - project:
                check:
                  jobs:
                    - undefined-job
                    - base:
                        nodeset: no-such-nodeset
            """),
    ])
    reasons = [e.reason for e in _errors(layout)]
    assert any('"chek" is neither a project attribute nor a pipeline' in r for r in reasons)
    assert 'check: job "undefined-job" is not defined' in reasons
    assert 'check: job "base": unknown nodeset "no-such-nodeset"' in reasons


def test_pipeline_triggers_validated_by_their_driver():
    bad = """
        - pipeline:
            name: check
            manager: independent
            trigger:
              gerrit:
                - event: patchset-created
                  colour: blue
        - pipeline:
            name: other
            manager: independent
            trigger:
              jira:
                - event: ticket
        """
    layout = _load(_tenant(CONFIG), [_f(CONFIG, bad)])
    err, unknown = _errors(layout)
    assert err.object_name == 'check' and 'trigger.gerrit' in err.reason and 'colour' in \
        err.reason
    # A driver the system does not have: an error naming pipeline and
    # driver, and the pipeline still loads so projects naming it do too.
    assert unknown.object_name == 'other'
    assert unknown.reason.startswith('trigger: no connection or driver named "jira"')
    assert 'other' in layout.pipelines


def test_regexes_re2_with_released_forms():
    layout = _load(_tenant(CONFIG, APP), [_f(CONFIG, PIPELINES), _f(APP, r"""
        - job:
            name: not-master
            branches: ^(?!master).*$
        - job:
            name: negated
            branches:
              regex: ^stable/.*
              negate: true
        - job:
            name: backref
            branches: (a)\1
        """)])
    (err,) = _errors(layout)
    assert err.object_name == 'backref' and 'RE2' in err.reason
    (v,) = layout.jobs['not-master']
    assert v.matches_branch('stable/1') and not v.matches_branch('master')
    (v,) = layout.jobs['negated']
    assert v.matches_branch('master') and not v.matches_branch('stable/2')
    # Trusted config keeps the released fallback, with a warning.
    layout = _load(_tenant(CONFIG), [_f(CONFIG, PIPELINES + r"""
- job:
    name: backref
    branches: (a)\1
""")])
    assert not _errors(layout)
    (warning,) = _errors(layout, 'warning')
    assert warning.object_name == 'backref' and "Python's re" in warning.reason


def test_secrets_load_encrypted_and_stay_in_their_project(tmp_path):
    private, public = encryption.generate_rsa_keypair()
    chunks = encryption.encrypt_chunks(b'hunter2', public)
    secret_yaml = '- secret:\n    name: creds\n    data:\n      password: !encrypted/' \
        'pkcs1-oaep\n'
    secret_yaml += ''.join(f'        - {c}\n' for c in chunks)
    layout = _load(_tenant(CONFIG, APP, LIB), [
        _f(CONFIG, PIPELINES),
        _f(APP, secret_yaml + '- job:\n    name: deploy\n    secrets: [creds]\n'),
        _f(LIB, '- job:\n    name: steal\n    secrets: [creds]\n'),
    ])
    (err,) = _errors(layout)
    assert err.object_name == 'steal' and 'belongs to project org/app' in err.reason
    (value,) = list(layout.secrets['creds'].encrypted_values())
    assert encryption.decrypt_chunks(value.ciphertext, private) == b'hunter2'


def test_tenant_limits():
    layout = _load(_tenant(CONFIG, APP, max_nodes_per_job=1, max_job_timeout=600), [
        _f(CONFIG, PIPELINES),
        _f(APP, """
            - nodeset:
                name: big
                nodes:
                  - {name: a, label: x}
                  - {name: b, label: x}
            - job:
                name: slow
                timeout: 3600
            """),
    ])
    reasons = sorted(e.reason for e in _errors(layout))
    assert 'max-job-timeout of 600' in reasons[1] or 'max-job-timeout of 600' in reasons[0]
    assert any('allows 1 per job' in r for r in reasons)


@pytest.mark.parametrize('paths,extra,expected,error', [
    (['zuul.yaml', 'README', '.zuul.yaml'], (), ['zuul.yaml'], False),
    (['zuul.d/b.yaml', 'zuul.d/a.yaml', 'zuul.d/sub/c.yaml', 'zuul.d/notes.txt'], (),
     ['zuul.d/a.yaml', 'zuul.d/b.yaml', 'zuul.d/sub/c.yaml'], False),
    (['.zuul.d/x.yaml', 'setup.py'], (), ['.zuul.d/x.yaml'], False),
    (['zuul.yaml', 'zuul.d/a.yaml'], (), ['zuul.yaml', 'zuul.d/a.yaml'], True),
    (['zuul.yaml', 'extra/a.yaml', 'other.yaml'], ('extra/', 'other.yaml'),
     ['zuul.yaml', 'extra/a.yaml', 'other.yaml'], False),
    (['README'], (), [], False),
])
def test_select_config_files(paths, extra, expected, error):
    chosen, problem = select_config_files(paths, extra)
    assert chosen == expected
    assert bool(problem) is error
