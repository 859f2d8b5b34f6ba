"""``workspace-scheme``: where the executor checks projects out in
``work/src`` and the ``src_dir`` it tells the job (real git repos, real
ansible-playbook)."""

from __future__ import annotations

import os

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

READ_SOURCES = """
- hosts: localhost
  gather_facts: false
  tasks:
    - zuul_return:
        data:
          project_src_dir: "{{ zuul.project.src_dir }}"
          src_dirs: "{{ zuul.projects | dict2items | map(attribute='value.src_dir') | list }}"
          app: "{{ lookup('file', zuul.executor.work_root + '/' + zuul.project.src_dir + '/a.txt') }}"
          lib: "{{ lookup('file', zuul.executor.work_root + '/' + zuul.projects['review.example.org/libs/lib'].src_dir + '/lib.txt') }}"
"""  # noqa: E501

EXPECTED = {
    'golang': ('src/review.example.org/org/app', 'src/review.example.org/libs/lib'),
    'flat': ('src/app', 'src/lib'),
    'unique': ('src/review.example.org/org/org%2Fapp', 'src/review.example.org/libs/libs%2Flib'),
}


def _request(env, uuid: str, scheme: str, required: list[str]):
    job = JobSpec(name='j', run=[playbook('org/app', 'playbooks/read.yaml', trusted=True)],
                  workspace_scheme=scheme,
                  required_projects=[RequiredProject('gerrit', p) for p in required])
    ref = env.upstream.add_change('org/app', 1, {'a.txt': 'changed\n'})
    return execute_request(uuid, job, [], [item('org/app', 1, ref)])


@pytest.mark.parametrize('scheme', ['golang', 'flat', 'unique'])
def test_projects_are_checked_out_where_the_scheme_says(exec_env, scheme):  # noqa: F811
    env = exec_env
    env.upstream.create('org/app', {'playbooks/read.yaml': READ_SOURCES, 'a.txt': 'base\n'})
    env.upstream.create('libs/lib', {'lib.txt': 'lib\n'})
    result, build = run_build(env, _request(env, '7' * 32, scheme, ['libs/lib']))
    assert result.result == 'SUCCESS', explain(build)
    app_dir, lib_dir = EXPECTED[scheme]
    assert result.data['project_src_dir'] == app_dir
    assert sorted(result.data['src_dirs']) == sorted([app_dir, lib_dir])
    # The change under test is in the checkout where src_dir says.
    assert (result.data['app'], result.data['lib']) == ('changed', 'lib')
    for path in (app_dir, lib_dir):
        assert os.path.isdir(os.path.join(build.jobdir.work_root, path, '.git'))
    assert not os.path.exists(os.path.join(build.jobdir.root, 'src-staging'))


def test_flat_scheme_refuses_two_projects_in_one_place(exec_env):  # noqa: F811
    env = exec_env
    env.upstream.create('org/app', {'playbooks/read.yaml': READ_SOURCES, 'a.txt': 'base\n'})
    env.upstream.create('other/app', {'b.txt': 'b\n'})
    result, build = run_build(env, _request(env, '8' * 32, 'flat', ['other/app']))
    assert result.result == 'ERROR'
    assert 'org/app' in result.error_detail and 'other/app' in result.error_detail
    assert 'src/app' in result.error_detail
