"""A finished build keeps its logs: real builds over Gearman copy work/logs
to [executor] log_root, the result's log URL points there, zuul-web serves
it after the job dir is gone, and a zuul_return log_url still wins."""

from __future__ import annotations

import dataclasses
import os
import urllib.error
import urllib.request

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
from zuul.scheduler.builds import ExecutorAdapter
from zuul.web.server import ZuulWeb

RUN = """
- hosts: all
  gather_facts: false
  tasks:
    - name: say hello
      command: echo hello-kept
"""

RETURN_LOG_URL = RUN + """
    - zuul_return:
        data:
          zuul:
            log_url: https://logs.example.org/elsewhere/
"""

# A trusted post-run playbook collects into work/logs, and plants what an
# untrusted one could: a symlink to a file outside and a FIFO.
COLLECT = """
- hosts: all
  gather_facts: false
  tasks:
    - name: collect
      delegate_to: localhost
      shell: |
        mkdir -p {{ zuul.executor.log_root }}/controller
        echo collected > {{ zuul.executor.log_root }}/controller/node.log
        ln -s {{ canary }} {{ zuul.executor.log_root }}/stolen.txt
        mkfifo {{ zuul.executor.log_root }}/pipe
"""


@pytest.fixture
def logs_env(exec_env, gearman_server):  # noqa: F811
    env = exec_env
    env.upstream.create('org/config', {'playbooks/collect.yaml': COLLECT})
    env.upstream.create('org/project', {'playbooks/run.yaml': RUN,
                                        'playbooks/return.yaml': RETURN_LOG_URL})
    log_root = os.path.join(env.root, 'kept-logs')
    web = ZuulWeb('127.0.0.1', 0, None, log_root=log_root)
    web.start()
    base = f'http://127.0.0.1:{web.port}'
    settings = dataclasses.replace(env.settings, log_root=log_root,
                                   log_url=base + '/logs/{build}/')
    server = ExecutorServer(settings, '127.0.0.1', gearman_server.port, env.merger)
    server.start()
    client = ExecutorClient('127.0.0.1', gearman_server.port)
    canary = os.path.join(env.root, 'canary')
    with open(canary, 'w') as f:
        f.write('SECRET\n')
    yield env, client, log_root, base, canary
    client.stop()
    server.stop()
    web.stop()


def _run(env, client, uuid, path, canary):
    job = JobSpec(name='j', vars={'canary': canary},
                  run=[playbook('org/project', path)],
                  post_run=[playbook('org/config', 'playbooks/collect.yaml', trusted=True)])
    request = execute_request(uuid, job, [node_spec(env.factory.make(), 'controller')],
                              [item('org/project')])
    handle = client.execute(request)
    return handle, handle.wait(300)


def _get(url):
    try:
        response = urllib.request.urlopen(url)
        return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_finished_build_keeps_its_logs_and_links_to_them(logs_env):
    env, client, log_root, base, canary = logs_env
    uuid = '1' * 32
    handle, result = _run(env, client, uuid, 'playbooks/run.yaml', canary)
    assert result.result == 'SUCCESS', result
    kept = os.path.join(log_root, uuid)
    assert result.log_url == f'{base}/logs/{uuid}/'
    assert not os.path.exists(os.path.join(env.settings.job_dir, uuid))  # job dir gone
    assert sorted(os.listdir(kept)) == ['controller', 'job-output.json', 'job-output.txt']
    with open(os.path.join(kept, 'controller', 'node.log')) as f:
        assert f.read() == 'collected\n'
    # The link the report carries answers, long after the live stream ended.
    status, body = _get(result.log_url + 'job-output.txt')
    assert status == 200 and b'hello-kept' in body and b'POST-RUN END' in body
    status, body = _get(result.log_url)
    assert status == 200 and b'job-output.txt' in body and b'stolen' not in body
    assert _get(handle.url)[0] == 404  # the live stream forgot the build
    # The scheduler reports the kept copy rather than the live stream.
    events = []
    adapter = ExecutorAdapter(None, _Events(events), {}, None)
    adapter._complete(_Build(uuid))(handle, result)
    assert events[0]['log_url'] == result.log_url


def test_zuul_return_log_url_wins(logs_env):
    env, client, log_root, base, canary = logs_env
    uuid = '2' * 32
    handle, result = _run(env, client, uuid, 'playbooks/return.yaml', canary)
    assert result.result == 'SUCCESS', result
    assert os.path.isdir(os.path.join(log_root, uuid))  # still kept
    assert result.returned_log_url == 'https://logs.example.org/elsewhere/'
    events = []
    ExecutorAdapter(None, _Events(events), {}, None)._complete(_Build(uuid))(handle, result)
    assert events[0]['log_url'] == 'https://logs.example.org/elsewhere/'


@dataclasses.dataclass
class _Build:
    uuid: str


class _Events:
    def __init__(self, events):
        self.events = events

    def add_result_event(self, kind, **args):
        self.events.append(args)
