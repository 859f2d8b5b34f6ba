"""Attacks on the live console path (zuul.ansible.nodeconsole) by an
unreviewed change to an untrusted project: real builds (bubblewrap,
ansible-playbook over SSH to sshd nodes in network namespaces).

The executor connects to port 19885 of the build's own nodes only, at the
addresses it wrote in the inventory: a playbook that adds a host
(``add_host``) at the executor's loopback or at another build's node, or
points an inventory host elsewhere (``set_fact: ansible_host``), makes it
connect nowhere else, so it cannot pull another build's console log (or
anything served on that port) into its own log.  What a hostile node sends
back is written, cut to size, into this build's log only, and cannot hold
the build.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from tests.functional.test_executor_builds import explain, run_build
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

pytestmark = pytest.mark.skipif(shutil.which('bwrap') is None, reason='needs bubblewrap')

START_CONSOLE = """
- hosts: all
  gather_facts: false
  tasks:
    - zuul_console:
"""

# A listener that records who connects and what they ask for.
RECORDER = textwrap.dedent("""
    import socket, sys
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], 19885))
    s.listen(16)
    print('ready', flush=True)
    while True:
        c, peer = s.accept()
        c.settimeout(2)
        try:
            data = c.recv(1024)
        except OSError:
            data = b''
        with open(sys.argv[2], 'a') as f:
            f.write(repr((peer[0], data)) + '\\n')
        c.sendall(b'2024-01-01 00:00:00.000000 | STOLEN-CONSOLE-LINE\\n')
        c.close()
