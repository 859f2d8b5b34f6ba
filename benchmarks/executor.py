"""Executor overhead: a one-task job on one node, through the executor
(Gearman request to WORK_COMPLETE) beside a bare ``ansible-playbook`` of
the same playbook against the same node, in the same run.

    .venv/bin/python -m benchmarks.executor [--rounds N] [--playbooks P]

With ``--playbooks P`` the job runs the playbook P times (P untrusted run
playbooks) and the bare side runs ansible-playbook P times sharing one SSH
control master: each sandboxed playbook has its own PID namespace, so its
SSH connections cannot outlive it and are opened again by the next one.

Needs root (the node is sshd in its own network namespace) and bwrap.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from nodepool.zk.localserver import free_port
from tests.functional.test_executor_support import (
    NetnsNodeFactory,
    UpstreamRepos,
    execute_request,
    item,
    make_merger,
    node_spec,
    playbook,
)
from zuul.executor.client import ExecutorClient
from zuul.executor.protocol import JobSpec
from zuul.executor.server import ExecutorServer
from zuul.executor.settings import ExecutorSettings
from zuul.lib.gearlib import GearServer

PLAYBOOK = ('- hosts: all\n  gather_facts: false\n  tasks:\n'
            '    - command: "true"\n')


def bare_run(root: str, node, key: str, ansible_playbook: str, playbooks: int = 1) -> float:
    """A plain ansible-playbook with the same SSH settings the executor uses."""
    inv = os.path.join(root, 'bare-inventory.ini')
    known = os.path.join(root, 'bare-known-hosts')
    with open(known, 'w') as f:
        f.write(''.join(f'{node.address} {k}\n' for k in node.host_keys))
    with open(inv, 'w') as f:
        f.write(f'node ansible_host={node.address} ansible_port={node.port} '
                f'ansible_user={node.username} ansible_python_interpreter=/usr/bin/python3 '
                f'ansible_private_key_file={key}\n')
    pb = os.path.join(root, 'bare.yaml')
    with open(pb, 'w') as f:
        f.write(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_HOST_KEY_CHECKING='True', ANSIBLE_PIPELINING='True',
               ANSIBLE_SSH_ARGS=f'-o ControlMaster=auto -o ControlPersist=60s '
                                f'-o UserKnownHostsFile={known}',
               ANSIBLE_CONTROL_PATH_DIR=os.path.join(root, 'bare-cp'))
    start = time.monotonic()
    for _ in range(playbooks):
        subprocess.run([ansible_playbook, '-i', inv, pb], env=env, check=True,
                       stdout=subprocess.DEVNULL)
    elapsed = time.monotonic() - start
    subprocess.run(['ssh', '-o', f'ControlPath={root}/bare-cp/*', '-O', 'exit', 'x'],
                   capture_output=True)
    shutil.rmtree(os.path.join(root, 'bare-cp'), ignore_errors=True)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--playbooks', type=int, default=1,
                        help='untrusted run playbooks per job (default 1)')
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix='zxb', dir='/tmp')
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', f'{root}/id'],
                   check=True)
    with open(f'{root}/id.pub') as f:
        nodes = NetnsNodeFactory(f.read(), root)
    upstream = UpstreamRepos(os.path.join(root, 'up'))
    upstream.create('org/project', {'playbooks/one.yaml': PLAYBOOK})
    os.makedirs(f'{root}/m')
    port = free_port()
    gear_server = GearServer(port=port, host='127.0.0.1')
    settings = ExecutorSettings(hostname='bench-executor', job_dir=f'{root}/b',
                                state_dir=f'{root}/s', private_key_file=f'{root}/id',
                                log_stream_host='127.0.0.1', log_stream_port=0)
    server = ExecutorServer(settings, '127.0.0.1', port, make_merger(upstream, f'{root}/m'))
    server.start()
    client = ExecutorClient('127.0.0.1', port)
    try:
        node = nodes.make()
        executor_times, bare_times = [], []
        for n in range(args.rounds):
            job = JobSpec(name='one-task',
                          run=[playbook('org/project', 'playbooks/one.yaml')] * args.playbooks)
            request = execute_request(f'{n:032x}', job, [node_spec(node, 'node')],
                                      [item('org/project')])
            start = time.monotonic()
            result = client.execute(request).wait(600)
            executor_times.append(time.monotonic() - start)
            assert result.result == 'SUCCESS', result
            bare_times.append(bare_run(root, node, f'{root}/id', settings.ansible_playbook,
                                       args.playbooks))
        ex, bare = statistics.median(executor_times), statistics.median(bare_times)
        print(f'playbooks per job:            {args.playbooks}')
        print(f'executor (request -> result): {ex:.2f} s  (runs: '
              f'{", ".join(f"{t:.2f}" for t in executor_times)})')
        print(f'bare ansible-playbook:        {bare:.2f} s  (runs: '
              f'{", ".join(f"{t:.2f}" for t in bare_times)})')
        print(f'ratio executor/bare:          {ex / bare:.2f}')
    finally:
        client.stop()
        server.stop()
        gear_server.shutdown()
        nodes.cleanup()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == '__main__':
    main()
