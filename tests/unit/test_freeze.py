"""Late-binding inheritance (seed 003) and the rules enforced at freeze time."""

from types import SimpleNamespace

import pytest

from zuul.configloader.job_parser import JobParser
from zuul.lib import yamlutil
from zuul.model.errors import ConfigurationError, SourceContext
from zuul.model.freeze import FreezeError, freeze_job, freeze_job_graph


def _sc(project='org/config', branch='master', trusted=True, path='zuul.yaml',
        implicit=False):
    return SourceContext(project=project, branch=branch, path=path, trusted=trusted,
                         implicit_branch_matcher=implicit)


class Layout:
    def __init__(self):
        self.jobs = {}
        self.parser = JobParser()

    def add(self, text, sc=None):
        for obj in yamlutil.load(text, 'zuul.yaml'):
            job = self.parser.parse_job(obj['job'], sc or _sc())
            self.jobs.setdefault(job.name, []).append(job)
        return self

    def pp(self, entry, sc=None):
        return self.parser.parse_project_pipeline_job(entry, sc or _sc())


def test_seed_003_traversal_order():
    layout = Layout().add('''
- job: {name: base, parent: null, vars: {order: [0]}}
- job: {name: devstack, parent: base, vars: {d1: 1}}
- job: {name: devstack, parent: base, vars: {d2: 2}}
- job: {name: tempest, parent: devstack}
- job: {name: altbase, parent: base}
- job: {name: tempest, parent: altbase}
- job: {name: foo, parent: tempest}
- job: {name: foo, parent: tempest}
''')
    frozen = freeze_job(layout, 'foo', 'master')
    order = [v.name for v in frozen.variants]
    assert order == ['base', 'devstack', 'devstack', 'tempest', 'altbase', 'tempest',
                     'foo', 'foo']
    assert frozen.inheritance_path[0].startswith('variant job base@org/config:master:')
    assert frozen.get('vars') == {'order': [0], 'd1': 1, 'd2': 2}


def test_branch_variants_apply_only_on_their_branch():
    layout = Layout().add('''
- job: {name: base, parent: null, timeout: 100}
- job: {name: unit, run: playbooks/unit.yaml}
- job: {name: unit, branches: ^stable/.*, timeout: 50, vars: {py: '2.7'}}
''')
    master = freeze_job(layout, 'unit', 'master')
    stable = freeze_job(layout, 'unit', 'stable/queens')
    assert master.get('timeout') == 100 and 'vars' not in master.attributes
    assert stable.get('timeout') == 50 and stable.get('vars') == {'py': '2.7'}


def test_no_matching_variant_means_job_does_not_run():
    layout = Layout().add('''
- job: {name: base, parent: null}
- job: {name: only-stable, branches: stable/.*}
''')
    assert freeze_job(layout, 'only-stable', 'master') is None


def test_files_and_irrelevant_files_matchers():
    layout = Layout().add('''
- job: {name: base, parent: null}
- job: {name: docs, files: ['^doc/.*']}
- job: {name: unit, irrelevant-files: ['^doc/.*', '\\.rst$']}
''')
    assert freeze_job(layout, 'docs', 'master', ['doc/index.rst']) is not None
    assert freeze_job(layout, 'docs', 'master', ['zuul/x.py']) is None
    assert freeze_job(layout, 'unit', 'master', ['doc/a', 'README.rst']) is None
    assert freeze_job(layout, 'unit', 'master', ['doc/a', 'zuul/x.py']) is not None


def test_a_child_without_file_matchers_inherits_its_parents():
    layout = Layout().add('''
- job: {name: base, parent: null}
- job: {name: docs-base, files: ['^doc/.*'], irrelevant-files: ['^doc/draft/.*']}
- job: {name: docs-build, parent: docs-base, run: playbooks/docs.yaml}
''')
    assert freeze_job(layout, 'docs-build', 'master', ['zuul/x.py']) is None
    assert freeze_job(layout, 'docs-build', 'master', ['doc/index.rst']) is not None
    assert freeze_job(layout, 'docs-build', 'master', ['doc/draft/x.rst']) is None
    # unknown files (a branch tip, a timer) match, as before
    assert freeze_job(layout, 'docs-build', 'master', None) is not None


