"""main.yaml: the released form, the seed's form, and clear errors."""

import textwrap

import pytest

from tests.harness import corpus
from zuul.configloader.tenant import load_tenant_config, tenant_conf_check

CORPUS = corpus.path('zuul-configs')


def _write(tmp_path, text, name='main.yaml'):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


@pytest.mark.corpus
@pytest.mark.parametrize('repo', ['openstack+project-config',
                                  'openstack-infra+project-config'])
def test_real_opendev_tenant_files_load(repo):
    result = load_tenant_config(str(CORPUS / repo / 'zuul' / 'main.yaml'))
    assert result.errors == []
    assert 'openstack' in result.tenants
    tenant = result.tenants['openstack']
    assert tenant.config_projects and tenant.untrusted_projects
    assert tenant.max_nodes_per_job >= 5


def test_released_form_options(tmp_path):
    result = load_tenant_config(_write(tmp_path, '''
        - tenant:
            name: t1
            max-job-timeout: 3600
            default-parent: mybase
            exclude-unprotected-branches: true
            source:
              review:
                config-projects:
                  - org/config
                untrusted-projects:
                  - org/jobs:
                      include: [job, project-template]
                  - org/noconfig:
                      exclude: [project, job, pipeline, nodeset, secret, semaphore,
                                project-template, queue, pragma]
                  - include: []
                    projects: [org/a, org/b]
        '''))
    assert result.errors == []
    t = result.tenants['t1']
    assert (t.max_job_timeout, t.default_parent, t.exclude_unprotected_branches) == \
        (3600, 'mybase', True)
    by_name = {p.name: p for p in t.projects}
    assert by_name['org/config'].trusted and not by_name['org/jobs'].trusted
    assert by_name['org/jobs'].load_classes == {'job', 'project-template'}
    assert 'job' not in by_name['org/noconfig'].load_classes
    assert by_name['org/a'].load_classes == frozenset()


def test_seed_form(tmp_path):
    result = load_tenant_config(_write(tmp_path, '''
        - tenant:
            name: random-stackforge-project
            include:
              - global_config.yaml
            source:
              my-gerrit:
                repos:
                  - stackforge/random
        '''))
    t = result.tenants['random-stackforge-project']
    assert t.include_files == [str(tmp_path / 'global_config.yaml')]
    assert [(p.connection, p.name, p.trusted) for p in t.projects] == \
        [('my-gerrit', 'stackforge/random', False)]


@pytest.mark.parametrize('text,message', [
    ('- tenant:\n    source: {}\n', 'required attribute "name" missing'),
    ('- tenant:\n    name: x\n    frobnicate: 1\n', 'unknown attribute "frobnicate"'),
    ('- tenant:\n    name: x\n    max-nodes-per-job: many\n', 'max-nodes-per-job'),
    ('- tenant:\n    name: x\n- tenant:\n    name: x\n', 'defined twice'),
    ('- tenant:\n    name: x\n    source:\n      r:\n        config-projects: [a, a]\n',
     'listed twice'),
    ('- bogus: {}\n', 'unknown object type "bogus"'),
    ('- tenant: [\n', 'main.yaml'),
])
def test_errors_name_file_line_and_reason(tmp_path, text, message):
    result = load_tenant_config(_write(tmp_path, text))
    assert result.errors, 'expected an error'
    text_errors = [str(e) for e in result.errors]
    assert any(message in e for e in text_errors), text_errors
    assert all(e.startswith(str(tmp_path / 'main.yaml')) for e in text_errors)
    assert result.errors[-1].line is not None


def test_one_bad_tenant_does_not_hide_the_others(tmp_path):
    result = load_tenant_config(_write(tmp_path, '''
        - tenant:
            name: good
        - tenant:
            name: bad
            nonsense: true
        '''))
    assert list(result.tenants) == ['good'] and len(result.errors) == 1


def test_tenant_conf_check_command(tmp_path, capsys):
    _write(tmp_path, '- tenant:\n    name: a\n    source:\n      review:\n'
                     '        untrusted-projects: [org/p]\n')
    conf = _write(tmp_path, '[scheduler]\ntenant_config=main.yaml\n'
                            '[connection review]\ndriver=gerrit\nserver=x\n', 'zuul.conf')
    assert tenant_conf_check(conf) == 0
    assert '1 tenant(s) OK' in capsys.readouterr().out
    _write(tmp_path, '- tenant:\n    name: a\n    source:\n      github:\n'
                     '        untrusted-projects: [org/p]\n')
    assert tenant_conf_check(conf) == 1
    assert 'unknown connection "github"' in capsys.readouterr().out


def test_tenant_conf_check_warns_exclude_unprotected_branches_without_protection(
        tmp_path, capsys):
    """Gerrit and git have no branch protection: the key changes nothing
    there, and the check says so (once per tenant and connection)."""
    _write(tmp_path, '''
        - tenant:
            name: a
            exclude-unprotected-branches: true
            source:
              review:
                untrusted-projects: [org/p, org/q]
              local:
                untrusted-projects:
                  - org/r:
                      exclude-unprotected-branches: false
        - tenant:
            name: b
            source:
              review:
                untrusted-projects:
                  - org/p
                  - org/q:
                      exclude-unprotected-branches: true
        ''')
    conf = _write(tmp_path, '[scheduler]\ntenant_config=main.yaml\n'
                            '[connection review]\ndriver=gerrit\nserver=x\n'
                            '[connection local]\ndriver=git\nbaseurl=/srv/git\n', 'zuul.conf')
    assert tenant_conf_check(conf) == 0
    out = capsys.readouterr().out
    warnings = [line for line in out.splitlines() if line.startswith('warning: ')]
    assert len(warnings) == 2
    assert all('exclude-unprotected-branches acts only on connections with branch '
               'protection; connection "review" (driver gerrit)' in w for w in warnings)
    assert 'main.yaml:3: in tenant "a"' in warnings[0]
    assert 'in tenant "b"' in warnings[1]
    assert '2 tenant(s) OK' in out
    _write(tmp_path, '- tenant:\n    name: a\n    source:\n      review:\n'
                     '        untrusted-projects: [org/p]\n')
    assert tenant_conf_check(conf) == 0
    assert 'warning' not in capsys.readouterr().out
