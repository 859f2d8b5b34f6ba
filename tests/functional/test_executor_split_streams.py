"""Job ``ansible-split-streams``: real builds (ansible-playbook over SSH to
an sshd node, untrusted playbooks in bubblewrap) whose command and shell
tasks write to both streams.  By default the streams are merged, in the
order they were written (stderr empty); with the key they stay apart."""

from __future__ import annotations

import pytest

from tests.functional.test_executor_builds import explain, run_build, task_results
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

BOTH_STREAMS = """
- hosts: all
  gather_facts: false
  tasks:
    - name: shell
      shell: "echo out-1; echo err-1 >&2; echo out-2"
      register: sh
    - name: command
      command: sh -c 'echo out-a; echo err-a >&2; echo out-b'
      register: cmd
    - name: argv fqcn
      ansible.builtin.command:
        argv: [sh, -c, 'echo "a  b"; echo "c;d" >&2']
      register: argv
    - name: failing shell
      shell: "echo before; echo broken >&2; exit 3"
      register: failing
      ignore_errors: true
    - zuul_return:
        data:
          sh: {stdout: "{{ sh.stdout }}", stderr: "{{ sh.stderr }}", cmd: "{{ sh.cmd }}"}
          cmd: {stdout: "{{ cmd.stdout }}", stderr: "{{ cmd.stderr }}", cmd: "{{ cmd.cmd }}"}
          argv: {stdout_lines: "{{ argv.stdout_lines }}", stderr: "{{ argv.stderr }}"}
          failing: {stdout: "{{ failing.stdout }}", stderr: "{{ failing.stderr }}",
                    rc: "{{ failing.rc }}"}
"""


def _build(env, split: bool, trusted: bool):
    project = 'org/config' if trusted else 'org/project'
    env.upstream.create(project, {'playbooks/streams.yaml': BOTH_STREAMS})
    if trusted:
        env.upstream.create('org/project', {'README': 'x\n'})
    job = JobSpec(name='streams', ansible_split_streams=split,
                  run=[playbook(project, 'playbooks/streams.yaml', trusted=trusted)])
    node = env.factory.make()
    request = execute_request('7' * 32, job, [node_spec(node, 'controller')],
                              [item('org/project')])
    result, build = run_build(env, request)
    assert result.result == 'SUCCESS', explain(build)
    with open(build.jobdir.job_output_txt) as f:
        console = [line.split(' | ')[-1] for line in f.read().splitlines()]
    return result.data, console, build


def _console_lines(console: list[str], *names: str) -> list[str]:
    return [line for line in console if line in names]


@pytest.mark.parametrize('trusted', [False, True], ids=['sandboxed', 'trusted'])
def test_streams_merged_by_default(exec_env, trusted):  # noqa: F811
    data, console, build = _build(exec_env, split=False, trusted=trusted)
    assert data['sh'] == {'stdout': 'out-1\nerr-1\nout-2', 'stderr': '',
                          'cmd': 'echo out-1; echo err-1 >&2; echo out-2'}
    assert data['cmd']['stdout'] == 'out-a\nerr-a\nout-b' and data['cmd']['stderr'] == ''
    # The result names the command the task gave, not the merging wrapper.
    assert data['cmd']['cmd'] == ['sh', '-c', 'echo out-a; echo err-a >&2; echo out-b']
    # argv words are not re-parsed by a shell on the way.
    assert data['argv'] == {'stdout_lines': ['a  b', 'c;d'], 'stderr': ''}
    assert data['failing'] == {'stdout': 'before\nbroken', 'stderr': '', 'rc': 3}
    # The console shows the lines in the order the command wrote them.
    assert _console_lines(console, 'out-1', 'err-1', 'out-2') == ['out-1', 'err-1', 'out-2']
    tasks = task_results(build)
    assert tasks['failing shell']['controller']['rc'] == 3


@pytest.mark.parametrize('trusted', [False, True], ids=['sandboxed', 'trusted'])
def test_streams_apart_with_ansible_split_streams(exec_env, trusted):  # noqa: F811
    data, console, _ = _build(exec_env, split=True, trusted=trusted)
    assert data['sh'] == {'stdout': 'out-1\nout-2', 'stderr': 'err-1',
                          'cmd': 'echo out-1; echo err-1 >&2; echo out-2'}
    assert (data['cmd']['stdout'], data['cmd']['stderr']) == ('out-a\nout-b', 'err-a')
    assert data['argv'] == {'stdout_lines': ['a  b'], 'stderr': 'c;d'}
    assert data['failing'] == {'stdout': 'before', 'stderr': 'broken', 'rc': 3}
    # Apart: the console shows stdout, then stderr.
    assert _console_lines(console, 'out-1', 'err-1', 'out-2') == ['out-1', 'out-2', 'err-1']