def test_the_later_parent_variant_files_replace_the_earlier():
    layout = Layout().add('''
- job: {name: base, parent: null}
- job: {name: lint-base, files: ['^src/.*']}
- job: {name: lint-base, files: ['^tests/.*']}
- job: {name: lint, parent: lint-base}
''')
    assert freeze_job(layout, 'lint', 'master', ['tests/t.py']) is not None
    assert freeze_job(layout, 'lint', 'master', ['src/a.py']) is None


def test_a_child_setting_files_replaces_the_parents_but_keeps_irrelevant_files():
    layout = Layout().add('''
- job: {name: base, parent: null}
- job: {name: parent, files: ['^src/.*'], irrelevant-files: ['\\.md$']}
- job: {name: child, parent: parent, files: ['^tests/.*']}
''')
    assert freeze_job(layout, 'child', 'master', ['src/a.py']) is None
    assert freeze_job(layout, 'child', 'master', ['tests/t.py']) is not None
    assert freeze_job(layout, 'child', 'master', ['tests/README.md']) is None


def test_file_matchers_do_not_choose_variants_the_branch_does():
    # A variant whose files do not match still applies its other
    # attributes; its files are the job's (the job then does not run).
    layout = Layout().add('''
- job: {name: base, parent: null}
- job: {name: unit, timeout: 100}
- job: {name: unit, files: ['^src/.*'], timeout: 50}
''')
    assert freeze_job(layout, 'unit', 'master', ['README']) is None
    assert freeze_job(layout, 'unit', 'master', ['src/a.c']).get('timeout') == 50


def test_a_project_pipeline_variant_files_decide_last():
    layout = Layout().add('''
- job: {name: base, parent: null}
- job: {name: docs, files: ['^doc/.*']}
''')
    entry = layout.pp({'docs': {'files': ['^api/.*']}})
    assert freeze_job(layout, 'docs', 'master', ['api/x.yaml'], [entry]) is not None
    assert freeze_job(layout, 'docs', 'master', ['doc/x.rst'], [entry]) is None


def test_implicit_branch_matcher_and_its_absence():
    untrusted = _sc('org/project', 'stable/1', trusted=False, implicit=True)
    layout = Layout().add('- job: {name: base, parent: null}\n')
    layout.add('- job: {name: local, vars: {where: stable}}\n', untrusted)
    assert freeze_job(layout, 'local', 'stable/1') is not None
    assert freeze_job(layout, 'local', 'stable/10') is None   # exact, not a prefix
    assert freeze_job(layout, 'local', 'master') is None
    free = _sc('org/project', 'stable/1', trusted=False, implicit=False)
    layout.add('- job: {name: everywhere}\n', free)
    assert freeze_job(layout, 'everywhere', 'master') is not None


def test_playbooks_accumulate_in_nesting_order_and_run_overrides():
    layout = Layout().add('''
- job: {name: base, parent: null, pre-run: base-pre.yaml, post-run: base-post.yaml,
        run: base-run.yaml}
- job: {name: child, pre-run: child-pre.yaml, post-run: child-post.yaml,
        run: child-run.yaml}
''')
    frozen = freeze_job(layout, 'child', 'master')
    assert [p.path for p in frozen.get('pre_run')] == ['base-pre.yaml', 'child-pre.yaml']
    assert [p.path for p in frozen.get('post_run')] == ['child-post.yaml', 'base-post.yaml']
    assert [p.path for p in frozen.get('run')] == ['child-run.yaml']


def test_no_implicit_run_playbook():
    layout = Layout().add('- job: {name: base, parent: null}\n- job: {name: empty}\n')
    assert freeze_job(layout, 'empty', 'master').get('run') is None


