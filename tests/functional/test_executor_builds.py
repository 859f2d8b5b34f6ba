"""Builds run by the executor: real ansible-playbook over SSH to sshd nodes
in their own network namespaces, real git repos."""

from __future__ import annotations

import json
import os

import pytest

from tests.functional.test_executor_support import (  # noqa: F401 - fixtures
    exec_env,
    exec_keypair,
    exec_nodes,
    execute_request,
    item,
    node_spec,
    playbook,
)
from zuul.executor.build import BuildExecution
from zuul.executor.protocol import GroupSpec, JobSpec
from zuul.executor.server import default_sandbox

PLAYS_HEADER = '- hosts: all\n  gather_facts: false\n  tasks:\n'


def run_build(env, request, created=None, **kw):
    """Run ``request``; ``kw`` goes to BuildExecution (``progress``,
    ``on_pre_fail``); ``created(build)`` is called before it runs."""
    # The job dir stays for inspection; exec_env removes the whole root.
    # The build starts its own ssh-agent, as it does in the executor.
    env.settings.keep_jobdir = True
    build = BuildExecution(request, env.settings, env.merger,
                           sandbox=default_sandbox(env.settings), **kw)
    if created is not None:
        created(build)
    return build.run(), build


def explain(build) -> str:
    """The build's logs, for assertion messages."""
    text = []
    for root, _, files in os.walk(build.jobdir.root):
        for name in files:
            if name in ('job-output.txt', 'ansible.log'):
                with open(os.path.join(root, name)) as f:
                    text.append(f'== {name}\n{f.read()}')
    return '\n'.join(text)


def task_results(build) -> dict:
    """{task name: {host: result}} from job-output.json."""
    with open(build.jobdir.job_output_json) as f:
        entries = json.load(f)
    tasks = {}
    for entry in entries:
        for play in entry['plays']:
            for task in play['tasks']:
                tasks[task['task']['name']] = task['hosts']
    return tasks


TWO_NODE_RUN = """
- hosts: controller
  gather_facts: false
  tasks:
    - name: read the prepared repo on the controller
      command: cat {{ zuul.executor.work_root }}/{{ zuul.project.src_dir }}/a.txt
      delegate_to: controller
      register: a_txt
      failed_when: false
    - zuul_return:
        data:
          controller:
            a: "{{ lookup('file', zuul.executor.work_root + '/' + zuul.project.src_dir + '/a.txt') }}"
            b: "{{ lookup('file', zuul.executor.work_root + '/' + zuul.project.src_dir + '/b.txt') }}"
            change: "{{ zuul.change }}"
            items: "{{ zuul['items'] | map(attribute='change') | list }}"
            canonical: "{{ zuul.project.canonical_name }}"
            src_dir: "{{ zuul.projects[zuul.project.canonical_name].src_dir }}"
            label: "{{ nodepool.label }}"
            executor: "{{ zuul.executor.hostname }}"
            job_var: "{{ job_var }}"
- hosts: compute
  gather_facts: false
  tasks:
    - name: run on compute
      command: hostname -I
      register: ip
    - zuul_return:
        data:
          compute:
            ip: "{{ ip.stdout }}"
            group_var: "{{ group_var }}"
"""  # noqa: E501


def test_two_node_job_sees_both_changes_merged_in_order(exec_env):  # noqa: F811
    env = exec_env
    env.upstream.create('org/project', {'playbooks/run.yaml': TWO_NODE_RUN,
                                        'a.txt': 'zero\n', 'b.txt': 'zero\n'})
    ref1 = env.upstream.add_change('org/project', 1, {'a.txt': 'one\n'})
    ref2 = env.upstream.add_change('org/project', 2, {'b.txt': 'two\n'})
    controller, compute = env.factory.make(), env.factory.make()
    job = JobSpec(name='multinode', run=[playbook('org/project', 'playbooks/run')],
                  vars={'job_var': 'jv'}, group_vars={'computes': {'group_var': 'gv'}},
                  groups=[GroupSpec('computes', ['compute'])])
    request = execute_request('b' * 32, job,
                              [node_spec(controller, 'controller'), node_spec(compute, 'compute')],
                              [item('org/project', 1, ref1), item('org/project', 2, ref2)])
    result, build = run_build(env, request)
    assert result.result == 'SUCCESS', explain(build)
    ctl = result.data['controller']
    assert (ctl['a'], ctl['b']) == ('one', 'two')
    assert ctl['change'] == '2' and ctl['items'] == ['1', '2']
    assert ctl['canonical'] == 'review.example.org/org/project'
    assert ctl['src_dir'] == 'src/review.example.org/org/project'
    assert (ctl['label'], ctl['executor'], ctl['job_var']) == (
        'debian', 'executor.example.org', 'jv')
    assert compute.address in result.data['compute']['ip']
    assert result.data['compute']['group_var'] == 'gv'


