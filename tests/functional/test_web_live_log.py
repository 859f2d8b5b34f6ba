"""The live log end to end: a real executor runs a real playbook over SSH
on a netns node, and a websocket client follows its console through
zuul-web's /api/tenant/<t>/console-stream while the build runs."""

from __future__ import annotations

import json
import threading

import pytest

from tests.fakes.scheduler_rpc import RUNNING_UUID
from tests.functional.test_executor_support import (  # noqa: F401 - fixtures
    exec_env,
    exec_keypair,
    exec_nodes,
    execute_request,
    item,
    node_spec,
    playbook,
)
from zuul.executor.client import ExecutorClient
from zuul.executor.protocol import JobSpec
from zuul.executor.server import ExecutorServer
from zuul.web.websocket import ConnectionClosedError, connect

# The second task waits for a file the test creates once it has seen the
# first task's output, so the build is certainly running while streamed.
PLAYBOOK = ('- hosts: all\n  gather_facts: false\n  tasks:\n'
            '    - name: say hello\n      command: echo hello-websocket\n'
            '    - name: wait for the test\n'
            '      wait_for: {path: "{{ gate }}", timeout: 300}\n'
            '    - name: say goodbye\n      command: echo goodbye-websocket\n')


@pytest.fixture
def executor(exec_env, gearman_server):  # noqa: F811
    exec_env.upstream.create('org/project', {'playbooks/live.yaml': PLAYBOOK})
    server = ExecutorServer(exec_env.settings, '127.0.0.1', gearman_server.port,
                            exec_env.merger)
    server.start()
    client = ExecutorClient('127.0.0.1', gearman_server.port)
    yield client
    client.stop()
    server.stop()


def test_websocket_follows_a_real_build(executor, exec_env, zuul_web,  # noqa: F811
                                        fake_scheduler, tmp_path):
    gate = tmp_path / 'gate'
    node = exec_env.factory.make()
    job = JobSpec(name='live', run=[playbook('org/project', 'playbooks/live.yaml')],
                  vars={'gate': str(gate)})
    stream_known = threading.Event()

    def on_progress(handle, progress):
        if progress.url and not stream_known.is_set():
            fake_scheduler.set_stream_url(progress.url)  # as the scheduler's status does
            stream_known.set()

    handle = executor.execute(execute_request(RUNNING_UUID, job, [node_spec(node, 'node')],
                                              [item('org/project')]), on_progress=on_progress)
    assert stream_known.wait(300)
    ws = connect('127.0.0.1', zuul_web.port, '/api/tenant/tenant-one/console-stream')
    ws.send_text(json.dumps({'uuid': RUNNING_UUID, 'logfile': 'console.log'}))
    text = ''
    while 'hello-websocket' not in text or 'TASK [wait for the test]' not in text:
        text += ws.receive().text
    assert 'goodbye-websocket' not in text and handle.result is None  # still running
    gate.write_text('go\n')
    try:
        while True:
            text += ws.receive().text
    except ConnectionClosedError as closed:
        assert (closed.code, closed.reason) == (1000, 'No more data')
    ws.shutdown()
    assert handle.wait(300).result == 'SUCCESS'
    assert 'goodbye-websocket' in text and 'RUN END RESULT_NORMAL' in text