def test_vars_merge_deeply_and_override_tag_replaces():
    layout = Layout().add('''
- job: {name: base, parent: null, vars: {a: {x: 1, y: 2}, keep: 1}}
- job: {name: merged, vars: {a: {y: 3}}}
- job: {name: replaced, vars: !override {a: {y: 3}}}
''')
    assert freeze_job(layout, 'merged', 'master').get('vars') == {'a': {'x': 1, 'y': 3},
                                                                  'keep': 1}
    assert freeze_job(layout, 'replaced', 'master').get('vars') == {'a': {'y': 3}}


def test_final_job_cannot_be_modified():
    layout = Layout().add('''
- job: {name: base, parent: null}
- job: {name: release, final: true, timeout: 10}
- job: {name: release, branches: master, timeout: 20}
''')
    with pytest.raises(FreezeError, match='final'):
        freeze_job(layout, 'release', 'master')
    assert freeze_job(layout, 'release', 'stable/x').get('timeout') == 10


def test_abstract_job_cannot_run_but_children_can():
    layout = Layout().add('''
- job: {name: base, parent: null}
- job: {name: tox, abstract: true, vars: {env: py}}
- job: {name: tox-py3, parent: tox}
''')
    with pytest.raises(FreezeError, match='abstract'):
        freeze_job(layout, 'tox', 'master')
    assert freeze_job(layout, 'tox-py3', 'master').get('vars') == {'env': 'py'}


def test_protected_job_only_inherited_within_its_project():
    layout = Layout().add('''
- job: {name: base, parent: null}
- job: {name: deploy, protected: true}
''')
    layout.add('- job: {name: mine, parent: deploy}\n', _sc('org/config', 'master'))
    assert freeze_job(layout, 'mine', 'master') is not None
    layout.add('- job: {name: theirs, parent: deploy}\n',
               _sc('org/other', 'master', trusted=False))
    with pytest.raises(FreezeError, match='protected'):
        freeze_job(layout, 'theirs', 'master')


def test_unknown_parent_and_cycle():
    layout = Layout().add('''
- job: {name: base, parent: null}
- job: {name: orphan, parent: nobody}
- job: {name: a, parent: b}
- job: {name: b, parent: a}
''')
    with pytest.raises(FreezeError, match='unknown parent'):
        freeze_job(layout, 'orphan', 'master')
    with pytest.raises(FreezeError, match='cycle'):
        freeze_job(layout, 'a', 'master')


def test_project_pipeline_variant_applies_last():
    layout = Layout().add('''
- job: {name: base, parent: null, voting: true, timeout: 30}
- job: {name: unit}
''')
    pp = layout.pp({'unit': {'voting': False}})
    frozen = freeze_job(layout, 'unit', 'master', project_variants=[pp])
    assert frozen.voting is False and frozen.get('timeout') == 30
    assert frozen.inheritance_path[-1].startswith('project-pipeline variant job unit@')


def test_job_graph_dependencies_and_errors():
    layout = Layout().add('''
- job: {name: base, parent: null}
- job: {name: build}
- job: {name: test}
- job: {name: publish}
''')
    jobs = [layout.pp('build'), layout.pp({'test': {'dependencies': ['build']}}),
            layout.pp({'publish': {'dependencies': ['test', {'name': 'absent',
                                                             'soft': True}]}})]
    pipeline = SimpleNamespace(name='check', post_review=False, allow_secrets=True)
    graph, errors = freeze_job_graph(layout, 'org/project', pipeline, 'master',
                                     job_list=jobs)
    assert errors == []
    assert graph.order == ['build', 'test', 'publish']
    assert graph.hard_dependencies('publish') == ('test',)
    assert graph.dependents_of('build') == ['test', 'publish']
    cyclic = [layout.pp({'build': {'dependencies': ['test']}}),
              layout.pp({'test': {'dependencies': ['build']}})]
    _, errors = freeze_job_graph(layout, 'org/project', pipeline, 'master', job_list=cyclic)
    assert errors and 'cycle' in errors[0]
    missing = [layout.pp({'test': {'dependencies': ['nope']}})]
    _, errors = freeze_job_graph(layout, 'org/project', pipeline, 'master', job_list=missing)
    assert errors and 'nope' in errors[0]


