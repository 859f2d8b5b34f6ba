"""Attacks that go through trusted playbooks, on the real executor.

An uploader controls a commit message, a topic, an untrusted project's job
variables and playbooks; a config project's trusted playbook (the base
job's post-run, say) then runs in the same build.  Each test performs the
attack for real (bubblewrap, ansible-playbook, sshd nodes in network
namespaces, git repos prepared by the merger) and asserts that what the
uploader wrote stays text, that nothing it chose decides how or where
Ansible executes on the executor, and that nothing outside the build's own
directories is read or written.  doc/source/security.rst is the model.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import threading
import uuid

import pytest

from tests.functional.test_executor_builds import explain, run_build, task_results
from tests.functional.test_executor_support import (  # noqa: F401 - fixtures
    HOSTNAME,
    exec_env,
    exec_keypair,
    exec_nodes,
    execute_request,
    git,
    item,
    node_spec,
    playbook,
)
from zuul.executor.protocol import ItemSpec, JobSpec

pytestmark = pytest.mark.skipif(shutil.which('bwrap') is None, reason='needs bubblewrap')

REFUSED = 'prohibited in untrusted playbooks'


def _uuid() -> str:
    return uuid.uuid4().hex


def _work_root(env, build_uuid: str) -> str:
    return os.path.join(env.settings.job_dir, build_uuid, 'work')


def _template(marker: str) -> str:
    """Jinja that proves it was rendered by creating ``marker``."""
    return "{{ lookup('pipe', 'touch " + marker + "') }}"


# -- 1. a commit message or topic is text, never a template ------------------
TRUSTED_RENDER = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: a log dump, as base jobs do
      debug:
        var: zuul
    - name: hand the rendered values back
      zuul_return:
        data:
          message: "{{ zuul.change_message }}"
          topic: "{{ zuul.topic }}"
          ahead: "{{ zuul['items'][0].change_message }}"
          src_dir: "{{ zuul.project.src_dir }}"
"""


def test_commit_message_and_topic_stay_text_in_trusted_playbooks(exec_env):  # noqa: F811
    env = exec_env
    build_uuid = _uuid()
    # Markers in the build's work dir: writable from any of its playbooks.
    marker = os.path.join(_work_root(env, build_uuid), 'rendered-message')
    env.upstream.create('org/config', {'playbooks/post.yaml': TRUSTED_RENDER})
    env.upstream.create('org/project', {'a.txt': 'a\n'})
    ref_ahead = env.upstream.add_change('org/project', 6, {'c.txt': 'c\n'})
    ref = env.upstream.add_change('org/project', 7, {'b.txt': 'b\n'})
    message = f'Fix it\n\n{_template(marker)}\n'
    ahead = dict(vars(item('org/project', 6, ref_ahead)), message=_template(marker + '-ahead'))
    under_test = dict(vars(item('org/project', 7, ref)), message=message,
                      topic=_template(marker + '-topic'))
    job = JobSpec(name='render', post_run=[playbook('org/config', 'playbooks/post',
                                                   trusted=True)])
    node = env.factory.make()
    request = execute_request(build_uuid, job, [node_spec(node, 'controller')],
                              [ItemSpec(**ahead), ItemSpec(**under_test)])
    result, build = run_build(env, request)
    rendered = [p for p in (marker, marker + '-ahead', marker + '-topic') if os.path.exists(p)]
    assert rendered == [], 'an uploader\'s template ran in a trusted playbook'
    assert result.result == 'SUCCESS', explain(build)
    assert result.data == {'message': message, 'topic': _template(marker + '-topic'),
                           'ahead': _template(marker + '-ahead'),
                           'src_dir': f'src/{HOSTNAME}/org/project'}


# -- also: untrusted job variables are text in trusted playbooks --------------
TRUSTED_VARS = """
- hosts: localhost
  gather_facts: false
  tasks:
    - debug:
        var: hostvars['controller']
    - zuul_return:
        data:
          job_var: "{{ from_job }}"
          extra_var: "{{ from_extra }}"
          host_var: "{{ hostvars['controller']['from_host'] }}"
          secret: "{{ from_secret.value }}"
          secret_number: "{{ from_secret.number }}"
          secret_flag: "{{ from_secret.flag }}"
"""


