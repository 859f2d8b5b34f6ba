"""Playbook semaphores (a playbook entry's ``semaphores``): held only while
that playbook runs, counted by the scheduler.

Real parts: a Gearman server, the scheduler (its layouts and semaphore
tables) answering RPC through its RPCListener, an ExecutorServer running
ansible-playbook over SSH to an sshd node in its own network namespace.
The scheduler's own executor client is the stand-in of
tests/unit/scheduler_support.py (its builds end when the test says)."""

from __future__ import annotations

import os
import shutil
import tempfile

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
from tests.unit.scheduler_support import enqueue_ref, start_system
from zuul.executor.client import ExecutorClient
from zuul.executor.jobdir import JobDir
from zuul.executor.protocol import JobSpec
from zuul.executor.server import ExecutorServer
from zuul.lib import rpc_protocol as p
from zuul.lib.rpc import RPCClient, RPCListener
from zuul.scheduler.rpc_handlers import handlers

MAIN = """
- tenant:
    name: tenant-one
    source:
      gerrit:
        config-projects: [org/config]
"""

CONFIG = """
- semaphore:
    name: db
    max: 1
- pipeline:
    name: post
    manager: independent
    trigger: {}
- job:
    name: base
    parent: null
- job:
    name: plain
- project:
    post:
      jobs: [plain]
"""

HEADER = '- hosts: all\n  gather_facts: false\n  tasks:\n'
PLAYBOOKS = {
    # Both builds' pre-run playbooks meet: each waits for the other's mark.
    'playbooks/pre.yaml': HEADER + (
        '    - shell: |\n'
        '        touch {{ d }}/pre-{{ zuul.build }}\n'
        '        timeout 240 sh -c \'until [ "$(ls {{ d }} | grep -c ^pre-)" -ge 2 ]; '
        'do sleep 0.2; done\'\n'),
    # While in here, any other build's run playbook in here too is written
    # down in ``overlaps``.
    'playbooks/run.yaml': HEADER + (
        '    - shell: |\n'
        '        touch {{ d }}/run-{{ zuul.build }}\n'
        '        for i in $(seq 1 25); do\n'
        '          if [ "$(ls {{ d }} | grep -c ^run-)" -gt 1 ]; then\n'
        '            echo {{ zuul.build }} >> {{ d }}/overlaps; fi\n'
        '          sleep 0.2\n'
        '        done\n'
        '        rm {{ d }}/run-{{ zuul.build }}\n'),
}


@pytest.fixture
def system(tmp_path, gearman_server):  # noqa: F811
    scheduler, held = start_system(tmp_path, MAIN, {'org/config': {'master': CONFIG}})
    listener = RPCListener('127.0.0.1', gearman_server.port,
                           handlers(scheduler, scheduler.layouts))
    listener.start()
    rpc = RPCClient('127.0.0.1', gearman_server.port, timeout=60)
    yield scheduler, held, rpc
    rpc.shutdown()
    listener.stop()
    scheduler.stop()


@pytest.fixture
def executor(exec_env, gearman_server, system):  # noqa: F811
    exec_env.upstream.create('org/project', PLAYBOOKS)
    exec_env.settings.keep_jobdir = True
    server = ExecutorServer(exec_env.settings, '127.0.0.1', gearman_server.port,
                            exec_env.merger)
    server.start()
    client = ExecutorClient('127.0.0.1', gearman_server.port)
    yield server, client
    client.stop()
    server.stop()


@pytest.fixture
def meeting_dir():
    path = tempfile.mkdtemp(prefix='zsem', dir='/tmp')
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _request(env, node, uuid, d, timeout=None):
    job = JobSpec(name='j', timeout=timeout, vars={'d': d},
                  pre_run=[playbook('org/project', 'playbooks/pre.yaml')],
                  run=[playbook('org/project', 'playbooks/run.yaml', semaphores=['db'])])
    return execute_request(uuid, job, [node_spec(node, 'controller')], [item('org/project')])


