"""Command, shell and script output streamed line by line from the nodes:
real builds (ansible-playbook over SSH to sshd nodes in network
namespaces), a trusted pre-run that starts ``zuul_console`` as zuul-jobs'
``start-zuul-console`` role does, and run playbooks (untrusted, in
bubblewrap; or trusted) whose tasks print a line, then wait for the test
to let them go on.  Each line is in job-output.txt while its task still
runs, stamped with the time the node printed it, labelled with its host,
and kept with that time in job-output.json."""

from __future__ import annotations

import json
import os
import threading

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
from tests.harness.waiting import wait_for
from zuul.executor.protocol import JobSpec

START_CONSOLE = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Start zuul_console daemon.
      zuul_console:
"""

# Each host prints a line, waits for the test's go file (nodes share this
# machine's /tmp), prints another; then a quiet task and a script.
RUN = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Two lines with a pause
      shell: |
        echo "first from {{ inventory_hostname }}"
        echo "to stderr from {{ inventory_hostname }}" >&2
        while [ ! -e /tmp/{{ zuul.build }}-go ]; do sleep 0.1; done
        echo "second from {{ inventory_hostname }}"
    - name: A command
      command: echo "command from {{ inventory_hostname }}"
    - name: A script
      script: hello.sh
    - name: A loop
      command: "echo item {{ item }} from {{ inventory_hostname }}"
      loop: [a, b]
"""

HELLO = '#!/bin/sh\necho "script says hello"\n'


def _run_in_thread(env, request):
    out = {}

    def run():
        out['result'], out['build'] = run_build(env, request, created=lambda b: out.update(
            early=b))
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    wait_for(lambda: 'early' in out, what='the build object')
    return thread, out


def _console(build) -> list[str]:
    try:
        with open(build.jobdir.job_output_txt) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def _lines_with(build, text: str) -> list[str]:
    return [line for line in _console(build) if line.endswith(text)]


@pytest.mark.parametrize('trusted', [False, True], ids=['sandboxed', 'trusted'])
def test_lines_reach_the_log_while_the_task_runs(exec_env, trusted):  # noqa: F811
    env = exec_env
    run_project = 'org/config' if trusted else 'org/project'
    env.upstream.create('org/config', {'playbooks/pre.yaml': START_CONSOLE})
    files = {'playbooks/run.yaml': RUN, 'playbooks/files/hello.sh': HELLO}
    if trusted:
        env.upstream.create('org/project', {'README': 'x\n'})
        with open(os.path.join(env.upstream.path('org/config'), 'README'), 'w') as f:
            f.write('x\n')
        env.upstream.create('org/runner', files)
        run_project = 'org/runner'
    else:
        env.upstream.create('org/project', files)
    job = JobSpec(name='live', pre_run=[playbook('org/config', 'playbooks/pre.yaml',
                                                 trusted=True)],
                  run=[playbook(run_project, 'playbooks/run.yaml', trusted=trusted)])
    nodes = [env.factory.make(), env.factory.make()]
    uuid = ('a' if trusted else 'b') * 32
    request = execute_request(uuid, job, [node_spec(nodes[0], 'controller'),
                                          node_spec(nodes[1], 'compute')],
                              [item('org/project')])
    go = f'/tmp/{uuid}-go'
    thread, out = _run_in_thread(env, request)
    build = out['early']
    try:
        # Both hosts' first lines (and stderr, merged) arrive while the
        # task still waits for the go file: streamed, not written at its end.
        wait_for(lambda: _lines_with(build, '| controller | first from controller')
                 and _lines_with(build, '| compute | first from compute')
                 and _lines_with(build, '| compute | to stderr from compute'),
                 timeout=120, what=f'the first lines streamed:\n{explain(build)}')
        assert not _lines_with(build, 'second from controller')
        assert thread.is_alive()
    finally:
        with open(go, 'w'):
            pass
    thread.join(180)
    os.unlink(go)
    result = out['result']
    assert result.result == 'SUCCESS', explain(build)
    console = _console(build)
    # every line once, with the node's own time: the first line was
    # printed before the go file existed, the second after
    first = _lines_with(build, '| controller | first from controller')
    second = _lines_with(build, '| controller | second from controller')
    assert len(first) == 1 and len(second) == 1, '\n'.join(console)
    assert first[0][:26] < second[0][:26]
    assert console.index(first[0]) < console.index(second[0])
    for text in ('| controller | command from controller', '| compute | command from compute',
                 '| controller | script says hello', '| compute | item b from compute'):
        assert len(_lines_with(build, text)) == 1, '\n'.join(console)
    tasks = task_results(build)
    lines = tasks['Two lines with a pause']['controller']['console']
    assert [text for _, text in lines] == ['first from controller', 'to stderr from controller',
                                           'second from controller']
    assert lines[0][0] == first[0][:26] and lines[2][0] == second[0][:26]
    # the result itself is unchanged: merged streams, whole stdout
    assert tasks['Two lines with a pause']['compute']['stdout'].splitlines()[-1] == \
        'second from compute'
    # the node's console logs are removed once read
    assert not [n for n in os.listdir('/tmp') if n.startswith('console-') and
                n.endswith(('-controller.log', '-compute.log')) and
                _from_build(n, build)]


def _from_build(name: str, build) -> bool:
    with open(build.jobdir.job_output_json) as f:
        ids = {t['task']['id'] for p in json.load(f) for play in p['plays']
               for t in play['tasks']}
    return any(name.startswith(f'console-{i}-') for i in ids)


@pytest.mark.corpus
def test_zuul_jobs_start_zuul_console_role_makes_a_build_stream(exec_env):  # noqa: F811
    """The real zuul-jobs (2019) ``start-zuul-console`` role, unmodified, as
    a base job's pre-run: the run playbook's command output is streamed."""
    from tests.harness import corpus
    from zuul.executor.protocol import RoleSpec
    env = exec_env
    role = corpus.path('zuul-jobs-repo-2019', 'roles', 'start-zuul-console')
    files = {os.path.relpath(os.path.join(d, n), role.parent.parent): open(
        os.path.join(d, n)).read() for d, _, names in os.walk(role) for n in names}
    env.upstream.create('zuul/zuul-jobs', files)
    env.upstream.create('org/config', {'playbooks/pre.yaml': (
        '- hosts: all\n  roles:\n    - start-zuul-console\n')})
    env.upstream.create('org/project', {'playbooks/run.yaml': (
        '- hosts: all\n  gather_facts: false\n  tasks:\n'
        '    - shell: echo streamed-from-the-node\n')})
    job = JobSpec(name='zuul-jobs-console', pre_run=[playbook(
        'org/config', 'playbooks/pre.yaml', trusted=True,
        roles=[RoleSpec(connection='gerrit', project='zuul/zuul-jobs')])],
        run=[playbook('org/project', 'playbooks/run.yaml')])
    node = env.factory.make()
    result, build = run_build(env, execute_request('f' * 32, job, [node_spec(node, 'node')],
                                                   [item('org/project')]))
    assert result.result == 'SUCCESS', explain(build)
    tasks = task_results(build)
    assert tasks['start-zuul-console : Start zuul_console daemon.']['node']['status'] == \
        'changed'
    (shell,) = [hosts['node'] for name, hosts in tasks.items() if name == 'shell']
    assert [text for _, text in shell['console']] == ['streamed-from-the-node']