def test_untrusted_variables_stay_text_in_trusted_playbooks(exec_env):  # noqa: F811
    """Job vars, extra-vars, host-vars and secrets of an untrusted project
    reach the executor marked unsafe (the scheduler marks them when it
    loads the project's config: tests/unit/test_unsafe_variables.py)."""
    from zuul.lib.yamlutil import UnsafeStr, to_wire
    env = exec_env
    build_uuid = _uuid()
    marker = os.path.join(_work_root(env, build_uuid), 'rendered-var')
    env.upstream.create('org/config', {'playbooks/post.yaml': TRUSTED_VARS})
    env.upstream.create('org/project', {'a.txt': 'a\n'})
    texts = {k: _template(f'{marker}-{k}') for k in ('job', 'extra', 'host', 'secret')}
    job = JobSpec(name='render', vars=to_wire({'from_job': UnsafeStr(texts['job'])}),
                  extra_vars=to_wire({'from_extra': UnsafeStr(texts['extra'])}),
                  host_vars=to_wire({'controller': {'from_host': UnsafeStr(texts['host'])}}),
                  post_run=[playbook('org/config', 'playbooks/post', trusted=True,
                                     secrets={'from_secret': to_wire(
                                         {'value': UnsafeStr(texts['secret']),
                                          'number': UnsafeStr('0123'),
                                          'flag': UnsafeStr('yes')})})])
    node = env.factory.make()
    result, build = run_build(env, execute_request(
        build_uuid, job, [node_spec(node, 'controller')], [item('org/project')]))
    assert [k for k in texts if os.path.exists(f'{marker}-{k}')] == []
    assert result.result == 'SUCCESS', explain(build)
    # Unsafe text stays the text it is, whatever it looks like (a password
    # of digits, "yes"): ansible-core 2.19 read a YAML "!unsafe '0123'" as 123.
    assert result.data == {'job_var': texts['job'], 'extra_var': texts['extra'],
                           'host_var': texts['host'], 'secret': texts['secret'],
                           'secret_number': '0123', 'secret_flag': 'yes'}


# -- 2. nothing untrusted decides how Ansible runs on the executor -----------
EVIL_INTERPRETER = """#!/bin/sh
touch "$(dirname "$0")/pwned"
exec python3 "$@"
"""

TRUSTED_LOCAL = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: a module on the executor
      command: /bin/true
    - name: a shell on the executor
      shell: /bin/true
