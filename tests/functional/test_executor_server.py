"""The executor over Gearman: execute, live log, stop, graceful stop."""

from __future__ import annotations

import dataclasses
import http.client
import threading
import urllib.parse

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
from zuul.executor.client import ExecutorClient
from zuul.executor.protocol import JobSpec
from zuul.executor.server import ExecutorServer

PLAYBOOKS = {
    'playbooks/ok.yaml': '- hosts: all\n  gather_facts: false\n  tasks:\n'
                         '    - name: say hello\n      command: echo hello-stream\n',
    'playbooks/sleep.yaml': '- hosts: all\n  gather_facts: false\n  tasks:\n'
                            '    - command: sleep 600\n',
}


@pytest.fixture
def executor(exec_env, gearman_server):  # noqa: F811
    exec_env.upstream.create('org/project', PLAYBOOKS)
    server = ExecutorServer(exec_env.settings, '127.0.0.1', gearman_server.port,
                            exec_env.merger)
    server.start()
    client = ExecutorClient('127.0.0.1', gearman_server.port)
    yield server, client
    client.stop()
    server.stop()


def read_stream(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    conn.request('GET', parts.path)
    response = conn.getresponse()
    assert response.status == 200
    body = response.read().decode('utf8')  # http.client decodes the chunks
    conn.close()
    return body


def request_for(env, path, uuid):
    node = env.factory.make()
    job = JobSpec(name='j', run=[playbook('org/project', path)])
    return execute_request(uuid, job, [node_spec(node, 'controller')], [item('org/project')])


def test_execute_reports_log_url_and_result(executor, exec_env):  # noqa: F811
    server, client = executor
    streamed = {}

    def on_progress(handle, progress):
        if 'reader' not in streamed:
            # Follow the live log from the first WORK_DATA to the end.
            streamed['reader'] = threading.Thread(
                target=lambda: streamed.update(text=read_stream(progress.url)))
            streamed['reader'].start()

    handle = client.execute(request_for(exec_env, 'playbooks/ok.yaml', 'f' * 32),
                            on_progress=on_progress)
    result = handle.wait(300)
    assert result.result == 'SUCCESS'
    assert handle.worker_hostname == 'executor.example.org'
    assert handle.url.endswith('/' + 'f' * 32)
    assert [p.phase for p in handle.progress][:2] == [None, 'prepare']
    assert 'run' in [p.phase for p in handle.progress]
    # The stream ends when the build does.
    streamed['reader'].join(60)
    assert 'TASK [say hello]' in streamed['text']
    assert 'hello-stream' in streamed['text']
    assert 'RUN END RESULT_NORMAL' in streamed['text']


def test_stop_aborts_running_build(executor, exec_env):  # noqa: F811
    server, client = executor
    running = threading.Event()
    handle = client.execute(request_for(exec_env, 'playbooks/sleep.yaml', 'a' * 32),
                            on_progress=lambda h, p: p.phase == 'run' and running.set())
    assert running.wait(120)
    assert client.cancel(handle)
    result = handle.wait(120)
    assert result.result == 'ABORTED'


def test_graceful_stop_finishes_running_build(executor, exec_env):  # noqa: F811
    server, client = executor
    handle = client.execute(request_for(exec_env, 'playbooks/ok.yaml', '9' * 32))
    assert handle.wait_started(120)
    server.graceful_stop()
    assert not server.accepting_work
    assert handle.wait(120).result == 'SUCCESS'


def test_job_limit_unregisters_execute(executor, exec_env):  # noqa: F811
    server, client = executor
    server.governor.max_builds = 1
    running = threading.Event()
    handle = client.execute(request_for(exec_env, 'playbooks/sleep.yaml', '8' * 32),
                            on_progress=lambda h, p: p.phase == 'run' and running.set())
    assert running.wait(120)
    assert not server.accepting_work
    client.cancel(handle)
    assert handle.wait(120).result == 'ABORTED'


class GatedMerger:
    """The real merger, whose first ``prepare_workspace`` (checking out the
    build's repos) waits for ``gate``: a build held while it starts."""

    def __init__(self, merger):
        self._merger = merger
        self.entered = threading.Event()
        self.gate = threading.Event()

    def prepare_workspace(self, *args, **kwargs):
        if not self.entered.is_set():
            self.entered.set()
            assert self.gate.wait(120)
        return self._merger.prepare_workspace(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._merger, name)


def test_max_starting_builds_takes_no_build_while_that_many_start(exec_env, gearman_server):  # noqa: F811,E501
    exec_env.upstream.create('org/project', PLAYBOOKS)
    settings = dataclasses.replace(exec_env.settings, max_starting_builds=1)
    merger = GatedMerger(exec_env.merger)
    server = ExecutorServer(settings, '127.0.0.1', gearman_server.port, merger)
    server.start()
    client = ExecutorClient('127.0.0.1', gearman_server.port)
    events = []
    try:
        first = client.execute(request_for(exec_env, 'playbooks/ok.yaml', '1' * 32),
                               on_progress=lambda h, p: events.append(('first', p.phase)))
        assert merger.entered.wait(120)
        # One build starting (preparing its repos) is the limit.
        assert not server.accepting_work
        assert 'max_starting_builds 1' in server.governor.reason
        second = client.execute(request_for(exec_env, 'playbooks/ok.yaml', '2' * 32),
                                on_progress=lambda h, p: events.append(('second', p.phase)))
        merger.gate.set()
        assert first.wait(300).result == 'SUCCESS'
        assert second.wait(300).result == 'SUCCESS'
        # The second build was taken only once the first reached its playbook.
        assert events.index(('second', None)) > events.index(('first', 'run')), events
        assert server.accepting_work and not server.starting
    finally:
        client.stop()
        server.stop()


def test_executor_also_serves_merger_functions(exec_env, gearman_server):  # noqa: F811
    from zuul.merger.client import MergeClient
    exec_env.upstream.create('org/config', {'zuul.yaml': '- job:\n    name: x\n'})
    server = ExecutorServer(exec_env.settings, '127.0.0.1', gearman_server.port,
                            exec_env.merger, serve_merger=True)
    server.start()
    client = MergeClient('127.0.0.1', gearman_server.port)
    try:
        results = []
        handle = client.get_files('gerrit', 'org/config', 'master', ['zuul.yaml', 'zuul.d/'],
                                  results.append)
        handle.wait(60)
        (result,) = results
        assert result.error is None
        assert result.files == {'zuul.yaml': '- job:\n    name: x\n'}
    finally:
        client.stop()
        server.stop()


def test_executor_refuses_a_job_dir_too_long_for_ssh_sockets(exec_env, gearman_server):  # noqa: F811
    import dataclasses
    settings = dataclasses.replace(exec_env.settings, job_dir='/tmp/' + 'x' * 60)
    server = ExecutorServer(settings, '127.0.0.1', gearman_server.port, exec_env.merger)
    with pytest.raises(ValueError, match='too long for SSH control sockets'):
        server.start()
