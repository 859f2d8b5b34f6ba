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


# -- the trusted sandbox -----------------------------------------------------
TRUSTED_PROBE = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: probe what a trusted playbook sees
      command: python3 {{ playbook_dir }}/probe.py {{ probe_args | to_json | quote }}
      register: probe
    - zuul_return:
        data:
          probe: "{{ probe.stdout | from_json }}"
"""

PROBE = r'''
import json, os, sys
args = json.loads(sys.argv[1])
def can_read(p):
    try:
        with open(p, 'rb') as f:
            f.read(1)
        return True
    except OSError:
        return False
def can_write(d):
    try:
        with open(os.path.join(d, '.probe'), 'w') as f:
            f.write('x')
        os.unlink(os.path.join(d, '.probe'))
        return True
    except OSError:
        return False
status = open('/proc/self/status').read()
print(json.dumps({
    'read': {p: can_read(p) for p in args['read']},
    'exists': {p: os.path.lexists(p) for p in args['exists']},
    'write': {d: can_write(d) for d in args['write']},
    'pids': len([p for p in os.listdir('/proc') if p.isdigit()]),
    'cap_eff': [l.split()[1] for l in status.splitlines() if l.startswith('CapEff')][0],
}))
'''


def test_trusted_sandbox_shows_only_the_build_and_the_trusted_paths(exec_env):  # noqa: F811
    """What a trusted playbook can see and write on the executor: its
    build, the system, ``trusted_ro_paths``/``trusted_rw_paths``; never
    the executor's config, keys, state dir or other builds."""
    import dataclasses
    env = exec_env
    build_uuid = _uuid()
    conf_dir = f'/srv/zuul-trusted-canary-{os.getpid()}'
    os.makedirs(conf_dir, exist_ok=True)
    zuul_conf = os.path.join(conf_dir, 'zuul.conf')
    with open(zuul_conf, 'w') as f:
        f.write('[keystore]\npassword=hunter2\n')
    state_key = os.path.join(env.settings.state_dir, 'keys', 'secret.pem')
    os.makedirs(os.path.dirname(state_key), exist_ok=True)
    open(state_key, 'w').write('key')
    other = os.path.join(env.settings.job_dir, 'f' * 32, 'work')
    os.makedirs(other, exist_ok=True)
    open(os.path.join(other, 'secret.txt'), 'w').write('other')
    ro_dir, rw_dir = os.path.join(env.root, 'tro'), os.path.join(env.root, 'trw')
    for d in (ro_dir, rw_dir):
        os.makedirs(d)
        open(os.path.join(d, 'data'), 'w').write('x')
    settings = dataclasses.replace(env.settings, trusted_ro_paths=[ro_dir],
                                   trusted_rw_paths=[rw_dir])
    env.settings = settings
    build_root = os.path.join(settings.job_dir, build_uuid)
    args = {
        'read': [zuul_conf, state_key, os.path.join(other, 'secret.txt'), '/etc/shadow',
                 os.path.join(ro_dir, 'data'), os.path.join(build_root, 'ansible',
                                                            'inventory.yaml')],
        'exists': [conf_dir, '/root/.ssh', '/etc/ssh/ssh_host_ed25519_key', '/usr/bin/ssh',
                   os.path.join(build_root, 'untrusted', 'fact-cache')],
        'write': [os.path.join(build_root, 'work'), os.path.join(build_root, 'ansible'),
                  os.path.join(build_root, 'ansible', 'fact-cache'), other, ro_dir, rw_dir,
                  '/usr', '/tmp']}
    env.upstream.create('org/config', {'playbooks/probe.yaml': TRUSTED_PROBE,
                                       'playbooks/probe.py': PROBE})
    env.upstream.create('org/project', {'a.txt': 'a\n'})
    job = JobSpec(name='probe', vars={'probe_args': args},
                  pre_run=[playbook('org/config', 'playbooks/probe', trusted=True)])
    node = env.factory.make()
    try:
        result, build = run_build(env, execute_request(
            build_uuid, job, [node_spec(node, 'controller')], [item('org/project')]))
    finally:
        shutil.rmtree(conf_dir, ignore_errors=True)
    assert result.result == 'SUCCESS', explain(build)
    out = result.data['probe']
    assert out['read'] == {zuul_conf: False, state_key: False,
                           os.path.join(other, 'secret.txt'): False, '/etc/shadow': False,
                           os.path.join(ro_dir, 'data'): True, args['read'][-1]: True}
    assert out['exists'] == {conf_dir: False, '/root/.ssh': False,
                             '/etc/ssh/ssh_host_ed25519_key': False, '/usr/bin/ssh': True,
                             args['exists'][-1]: False}
    assert out['write'] == {args['write'][0]: True, args['write'][1]: False,
                            args['write'][2]: True, other: False, ro_dir: False,
                            rw_dir: True, '/usr': False, '/tmp': True}
    # Its own PID namespace, no capabilities even when the executor is root.
    assert out['pids'] < 20 and int(out['cap_eff'], 16) == 0