"""


@pytest.mark.parametrize('how', [
    {'extra_vars': {'ansible_python_interpreter': '{script}'}},
    {'extra_vars': {'ansible_become': True, 'ansible_become_exe': '{script}'}},
    {'extra_vars': {'ansible_shell_executable': '{script}'}},
    {'vars': {'ansible_python_interpreter': '{script}'}},
    {'secret': {'ansible_python_interpreter': '{script}'}},
], ids=['extra-vars-interpreter', 'extra-vars-become', 'extra-vars-shell', 'vars',
        'secret-passed-to-parent'])
def test_untrusted_variables_cannot_choose_the_executors_interpreter(exec_env, how):  # noqa: F811,E501
    env = exec_env
    build_uuid = _uuid()
    project_dir = os.path.join(_work_root(env, build_uuid), 'src', HOSTNAME, 'org/project')
    script = os.path.join(project_dir, 'evil.sh')
    env.upstream.create('org/config', {'playbooks/post.yaml': TRUSTED_LOCAL})
    env.upstream.create('org/project', {'evil.sh': EVIL_INTERPRETER})
    upstream = env.upstream.path('org/project')
    git(upstream, 'update-index', '--chmod=+x', 'evil.sh')
    git(upstream, 'commit', '-q', '-m', 'executable')

    def filled(values):
        return {k: v.format(script=script) if isinstance(v, str) else v
                for k, v in values.items()}
    secrets = filled(how['secret']) if 'secret' in how else {}
    job = JobSpec(name='interpreter', vars=filled(how.get('vars', {})),
                  extra_vars=filled(how.get('extra_vars', {})),
                  post_run=[playbook('org/config', 'playbooks/post', trusted=True,
                                     secrets=secrets)])
    node = env.factory.make()
    result, build = run_build(env, execute_request(
        build_uuid, job, [node_spec(node, 'controller')], [item('org/project')]))
    assert not os.path.exists(os.path.join(project_dir, 'pwned')), \
        'a script from the change ran as the executor\'s interpreter'
    log = explain(build)
    if 'vars' in how:
        # All vars rank below the implicit localhost's own interpreter.
        assert result.result == 'SUCCESS', log
    elif how['extra_vars'].keys() & {'ansible_become_exe', 'ansible_shell_executable'}:
        # Refused before anything runs: no job config may set these.
        assert result.result == 'ERROR' and 'may not set' in result.error_detail
    else:
        assert result.result == 'POST_FAILURE', log
        assert 'may not be changed on the executor' in log, log


# -- 3. add_host with paramiko and a proxy command ---------------------------
PARAMIKO_PROXY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: add a host reached through a proxy command
      add_host:
        name: jump
        ansible_host: "{{ node_address }}"
        ansible_connection: paramiko
        ansible_paramiko_proxy_command: "touch {{ zuul.executor.work_root }}/pwned"
      ignore_errors: true
    - name: add a host with the paramiko connection only
      add_host:
        name: jump2
        ansible_host: "{{ node_address }}"
        ansible_connection: paramiko
      ignore_errors: true
- hosts: jump
  gather_facts: false
  tasks:
    - name: use it
      raw: "true"
      ignore_errors: true
      ignore_unreachable: true
"""


def test_untrusted_add_host_may_not_choose_the_connection(exec_env):  # noqa: F811
    env = exec_env
    env.upstream.create('org/project', {'playbooks/run.yaml': PARAMIKO_PROXY})
    node = env.factory.make()
    build_uuid = _uuid()
    job = JobSpec(name='proxy', vars={'node_address': node.address},
                  run=[playbook('org/project', 'playbooks/run')])
    result, build = run_build(env, execute_request(
        build_uuid, job, [node_spec(node, 'controller')], [item('org/project')]))
    assert not os.path.exists(os.path.join(_work_root(env, build_uuid), 'pwned')), \
        'a proxy command ran on the executor'
    tasks = task_results(build)
    for name in ('add a host reached through a proxy command',
                 'add a host with the paramiko connection only'):
        refusal = json.dumps(tasks[name])
        assert REFUSED in refusal and 'only the ssh connection' in refusal, tasks[name]


# -- 4. untrusted playbooks cannot reach other builds' nodes -----------------
OTHER_NODE = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: add the other node without host key checking
      add_host:
        name: other
        ansible_host: "{{ other_address }}"
        ansible_connection: paramiko
        ansible_host_key_checking: false
      ignore_errors: true
    - name: add the other node over ssh
      add_host:
        name: other_ssh
        ansible_host: "{{ other_address }}"
    - name: turn host key checking off for everyone
      set_fact:
        ansible_host_key_checking: false
      ignore_errors: true
- hosts: other,other_ssh
  gather_facts: false
  tasks:
    - name: write on the other build's node
      command: touch {{ marker }}
      ignore_unreachable: true
