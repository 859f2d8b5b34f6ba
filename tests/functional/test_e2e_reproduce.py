"""``zuul reproduce`` end to end: a change fails in the gate behind
another one on real daemons (development Gerrit over SSH, ZooKeeper,
Gearman, merger, executor running ansible-playbook on a node that
nodepool-launcher booted in a network namespace, zuul-web on the build
database). The command reproduces the failing build on a fresh local
network-namespace node it starts and stops itself: the same task fails
with the same output, and the change ahead is in the checked-out tree.
The passing build ahead of it passes again, prepared for a node the
user names and run by its run.sh. The commands are those of
doc/source/user/reproduce.rst, as printed (its example URL, build uuid,
host address and key file replaced by this system's)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from nodepool.driver.netns.host import NetnsHostManager
from tests.functional.system_support import zuul_system  # noqa: F401 - fixture
from tests.functional.test_e2e_multinode import launcher  # noqa: F401 - fixture
from tests.harness.docs import code_blocks
from tests.harness.waiting import wait_for

DOC = 'doc/source/user/reproduce.rst'
DOC_UUID = '4a7c1d2e9b8f4c3a9e6d5b4a3c2d1e0f'

JOBS = """
- job:
    name: repro
    nodeset:
      nodes:
        - name: node
          label: ubuntu-jammy
    run: playbooks/repro.yaml
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
          | map('relpath', zuul.executor.src_root) | sort | list }}:
          {{ zuul.change_message }}
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


def doc_commands(index: int) -> list[str]:
    """The ``$`` lines of the page's console block ``index``."""
    block = code_blocks(DOC, 'console')[index]
    return [line[2:] for line in block.splitlines() if line.startswith('$ ')]


def run(system, line: str, cwd, **replace) -> tuple[int, str]:
    """Run a documented command line in ``cwd``: ``zuul`` is this
    checkout's client; git reaches the development Gerrit with its key."""
    for old, new in {'https://zuul.example.org': system.web, **replace}.items():
        line = line.replace(old, new)
    argv = shlex.split(line)
    if argv[0] == 'zuul':
        argv = [sys.executable, '-m', 'zuul.cmd.client'] + argv[1:]
    gerrit = system.gerrit
    ssh = ['ssh', '-o', 'BatchMode=yes', '-i', gerrit.key_path, '-o', 'IdentitiesOnly=yes',
           '-o', f'UserKnownHostsFile={gerrit.known_hosts}']
    env = dict(os.environ, GIT_SSH_COMMAND=' '.join(shlex.quote(c) for c in ssh))
    os.makedirs(cwd, exist_ok=True)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr


def _failure_lines(text: str) -> list[str]:
    """The failing task's lines of a console, timestamps and run times
    taken off."""
    lines = [re.sub(r'Runtime: [\d.]+s', 'Runtime: -', re.sub(r'^\S+ \S+ \| ', '', line))
             for line in text.splitlines()]
    at = lines.index('TASK [Fail on request]')
    return [line for line in lines[at:at + 4] if line.strip()]


def test_a_gate_failure_behind_another_change_reproduces_locally(system, tmp_path,
                                                                 ssh_keypair):
    store = system.store
    ahead = store.create_change('org/app', 'master', 'Ahead', {'ahead.txt': 'ahead\n'})
    # A commit message carrying a template: text on the executor, text again
    # in the reproduction (zuul.* variables are unsafe).
    marker = tmp_path / 'templated'
    message = "Fails {{ lookup('pipe', 'touch %s') }}" % marker
    failing = store.create_change('org/app', 'master', message, {'FAIL': 'yes\n'})
    wait_for(lambda: system.verified(ahead) and system.verified(failing), timeout=300,
             what='check votes')
    store.approve(ahead, 'Workflow', 1, who='core')
    store.approve(failing, 'Workflow', 1, who='core')
    wait_for(lambda: store.get_change(ahead.number).status == 'MERGED' and
             system.verified(failing) == -2, timeout=300, what='gate results')
    builds = system.build_history(pipeline='gate', change=failing.number) + \
        system.build_history(pipeline='gate', change=ahead.number)
    (bad,) = [b for b in builds if b['change'] == failing.number and b['final']]
    (good,) = [b for b in builds if b['change'] == ahead.number and b['final']]
    assert (bad['result'], good['result']) == ('FAILURE', 'SUCCESS'), builds

    (command,) = doc_commands(0)
    status, out = run(system, command, tmp_path / 'bad', **{DOC_UUID: bad['uuid']})
    work = str(tmp_path / 'bad' / f'reproduce-{bad["uuid"]}')
    assert status == 1, out
    assert 'Started local node' in out and 'Stopped local node' in out
    # The same merge commits as the executor's, the change ahead included.
    assert re.search(r'Same commits as the executor ran on \(\d+ branch heads\)', out), out
    assert 'node node up' in out          # the playbook reached the local node
    original = open(os.path.join(system.log_root, bad['uuid'], 'job-output.txt')).read()
    again = open(os.path.join(work, 'work', 'logs', 'job-output.txt')).read()
    assert _failure_lines(again) == _failure_lines(original)
    assert "Asked to fail by ['" in '\n'.join(_failure_lines(again))
    assert '== Reproduction result: FAILURE' in out
    # The change ahead is in the tree, merged as in the gate.
    assert os.path.isfile(os.path.join(_app(work), 'ahead.txt'))
    assert os.path.isfile(os.path.join(_app(work), 'FAIL'))
    # The commit message's template stayed text, as on the executor.
    assert "Fails {{ lookup('pipe'," in again
    assert not marker.exists()

    # The passing build, prepared for a node of one's own, run by run.sh.
    prepare, run_script = doc_commands(1)
    cwd = tmp_path / 'good'
    os.makedirs(cwd)
    shutil.copy(ssh_keypair.private_key_path, cwd / 'my-node-key')
    manager = NetnsHostManager(str(tmp_path / 'mine'), '10.236.0.0/16', 'rpbr0')
    node = manager.create('mine-1', [ssh_keypair.public_key.strip()])
    try:
        status, out = run(system, prepare, cwd, **{DOC_UUID: good['uuid'],
                                                   '192.0.2.10': node.address})
        assert status == 0, out
        assert 'Started local node' not in out
        status, out = run(system, run_script, cwd)
    finally:
        manager.delete(node)
        os.system('ip link del rpbr0 2>/dev/null')
    assert status == 0, out
    assert 'node node up' in out and '== Reproduction result: SUCCESS' in out
    assert os.path.isfile(os.path.join(_app(cwd / 'failed-build'), 'ahead.txt'))
    assert not os.path.exists(os.path.join(_app(cwd / 'failed-build'), 'FAIL'))


def _app(work) -> str:
    (src,) = [root for root, _, _ in os.walk(os.path.join(work, 'work', 'src'))
              if root.endswith('org/app')]
    return src