# -- 3/4. one ssh-agent per build --------------------------------------------
WAIT_THEN_SECOND_NODE = """
- hosts: first
  gather_facts: false
  tasks:
    - name: wait while another build runs
      wait_for:
        path: /tmp/{{ go_file }}
        timeout: 120
- hosts: second
  gather_facts: false
  tasks:
    - name: first connection to the second node, through the agent
      command: /bin/true
"""

EMPTY_AGENTS = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: empty every ssh-agent in reach
      shell: |
        for sock in $SSH_AUTH_SOCK $(find / -xdev -type s 2>/dev/null); do
          SSH_AUTH_SOCK=$sock ssh-add -D && echo "emptied $sock"
        done
        true
      register: emptied
    - zuul_return:
        data:
          emptied: "{{ emptied.stdout_lines }}"
"""


def test_a_build_cannot_empty_another_builds_ssh_agent(exec_env, gearman_server):  # noqa: F811,E501
    """Build A waits between its first node and its first connection to
    its second node; meanwhile build B's trusted playbook runs ``ssh-add
    -D`` on every agent socket it can find.  A's nodes still answer."""
    from zuul.executor.client import ExecutorClient
    from zuul.executor.server import ExecutorServer
    env = exec_env
    go_file = f'{_uuid()}-go'
    env.upstream.create('org/config', {'playbooks/empty.yaml': EMPTY_AGENTS})
    env.upstream.create('org/project', {'playbooks/run.yaml': WAIT_THEN_SECOND_NODE})
    server = ExecutorServer(env.settings, '127.0.0.1', gearman_server.port, env.merger)
    server.start()
    client = ExecutorClient('127.0.0.1', gearman_server.port)
    try:
        first, second = env.factory.make(), env.factory.make()
        job_a = JobSpec(name='a', vars={'go_file': go_file},
                        run=[playbook('org/project', 'playbooks/run')])
        started = threading.Event()
        handle_a = client.execute(
            execute_request(_uuid(), job_a, [node_spec(first, 'first'),
                                             node_spec(second, 'second')],
                            [item('org/project')]),
            on_progress=lambda h, p: p.phase == 'run' and started.set())
        assert started.wait(120)
        job_b = JobSpec(name='b', pre_run=[playbook('org/config', 'playbooks/empty',
                                                    trusted=True)])
        third = env.factory.make()
        result_b = client.execute(execute_request(
            _uuid(), job_b, [node_spec(third, 'controller')], [item('org/project')])).wait(300)
        open(f'/tmp/{go_file}', 'w').close()
        result_a = handle_a.wait(300)
    finally:
        if os.path.exists(f'/tmp/{go_file}'):
            os.unlink(f'/tmp/{go_file}')
        client.stop()
        server.stop()
    assert result_b.result == 'SUCCESS', result_b
    # B saw (and emptied) its own agent only.
    emptied = [line for line in result_b.data['emptied'] if line.startswith('emptied ')]
    assert len(emptied) == 1, result_b.data
    assert result_a.result == 'SUCCESS', result_a
