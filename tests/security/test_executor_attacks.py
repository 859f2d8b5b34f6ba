"""Attacks on the executor by an unreviewed change to an untrusted project.

Each test runs the attack for real: bubblewrap, ansible-playbook, sshd
nodes in their own network namespaces, git repos prepared by the merger.
Each asserts that the attack is refused with a clear error and that
nothing outside the job dir was read or written.  doc/source/security.rst
describes the model these tests hold up.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import uuid

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
from zuul.executor.build import BuildExecution
from zuul.executor.protocol import JobSpec, RoleSpec
from zuul.executor.server import default_sandbox

pytestmark = pytest.mark.skipif(shutil.which('bwrap') is None, reason='needs bubblewrap')

REFUSED = 'prohibited in untrusted playbooks'


def _uuid() -> str:
    return uuid.uuid4().hex


def _marker_plugin(marker: str) -> str:
    """An action plugin that proves it ran by writing ``marker``."""
    return (
        'from ansible.plugins.action import ActionBase\n'
        'class ActionModule(ActionBase):\n'
        '    def run(self, tmp=None, task_vars=None):\n'
        f'        open({marker!r}, "w").write("planted code ran")\n'
        '        return {"changed": False, "msg": "planted"}\n')


def _marker_lookup(marker: str) -> str:
    """A lookup plugin that proves it ran by writing ``marker``."""
    return (
        'from ansible.plugins.lookup import LookupBase\n'
        'class LookupModule(LookupBase):\n'
        '    def run(self, terms, variables=None, **kwargs):\n'
        f'        open({marker!r}, "w").write("planted code ran")\n'
        '        return ["planted"]\n')


def _refusals(build, task: str) -> str:
    return json.dumps(task_results(build)[task])


# -- planting code for a later trusted playbook -----------------------------
PLANT = """
- hosts: controller
  gather_facts: false
  tasks:
    - name: put the plugin on the node
      copy:
        content: "{{ plugin_source }}"
        dest: /tmp/{{ zuul.build }}-plugin.py
    - name: plant
      fetch:
        src: /tmp/{{ zuul.build }}-plugin.py
        dest: "{{ item }}"
        flat: true
      loop:
        - "{{ zuul.executor.work_root }}/../home/.ansible/plugins/lookup/env.py"
        - "{{ zuul.executor.work_root }}/../ansible/no-plugins/env.py"
        - "{{ zuul.executor.work_root }}/../ansible/post_run_0/home/.ansible/plugins/lookup/env.py"
        - "~/.ansible/plugins/lookup/env.py"
        - "{{ zuul.executor.work_root }}/.ansible/plugins/lookup/env.py"
      ignore_errors: true
"""  # noqa: E501

TRUSTED_POST = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: trusted lookup
      debug: msg="{{ lookup('env', 'HOME') }}"
    - zuul_return:
        data:
          trusted_post: done
"""


def test_untrusted_cannot_plant_code_for_trusted_playbooks(exec_env):  # noqa: F811
    env = exec_env
    marker = os.path.join(env.root, 'planted-marker')
    env.upstream.create('org/config', {'playbooks/post.yaml': TRUSTED_POST})
    env.upstream.create('org/project', {'playbooks/run.yaml': PLANT})
    job = JobSpec(name='plant', vars={'plugin_source': _marker_lookup(marker)},
                  run=[playbook('org/project', 'playbooks/run')],
                  post_run=[playbook('org/config', 'playbooks/post', trusted=True)])
    node = env.factory.make()
    result, build = run_build(env, execute_request(_uuid(), job, [node_spec(node, 'controller')],
                                                   [item('org/project')]))
    assert not os.path.exists(marker), 'code planted by an untrusted playbook ran trusted'
    assert result.result == 'SUCCESS', explain(build)
    assert result.data.get('trusted_post') == 'done'
    results = task_results(build)['plant']['controller']['results']
    # Every destination outside the work dir is refused with a clear reason;
    # the one inside it is allowed (and harmless: no trusted run reads it).
    assert [r.get('failed', False) for r in results] == [True, True, True, True, False]
    for refused in results[:4]:
        assert REFUSED in refused['msg'] and 'only the work dir' in refused['msg'], refused
    assert not os.path.exists(os.path.join(build.jobdir.home, '.ansible'))
    assert os.listdir(build.jobdir.no_plugins) == []


