"""zuul_debug_info (zuul-jobs' validate-host) run as Ansible runs a
module: what it reports, and what it leaves out when a tool is missing
or fails, as released Zuul's module does.  The netns node's sshd_config
is here too: which authorized_keys files a node's sshd reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from nodepool.driver.netns.host import sshd_config

MODULE = os.path.join(os.path.dirname(__file__), '..', '..', 'zuul', 'ansible', 'library',
                      'zuul_debug_info.py')


def run_module(tmp_path, env=None, **args) -> dict:
    path = tmp_path / 'args.json'
    path.write_text(json.dumps({'ANSIBLE_MODULE_ARGS': args}))
    proc = subprocess.run([sys.executable, MODULE, str(path)], capture_output=True, text=True,
                          timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return json.loads(proc.stdout)


def test_reports_host_network_and_manifest_files(tmp_path):
    manifest = tmp_path / 'dib-builddate.txt'
    manifest.write_text('2019-01-02 03:04\n')
    result = run_module(tmp_path, image_manifest=str(manifest),
                        image_manifest_files=[str(manifest), str(tmp_path / 'missing.txt')])
    assert not result.get('failed') and result['changed'] is False
    assert os.uname().nodename in result['uname']
    assert 'lo' in result['network_interfaces']
    assert result['image_manifest'] == '2019-01-02 03:04\n'
    # a missing file is left out; each one found has a title underlined to its length
    assert result['image_manifest_files'] == [{
        'filename': str(manifest), 'underline': '-' * len(str(manifest)),
        'content': '2019-01-02 03:04\n'}]
    assert 'traceroute_v4' not in result        # none asked for


def test_a_failing_or_missing_tool_leaves_its_keys_out(tmp_path):
    # an `ip` that fails, found first on PATH: the network keys are left
    # out, the build goes on (validate-host's template tests for each key)
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    (bin_dir / 'ip').write_text('#!/bin/sh\nexit 1\n')
    (bin_dir / 'ip').chmod(0o755)
    env = dict(os.environ, PATH=f'{bin_dir}:{os.environ["PATH"]}')
    result = run_module(tmp_path, env=env, traceroute_host='192.0.2.1')
    assert 'uname' in result
    for key in ('network_interfaces', 'network_routing_v4', 'network_routing_v6',
                'network_neighbors'):
        assert key not in result, key
    assert result['image_manifest_files'] == []
    assert not result.get('failed')


def test_only_a_node_with_its_own_root_reads_its_users_authorized_keys():
    own = sshd_config('10.0.0.2', '/etc/nodepool-node', own_root=True)
    assert 'AuthorizedKeysFile /etc/nodepool-node/authorized_keys .ssh/authorized_keys\n' in own
    # without a root filesystem of its own, ~/.ssh is this machine's user's:
    # a key a job added there must never open the node (nor this machine)
    shared = sshd_config('10.0.0.2', '/state/n1', own_root=False)
    assert 'AuthorizedKeysFile /state/n1/authorized_keys\n' in shared
    assert '.ssh/authorized_keys' not in shared
