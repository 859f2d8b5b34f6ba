"""The live console's parts on this machine, without Ansible's runner:
Zuul's command module run as Ansible runs a module (a JSON args file),
the zuul_console server in a process of its own on a free port, and the
executor's ConsoleStreamer reading from it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import uuid

import pytest

from tests.harness.waiting import wait_for
from zuul.ansible import nodeconsole

LIBRARY = os.path.join(os.path.dirname(__file__), '..', '..', 'zuul', 'ansible', 'library')
COMMAND = os.path.join(LIBRARY, 'command.py')
CONSOLE = os.path.join(LIBRARY, 'zuul_console.py')


def run_module(tmp_path, **args) -> dict:
    path = tmp_path / f'args-{uuid.uuid4().hex}.json'
    path.write_text(json.dumps({'ANSIBLE_MODULE_ARGS': args}))
    proc = subprocess.run([sys.executable, COMMAND, str(path)], capture_output=True, text=True,
                          timeout=60)
    return json.loads(proc.stdout)


def console_path(log_id: str) -> str:
    return f'/tmp/console-{log_id}.log'


@pytest.fixture
def log_id():
    lid = f'test-{uuid.uuid4().hex}-0-node'
    yield lid
    if os.path.exists(console_path(lid)):
        os.unlink(console_path(lid))


def _console_lines(lid: str) -> list[tuple[str, str]]:
    with open(console_path(lid)) as f:
        return [tuple(line.split(' | ', 1)) for line in f.read().splitlines()]


# -- the command module ------------------------------------------------------

def test_merged_output_is_logged_line_by_line_with_times(tmp_path, log_id):
    r = run_module(tmp_path, _raw_params='echo one; echo two >&2; printf three',
                   _uses_shell=True, zuul_log_id=log_id, zuul_ansible_split_streams=False)
    assert (r['rc'], r['stdout'], r['stderr']) == (0, 'one\ntwo\nthree', '')
    assert r['cmd'] == 'echo one; echo two >&2; printf three'
    assert r['changed'] is True and r['delta'].startswith('0:00:')
    lines = _console_lines(log_id)
    assert [text for _, text in lines] == ['one', 'two', 'three',
                                           '[Zuul] Task exit code: 0']
    for stamp, _ in lines:
        assert nodeconsole.parse_line(f'{stamp} | x') == (stamp, 'x')


def test_split_streams_keep_stderr_apart_and_log_both(tmp_path, log_id):
    r = run_module(tmp_path, argv=['sh', '-c', 'echo out; echo err >&2; exit 3'],
                   zuul_log_id=log_id, zuul_ansible_split_streams=True)
    assert (r['rc'], r['stdout'], r['stderr'], r['msg']) == (3, 'out', 'err',
                                                             'non-zero return code')
    assert r['failed'] is True and r['cmd'] == ['sh', '-c', 'echo out; echo err >&2; exit 3']
    assert sorted(t for _, t in _console_lines(log_id)) == [
        '[Zuul] Task exit code: 3', 'err', 'out']


def test_command_words_are_not_reparsed_and_vars_expand_as_ansible_does(tmp_path):
    r = run_module(tmp_path, _raw_params="printf '%s|' 'a  b' $HOME ~", _uses_shell=False,
                   zuul_ansible_split_streams=False)
    assert r['stdout'] == f'a  b|{os.environ["HOME"]}|{os.path.expanduser("~")}|'
    r = run_module(tmp_path, argv=['printf', '%s', '$HOME'], expand_argument_vars=False)
    assert r['stdout'] == '$HOME'


def test_creates_removes_stdin_chdir_and_missing_commands(tmp_path):
    (tmp_path / 'there').write_text('')
    r = run_module(tmp_path, _raw_params='echo ran', creates=str(tmp_path / 'there'))
    assert (r['changed'], r['rc'], r['stdout']) == (False, 0,
                                                    f'skipped, since {tmp_path}/there exists')
    assert r['msg'] == f"Did not run command since '{tmp_path}/there' exists"
    r = run_module(tmp_path, _raw_params='echo ran', removes=str(tmp_path / 'absent'))
    assert r['changed'] is False and 'does not exist' in r['msg']
    r = run_module(tmp_path, _raw_params='cat', stdin='given')
    assert r['stdout'] == 'given'
    r = run_module(tmp_path, _raw_params='pwd', chdir=str(tmp_path))
    assert r['stdout'] == str(tmp_path)
    r = run_module(tmp_path, _raw_params='/nonexistent/tool --flag')
    assert r['failed'] is True and r['rc'] == 2 and 'No such file' in r['msg']


def test_older_roles_warn_argument_is_accepted(tmp_path):
    """zuul-jobs' roles of 2019 pass ``warn: false`` (Ansible 2.14 removed
    it from its command module)."""
    r = run_module(tmp_path, _raw_params='echo ok', warn=False)
    assert r['rc'] == 0 and r['stdout'] == 'ok' and not r.get('failed')


def test_a_background_process_holding_the_pipe_does_not_hold_the_task(tmp_path, log_id):
    r = run_module(tmp_path, _raw_params='(sleep 30; echo late) & echo started',
                   _uses_shell=True, zuul_log_id=log_id, zuul_ansible_split_streams=False)
    assert r['stdout'] == 'started'
    assert r['delta'] < '0:00:10'
    assert _console_lines(log_id)[-1][1] == '[Zuul] Task exit code: 0'


def test_the_log_id_never_names_another_file(tmp_path):
    lid = f'../../etc/{uuid.uuid4().hex}'
    r = run_module(tmp_path, _raw_params='echo x', zuul_log_id=lid)
    assert r['rc'] == 0
    name = console_path('.._.._etc_' + lid.rsplit('/', 1)[1])
    assert os.path.exists(name)
    os.unlink(name)


def test_a_symlink_in_place_of_the_log_is_not_followed(tmp_path, log_id):
    target = tmp_path / 'victim'
    target.write_text('precious\n')
    os.symlink(target, console_path(log_id))
    try:
        r = run_module(tmp_path, _raw_params='echo x', zuul_log_id=log_id)
        assert r['rc'] == 0 and r['stdout'] == 'x'
        assert target.read_text() == 'precious\n'
    finally:
        os.unlink(console_path(log_id))


# -- the console server and the executor's streamer ---------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@pytest.fixture
def console_server():
    port = _free_port()
    proc = subprocess.Popen([sys.executable, CONSOLE, '--serve', str(port)])

    def listening():
        try:
            socket.create_connection(('127.0.0.1', port), 1).close()
            return True
        except OSError:
            return False
    wait_for(listening, what='the console server')
    yield port
    proc.kill()
    proc.wait()


def _ask(port: int, request: bytes, size: int = 4096) -> bytes:
    with socket.create_connection(('127.0.0.1', port), 5) as s:
        s.sendall(request)
        s.settimeout(2)
        data = b''
        try:
            while len(data) < size:
                chunk = s.recv(size)
                if not chunk:
                    break
                data += chunk
        except socket.timeout:
            pass
        except ConnectionResetError:    # closed on us with the request unread
            pass
        return data


def test_streamer_follows_a_growing_log_to_its_exit_code(console_server, log_id):
    path = console_path(log_id)
    got = []
    arrived = threading.Condition()

    def emit(host, stamp, text):
        with arrived:
            got.append((host, stamp, text))
            arrived.notify_all()
    task, count = log_id.rsplit('-', 2)[0], 0
    streamer = nodeconsole.ConsoleStreamer('node', '127.0.0.1', task, count, emit,
                                           port=console_server).start()
    with open(path, 'a') as f:
        f.write('2024-01-02 03:04:05.000001 | first\n')
    wait_for(lambda: got, condition=arrived, what='the first line')
    assert got == [('node', '2024-01-02 03:04:05.000001', 'first')]
    with open(path, 'a') as f:
        f.write('2024-01-02 03:04:06.000002 | second\n'
                '2024-01-02 03:04:06.000003 | [Zuul] Task exit code: 0\n')
    streamer.stop()
    assert streamer.join(10)
    assert [t for _, _, t in got] == ['first', 'second'] and streamer.done == {0}
    assert streamer.lines == [['2024-01-02 03:04:05.000001', 'first'],
                              ['2024-01-02 03:04:06.000002', 'second']]
    # read whole: the executor asked the node to delete it
    wait_for(lambda: not os.path.exists(path), what='the log removed')


def test_streamer_ends_at_once_when_nothing_ran(console_server, log_id):
    task = log_id.rsplit('-', 2)[0]
    streamer = nodeconsole.ConsoleStreamer('node', '127.0.0.1', task, 0, lambda *a: None,
                                           port=console_server).start()
    streamer.stop()
    assert streamer.join(5)
    assert not streamer.streamed and not streamer.done


def test_streamer_without_a_console_server_gives_up_when_stopped():
    streamer = nodeconsole.ConsoleStreamer('node', '127.0.0.1', 'x', 0, lambda *a: None,
                                           port=_free_port()).start()
    streamer.stop()
    assert streamer.join(5) and not streamer.streamed


def test_server_protocol_version_and_delete(console_server, log_id):
    with open(console_path(log_id), 'w') as f:
        f.write('2024-01-02 03:04:05.000001 | x\n')
    assert _ask(console_server, b'v:1\n', 2) == b'1\n'
    assert _ask(console_server, f'v:1\nf:{log_id}\n'.encode()) == b'1\n'
    assert not os.path.exists(console_path(log_id))


@pytest.mark.parametrize('request_line', [
    b'../../../etc/passwd\n', b'/etc/passwd\n', b'x/../../etc/hostname\n',
    b'f:../../../tmp/victim\n'])
def test_server_serves_and_deletes_only_console_logs_in_tmp(console_server, tmp_path,
                                                            request_line):
    victim = '/tmp/victim'
    with open(victim, 'w') as f:
        f.write('precious\n')
    try:
        answer = _ask(console_server, request_line, 64)
        assert b'root:' not in answer and b'precious' not in answer
        assert answer in (b'', nodeconsole.NOT_FOUND.encode() + b'\n') or \
            answer.startswith(nodeconsole.NOT_FOUND.encode())
        assert os.path.exists(victim)
    finally:
        os.unlink(victim)


def test_server_refuses_an_endless_request(console_server):
    assert _ask(console_server, b'x' * 5000, 64) == b''


@pytest.mark.parametrize('address,ok', [
    ('10.1.2.3', True), ('node1.example.org', True), ('127.0.0.1', False),
    ('127.5.5.5', False), ('::1', False), ('localhost', False), ('0.0.0.0', False),
    ('{{ evil }}', False)])
def test_only_node_addresses_are_streamed_from(address, ok):
    assert nodeconsole.streamable_address(address) is ok


def test_hosts_come_from_the_inventory_file_only(tmp_path):
    inventory = tmp_path / 'inventory.yaml'
    inventory.write_text(
        'all:\n  hosts:\n    controller:\n      ansible_host: 10.9.0.2\n'
        '    local:\n      ansible_host: 127.0.0.1\n'
        '  vars:\n    text: !unsafe "{{ x }}"\n')
    assert nodeconsole.inventory_addresses(str(inventory)) == {'controller': '10.9.0.2'}
    assert nodeconsole.inventory_addresses(str(tmp_path / 'absent')) == {}
    inventory.write_text(': : not yaml [')
    assert nodeconsole.inventory_addresses(str(inventory)) == {}
