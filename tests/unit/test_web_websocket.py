"""RFC 6455 websockets (zuul/web/websocket.py): the handshake, framing
and masking, ping/close; and the console-stream websocket of zuul-web
relaying a real executor log stream (zuul/executor/logstream.py)."""

import json
import socket
import struct
import threading

import pytest

from tests.fakes.scheduler_rpc import FINISHED_UUID, RUNNING_UUID
from zuul.executor.logstream import LogStreamServer
from zuul.web.websocket import (
    BINARY,
    CLOSE,
    CONT,
    PING,
    TEXT,
    ConnectionClosedError,
    HandshakeError,
    WebSocket,
    accept_key,
    check_handshake,
    connect,
    encode_frame,
)


def test_accept_key_of_the_rfc_example():
    assert accept_key('dGhlIHNhbXBsZSBub25jZQ==') == 's3pPLMBiTxaQ9kYGzzhZRbK+xOo='


def _environ(**headers):
    env = {'REQUEST_METHOD': 'GET', 'HTTP_UPGRADE': 'websocket',
           'HTTP_CONNECTION': 'keep-alive, Upgrade', 'HTTP_SEC_WEBSOCKET_VERSION': '13',
           'HTTP_SEC_WEBSOCKET_KEY': 'dGhlIHNhbXBsZSBub25jZQ=='}
    env.update(headers)
    return env


@pytest.mark.parametrize('change, status, message', [
    ({'REQUEST_METHOD': 'POST'}, 400, 'must be a GET'),
    ({'HTTP_CONNECTION': 'keep-alive'}, 400, 'Connection: Upgrade'),
    ({'HTTP_SEC_WEBSOCKET_VERSION': '8'}, 426, 'version 13'),
    ({'HTTP_SEC_WEBSOCKET_KEY': 'c2hvcnQ='}, 400, '16 bytes'),
    ({'HTTP_SEC_WEBSOCKET_KEY': '!!!'}, 400, '16 bytes'),
])
def test_bad_handshakes(change, status, message):
    assert check_handshake(_environ()) == 'dGhlIHNhbXBsZSBub25jZQ=='
    with pytest.raises(HandshakeError) as e:
        check_handshake(_environ(**change))
    assert e.value.status == status and message in e.value.message
    if status == 426:
        assert e.value.headers == {'Sec-WebSocket-Version': '13'}


@pytest.fixture
def pair():
    """(client, server) WebSockets over a socketpair."""
    a, b = socket.socketpair()
    client, server = WebSocket(a, client=True), WebSocket(b)
    yield client, server
    a.close()
    b.close()


def test_messages_both_ways_with_all_three_lengths(pair):
    client, server = pair
    for size in (5, 300, 70_000):   # 7-bit, 16-bit and 64-bit lengths
        text = 'é' * size
        client.send_text(text)
        assert server.receive().text == text
        server.send_binary(b'\x00\xff' * size)
        message = client.receive()
        assert (message.opcode, message.data) == (BINARY, b'\x00\xff' * size)


def test_client_frames_are_masked_and_server_frames_not():
    masked = encode_frame(TEXT, b'hello', mask=True)
    assert masked[1] & 0x80 and b'hello' not in masked
    plain = encode_frame(TEXT, b'hello')
    assert plain == b'\x81\x05hello'


def test_fragmented_message_with_a_ping_between(pair):
    client, server = pair
    raw = client.sock
    raw.sendall(encode_frame(TEXT, b'hel', fin=False, mask=True) +
                encode_frame(PING, b'are you there', mask=True) +
                encode_frame(CONT, b'lo', mask=True))
    assert server.receive().text == 'hello'
    # the server answered the ping with a pong carrying the same data
    assert client.read_frame() == (True, 0xA, b'are you there')


def test_close_handshake(pair):
    client, server = pair
    client.close(4001, 'bye')
    with pytest.raises(ConnectionClosedError) as e:
        server.receive()
    assert (e.value.code, e.value.reason) == (4001, 'bye')
    with pytest.raises(ConnectionClosedError) as e:   # the echo
        client.receive()
    assert e.value.code == 4001
    with pytest.raises(ConnectionClosedError):
        server.send_text('too late')


@pytest.mark.parametrize('frame, code', [
    (encode_frame(TEXT, b'unmasked'), 1002),
    (bytes([0x80 | 0x40 | TEXT]) + encode_frame(TEXT, b'x', mask=True)[1:], 1002),
    (encode_frame(0x3, b'x', mask=True), 1002),
    (encode_frame(CONT, b'x', mask=True), 1002),
    (encode_frame(PING, b'x' * 126, mask=True), 1002),
    (encode_frame(CLOSE, b'x', mask=True), 1002),
    (encode_frame(TEXT, b'\xff\xfe', mask=True), 1007),
    (bytes([0x81, 0x80 | 127]) + struct.pack('!Q', 1 << 30) + b'keys', 1009),
])
def test_protocol_errors_close_with_a_code(pair, frame, code):
    client, server = pair
    client.sock.sendall(frame)
    with pytest.raises(ConnectionClosedError) as e:
        server.receive()
    assert e.value.code == code
    fin, opcode, payload = client.read_frame()
    assert opcode == CLOSE and struct.unpack('!H', payload[:2])[0] == code