def test_secrets_imply_post_review_and_pipeline_rules():
    layout = Layout().add('''
- job: {name: base, parent: null}
- job: {name: upload, secrets: [creds]}
- job: {name: only-here, allowed-projects: [org/allowed]}
''')
    check = SimpleNamespace(name='check', post_review=False, allow_secrets=True)
    gate = SimpleNamespace(name='gate', post_review=True, allow_secrets=True)
    no_secrets = SimpleNamespace(name='x', post_review=True, allow_secrets=False)
    _, errors = freeze_job_graph(layout, 'org/p', check, 'master',
                                 job_list=[layout.pp('upload')])
    assert errors and 'post-review' in errors[0]
    graph, errors = freeze_job_graph(layout, 'org/p', gate, 'master',
                                     job_list=[layout.pp('upload')])
    assert not errors and graph.jobs['upload'].secrets == {'creds': ('creds', 'org/config')}
    _, errors = freeze_job_graph(layout, 'org/p', no_secrets, 'master',
                                 job_list=[layout.pp('upload')])
    assert errors and 'secrets' in errors[0]
    _, errors = freeze_job_graph(layout, 'org/p', gate, 'master',
                                 job_list=[layout.pp('only-here')])
    assert errors == ['Project org/p is not allowed to run job only-here.']


@pytest.mark.parametrize('text,reason', [
    ('- job: {name: x, nodeset: {nodes: [{name: localhost, label: l}]}}', 'localhost'),
    ('- job: {name: x, vars: {ansible_connection: local}}', 'ansible_connection'),
    ('- job: {name: x, host-vars: {n1: {ansible_host: 1.2.3.4}}}', 'ansible_host'),
    ('- job: {name: x, branches: "(unclosed"}', 'invalid regular expression'),
    ('- job: {name: x, frobnicate: true}', 'unknown attribute "frobnicate"'),
    ('- job: {name: x, timeout: soon}', 'timeout'),
    ('- job: {name: x, secrets: [a, {name: a, secret: b}]}', 'same name'),
])
def test_rejected_job_definitions(text, reason):
    with pytest.raises(ConfigurationError) as e:
        Layout().add(text)
    assert reason in e.value.reason


def test_spec_era_spellings():
    layout = Layout().add('''
- job: {name: base, parent: null, nodes: precise, auth: {inherit: true, secrets: [creds]},
        repos: [org/other], workspace: /opt/workspace}
''')
    job = layout.jobs['base'][0]
    assert job.get('nodeset') == 'precise'
    assert [r.name for r in job.get('required_projects')] == ['org/other']
    assert job.secrets[0].name == 'creds'


def test_tenant_limits():
    parser = JobParser(SimpleNamespace(max_job_timeout=60, max_nodes_per_job=1))
    conf = yamlutil.load('- job: {name: x, timeout: 61}', 'z.yaml')[0]['job']
    with pytest.raises(ConfigurationError, match='max-job-timeout'):
        parser.parse_job(conf, _sc())
    conf = yamlutil.load('- job: {name: x, nodeset: {nodes: [{name: a, label: l}, '
                         '{name: b, label: l}]}}', 'z.yaml')[0]['job']
    with pytest.raises(ConfigurationError, match='allows 1'):
        parser.parse_job(conf, _sc())


def test_report_messages_and_urls_are_inherited_and_overridden():
    layout = Layout().add('''
- job: {name: base, parent: null, success-message: fine, failure-url: https://ci/help}
- job: {name: unit, parent: base, success-url: https://ci/unit, success-message: green}
''')
    frozen = freeze_job(layout, 'unit', 'master')
    assert (frozen.get('success_message'), frozen.get('success_url'),
            frozen.get('failure_url')) == ('green', 'https://ci/unit', 'https://ci/help')


