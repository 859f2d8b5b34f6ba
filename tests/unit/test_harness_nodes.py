"""netns nodes: reachable by key with the recorded host key, each in its own
namespace, reachable from each other, gone after deletion."""

import os
import subprocess

import pytest


def _ssh(node, keypair, known_hosts, command, strict='yes'):
    return subprocess.run(
        ['ssh', '-i', keypair.private_key_path, '-p', str(node.port),
         '-o', f'UserKnownHostsFile={known_hosts}', '-o', f'StrictHostKeyChecking={strict}',
         '-o', 'BatchMode=yes', '-o', 'ConnectTimeout=10',
         f'{node.username}@{node.address}', command],
        capture_output=True, text=True, timeout=60)


def _known_hosts(tmp_path, node, key=None):
    path = tmp_path / f'known_{node.address}'
    path.write_text(f'{node.address} {key or node.host_keys[0]}\n')
    return str(path)


def test_node_has_its_own_address_and_reaches_the_other(two_nodes, ssh_keypair, tmp_path):
    a, b = two_nodes
    assert a.address != b.address
    out = _ssh(a, ssh_keypair, _known_hosts(tmp_path, a), 'ip -4 -o addr show dev eth0')
    assert out.returncode == 0, out.stderr
    assert a.address in out.stdout and b.address not in out.stdout
    probe = (f'python3 -c "import socket; s=socket.create_connection(('
             f"'{b.address}', 22), 5); print(s.recv(4))\"")
    reach = _ssh(a, ssh_keypair, _known_hosts(tmp_path, a), probe)
    assert "b'SSH-'" in reach.stdout, reach.stderr


def test_wrong_host_key_is_rejected(node_factory, ssh_keypair, tmp_path):
    node = node_factory.make()
    other = node_factory.make()
    wrong = _known_hosts(tmp_path, node, key=other.host_keys[0])
    out = _ssh(node, ssh_keypair, wrong, 'true')
    assert out.returncode == 255
    assert 'REMOTE HOST IDENTIFICATION HAS CHANGED' in out.stderr or \
        'Host key verification failed' in out.stderr


def test_deleted_node_leaves_nothing(netns_manager, ssh_keypair):
    host = netns_manager.create(f't{os.getpid()}-gone', [ssh_keypair.public_key])
    assert f't{os.getpid()}-gone' in netns_manager.list()
    pid = host.sshd_pid
    netns_manager.delete(host)
    netns_manager.delete(host)   # idempotent
    assert f't{os.getpid()}-gone' not in netns_manager.list()
    assert not os.path.exists(f'/proc/{pid}')
    assert not os.path.exists(host.state_dir)


def test_ansible_ping_two_nodes(two_nodes, ssh_keypair, tmp_path):
    ansible = os.path.join(os.path.dirname(__import__('sys').executable),
                           'ansible')
    if not os.path.exists(ansible):
        pytest.skip('ansible not installed in the virtualenv')
    a, b = two_nodes
    inventory = tmp_path / 'inventory'
    py = 'ansible_python_interpreter=/usr/bin/python3'
    inventory.write_text(f'controller ansible_host={a.address} ansible_user=root {py}\n'
                         f'compute ansible_host={b.address} ansible_user=root {py}\n')
    known = tmp_path / 'known'
    known.write_text(f'{a.address} {a.host_keys[0]}\n{b.address} {b.host_keys[0]}\n')
    env = dict(os.environ, ANSIBLE_HOST_KEY_CHECKING='True',
               ANSIBLE_SSH_ARGS=f'-o UserKnownHostsFile={known} -o ControlMaster=auto '
                                f'-o ControlPersist=60s',
               ANSIBLE_PRIVATE_KEY_FILE=ssh_keypair.private_key_path)
    out = subprocess.run([ansible, '-i', str(inventory), 'all', '-m', 'ping'],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count('"ping": "pong"') == 2