# -- role names from config ------------------------------------------------
def test_role_name_cannot_choose_a_path(exec_env):  # noqa: F811
    env = exec_env
    env.upstream.create('org/role', {'tasks/main.yaml': '- debug: msg=role\n'})
    env.upstream.create('org/project', {'playbooks/run.yaml':
                                        '- hosts: all\n  roles: [escape]\n'})
    escape = os.path.join(env.root, 'escape')
    depth = '../' * 12
    for name in (f'{depth}{escape.lstrip("/")}', escape, 'a/b', '..'):
        job = JobSpec(name='roles', run=[playbook(
            'org/project', 'playbooks/run',
            roles=[RoleSpec(connection='gerrit', project='org/role', target_name=name)])])
        node = env.factory.make()
        result, build = run_build(env, execute_request(
            _uuid(), job, [node_spec(node, 'controller')], [item('org/project')]))
        assert result.result == 'ERROR'
        assert 'Role name' in result.error_detail and 'not allowed' in result.error_detail
        assert not os.path.lexists(escape)


# -- plugins from untrusted content ----------------------------------------
def test_plugins_beside_the_playbook_in_roles_refused(exec_env):  # noqa: F811
    env = exec_env
    marker = os.path.join(env.root, 'marker')
    env.upstream.create('org/project', {
        'playbooks/run.yaml': '- hosts: localhost\n  roles: [x]\n',
        'playbooks/roles/x/tasks/main.yaml': '- debug: msg=x\n',
        'playbooks/roles/x/action_plugins/debug.py': _marker_plugin(marker)})
    job = JobSpec(name='adjacent', run=[playbook('org/project', 'playbooks/run')])
    node = env.factory.make()
    result, build = run_build(env, execute_request(_uuid(), job, [node_spec(node, 'controller')],
                                                   [item('org/project')]))
    assert result.result == 'ERROR'
    assert 'action_plugins found in role x' in result.error_detail
    assert not os.path.exists(marker)


LIBRARY_MODULE = """#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule
m = AnsibleModule(argument_spec={'path': {'type': 'str'}})
open(m.params['path'], 'w').write('module ran')
m.exit_json(changed=True, msg='module ran')
"""

LOCAL_MODULE = """
- hosts: controller
  gather_facts: false
  tasks:
    - name: module on the node
      noop: path=/tmp/{{ zuul.build }}-on-node
- hosts: localhost
  gather_facts: false
  tasks:
    - name: module on the executor
      noop: path={{ marker }}
      ignore_errors: true
    - name: module delegated to the executor by a safe name
      ansible.legacy.noop: path={{ marker }}
      delegate_to: localhost
      ignore_errors: true
"""


def test_untrusted_modules_never_run_on_the_executor(exec_env):  # noqa: F811
    env = exec_env
    marker = os.path.join(env.root, 'local-marker')
    env.upstream.create('org/project', {'playbooks/run.yaml': LOCAL_MODULE,
                                        'playbooks/library/noop.py': LIBRARY_MODULE})
    job = JobSpec(name='modules', vars={'marker': marker},
                  run=[playbook('org/project', 'playbooks/run')])
    node = env.factory.make()
    build_uuid = _uuid()
    result, build = run_build(env, execute_request(build_uuid, job,
                                                   [node_spec(node, 'controller')],
                                                   [item('org/project')]))
    assert result.result == 'SUCCESS', explain(build)
    assert not os.path.exists(marker)
    tasks = task_results(build)
    # A module from the project's library/ runs on the nodes, as released.
    assert tasks['module on the node']['controller']['msg'] == 'module ran'
    for name in ('module on the executor', 'module delegated to the executor by a safe name'):
        assert REFUSED in _refusals(build, name), tasks[name]
    os.unlink(f'/tmp/{build_uuid}-on-node')


