"""``include-vars``: job variables from YAML files in the job's repos, at
their speculative state (or without the changes, ``use-ref: false``);
real git repos and real ansible-playbook."""

from __future__ import annotations

import configparser

import pytest

from tests.functional.test_executor_builds import explain, run_build
from tests.functional.test_executor_support import (  # noqa: F401 - fixtures
    exec_env,
    exec_keypair,
    exec_nodes,
    execute_request,
    item,
    playbook,
)
from zuul.executor.protocol import JobSpec, RequiredProject
from zuul.executor.settings import ExecutorSettings

REPORT = """
- hosts: localhost
  gather_facts: false
  tasks:
    - zuul_return:
        data:
          greeting: "{{ greeting }}"
          base_value: "{{ base_value }}"
          lib_var: "{{ lib_var }}"
          shared: "{{ shared }}"
          optional_missing: "{{ optional_missing | default('unset') }}"
"""


def _build(env, uuid: str, include_vars: list, files: dict | None = None,
           job_vars: dict | None = None):
    env.upstream.create('org/app', {
        'playbooks/report.yaml': REPORT,
        'vars/app.yaml': 'greeting: base\nshared: from-file\n',
        'vars/base.yaml': 'base_value: old\n', **(files or {})})
    env.upstream.create('libs/lib', {'lib-vars.yaml': 'lib_var: from-lib\n'})
    ref = env.upstream.add_change('org/app', 1, {'vars/app.yaml': 'greeting: changed\n'
                                                 'shared: from-file\n',
                                                 'vars/base.yaml': 'base_value: new\n'})
    job = JobSpec(name='j', run=[playbook('org/app', 'playbooks/report.yaml', trusted=True)],
                  include_vars=include_vars, vars=job_vars or {},
                  required_projects=[RequiredProject('gerrit', 'libs/lib')])
    return run_build(env, execute_request(uuid, job, [], [item('org/app', 1, ref)]))


def test_included_files_give_variables(exec_env):  # noqa: F811
    result, build = _build(exec_env, '1' * 32, [
        {'name': 'vars/app.yaml'},
        {'name': 'lib-vars.yaml', 'project': 'review.example.org/libs/lib'},
        {'name': 'vars/base.yaml', 'use-ref': False},
        {'name': 'vars/missing.yaml', 'required': False},
    ], job_vars={'shared': 'from-job'})
    assert result.result == 'SUCCESS', explain(build)
    assert result.data == {
        'greeting': 'changed',          # the change under test's version
        'base_value': 'old',            # use-ref: false -- the branch without it
        'lib_var': 'from-lib',          # another of the job's projects
        'shared': 'from-job',           # the job's own vars win
        'optional_missing': 'unset'}


@pytest.mark.parametrize('entry,files,words', [
    ({'name': 'vars/nope.yaml'}, {}, ['required file vars/nope.yaml', 'org/app']),
    ({'name': 'x.yaml', 'project': 'org/elsewhere'}, {}, ['org/elsewhere',
                                                          'required-projects']),
    ({'name': 'vars/bad.yaml'}, {'vars/bad.yaml': 'ansible_host: 127.0.0.1\n'},
     ['vars/bad.yaml', 'ansible_host']),
    ({'name': 'vars/list.yaml'}, {'vars/list.yaml': '- a\n- b\n'}, ['mapping']),
])
def test_unusable_include_vars_end_the_build_with_an_error(exec_env, entry, files,  # noqa: F811
                                                           words):
    result, build = _build(exec_env, '2' * 32, [entry], files=files)
    assert result.result == 'ERROR', explain(build)
    for word in words:
        assert word in result.error_detail


SITE_REPORT = """
- hosts: localhost
  gather_facts: false
  tasks:
    - zuul_return:
        data:
          site_only: "{{ site_only }}"
          contested: "{{ contested }}"
"""


def test_site_variables_reach_every_job_and_win(exec_env, tmp_path):  # noqa: F811
    site = tmp_path / 'site-vars.yaml'
    site.write_text('site_only: from-site\ncontested: from-site\n')
    config = configparser.ConfigParser()
    config.read_dict({'executor': {'variables': str(site)}})
    exec_env.settings.site_variables = ExecutorSettings.from_config(config).site_variables
    exec_env.upstream.create('org/app', {'playbooks/site.yaml': SITE_REPORT})
    job = JobSpec(name='j', run=[playbook('org/app', 'playbooks/site.yaml', trusted=True)],
                  vars={'contested': 'from-vars'}, extra_vars={'contested': 'from-extra'})
    result, build = run_build(exec_env, execute_request('3' * 32, job, [], [item('org/app')]))
    assert result.result == 'SUCCESS', explain(build)
    assert result.data == {'site_only': 'from-site', 'contested': 'from-site'}