def test_final_job_may_be_placed_in_the_graph_but_not_changed_by_a_project():
    layout = Layout().add('''
- job: {name: base, parent: null}
- job: {name: publish}
- job: {name: release, final: true, timeout: 10}
''')
    placed = layout.pp({'release': {'dependencies': [{'name': 'publish'}]}})
    frozen = freeze_job(layout, 'release', 'master', project_variants=[placed])
    assert frozen.get('timeout') == 10
    changed = layout.pp({'release': {'timeout': 99}})
    with pytest.raises(FreezeError, match='Unable to modify final job "release" attribute '
                                          '"timeout"'):
        freeze_job(layout, 'release', 'master', project_variants=[changed])
    # A variant defined as a job (not where a project runs it) stays refused.
    layout.add('- job: {name: release, dependencies: [publish]}')
    with pytest.raises(FreezeError, match='"dependencies"'):
        freeze_job(layout, 'release', 'master')


def _graph_jobs(layout, files, project='org/app'):
    pipeline = SimpleNamespace(name='check', post_review=False, allow_secrets=False)
    entries = [layout.pp('docs', _sc(project=project, trusted=False))]
    graph, errors = freeze_job_graph(layout, project, pipeline, 'master', files,
                                     job_list=entries)
    assert errors == []
    return list(graph.jobs)


def test_match_on_config_updates_runs_a_job_whose_config_the_change_edits():
    app = _sc(project='org/app', trusted=False, path='.zuul.yaml')
    layout = Layout().add('- job: {name: base, parent: null}').add('''
- job:
    name: docs
    files: ['^doc/.*']
    run: playbooks/docs.yaml
''', app)
    # Neither the job's file nor its playbook: the matcher decides.
    assert _graph_jobs(layout, ['src/main.c']) == []
    assert _graph_jobs(layout, ['doc/index.rst']) == ['docs']
    # The change edits the file defining the job, or its playbook.
    assert _graph_jobs(layout, ['.zuul.yaml']) == ['docs']
    assert _graph_jobs(layout, ['playbooks/docs.yaml']) == ['docs']
    # The same path in another project is not this job's configuration.
    assert _graph_jobs(layout, ['.zuul.yaml'], project='org/other') == []


def test_match_on_config_updates_false_keeps_the_file_matchers():
    app = _sc(project='org/app', trusted=False, path='.zuul.yaml')
    layout = Layout().add('- job: {name: base, parent: null}').add('''
- job:
    name: docs
    files: ['^doc/.*']
    match-on-config-updates: false
    include-vars: [vars/docs.yaml]
''', app)
    assert _graph_jobs(layout, ['.zuul.yaml']) == []
    assert _graph_jobs(layout, ['vars/docs.yaml']) == []


def test_match_on_config_updates_counts_include_vars_files():
    app = _sc(project='org/app', trusted=False, path='.zuul.yaml')
    layout = Layout().add('- job: {name: base, parent: null}').add('''
- job:
    name: docs
    irrelevant-files: ['^vars/.*']
    include-vars: [vars/docs.yaml]
''', app)
    assert _graph_jobs(layout, ['vars/other.yaml']) == []
    assert _graph_jobs(layout, ['vars/docs.yaml']) == ['docs']


def _secrets_by_playbook(frozen) -> dict:
    """{playbook path: {variable: secret name}} over every phase."""
    out = {}
    for phase in ('pre_run', 'run', 'post_run', 'cleanup_run'):
        for ref in frozen.playbooks(phase):
            out[ref.path] = {use.alias: use.name for use in ref.secrets}
    return out


PASS_TO_PARENT = '''
- job: {name: base, parent: null, pre-run: base-pre.yaml, post-run: base-post.yaml}
- job: {name: deploy, pre-run: deploy-pre.yaml, run: deploy.yaml,
        secrets: [{name: token, secret: deploy-token}]}
- job:
    name: site-deploy
    parent: deploy
    post-run: site-post.yaml
    secrets:
      - {name: creds, secret: site-creds, pass-to-parent: true}
      - {name: token, secret: site-token, pass-to-parent: true}
      - {name: mine, secret: site-only}
'''