def test_merge_conflict_is_reported(exec_env):  # noqa: F811
    env = exec_env
    env.upstream.create('org/project', {'a.txt': 'zero\n'})
    ref1 = env.upstream.add_change('org/project', 1, {'a.txt': 'one\n'})
    ref2 = env.upstream.add_change('org/project', 2, {'a.txt': 'two\n'})
    request = execute_request('c' * 32, JobSpec(name='j'), [],
                              [item('org/project', 1, ref1), item('org/project', 2, ref2)])
    result, _ = run_build(env, request)
    assert result.result == 'MERGER_FAILURE'
    assert 'Change 2,1' in result.error_detail


RESULT_PLAYBOOKS = {
    'ok.yaml': PLAYS_HEADER + '    - command: "true"\n',
    'fail.yaml': PLAYS_HEADER + '    - command: "false"\n',
    'sleep.yaml': PLAYS_HEADER + '    - command: sleep 600\n',
}


@pytest.mark.parametrize('phases,attempt,timeout,expected', [
    ({'run': 'ok'}, 1, None, 'SUCCESS'),
    ({'run': 'fail'}, 1, None, 'FAILURE'),
    ({'run': 'ok', 'post_run': 'fail'}, 1, None, 'POST_FAILURE'),
    ({'pre_run': 'fail', 'run': 'ok'}, 1, None, 'RETRY'),
    ({'pre_run': 'fail', 'run': 'ok'}, 2, None, 'RETRY_LIMIT'),
    ({'run': 'sleep'}, 1, 6, 'TIMED_OUT'),
])
def test_playbook_outcome_gives_result(exec_env, phases, attempt, timeout, expected):  # noqa: F811
    env = exec_env
    env.upstream.create('org/project', {f'playbooks/{k}': v for k, v in RESULT_PLAYBOOKS.items()})
    node = env.factory.make()
    job = JobSpec(name='j', attempts=2, timeout=timeout,
                  **{phase: [playbook('org/project', f'playbooks/{name}')]
                     for phase, name in phases.items()})
    request = execute_request('d' * 32, job, [node_spec(node, 'controller')],
                              [item('org/project')], attempt=attempt)
    result, build = run_build(env, request)
    assert result.result == expected, explain(build)
    assert result.attempt == attempt


UNTRUSTED_LOCAL = """
- hosts: all
  gather_facts: false
  tasks:
    - name: delegate localhost
      shell: echo pwned > {{ canary }}
      delegate_to: localhost
      ignore_errors: true
    - name: delegate 127.0.0.1
      shell: echo pwned > {{ canary }}
      delegate_to: 127.0.0.1
      ignore_errors: true
    - name: delegate templated
      shell: echo pwned > {{ canary }}
      delegate_to: "{{ 'local' + 'host' }}"
      ignore_errors: true
    - name: local_action
      local_action: shell echo pwned > {{ canary }}
      ignore_errors: true
    - name: connection local
      shell: echo pwned > {{ canary }}
      connection: local
      ignore_errors: true
    - name: connection fqcn
      ansible.builtin.shell: echo pwned > {{ canary }}
      connection: ansible.builtin.local
      ignore_errors: true
    - name: ansible_connection var
      copy: content=pwned dest={{ canary }}
      vars:
        ansible_connection: local
      ignore_errors: true
    - name: add_host localhost
      add_host: name=localhost
      ignore_errors: true
    - name: add_host local connection
      add_host: name=sneaky ansible_connection=local
      ignore_errors: true
    - name: pipe lookup
      debug: msg="{{ lookup('pipe', 'echo pwned > ' + canary) }}"
      ignore_errors: true
- hosts: localhost
  gather_facts: false
  tasks:
    - name: on localhost
      shell: echo pwned > {{ canary }}
      ignore_errors: true
    - name: debug on localhost is fine
      debug: msg=fine
    - name: read executor key
      debug: msg="{{ lookup('file', private_key) }}"
      ignore_errors: true
"""

TRUSTED_LOCAL = """
- hosts: all
  gather_facts: false
  tasks:
    - name: trusted local
      copy: content=trusted dest={{ trusted_marker }}
      delegate_to: localhost
"""


