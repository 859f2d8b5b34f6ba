"""The ``nodepool`` CLI and the ``nodepool-launcher`` daemon, on a real
ZooKeeper."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from nodepool.cmd import client
from nodepool.cmd.output import age, render_table
from nodepool.zk.records import DELETING, HOLD, IN_USE, NodeRequest
from tests.functional import test_nodepool_support as support
from tests.functional.test_nodepool_support import sim_config, wait_until
from tests.harness.waiting import wait_for

launchers = support.launchers
requestor = support.requestor
zk = support.zk


@pytest.fixture
def config_file(zk_chroot, tmp_path):
    host, _, rest = zk_chroot.hosts.partition(':')
    port, _, chroot = rest.partition('/')
    path = tmp_path / 'nodepool.yaml'
    path.write_text(f'zookeeper-servers:\n  - host: {host}\n    port: {port}\n'
                    f'    chroot: /{chroot}\n' + sim_config())
    return str(path)


def run_cli(config_file, *args, capsys):
    rc = client.main(['-c', config_file, *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_render_table_and_age():
    table = render_table(['A', 'Bee'], [['1', None], ['long value', 2]])
    lines = table.splitlines()
    assert lines[0] == lines[2] == lines[-1] == '+------------+-----+'
    assert lines[1] == '| A          | Bee |'
    assert lines[3] == '| 1          |     |'
    assert age(100, now=100 + 86400 + 3661) == '01:01:01:01'
    assert age(None) == ''


def test_list_hold_delete_and_requests(launchers, requestor, zk, config_file, capsys):
    launcher = launchers.make(sim_config())
    handle = requestor.submit(['small'])
    assert handle.wait(30)
    in_use = handle.nodes[0]
    raw = NodeRequest(node_types=['large'], requestor='cli-test')
    launcher.adapters['sim'].hold_boots()
    zk.submit_request(raw, priority=300)
    wait_until(launcher, lambda: len(zk.get_nodes()) == 2, 'a second node building')

    rc, out, _ = run_cli(config_file, 'list', capsys=capsys)
    assert rc == 0
    assert 'ID' in out and 'Server ID' in out and 'Locked' in out
    row = next(line for line in out.splitlines() if in_use.id in line)
    assert '| sim ' in row and '| small ' in row and '| in-use ' in row and '| locked ' in row

    rc, out, _ = run_cli(config_file, 'list', '--detail', capsys=capsys)
    assert 'Allocated To' in out and handle.request.id in out

    rc, out, _ = run_cli(config_file, 'request-list', capsys=capsys)
    assert rc == 0 and raw.id in out and 'cli-test' in out and 'large' in out

    rc, out, _ = run_cli(config_file, 'info', 'sim', capsys=capsys)
    assert rc == 0 and in_use.id in out
    rc, _, err = run_cli(config_file, 'info', 'nope', capsys=capsys)
    assert rc == 1 and "no provider 'nope'" in err

    rc, out, _ = run_cli(config_file, 'label-list', capsys=capsys)
    assert rc == 0 and 'small' in out and 'sim/main' in out

    # A locked (in-use) node can be neither held nor deleted.
    rc, _, err = run_cli(config_file, 'hold', in_use.id, capsys=capsys)
    assert rc == 1 and 'is locked' in err
    rc, _, err = run_cli(config_file, 'delete', '9999999999', capsys=capsys)
    assert rc == 1 and 'not found' in err

    launcher.adapters['sim'].release_boots()
    wait_until(launcher, lambda: zk.get_request(raw.id).state == 'fulfilled', 'fulfilled')
    ready_id = zk.get_request(raw.id).nodes[0]
    rc, out, _ = run_cli(config_file, 'hold', ready_id, '--reason', 'debugging',
                         capsys=capsys)
    assert rc == 0
    held = zk.get_node(ready_id)
    assert (held.state, held.comment) == (HOLD, 'debugging')
    launcher.run_cleanup()
    assert zk.get_node(ready_id).state == HOLD        # held nodes stay

    rc, out, _ = run_cli(config_file, 'delete', ready_id, capsys=capsys)
    assert rc == 0 and DELETING in out
    wait_until(launcher, lambda: zk.get_node(ready_id) is None, 'deleted by the launcher')
    requestor.release(handle)


def test_delete_now(launchers, requestor, zk, config_file, capsys):
    launcher = launchers.make(sim_config())
    raw = NodeRequest(node_types=['small'], requestor='x')
    zk.submit_request(raw)
    wait_until(launcher, lambda: (zk.get_request(raw.id) or raw).state == 'fulfilled',
               'fulfilled')
    node_id = zk.get_request(raw.id).nodes[0]
    launcher.stop()
    rc, out, _ = run_cli(config_file, 'delete', node_id, '--now', capsys=capsys)
    assert rc == 0 and f'Node {node_id} deleted' in out
    assert zk.get_node(node_id) is None


def test_invalid_config_is_refused(tmp_path, capsys):
    path = tmp_path / 'bad.yaml'
    path.write_text('providers:\n  - name: x\n    driver: aws\n    pools: []\n')
    assert client.main(['-c', str(path), 'list']) == 1
    assert "bad.yaml:2: providers[0].region-name: required key not provided" in \
        capsys.readouterr().err
    path.write_text('providers:\n  - name: x\n    driver: ibmvpc\n    pools: []\n')
    assert client.main(['-c', str(path), 'list']) == 1
    assert "driver 'ibmvpc' is not supported" in capsys.readouterr().err


def test_launcher_daemon_serves_and_stops_on_sigterm(requestor, zk, config_file, tmp_path):
    pidfile = tmp_path / 'run' / 'launcher.pid'
    log = open(tmp_path / 'launcher.log', 'w')
    proc = subprocess.Popen([sys.executable, '-m', 'nodepool.cmd.launcher', '-c', config_file,
                             '-d', '-p', str(pidfile)], stdout=log, stderr=subprocess.STDOUT,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                                os.path.abspath(__file__)))))
    try:
        wait_for(lambda: zk.get_launcher_ids() or proc.poll() is not None, 60,
                 what='the daemon registered')
        assert proc.poll() is None, (tmp_path / 'launcher.log').read_text()
        assert pidfile.read_text().strip() == str(proc.pid)
        handle = requestor.submit(['small'])
        assert handle.wait(30) and handle.fulfilled
        assert handle.nodes[0].state == IN_USE
        requestor.release(handle)
        wait_for(lambda: not zk.get_nodes(), 30, what='used node deleted by the daemon')

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    assert not pidfile.exists()
    assert zk.get_launcher_ids() == []
    text = (tmp_path / 'launcher.log').read_text()
    assert 'Launcher stopped' in text


def test_launcher_refuses_a_bad_config(tmp_path):
    path = tmp_path / 'bad.yaml'
    path.write_text('labels: [{name: a, min-ready: lots}]\n')
    proc = subprocess.run([sys.executable, '-m', 'nodepool.cmd.launcher', '-c', str(path),
                           '-d'], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert f'{path}:1' in proc.stderr and 'min-ready' in proc.stderr


RELEASED_NODE_KEYS = ['id', 'provider', 'label', 'server_id', 'public_ipv4', 'ipv6', 'state',
                      'age', 'locked', 'pool', 'hostname', 'private_ipv4', 'AZ',
                      'connection_port', 'launcher', 'allocated_to', 'hold_job', 'comment']


def test_list_and_request_list_as_json(launchers, requestor, zk, config_file, capsys):
    rc, out, _ = run_cli(config_file, 'list', '--json', capsys=capsys)
    assert rc == 0 and json.loads(out) == []

    launcher = launchers.make(sim_config())
    handle = requestor.submit(['small'])
    assert handle.wait(30)
    in_use = handle.nodes[0]
    launcher.adapters['sim'].hold_boots()
    pending = NodeRequest(node_types=['large'], requestor='json-test')
    zk.submit_request(pending, priority=300)
    wait_until(launcher, lambda: len(zk.get_nodes()) == 2, 'a second node building')

    for extra in ((), ('--detail',)):      # JSON carries every field either way
        rc, out, _ = run_cli(config_file, 'list', '--json', *extra, capsys=capsys)
        assert rc == 0
        objs = json.loads(out)
        assert [list(o) for o in objs] == [RELEASED_NODE_KEYS] * 2
        by_id = {o['id']: o for o in objs}
        used = by_id[in_use.id]
        assert (used['provider'], used['pool'], used['label'], used['state'],
                used['locked']) == ('sim', 'main', 'small', IN_USE, 'locked')
        assert used['server_id'] == in_use.external_id
        assert used['public_ipv4'] == in_use.public_ipv4 and used['AZ'] == 'sim-az'
        assert used['allocated_to'] == handle.request.id
        assert used['connection_port'] == 22 and used['launcher'] == launcher.workers[0].id
        assert re.fullmatch(r'\d\d:\d\d:\d\d:\d\d', used['age'])
        building = next(o for o in objs if o['id'] != in_use.id)
        assert (building['label'], building['state'], building['allocated_to']) == \
            ('large', 'building', pending.id)

    rc, out, _ = run_cli(config_file, 'request-list', '--json', capsys=capsys)
    assert rc == 0
    assert json.loads(out) == [{'id': pending.id, 'state': 'pending',
                                'requestor': 'json-test', 'node_types': ['large'],
                                'nodes': [], 'declined_by': []}]
    launcher.adapters['sim'].release_boots()
    requestor.release(handle)