def test_pass_to_parent_secret_joins_every_parent_playbook():
    frozen = freeze_job(Layout().add(PASS_TO_PARENT), 'site-deploy', 'master')
    assert _secrets_by_playbook(frozen) == {
        # Parent playbooks get the passed secrets, not the unpassed one;
        # deploy's own ``token`` is kept, the child's is not given there.
        'base-pre.yaml': {'creds': 'site-creds', 'token': 'site-token'},
        'base-post.yaml': {'creds': 'site-creds', 'token': 'site-token'},
        'deploy-pre.yaml': {'token': 'deploy-token', 'creds': 'site-creds'},
        'deploy.yaml': {'token': 'deploy-token', 'creds': 'site-creds'},
        # The child's own playbook has all of its secrets.
        'site-post.yaml': {'creds': 'site-creds', 'token': 'site-token',
                           'mine': 'site-only'},
    }
    assert frozen.post_review


def test_secret_without_pass_to_parent_stays_with_its_variant():
    layout = Layout().add('''
- job: {name: base, parent: null, pre-run: base-pre.yaml}
- job: {name: child, run: child.yaml, secrets: [{name: creds, secret: c}]}
- job: {name: grandchild, parent: child, post-run: gc-post.yaml}
''')
    assert _secrets_by_playbook(freeze_job(layout, 'grandchild', 'master')) == {
        'base-pre.yaml': {}, 'child.yaml': {'creds': 'c'}, 'gc-post.yaml': {}}


def test_pass_to_parent_reaches_parents_only():
    """Children of the passing job and earlier variants of the job itself
    do not get the secret; a variant's parents do, and the layout's own
    playbook references are left unchanged (another item freezes them
    afresh)."""
    layout = Layout().add('''
- job: {name: base, parent: null, pre-run: base-pre.yaml}
- job: {name: middle, pre-run: middle-pre.yaml}
- job: {name: middle, branches: master, post-run: middle-master-post.yaml,
        secrets: [{name: creds, secret: c, pass-to-parent: true}]}
- job: {name: leaf, parent: middle, run: leaf.yaml}
''')
    assert _secrets_by_playbook(freeze_job(layout, 'leaf', 'master')) == {
        'base-pre.yaml': {'creds': 'c'}, 'middle-pre.yaml': {},
        'middle-master-post.yaml': {'creds': 'c'}, 'leaf.yaml': {}}
    assert _secrets_by_playbook(freeze_job(layout, 'leaf', 'stable')) == {
        'base-pre.yaml': {}, 'middle-pre.yaml': {}, 'leaf.yaml': {}}
    assert layout.jobs['base'][0].get('pre_run')[0].secrets == ()


def test_pass_to_parent_from_a_project_pipeline_variant():
    layout = Layout().add('''
- job: {name: base, parent: null, pre-run: base-pre.yaml}
- job: {name: unit, run: unit.yaml}
''')
    pp = layout.pp({'unit': {'secrets': [{'name': 'creds', 'secret': 'c',
                                          'pass-to-parent': True}]}})
    frozen = freeze_job(layout, 'unit', 'master', project_variants=[pp])
    assert _secrets_by_playbook(frozen) == {'base-pre.yaml': {'creds': 'c'},
                                            'unit.yaml': {}}
    assert frozen.post_review


def test_nearer_pass_to_parent_secret_wins_a_shared_name():
    """Two generations pass a secret under the same variable name: the
    nearer job (applied first) gives it, the later one does not override."""
    layout = Layout().add('''
- job: {name: base, parent: null, run: base.yaml}
- job: {name: middle, secrets: [{name: creds, secret: middle-c, pass-to-parent: true}]}
- job: {name: leaf, parent: middle,
        secrets: [{name: creds, secret: leaf-c, pass-to-parent: true}]}
''')
    assert _secrets_by_playbook(freeze_job(layout, 'leaf', 'master')) == {
        'base.yaml': {'creds': 'middle-c'}}