RUNTIME_ROLE = """
- hosts: controller
  gather_facts: false
  tasks:
    - copy:
        content: "{{ plugin_source }}"
        dest: /tmp/{{ zuul.build }}-plugin.py
    - copy:
        content: "- evil_action: {}\\n"
        dest: /tmp/{{ zuul.build }}-main.yaml
    - fetch:
        src: /tmp/{{ zuul.build }}-plugin.py
        dest: "{{ zuul.executor.work_root }}/evilrole/action_plugins/evil_action.py"
        flat: true
    - fetch:
        src: /tmp/{{ zuul.build }}-main.yaml
        dest: "{{ zuul.executor.work_root }}/evilrole/tasks/main.yaml"
        flat: true
- hosts: localhost
  gather_facts: false
  tasks:
    - name: use a role written at run time
      include_role:
        name: "{{ zuul.executor.work_root }}/evilrole"
      ignore_errors: true
"""


def test_plugins_written_at_run_time_are_not_loaded(exec_env):  # noqa: F811
    env = exec_env
    marker = os.path.join(env.root, 'runtime-marker')
    env.upstream.create('org/project', {'playbooks/run.yaml': RUNTIME_ROLE})
    job = JobSpec(name='runtime', vars={'plugin_source': _marker_plugin(marker)},
                  run=[playbook('org/project', 'playbooks/run')])
    node = env.factory.make()
    result, build = run_build(env, execute_request(_uuid(), job, [node_spec(node, 'controller')],
                                                   [item('org/project')]))
    assert not os.path.exists(marker), 'a plugin written by the playbook was imported'
    log = explain(build)
    assert 'untrusted content may not bring plugins' in log, log


# -- reading the executor's files ------------------------------------------
READ_FILES = """
- hosts: controller
  gather_facts: false
  tasks:
    - name: copy an executor file to the node
      copy: src={{ canary }} dest=/tmp/{{ zuul.build }}-copied
      ignore_errors: true
    - name: template an executor file
      template: src={{ canary }} dest=/tmp/{{ zuul.build }}-templated
      ignore_errors: true
    - name: file lookup
      debug: msg="{{ lookup('file', canary) }}"
      ignore_errors: true
    - name: file lookup through a link in the work dir
      debug: msg="{{ lookup('file', zuul.executor.work_root + '/link') }}"
      ignore_errors: true
    - name: reading the work dir is fine
      debug: msg="{{ lookup('file', zuul.executor.work_root + '/' + zuul.project.src_dir + '/a.txt') }}"
- hosts: localhost
  gather_facts: false
  tasks:
    - name: include_vars from the executor
      include_vars: file={{ canary }}
      ignore_errors: true
"""  # noqa: E501


def test_file_sources_confined_to_the_work_dir(exec_env):  # noqa: F811
    env = exec_env
    # /etc/hosts is one of the few host files the sandbox shows; the
    # restrictions must refuse it all the same (a second line of defence).
    canary = '/etc/hosts'
    env.upstream.create('org/project', {'playbooks/run.yaml': READ_FILES, 'a.txt': 'fine\n'})
    job = JobSpec(name='read', vars={'canary': canary},
                  run=[playbook('org/project', 'playbooks/run')])
    node = env.factory.make()
    request = execute_request(_uuid(), job, [node_spec(node, 'controller')],
                              [item('org/project')])
    build = BuildExecution(request, env.settings, env.merger, sandbox=None)
    os.makedirs(build.jobdir.work_root)
    os.symlink(canary, os.path.join(build.jobdir.work_root, 'link'))
    result, build = run_build(env, request)
    assert result.result == 'SUCCESS', explain(build)
    for name in ('copy an executor file to the node', 'template an executor file',
                 'file lookup', 'file lookup through a link in the work dir',
                 'include_vars from the executor'):
        refusal = _refusals(build, name)
        assert REFUSED in refusal and 'only files in the work dir' in refusal, name
    assert 'fine' in _refusals(build, 'reading the work dir is fine')
    assert not os.path.exists(f'/tmp/{request.uuid}-copied')


# -- the sandbox itself ----------------------------------------------------
PROBE = r'''
import json, os, sys
out = {}
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
        return True
    except OSError:
        return False
args = json.loads(sys.argv[1])
out['read'] = {p: can_read(p) for p in args['read']}
out['exists'] = {p: os.path.lexists(p) for p in args['exists']}
out['write'] = {d: can_write(d) for d in args['write']}
out['pids'] = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
out['proc_root_walk'] = can_read('/proc/%d/root%s' % (args['host_pid'], args['read'][0]))
status = open('/proc/self/status').read()
out['cap_eff'] = [l.split()[1] for l in status.splitlines() if l.startswith('CapEff')][0]
out['home'] = os.listdir(os.environ['HOME']) if os.path.isdir(os.environ['HOME']) else None
print(json.dumps(out))
'''