""")


class Recorder:
    """RECORDER in a network namespace (None: this machine's)."""

    def __init__(self, tmp_path, address: str, namespace: str | None = None):
        self.log = tmp_path / f'connections-{address}.log'
        self.log.write_text('')
        command = [sys.executable, '-c', RECORDER, address, str(self.log)]
        if namespace:
            command = ['ip', 'netns', 'exec', namespace] + command
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        if self.proc.stdout.readline().strip() != 'ready':
            self.proc.kill()
            pytest.skip(f'cannot listen on {address}:19885: {self.proc.stderr.read()}')

    def connections(self) -> str:
        return self.log.read_text()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _build(env, run_text: str, nodes: list, uuid: str, files: dict | None = None,
           console: bool = True):
    env.upstream.create('org/config', {'playbooks/pre.yaml': START_CONSOLE})
    env.upstream.create('org/project', {'playbooks/run.yaml': run_text, **(files or {})})
    pre = [playbook('org/config', 'playbooks/pre.yaml', trusted=True)] if console else []
    job = JobSpec(name='attack', pre_run=pre,
                  run=[playbook('org/project', 'playbooks/run.yaml')])
    request = execute_request(uuid, job, [node_spec(n, name) for n, name in nodes],
                              [item('org/project')])
    return run_build(env, request)


def _console(build) -> str:
    with open(build.jobdir.job_output_txt) as f:
        return f.read()


def test_added_hosts_never_make_the_executor_connect_elsewhere(exec_env, tmp_path):  # noqa
    env = exec_env
    node, other = env.factory.make(), env.factory.make()
    namespace = getattr(other, 'namespace', None)
    if not namespace:
        pytest.skip('needs nodes in named network namespaces (tests/harness/nodes.py)')
    loopback = Recorder(tmp_path, '127.0.0.1')
    # "another build's node": a node of this machine not in this build
    foreign = Recorder(tmp_path, other.address, namespace)
    try:
        result, build = _build(env, f"""
- hosts: localhost
  gather_facts: false
  tasks:
    - name: a host at the executor's loopback, and one at another build's node
      add_host:
        name: "../../{{{{ item.name }}}}"
        ansible_host: "{{{{ item.address }}}}"
        ansible_user: root
        groups: stolen
      loop:
        - {{name: executor, address: 127.0.0.1}}
        - {{name: executor2, address: 127.0.0.2}}
        - {{name: neighbour, address: {other.address}}}
      ignore_errors: true
    - name: one at a time, in case one is refused
      add_host:
        name: "neighbour2"
        ansible_host: "{other.address}"
        ansible_user: root
        groups: stolen
- hosts: controller
  gather_facts: false
  tasks:
    - name: point the inventory host at the executor
      set_fact:
        ansible_host: 127.0.0.1
      ignore_errors: true
- hosts: stolen:controller
  gather_facts: false
  tasks:
    - name: run a command everywhere
      command: echo ran
      ignore_errors: true
      ignore_unreachable: true
""", [(node, 'controller')], 'c' * 32)
        log = _console(build)
        assert 'TASK [run a command everywhere]' in log
        assert loopback.connections() == '', log
        assert foreign.connections() == '', log
        assert 'STOLEN-CONSOLE-LINE' not in log
        assert result.result in ('SUCCESS', 'FAILURE'), explain(build)
    finally:
        loopback.stop()
        foreign.stop()


HOSTILE_SERVER = """
import socket, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('0.0.0.0', 19885))
s.listen(16)
while True:
    c, _ = s.accept()
    try:
        request = c.recv(1024)
        if request.startswith(b'v:'):
            c.sendall(b'1\\n')
            continue
        c.sendall(b'2024-01-01 00:00:00.000000 | \\x1b[31mred\\x1b[0m \\xff\\xfe binary\\n')
        c.sendall(b'not stamped | controller | pretending\\n')
        c.sendall(b'2024-01-01 00:00:00.000000 | ' + b'A' * (3 * 65536) + b'\\n')
        # never the exit code, never the end: hold the executor if it lets us
        time.sleep(3600)
    except OSError:
        pass
"""


def test_a_hostile_console_server_on_the_node_cannot_hold_or_flood(exec_env):  # noqa: F811
    env = exec_env
    node = env.factory.make()
    result, build = _build(env, """
- hosts: all
  gather_facts: false
  tasks:
    - name: our own console server
      copy:
        src: hostile.py
        dest: "/tmp/{{ zuul.build }}-hostile.py"
    - name: start it
      shell: |
        nohup python3 /tmp/{{ zuul.build }}-hostile.py >/dev/null 2>&1 &
        for i in $(seq 100); do
          python3 -c "import socket; socket.create_connection(('127.0.0.1', 19885))" \\
            2>/dev/null && break
          sleep 0.1
        done
    - name: the task whose output the hostile server answers for
      command: echo genuine output
""", [(node, 'controller')], 'd' * 32, files={'playbooks/files/hostile.py': HOSTILE_SERVER},
        console=False)
    assert result.result == 'SUCCESS', explain(build)
    log = _console(build)
    lines = log.splitlines()
    # every line of the log is bounded, the flood was cut, not kept whole
    assert max(len(line) for line in lines) < 65536 + 200
    assert sum(line.count('A' * 1000) for line in lines) >= 3
    # the real output is there (whole, after the stream did not end)
    assert 'controller | genuine output' in log
    assert '[Zuul] Log stream did not terminate' in log


def test_no_log_output_is_never_streamed_nor_left_on_the_node(exec_env):  # noqa: F811
    env = exec_env
    node = env.factory.make()
    before = set(os.listdir('/tmp'))
    result, build = _build(env, """
- hosts: all
  gather_facts: false
  tasks:
    - name: a secret on the command line
      command: echo SECRET-TOKEN-4f2a
      no_log: true
    - name: and a visible one
      command: echo visible-output
""", [(node, 'controller')], 'e' * 32)
    assert result.result == 'SUCCESS', explain(build)
    log = _console(build)
    assert 'controller | visible-output' in log
    assert 'SECRET-TOKEN-4f2a' not in log
    with open(build.jobdir.job_output_json) as f:
        assert 'SECRET-TOKEN-4f2a' not in f.read()
    for name in set(os.listdir('/tmp')) - before:     # the node shares this /tmp
        if name.startswith('console-'):
            with open(os.path.join('/tmp', name), errors='replace') as f:
                assert 'SECRET-TOKEN-4f2a' not in f.read()