def _console(env, uuid) -> str:
    with open(JobDir(env.settings.job_dir, uuid).job_output_txt) as f:
        return f.read()


def _acquire(rpc, build, names=('db',), playbook_name='run 0'):
    return rpc.call(p.SEMAPHORE_ACQUIRE, p.RPCRequest(
        tenant='tenant-one', build=build, playbook=playbook_name, semaphores=list(names)))


def test_run_playbooks_with_a_max_1_semaphore_never_overlap(
        executor, system, exec_env, meeting_dir):  # noqa: F811
    scheduler, _, _ = system
    _, client = executor
    node = exec_env.factory.make()
    uuids = ['a' * 32, 'b' * 32]
    handles = [client.execute(_request(exec_env, node, u, meeting_dir)) for u in uuids]
    results = [h.wait(600) for h in handles]
    consoles = {u: _console(exec_env, u) for u in uuids}
    assert [r.result for r in results] == ['SUCCESS', 'SUCCESS'], consoles
    # The pre-run playbooks ran at the same time (each waited for the
    # other's mark); the run playbooks, one after the other.
    assert sorted(os.listdir(meeting_dir)) == [f'pre-{u}' for u in uuids]
    waited = [u for u in uuids if 'Waiting for semaphore db' in consoles[u]]
    assert len(waited) == 1, consoles
    # Released after each playbook: nothing is held once both ended.
    assert scheduler.semaphore_handler('tenant-one').holders == {}


def test_a_playbook_waits_within_the_job_timeout(
        executor, system, exec_env, meeting_dir):  # noqa: F811
    _, _, rpc = system
    _, client = executor
    assert _acquire(rpc, 'c' * 32) == {'acquired': True, 'waiting_for': []}
    node = exec_env.factory.make()
    open(os.path.join(meeting_dir, 'pre-other'), 'w').close()
    uuid = 'd' * 32
    result = client.execute(_request(exec_env, node, uuid, meeting_dir, timeout=20)).wait(600)
    console = _console(exec_env, uuid)
    assert result.result == 'TIMED_OUT', console
    assert 'Waiting for semaphore db' in console
    assert f'run-{uuid}' not in os.listdir(meeting_dir)     # the run playbook never ran


def test_holders_of_a_build_are_released_when_it_completes(system):
    scheduler, held, rpc = system
    enqueue_ref(scheduler, 'tenant-one', 'post', 'org/config')
    [request] = held.requests
    assert _acquire(rpc, request.uuid) == {'acquired': True, 'waiting_for': []}
    # Asking again for the same playbook is no second hold.
    assert _acquire(rpc, request.uuid)['acquired']
    assert _acquire(rpc, 'e' * 32) == {'acquired': False, 'waiting_for': ['db']}
    held.finish(request)
    assert scheduler.wait_until_settled(60)
    assert _acquire(rpc, 'e' * 32)['acquired']
    release = p.RPCRequest(tenant='tenant-one', build='e' * 32, playbook='run 0')
    assert rpc.call(p.SEMAPHORE_RELEASE, release) == {'released': True}
    assert rpc.call(p.SEMAPHORE_RELEASE, release) == {'released': False}


def test_semaphore_requests_name_their_errors(system):
    _, _, rpc = system
    with pytest.raises(p.RPCError, match='Unknown tenant "nope"'):
        rpc.call(p.SEMAPHORE_ACQUIRE, p.RPCRequest(tenant='nope', build='f' * 32,
                                                   playbook='run 0', semaphores=['db']))
    with pytest.raises(p.RPCError, match='a tenant, a build and a playbook are required'):
        rpc.call(p.SEMAPHORE_ACQUIRE, p.RPCRequest(tenant='tenant-one', semaphores=['db']))
    with pytest.raises(p.RPCError, match='no semaphores to acquire'):
        _acquire(rpc, 'f' * 32, names=())