def test_sandbox_exposes_only_the_system_and_its_build(exec_env):  # noqa: F811
    env = exec_env
    job = JobSpec(name='probe')
    request = execute_request(_uuid(), job, [], [])
    build = BuildExecution(request, env.settings, env.merger,
                           sandbox=default_sandbox(env.settings))
    build.jobdir.create()
    open(build.jobdir.inventory_file, 'w').write('all: {}\n')
    # What an operator keeps on the executor host, outside the job dir.
    conf_dir = f'/srv/zuul-canary-{os.getpid()}'
    os.makedirs(conf_dir, exist_ok=True)
    zuul_conf = os.path.join(conf_dir, 'zuul.conf')
    with open(zuul_conf, 'w') as f:
        f.write('[database]\ndburi=postgresql://zuul:hunter2@db/zuul\n')
    state_key = os.path.join(env.settings.state_dir, 'keys', 'secret.pem')
    os.makedirs(os.path.dirname(state_key), exist_ok=True)
    open(state_key, 'w').write('key')
    other_build = os.path.join(env.settings.job_dir, 'f' * 32, 'work', 'secret.txt')
    os.makedirs(os.path.dirname(other_build), exist_ok=True)
    open(other_build, 'w').write('other')
    trusted_socket_dir = build.jobdir.control_path_dir
    open(os.path.join(trusted_socket_dir, 'master'), 'w').write('trusted')
    host_pid = os.getpid()
    args = {'read': [zuul_conf, state_key, other_build, '/etc/shadow',
                     os.path.join(trusted_socket_dir, 'master'),
                     os.path.join(build.jobdir.work_root, 'logs')],
            'exists': ['/etc/ssh/ssh_host_ed25519_key', '/root/.ssh', conf_dir,
                       '/usr/bin/ssh', build.jobdir.inventory_file],
            'write': [build.jobdir.work_root, build.jobdir.ansible_root,
                      build.jobdir.untrusted_fact_cache, '/usr', '/tmp'],
            'host_pid': host_pid}
    try:
        mounts = build._sandbox_mounts()
        command = build.sandbox.wrap([sys.executable, '-c', PROBE, json.dumps(args)], mounts,
                                     cwd=build.jobdir.work_root)
        proc = subprocess.run(command, capture_output=True, text=True, timeout=60,
                              env={'PATH': '/usr/bin:/bin', 'HOME': build.jobdir.home})
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
    finally:
        shutil.rmtree(conf_dir, ignore_errors=True)
    # Nothing of the host's config, keys, state or other builds.
    assert out['read'] == {zuul_conf: False, state_key: False, other_build: False,
                           '/etc/shadow': False,
                           os.path.join(trusted_socket_dir, 'master'): False,
                           os.path.join(build.jobdir.work_root, 'logs'): False}
    assert out['exists'] == {'/etc/ssh/ssh_host_ed25519_key': False, '/root/.ssh': False,
                             conf_dir: False, '/usr/bin/ssh': True,
                             build.jobdir.inventory_file: True}
    # Writable: its work dir, its own state and a private /tmp; nothing else.
    assert out['write'] == {build.jobdir.work_root: True, build.jobdir.ansible_root: False,
                            build.jobdir.untrusted_fact_cache: True, '/usr': False,
                            '/tmp': True}
    # Its own PID namespace: a handful of processes, no way up to the host's.
    assert len(out['pids']) <= 4 and out['pids'][0] == 1, out['pids']
    assert out['proc_root_walk'] is False
    assert int(out['cap_eff'], 16) == 0
    assert out['home'] == []


