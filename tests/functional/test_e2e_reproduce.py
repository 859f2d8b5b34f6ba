"""``zuul reproduce`` end to end: a change fails in the gate behind
another one on real daemons (development Gerrit over SSH, ZooKeeper,
Gearman, merger, executor running ansible-playbook on a node that
nodepool-launcher booted in a network namespace, zuul-web on the build
database). The command reproduces the failing build on a fresh local
network-namespace node it starts and stops itself: the same task fails
with the same output, and the change ahead is in the checked-out tree.
The passing build ahead of it passes again."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from tests.functional.system_support import zuul_system  # noqa: F401 - fixture
from tests.functional.test_e2e_multinode import launcher  # noqa: F401 - fixture
from tests.harness.waiting import wait_for

JOBS = """
- job:
    name: repro
    nodeset:
      nodes:
        - name: node
          label: ubuntu-jammy
    run: playbooks/repro.yaml
    vars:
      shout: "{{ '{{' }} lookup('pipe', 'touch /tmp/templated') }}"
"""

PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: The node answers
      command: echo "node {{ inventory_hostname }} up"
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Look for markers
      find:
        paths: "{{ zuul.executor.src_root }}"
        patterns: FAIL
        recurse: true
      register: markers
    - name: Fail on request
      fail:
        msg: >-
          Asked to fail by {{ markers.files | map(attribute='path')
          | map('relpath', zuul.executor.src_root) | sort | list }}
      when: markers.matched > 0
"""

APP = """
- project:
    queue: integrated
    check:
      jobs: [repro]
    gate:
      jobs: [repro]
"""


@pytest.fixture
def system(zuul_system, launcher):  # noqa: F811
    from zuul.driver.sql.history import BuildHistory
    from zuul.lib.rpc import RPCClient
    from zuul.web.server import ZuulWeb
    system = zuul_system
    system.create_projects(app_config=APP, config_files={
        'zuul.d/repro.yaml': JOBS, 'playbooks/repro.yaml': PLAYBOOK})
    system.log_root = os.path.join(system.root, 'logs')
    system.executor.settings.log_root = system.log_root
    history = BuildHistory(system.conf.database.dburi)
    history.migrate()
    rpc = RPCClient('127.0.0.1', system.gear_port, timeout=60, name='zuul-web')
    web = ZuulWeb('127.0.0.1', 0, rpc, history)
    web.start()
    system.web = f'http://127.0.0.1:{web.port}'
    system.start()
    try:
        yield system
    finally:
        web.stop()
        rpc.shutdown()


def reproduce(system, uuid: str, workdir: str) -> tuple[int, str]:
    gerrit = system.gerrit
    ssh = ['ssh', '-o', 'BatchMode=yes', '-i', gerrit.key_path, '-o', 'IdentitiesOnly=yes',
           '-o', f'UserKnownHostsFile={gerrit.known_hosts}']
    env = dict(os.environ, GIT_SSH_COMMAND=' '.join(shlex.quote(c) for c in ssh))
    proc = subprocess.run([sys.executable, '-m', 'zuul.cmd.client', '--zuul-url', system.web,
                           'reproduce', '--tenant', 'example', uuid, '--workdir', workdir],
                          capture_output=True, text=True, env=env, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr


def _failure_lines(text: str) -> list[str]:
    """The failing task's lines of a console, timestamps and run times
    taken off."""
    lines = [re.sub(r'Runtime: [\d.]+s', 'Runtime: -', re.sub(r'^\S+ \S+ \| ', '', line))
             for line in text.splitlines()]
    at = lines.index('TASK [Fail on request]')
    return [line for line in lines[at:at + 4] if line.strip()]


def test_a_gate_failure_behind_another_change_reproduces_locally(system, tmp_path):
    store = system.store
    ahead = store.create_change('org/app', 'master', 'Ahead', {'ahead.txt': 'ahead\n'})
    failing = store.create_change('org/app', 'master', 'Fails', {'FAIL': 'yes\n'})
    wait_for(lambda: system.verified(ahead) and system.verified(failing), timeout=300,
             what='check votes')
    store.approve(ahead, 'Workflow', 1, who='core')
    store.approve(failing, 'Workflow', 1, who='core')
    wait_for(lambda: store.get_change(ahead.number).status == 'MERGED' and
             system.verified(failing) == -2, timeout=300, what='gate results')
    (bad,) = system.build_history(pipeline='gate', change=failing.number)
    (good,) = system.build_history(pipeline='gate', change=ahead.number)
    assert (bad['result'], good['result']) == ('FAILURE', 'SUCCESS')

    work = str(tmp_path / 'bad')
    status, out = reproduce(system, bad['uuid'], work)
    assert status == 1, out
    assert 'Started local node' in out and 'Stopped local node' in out
    assert 'node node up' in out          # the playbook reached the local node
    original = open(os.path.join(system.log_root, bad['uuid'], 'job-output.txt')).read()
    again = open(os.path.join(work, 'work', 'logs', 'job-output.txt')).read()
    assert _failure_lines(again) == _failure_lines(original)
    assert "Asked to fail by ['" in '\n'.join(_failure_lines(again))
    assert '== Reproduction result: FAILURE' in out
    # The change ahead is in the tree, merged as in the gate.
    (src,) = [os.path.join(root) for root, dirs, files in os.walk(os.path.join(work, 'work',
                                                                              'src'))
              if root.endswith('org/app')]
    assert os.path.isfile(os.path.join(src, 'ahead.txt'))
    assert os.path.isfile(os.path.join(src, 'FAIL'))
    # A variable that looks like a template stays text, as on the executor.
    assert not os.path.exists('/tmp/templated')

    work = str(tmp_path / 'good')
    status, out = reproduce(system, good['uuid'], work)
    assert status == 0, out
    assert '== Reproduction result: SUCCESS' in out
    (src,) = [root for root, dirs, files in os.walk(os.path.join(work, 'work', 'src'))
              if root.endswith('org/app')]
    assert os.path.isfile(os.path.join(src, 'ahead.txt'))
    assert not os.path.exists(os.path.join(src, 'FAIL'))