"""


def test_untrusted_playbooks_cannot_reach_other_builds_nodes(exec_env):  # noqa: F811
    env = exec_env
    mine, other = env.factory.make(), env.factory.make()
    marker = f'/tmp/{_uuid()}-other-node'
    env.upstream.create('org/project', {'playbooks/run.yaml': OTHER_NODE})
    job = JobSpec(name='other', vars={'other_address': other.address, 'marker': marker},
                  run=[playbook('org/project', 'playbooks/run')])
    result, build = run_build(env, execute_request(
        _uuid(), job, [node_spec(mine, 'controller')], [item('org/project')]))
    try:
        assert not os.path.exists(marker), 'a command ran on another build\'s node'
    finally:
        if os.path.exists(marker):
            os.unlink(marker)
    tasks = task_results(build)
    assert REFUSED in json.dumps(tasks['add the other node without host key checking'])
    assert REFUSED in json.dumps(tasks['turn host key checking off for everyone'])
    # The plain ssh host is added, and then refused by ssh: its host key is
    # not among the build's known hosts.
    other_ssh = json.dumps(tasks['write on the other build\'s node'].get('other_ssh'))
    assert 'Host key verification failed' in other_ssh, other_ssh


# -- 6. the url lookup -------------------------------------------------------
URL_LOOKUP = """
- hosts: controller
  gather_facts: false
  tasks:
    - name: fetch from the executor's loopback
      debug:
        msg: "{{ lookup('url', canary_url) }}"
      ignore_errors: true
"""


def test_untrusted_url_lookup_refused(exec_env):  # noqa: F811
    env = exec_env
    hits = []

    class Canary(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'metadata-credentials')

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Canary)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env.upstream.create('org/project', {'playbooks/run.yaml': URL_LOOKUP})
        job = JobSpec(name='url', vars={'canary_url': f'http://127.0.0.1:{server.server_port}/'},
                      run=[playbook('org/project', 'playbooks/run')])
        node = env.factory.make()
        result, build = run_build(env, execute_request(
            _uuid(), job, [node_spec(node, 'controller')], [item('org/project')]))
    finally:
        server.shutdown()
    assert hits == [], 'an untrusted playbook reached a service on the executor'
    refusal = json.dumps(task_results(build)["fetch from the executor's loopback"])
    assert REFUSED in refusal and 'lookup url' in refusal, refusal
    assert 'metadata-credentials' not in explain(build)


# -- also: a trusted playbook's working directory ----------------------------
PLANT_MODULE = """
- hosts: controller
  gather_facts: false
  tasks:
    - copy:
        content: "open({{ marker | to_json }}, 'w').write('planted')\\n"
        dest: /tmp/{{ zuul.build }}-planted.py
    - name: plant python modules where a trusted run's python would look
      fetch:
        src: /tmp/{{ zuul.build }}-planted.py
        dest: "{{ zuul.executor.work_root }}/{{ item }}.py"
        flat: true
      loop: [datetime, json, base64, zipfile, shutil, tempfile, io, types, runpy]
"""

TRUSTED_MODULE = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: a module on the executor
      stat:
        path: /
    - name: a python command on the executor, as log processing does
      command: python3 -c "import datetime, json; print(datetime.date.today())"
    - name: where ansible-playbook itself works
      zuul_return:
        data:
          cwd: "{{ lookup('pipe', 'readlink /proc/$PPID/cwd') }}"
"""


def test_trusted_runs_do_not_work_in_the_untrusted_work_dir(exec_env):  # noqa: F811
    env = exec_env
    build_uuid = _uuid()
    marker = os.path.join(_work_root(env, build_uuid), 'planted-module-ran')
    env.upstream.create('org/config', {'playbooks/post.yaml': TRUSTED_MODULE})
    env.upstream.create('org/project', {'playbooks/run.yaml': PLANT_MODULE})
    job = JobSpec(name='plant', vars={'marker': marker},
                  run=[playbook('org/project', 'playbooks/run')],
                  post_run=[playbook('org/config', 'playbooks/post', trusted=True)])
    node = env.factory.make()
    result, build = run_build(env, execute_request(
        build_uuid, job, [node_spec(node, 'controller')], [item('org/project')]))
    assert not os.path.exists(marker), 'a module planted in work/ ran in a trusted run'
    assert result.result == 'SUCCESS', explain(build)
    # The trusted run works in a directory of its own that no untrusted
    # playbook can write (under ansible/, read-only in their sandbox).
    cwd = result.data['cwd']
    assert cwd.startswith(build.jobdir.ansible_root + os.sep), cwd