# -- the console-stream websocket of zuul-web ------------------------------------


@pytest.fixture
def log_stream():
    server = LogStreamServer('127.0.0.1', 0)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _open(web, tenant='tenant-one'):
    return connect('127.0.0.1', web.port, f'/api/tenant/{tenant}/console-stream')


def _closed(ws):
    """(text received, close code, reason) until the server closes."""
    text = ''
    try:
        while True:
            text += ws.receive().text
    except ConnectionClosedError as e:
        return text, e.code, e.reason
    finally:
        ws.shutdown()


def test_console_stream_websocket_follows_the_running_build(zuul_web, fake_scheduler,
                                                           log_stream, tmp_path):
    log = tmp_path / 'job-output.txt'
    log.write_bytes(b'first line\n\xc3')   # half of an "\xe9" to come
    log_stream.register(RUNNING_UUID, str(log))
    fake_scheduler.set_stream_url(log_stream.url(RUNNING_UUID))
    ws = _open(zuul_web)
    ws.send_text(json.dumps({'uuid': RUNNING_UUID, 'logfile': 'console.log'}))
    assert ws.receive().text == 'first line\n'   # before the build ends
    ws.ping(b'still there?')                     # answered while streaming
    with log.open('ab') as f:
        f.write(b'\xa9t\xc3\xa9 second line\n')
    log_stream.finish(RUNNING_UUID)
    assert _closed(ws) == ('été second line\n', 1000, 'No more data')


@pytest.mark.parametrize('request_text, code, reason', [
    (json.dumps({'uuid': RUNNING_UUID}), 4000, "'logfile' missing from request payload"),
    (json.dumps({'logfile': 'console.log'}), 4000, "'uuid' missing from request payload"),
    ('not json', 4000, 'the request must be a JSON object'),
    (json.dumps({'uuid': RUNNING_UUID, 'logfile': 'other.log'}), 4000, 'unknown logfile'),
    (json.dumps({'uuid': 'f' * 32, 'logfile': 'console.log'}), 4011,
     f'no running build {"f" * 32} in tenant tenant-one'),
    (json.dumps({'uuid': '../x', 'logfile': 'console.log'}), 4011, 'Invalid build UUID'),
    (json.dumps({'uuid': FINISHED_UUID, 'logfile': 'console.log'}), 4011, 'no live log yet'),
])
def test_console_stream_websocket_errors(zuul_web, fake_scheduler, log_stream,
                                         request_text, code, reason):
    fake_scheduler.set_stream_url(log_stream.url(RUNNING_UUID))
    ws = _open(zuul_web)
    ws.send_text(request_text)
    text, got_code, got_reason = _closed(ws)
    assert (text, got_code) == ('', code)
    assert reason in got_reason


def test_console_stream_websocket_of_another_tenant_or_a_gone_executor(
        zuul_web, fake_scheduler, log_stream):
    fake_scheduler.set_stream_url(log_stream.url(RUNNING_UUID))  # never registered
    request = json.dumps({'uuid': RUNNING_UUID, 'logfile': 'console.log'})
    ws = _open(zuul_web, 'tenant-two')
    ws.send_text(request)
    assert _closed(ws)[1:] == (4011, f'no running build {RUNNING_UUID} in tenant tenant-two')
    ws = _open(zuul_web)
    ws.send_text(request)
    text, code, reason = _closed(ws)
    assert code == 4011 and 'no live log for this build (404)' in reason


def test_console_stream_websocket_handshake_refusals(zuul_web):
    with pytest.raises(HandshakeError) as e:
        _open(zuul_web, 'nope')
    assert e.value.status == 404 and 'Unknown tenant nope' in e.value.message
    # a plain request to the same path is still the HTTP stream (400: no uuid)
    with socket.create_connection(('127.0.0.1', zuul_web.port)) as s:
        s.sendall(b'GET /api/tenant/tenant-one/console-stream HTTP/1.1\r\n'
                  b'Host: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n'
                  b'Sec-WebSocket-Version: 7\r\nSec-WebSocket-Key: x\r\n\r\n')
        assert s.recv(65536).startswith(b'HTTP/1.1 426 ')


def test_client_leaving_mid_stream_ends_the_relay(zuul_web, fake_scheduler, log_stream,
                                                  tmp_path):
    log = tmp_path / 'job-output.txt'
    log.write_text('line\n')
    log_stream.register(RUNNING_UUID, str(log))
    fake_scheduler.set_stream_url(log_stream.url(RUNNING_UUID))
    before = {t.ident for t in threading.enumerate() if t.name == 'websocket'}
    ws = _open(zuul_web)
    ws.send_text(json.dumps({'uuid': RUNNING_UUID, 'logfile': 'console.log'}))
    assert ws.receive().text == 'line\n'
    session = next(t for t in threading.enumerate()
                   if t.name == 'websocket' and t.ident not in before)
    ws.close(1000, 'seen enough')
    with pytest.raises(ConnectionClosedError):
        ws.receive()
    session.join(30)   # the build still runs: the relay stopped because the client left
    assert not session.is_alive()
