"""The released finger protocol on the executor's live-log port
(zuul/executor/logstream.py, beside HTTP), with a real TCP client."""

import socket

import pytest

from zuul.executor.logstream import LogStreamServer
from zuul.executor.logstream import parse_finger_request as parse_request

UUID = 'a1b2c3d4e5f60718293a4b5c6d7e8f90'


@pytest.fixture
def servers():
    streams = LogStreamServer('127.0.0.1', 0)
    streams.start()
    try:
        yield streams, streams      # one port: HTTP and finger
    finally:
        streams.stop()


def ask(finger, request: bytes) -> socket.socket:
    sock = socket.create_connection(('127.0.0.1', finger.port), timeout=60)
    sock.sendall(request)
    return sock


def read_all(sock) -> bytes:
    data = b''
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    return data


def test_finger_streams_a_running_build_until_it_ends(servers, tmp_path):
    streams, finger = servers
    log = tmp_path / 'work' / 'logs' / 'job-output.txt'
    log.parent.mkdir(parents=True)
    log.write_text('first line\n')
    streams.register(UUID, str(log))
    sock = ask(finger, f'{UUID}\n'.encode())
    received = b''
    while b'first line\n' not in received:   # arrives while the build runs
        received += sock.recv(65536)
    with log.open('a') as f:
        f.write('second line\n')
    streams.finish(UUID)
    assert received + read_all(sock) == b'first line\nsecond line\n'


def test_finger_errors(servers):
    streams, finger = servers
    assert read_all(ask(finger, f'{UUID}\n'.encode())) == f'Build ID {UUID} not found\n'.encode()
    assert read_all(ask(finger, b'../etc/passwd\n')).startswith(b'Invalid request')
    assert read_all(ask(finger, b'x' * 300 + b'\n')).startswith(b'Invalid request')


def test_parse_request():
    assert parse_request(f'{UUID}\r\n'.encode()) == UUID
    assert parse_request(f'/W {UUID}\n'.encode()) == UUID
    assert parse_request(b'\n') is None
    assert parse_request(b'a b\n') is None


def test_http_and_finger_share_the_port(servers, tmp_path):
    import urllib.request
    streams, _ = servers
    log = tmp_path / 'work' / 'logs' / 'job-output.txt'
    log.parent.mkdir(parents=True)
    log.write_text('done\n')
    streams.register(UUID, str(log))
    response = urllib.request.urlopen(streams.url(UUID), timeout=60)
    sock = ask(streams, f'{UUID}\n'.encode())
    assert response.read(5) == b'done\n'      # while the build runs
    received = b''
    while b'done\n' not in received:
        received += sock.recv(65536)
    streams.finish(UUID)
    assert response.read() == b''
    response.close()
    assert received + read_all(sock) == b'done\n'