def test_untrusted_local_execution_refused_trusted_allowed(exec_env):  # noqa: F811
    env = exec_env
    env.upstream.create('org/config', {'playbooks/local.yaml': TRUSTED_LOCAL})
    env.upstream.create('org/project', {'playbooks/local.yaml': UNTRUSTED_LOCAL})
    canary = os.path.join(env.root, 'canary')
    with open(canary, 'w') as f:
        f.write('original')
    # Trusted playbooks run sandboxed too: they write in the build's work dir.
    marker = os.path.join(env.settings.job_dir, 'e' * 32, 'work', 'trusted-marker')
    job = JobSpec(name='j', vars={'canary': canary, 'trusted_marker': marker,
                                  'private_key': env.settings.private_key_file},
                  pre_run=[playbook('org/config', 'playbooks/local.yaml', trusted=True)],
                  run=[playbook('org/project', 'playbooks/local.yaml')])
    node = env.factory.make()
    request = execute_request('e' * 32, job, [node_spec(node, 'controller')],
                              [item('org/project')])
    result, build = run_build(env, request)
    with open(canary) as f:
        assert f.read() == 'original'
    with open(marker) as f:
        assert f.read() == 'trusted'
    tasks = task_results(build)
    # The sandbox hides the executor's key from untrusted playbooks.
    assert tasks.pop('read executor key')['localhost']['status'] == 'FAILED (ignored)'
    refused = [name for name in tasks if name not in ('trusted local', 'debug on localhost is fine')]  # noqa: E501
    assert len(refused) == 11
    for name in refused:
        for host_result in tasks[name].values():
            assert 'prohibited' in json.dumps(host_result), (name, host_result)
    assert tasks['debug on localhost is fine']['localhost']['status'] == 'ok'
    assert result.result == 'SUCCESS', explain(build)


MARK = PLAYS_HEADER + '    - copy: content=done dest={{ marker_dir }}/{{ marker }}\n'


def test_abort_runs_only_the_cleanup_playbooks(exec_env):  # noqa: F811
    """A stopped build runs its post-run entries marked ``cleanup`` and its
    cleanup-run playbooks, not the other post-run ones; it is ABORTED."""
    env = exec_env
    env.upstream.create('org/project', {
        'playbooks/sleep.yaml': RESULT_PLAYBOOKS['sleep.yaml'],
        **{f'playbooks/mark-{m}.yaml': MARK.replace('{{ marker }}', m)
           for m in ('post', 'cleanup-post', 'cleanup-run')}})
    marker_dir = os.path.join(env.root, 'markers')
    os.makedirs(marker_dir)
    node = env.factory.make()
    job = JobSpec(name='j', run=[playbook('org/project', 'playbooks/sleep.yaml')],
                  post_run=[playbook('org/project', 'playbooks/mark-cleanup-post.yaml',
                                     cleanup=True),
                            playbook('org/project', 'playbooks/mark-post.yaml')],
                  cleanup_run=[playbook('org/project', 'playbooks/mark-cleanup-run.yaml')],
                  vars={'marker_dir': marker_dir})
    request = execute_request('5' * 32, job, [node_spec(node, 'controller')],
                              [item('org/project')])
    builds = []

    def stop_in_run(phase):
        if phase == 'run':
            builds[0].stop()
    result, build = run_build(env, request, progress=stop_in_run, created=builds.append)
    assert result.result == 'ABORTED', explain(build)
    assert sorted(os.listdir(marker_dir)) == ['cleanup-post', 'cleanup-run'], explain(build)


def test_cleanup_post_run_runs_like_the_others_when_not_aborted(exec_env):  # noqa: F811
    env = exec_env
    env.upstream.create('org/project', {
        'playbooks/ok.yaml': RESULT_PLAYBOOKS['ok.yaml'],
        **{f'playbooks/mark-{m}.yaml': MARK.replace('{{ marker }}', m)
           for m in ('post', 'cleanup-post')}})
    marker_dir = os.path.join(env.root, 'markers')
    os.makedirs(marker_dir)
    node = env.factory.make()
    job = JobSpec(name='j', run=[playbook('org/project', 'playbooks/ok.yaml')],
                  post_run=[playbook('org/project', 'playbooks/mark-cleanup-post.yaml',
                                     cleanup=True),
                            playbook('org/project', 'playbooks/mark-post.yaml')],
                  vars={'marker_dir': marker_dir})
    request = execute_request('6' * 32, job, [node_spec(node, 'controller')],
                              [item('org/project')])
    result, build = run_build(env, request)
    assert result.result == 'SUCCESS', explain(build)
    assert sorted(os.listdir(marker_dir)) == ['cleanup-post', 'post']