def test_extra_paths_bound_and_hidden_paths_stay_hidden(exec_env):  # noqa: F811
    """``untrusted_ro_paths``/``untrusted_rw_paths`` show exactly what they
    name: an rw path above the state dir and the job dir does not expose
    the keys or other builds."""
    import dataclasses
    env = exec_env
    ro_dir = os.path.join(env.root, 'ro')
    os.makedirs(ro_dir)
    open(os.path.join(ro_dir, 'data'), 'w').write('ro')
    state_key = os.path.join(env.settings.state_dir, 'keys', 'secret.pem')
    os.makedirs(os.path.dirname(state_key), exist_ok=True)
    open(state_key, 'w').write('key')
    other_build = os.path.join(env.settings.job_dir, 'f' * 32, 'work', 'secret.txt')
    os.makedirs(os.path.dirname(other_build), exist_ok=True)
    open(other_build, 'w').write('other')
    settings = dataclasses.replace(env.settings, untrusted_ro_paths=[ro_dir],
                                   untrusted_rw_paths=[env.root])
    build = BuildExecution(execute_request(_uuid(), JobSpec(name='probe'), [], []), settings,
                           env.merger, sandbox=default_sandbox(settings))
    build.jobdir.create()
    args = {'read': [os.path.join(ro_dir, 'data'), state_key, other_build],
            'exists': [], 'write': [ro_dir, env.root, build.jobdir.work_root],
            'host_pid': os.getpid()}
    command = build.sandbox.wrap([sys.executable, '-c', PROBE, json.dumps(args)],
                                build._sandbox_mounts(), cwd=build.jobdir.work_root)
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60,
                          env={'PATH': '/usr/bin:/bin', 'HOME': build.jobdir.home})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out['read'] == {os.path.join(ro_dir, 'data'): True, state_key: False,
                           other_build: False}
    assert out['write'] == {ro_dir: False, env.root: True, build.jobdir.work_root: True}
    assert os.path.exists(os.path.join(env.root, '.probe'))


# -- secrets ---------------------------------------------------------------
SECRET_RUN = """
- hosts: controller
  gather_facts: false
  tasks:
    - assert:
        that: db.password == expected
    - name: wait while the test looks for the secret on disk
      command: sleep 2
"""


@pytest.mark.parametrize('trusted', [False, True], ids=['untrusted', 'trusted'])
def test_secrets_never_rest_on_disk(exec_env, trusted):  # noqa: F811
    env = exec_env
    secret = f'S3cr3t-{_uuid()}'
    project = 'org/config' if trusted else 'org/project'
    env.upstream.create(project, {'playbooks/run.yaml': SECRET_RUN})
    job = JobSpec(name='secrets', vars={'expected': secret},
                  run=[playbook(project, 'playbooks/run', trusted=trusted,
                                secrets={'db': {'password': secret}})])
    node = env.factory.make()
    request = execute_request(_uuid(), job, [node_spec(node, 'controller')], [item(project)])
    # ``expected`` sits in the job vars (on disk) by design of this test:
    # look for the secret under a key nobody else writes.
    found: list[str] = []
    stop = threading.Event()
    jobroot = os.path.join(env.settings.job_dir, request.uuid)
    needle = f"password: {secret}".encode()

    def scan():
        while not stop.is_set():
            for root, _, files in os.walk(jobroot):
                for name in files:
                    path = os.path.join(root, name)
                    try:
                        with open(path, 'rb') as f:
                            if needle in f.read():
                                found.append(path)
                    except OSError:
                        pass
            stop.wait(0.05)

    scanner = threading.Thread(target=scan)
    scanner.start()
    try:
        result, build = run_build(env, request)
    finally:
        stop.set()
        scanner.join()
    assert result.result == 'SUCCESS', explain(build)
    assert found == []


# -- trusted content and the speculative state ------------------------------
TRUSTED_VERSION = """
- hosts: localhost
  gather_facts: false
  tasks:
    - zuul_return:
        data:
          version: {version}
"""


def test_trusted_content_never_from_the_change_under_test(exec_env):  # noqa: F811
    env = exec_env
    env.upstream.create('org/config', {'playbooks/pre.yaml':
                                       TRUSTED_VERSION.format(version='merged')})
    ref = env.upstream.add_change('org/config', 1, {
        'playbooks/pre.yaml': TRUSTED_VERSION.format(version='proposed')})
    job = JobSpec(name='trusted', pre_run=[playbook('org/config', 'playbooks/pre',
                                                    trusted=True)])
    node = env.factory.make()
    # No repo_state in the request: the executor must still not fall back
    # to the speculative state for trusted content.
    request = execute_request(_uuid(), job, [node_spec(node, 'controller')],
                              [item('org/config', 1, ref)])
    assert not request.repo_state
    result, build = run_build(env, request)
    assert result.result == 'SUCCESS', explain(build)
    assert result.data['version'] == 'merged'
