"""Failure classes sent by the executor (zuul/executor/infrafailure.py):
real ansible-playbook over SSH to sshd nodes in network namespaces. A
pre-run failure, an unreachable node and a console matching the tenant's
``infra-failure-patterns`` come back RETRY (RETRY_LIMIT at the last
attempt) with their class; a failing test is FAILURE, class ``test``, and
so is a playbook ansible cannot load (it exits 4 as for an unreachable
host)."""

from __future__ import annotations

import dataclasses

import pytest

from tests.functional.test_executor_builds import PLAYS_HEADER, explain, run_build
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

PLAYBOOKS = {
    'ok.yaml': PLAYS_HEADER + '    - command: "true"\n',
    'fail.yaml': PLAYS_HEADER + '    - command: "false"\n',
    'mirror.yaml': PLAYS_HEADER + (
        "    - shell: 'echo Failed to fetch http://mirror/ubuntu  503 Unavailable; exit 1'\n"),
    # ansible-playbook exits 4 for this too, as for an unreachable host.
    'broken.yaml': PLAYS_HEADER + '    - shell: echo "a: b"; exit 1\n',
}
MIRROR = r'Failed to fetch http://mirror/.* 503'


def _request(env, phases: dict, attempt: int = 1, patterns=(), unreachable=False):
    node = env.factory.make()
    spec = node_spec(node, 'controller')
    if unreachable:
        spec = dataclasses.replace(spec, connection_port=2)    # nothing listens
    job = JobSpec(name='j', attempts=2,
                  **{phase: [playbook('org/project', f'playbooks/{name}')]
                     for phase, name in phases.items()})
    request = execute_request('c' * 32, job, [spec], [item('org/project')], attempt=attempt)
    request.infra_failure_patterns = list(patterns)
    return request


@pytest.mark.parametrize('phases,attempt,patterns,unreachable,result,klass', [
    ({'run': 'ok'}, 1, (), False, 'SUCCESS', None),
    ({'run': 'fail'}, 1, (), False, 'FAILURE', 'test'),
    ({'pre_run': 'fail', 'run': 'ok'}, 1, (), False, 'RETRY', 'infra:pre-run'),
    ({'pre_run': 'fail', 'run': 'ok'}, 2, (), False, 'RETRY_LIMIT', 'infra:pre-run'),
    ({'run': 'ok'}, 1, (), True, 'RETRY', 'infra:unreachable'),
    ({'run': 'mirror'}, 1, ('never seen', MIRROR), False, 'RETRY', 'infra:pattern:' + MIRROR),
    ({'run': 'mirror'}, 2, (MIRROR,), False, 'RETRY_LIMIT', 'infra:pattern:' + MIRROR),
    ({'run': 'mirror'}, 1, ('never seen',), False, 'FAILURE', 'test'),
    ({'run': 'ok', 'post_run': 'mirror'}, 1, (MIRROR,), False, 'RETRY',
     'infra:pattern:' + MIRROR),
    ({'run': 'broken'}, 1, (), False, 'FAILURE', 'test'),
])
def test_result_and_failure_class(exec_env, phases, attempt, patterns, unreachable,  # noqa: F811
                                  result, klass):
    env = exec_env
    env.upstream.create('org/project', {f'playbooks/{k}': v for k, v in PLAYBOOKS.items()})
    request = _request(env, phases, attempt, patterns, unreachable)
    outcome, build = run_build(env, request)
    assert (outcome.result, outcome.failure_class) == (result, klass), explain(build)
