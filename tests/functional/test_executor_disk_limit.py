"""``[executor] disk_limit_per_job``: real builds (ansible-playbook over SSH,
untrusted playbooks in bubblewrap) whose playbooks fetch a big file from
the node into the job's work dir on the executor."""

from __future__ import annotations

import dataclasses
import os

from tests.functional.test_executor_builds import explain, run_build
from tests.functional.test_executor_support import (  # noqa: F401 - fixtures
    exec_env,
    exec_keypair,
    exec_nodes,
    execute_request,
    item,
    node_spec,
    playbook,
)
from zuul.executor.protocol import JobSpec

FETCH_BIG = """
- hosts: controller
  gather_facts: false
  tasks:
    - name: a 6 MB file on the node
      shell: head -c 6291456 /dev/urandom > /tmp/{{ zuul.build }}-big
    - name: into the work dir on the executor
      fetch:
        src: /tmp/{{ zuul.build }}-big
        dest: "{{ zuul.executor.work_root }}/big"
        flat: true
    - file:
        path: /tmp/{{ zuul.build }}-big
        state: absent
"""
MARK_TASKS = """
    - command: sleep {{ pause | default(0) }}
    - copy: content=done dest={{ marker_dir }}/{{ marker }}
"""
MARK = "- hosts: controller\n  gather_facts: false\n  tasks:" + MARK_TASKS
CLEANUP = ('- hosts: controller\n  gather_facts: false\n  tasks:\n'
           '    - copy: content=done dest={{ marker_dir }}/cleanup\n')


def _job(env, phases: dict, **job_vars) -> tuple:
    env.upstream.create('org/project', {
        'playbooks/fetch-big.yaml': FETCH_BIG,
        'playbooks/fetch-big-then-wait.yaml': FETCH_BIG + MARK_TASKS,
        'playbooks/mark.yaml': MARK, 'playbooks/cleanup.yaml': CLEANUP})
    marker_dir = os.path.join(env.root, 'markers')
    os.makedirs(marker_dir)
    job = JobSpec(name='disk', vars={'marker_dir': marker_dir, **job_vars},
                  **{phase: [playbook('org/project', f'playbooks/{name}.yaml')]
                     for phase, name in phases.items()},
                  cleanup_run=[playbook('org/project', 'playbooks/cleanup.yaml')])
    request = execute_request('4' * 32, job, [node_spec(env.factory.make(), 'controller')],
                              [item('org/project')])
    return request, marker_dir


def test_build_past_the_limit_is_stopped_before_its_next_playbook(exec_env):  # noqa: F811
    env = exec_env
    env.settings = dataclasses.replace(env.settings, disk_limit_per_job=3,
                                       disk_check_interval=3600)
    request, marker_dir = _job(env, {'pre_run': 'fetch-big', 'run': 'mark'},
                               marker='run')
    result, build = run_build(env, request)
    assert result.result == 'ABORTED', explain(build)
    assert 'more than its limit of 3 MB ([executor] disk_limit_per_job)' in result.error_detail
    # The run playbook never started; cleanup playbooks still run (as for
    # any stopped build).
    assert os.listdir(marker_dir) == ['cleanup'], explain(build)
    with open(build.jobdir.job_output_txt) as f:
        assert 'disk_limit_per_job' in f.read()


def test_build_past_the_limit_is_stopped_while_its_playbook_runs(exec_env):  # noqa: F811
    env = exec_env
    env.settings = dataclasses.replace(env.settings, disk_limit_per_job=3,
                                       disk_check_interval=0.2)
    request, marker_dir = _job(env, {'run': 'fetch-big-then-wait'}, marker='waited',
                               pause=120)
    result, build = run_build(env, request)
    assert result.result == 'ABORTED', explain(build)
    assert 'disk_limit_per_job' in result.error_detail
    # Stopped during its sleep: the task after it never ran.
    assert os.listdir(marker_dir) == ['cleanup'], explain(build)


def test_build_within_the_limit_runs(exec_env):  # noqa: F811
    env = exec_env
    env.settings = dataclasses.replace(env.settings, disk_limit_per_job=50,
                                       disk_check_interval=0.2)
    request, marker_dir = _job(env, {'pre_run': 'fetch-big', 'run': 'mark'}, marker='run')
    result, build = run_build(env, request)
    assert result.result == 'SUCCESS', explain(build)
    assert result.error_detail is None
    assert sorted(os.listdir(marker_dir)) == ['cleanup', 'run']
