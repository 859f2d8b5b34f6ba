"""A job's ``failure-output`` on the executor: real ansible-playbook over
SSH, the executor over Gearman.  A matching console line is announced
(WORK_DATA with ``pre_fail``) while the build still runs, and the build
ends FAILURE even though its playbook succeeds."""

from __future__ import annotations

import os
import threading

from tests.functional.test_executor_builds import explain, run_build
from tests.functional.test_executor_server import executor  # noqa: F401 - fixture
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

PRINT_THEN_WAIT = """
- hosts: all
  gather_facts: false
  tasks:
    - name: report a problem
      command: echo "ERROR-XYZ something broke"
    - name: report it again
      command: echo "ERROR-XYZ still broken"
    - name: keep running until the test lets the build end
      wait_for:
        path: "{{ release_file }}"
        timeout: 300
"""

QUIET = """
- hosts: all
  gather_facts: false
  tasks:
    - name: all is well
      command: echo "all fine here"
"""


def _request(env, uuid: str, path: str, failure_output: list[str], release: str = '',
             project: str = 'org/project'):
    node = env.factory.make()
    job = JobSpec(name='j', run=[playbook(project, path)],
                  failure_output=failure_output, vars={'release_file': release})
    return execute_request(uuid, job, [node_spec(node, 'controller')], [item(project)])


def test_matching_line_sends_pre_fail_before_the_build_ends(executor, exec_env):  # noqa: F811
    server, client = executor
    exec_env.upstream.create('org/fo', {'playbooks/print.yaml': PRINT_THEN_WAIT})
    release = os.path.join(exec_env.root, 'release')
    request = _request(exec_env, 'e' * 32, 'playbooks/print.yaml', [r'^ERROR-\w+'], release,
                       project='org/fo')
    pre_failed = threading.Event()
    handle = client.execute(request,
                            on_progress=lambda h, p: p.pre_fail and pre_failed.set())
    assert pre_failed.wait(240), 'no pre_fail progress'
    # Announced while the playbook still waits: the build has not ended.
    assert handle.result is None and not os.path.exists(release)
    with open(release, 'w'):
        pass
    result = handle.wait(240)
    # The playbook succeeded, yet the job failed: it announced so.
    assert result.result == 'FAILURE'
    assert [p.pre_fail for p in handle.progress].count(True) == 1


def test_build_without_a_match_succeeds_and_never_pre_fails(exec_env):  # noqa: F811
    exec_env.upstream.create('org/project', {'playbooks/quiet.yaml': QUIET})
    request = _request(exec_env, 'c' * 32, 'playbooks/quiet.yaml', ['ERROR', 'Traceback'])
    seen = []
    result, build = run_build(exec_env, request, on_pre_fail=seen.append)
    assert result.result == 'SUCCESS', explain(build)
    assert seen == []


def test_matching_run_playbook_that_succeeds_ends_failure(exec_env):  # noqa: F811
    exec_env.upstream.create('org/project', {'playbooks/quiet.yaml': QUIET})
    request = _request(exec_env, 'b' * 32, 'playbooks/quiet.yaml', ['fine here$'])
    seen = []
    result, build = run_build(exec_env, request, on_pre_fail=seen.append)
    assert result.result == 'FAILURE', explain(build)
    assert len(seen) == 1 and 'all fine here' in seen[0]
    with open(build.jobdir.job_output_txt) as f:
        assert 'Early failure in job: failure-output matched' in f.read()


def test_invalid_failure_output_regex_is_an_error(exec_env):  # noqa: F811
    exec_env.upstream.create('org/project', {'playbooks/quiet.yaml': QUIET})
    request = _request(exec_env, 'a' * 32, 'playbooks/quiet.yaml', ['ok', 'a(?=b)'])
    result, build = run_build(exec_env, request)
    assert result.result == 'ERROR'
    assert 'failure-output' in result.error_detail and 'a(?=b)' in result.error_detail

