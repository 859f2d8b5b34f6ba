"""WebSockets (RFC 6455) for zuul-web, without a dependency.

cheroot's WSGI server has no notion of a connection upgrade, so this
module does the three parts itself:

* ``check_handshake``/``handshake_response``: the opening handshake
  (section 4.2): a ``GET`` with ``Upgrade: websocket``, ``Connection:
  Upgrade``, ``Sec-WebSocket-Version: 13`` and a 16-byte base64
  ``Sec-WebSocket-Key``, answered ``101`` with the key's accept hash;
* ``WebSocket``: framing (section 5) over a plain blocking socket: text,
  binary and continuation frames, masking (every client frame must be
  masked, no server frame is), ping/pong, and the close handshake;
* ``install``: a WSGI middleware plus a cheroot gateway that lets a
  route take the TCP connection over from cheroot once the handshake
  checks pass; each session then runs in a thread of its own, so a long
  live log never holds one of cheroot's worker threads.

``connect`` is the client side (tests, scripts): it sends the handshake,
checks the ``101`` answer and masks what it sends.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import os
import re
import socket
import struct
import threading
from dataclasses import dataclass

from cheroot import wsgi

log = logging.getLogger('zuul.web.websocket')

GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11'
CONT, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
CONTROL = frozenset({CLOSE, PING, PONG})
KNOWN = frozenset({CONT, TEXT, BINARY}) | CONTROL
# Close codes (section 7.4.1) this module sends itself.
NORMAL, GOING_AWAY, PROTOCOL_ERROR, INVALID_DATA, TOO_BIG = 1000, 1001, 1002, 1007, 1009
# A client message larger than this closes the connection (1009): the
# clients of zuul-web send one small JSON request.
MAX_MESSAGE = 1 << 20
TAKEOVER_KEY = 'zuul.websocket.takeover'


class HandshakeError(Exception):
    """The upgrade request is refused with an HTTP ``status``."""

    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


class ProtocolError(Exception):
    """The peer broke the framing rules; the connection is closed with ``code``."""

    def __init__(self, message: str, code: int = PROTOCOL_ERROR):
        super().__init__(message)
        self.code = code


def accept_key(key: str) -> str:
    """``Sec-WebSocket-Accept`` for a ``Sec-WebSocket-Key``."""
    digest = hashlib.sha1((key + GUID).encode('ascii')).digest()  # noqa: S324 - RFC 6455
    return base64.b64encode(digest).decode('ascii')


def _tokens(value: str) -> set[str]:
    return {t.strip().lower() for t in value.split(',') if t.strip()}


def check_handshake(environ: dict) -> str:
    """The client's key if ``environ`` is a valid opening handshake;
    HandshakeError (400, or 426 for another version) otherwise."""
    if environ.get('REQUEST_METHOD') != 'GET':
        raise HandshakeError(400, 'a websocket handshake must be a GET request')
    if 'websocket' not in _tokens(environ.get('HTTP_UPGRADE', '')):
        raise HandshakeError(400, 'missing "Upgrade: websocket" header')
    if 'upgrade' not in _tokens(environ.get('HTTP_CONNECTION', '')):
        raise HandshakeError(400, 'missing "Connection: Upgrade" header')
    if environ.get('HTTP_SEC_WEBSOCKET_VERSION', '').strip() != '13':
        raise HandshakeError(426, 'only websocket version 13 is supported',
                             {'Sec-WebSocket-Version': '13'})
    key = environ.get('HTTP_SEC_WEBSOCKET_KEY', '').strip()
    try:
        if len(base64.b64decode(key, validate=True)) != 16:
            raise ValueError
    except (ValueError, binascii.Error):
        raise HandshakeError(400, 'Sec-WebSocket-Key must be 16 bytes in base64') from None
    return key


def handshake_response(key: str) -> bytes:
    return ('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n'
            f'Connection: Upgrade\r\nSec-WebSocket-Accept: {accept_key(key)}\r\n\r\n'
            ).encode('ascii')


def _mask(payload: bytes, key: bytes) -> bytes:
    if not payload:
        return payload
    repeated = (key * (len(payload) // 4 + 1))[:len(payload)]
    return (int.from_bytes(payload, 'big') ^ int.from_bytes(repeated, 'big')).to_bytes(
        len(payload), 'big')


def encode_frame(opcode: int, payload: bytes, fin: bool = True, mask: bool = False) -> bytes:
    """One frame; ``mask`` (clients) masks the payload with a random key."""
    head = bytes([(0x80 if fin else 0) | opcode])
    length = len(payload)
    bit = 0x80 if mask else 0
    if length < 126:
        head += bytes([bit | length])
    elif length < 1 << 16:
        head += bytes([bit | 126]) + struct.pack('!H', length)
    else:
        head += bytes([bit | 127]) + struct.pack('!Q', length)
    if mask:
        key = os.urandom(4)
        return head + key + _mask(payload, key)
    return head + payload


@dataclass
class Message:
    opcode: int     # TEXT or BINARY
    data: bytes

    @property
    def text(self) -> str:
        return self.data.decode('utf-8')


class ConnectionClosedError(Exception):
    """The close handshake happened (or the TCP connection ended)."""

    def __init__(self, code: int | None, reason: str = ''):
        super().__init__(f'websocket closed ({code}) {reason}'.strip())
        self.code = code
        self.reason = reason


class WebSocket:
    """One open websocket over a blocking socket.

    ``receive()`` (one thread at a time) answers pings and the close
    handshake itself; the ``send_*`` methods and ``close`` may be called
    from any thread.  ``client`` masks outgoing frames and expects
    unmasked ones; a server does the opposite.
    """

    def __init__(self, sock: socket.socket, client: bool = False, buffered: bytes = b''):
        self.sock = sock
        self.client = client
        self._buffer = bytearray(buffered)
        self._send_lock = threading.Lock()
        self.close_sent = False
        self.closed: ConnectionClosedError | None = None

    # -- sending -----------------------------------------------------------

    def _send(self, opcode: int, payload: bytes) -> None:
        frame = encode_frame(opcode, payload, mask=self.client)
        with self._send_lock:
            if self.close_sent:
                raise ConnectionClosedError(*(self._closed_args()))
            self.sock.sendall(frame)
            if opcode == CLOSE:
                self.close_sent = True

    def _closed_args(self):
        return (self.closed.code, self.closed.reason) if self.closed else (None, '')

    def send_text(self, text: str) -> None:
        self._send(TEXT, text.encode('utf-8'))

    def send_binary(self, data: bytes) -> None:
        self._send(BINARY, data)

    def ping(self, data: bytes = b'') -> None:
        self._send(PING, data)

    def close(self, code: int = NORMAL, reason: str = '') -> None:
        """Start (or answer) the close handshake; a no-op once sent."""
        payload = struct.pack('!H', code) + reason.encode('utf-8')[:123]
        try:
            self._send(CLOSE, payload)
        except (ConnectionClosedError, OSError):
            pass

    def close_and_wait(self, code: int = NORMAL, reason: str = '',
                       timeout: float = 5) -> None:
        """Close and read until the peer's close answer (or ``timeout``),
        so no unread data makes the kernel reset the connection before the
        peer has read everything.  Only when no other thread receives."""
        self.close(code, reason)
        try:
            self.sock.settimeout(timeout)
            while True:
                self.receive()
        except (ConnectionClosedError, OSError):
            pass

    def shutdown(self) -> None:
        """Drop the TCP connection (after the close handshake)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    # -- receiving ---------------------------------------------------------

    def _read(self, n: int) -> bytes:
        while len(self._buffer) < n:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionClosedError(None, 'connection lost')
            self._buffer += data
        out = bytes(self._buffer[:n])
        del self._buffer[:n]
        return out

    def read_frame(self) -> tuple[bool, int, bytes]:
        """(fin, opcode, unmasked payload) of the next frame."""
        b0, b1 = self._read(2)
        fin, opcode, masked, length = bool(b0 & 0x80), b0 & 0x0F, bool(b1 & 0x80), b1 & 0x7F
        if b0 & 0x70:
            raise ProtocolError('reserved bits set without a negotiated extension')
        if opcode not in KNOWN:
            raise ProtocolError(f'unknown opcode {opcode:#x}')
        if masked == self.client:
            raise ProtocolError('client frames must be masked, server frames must not be')
        if length == 126:
            (length,) = struct.unpack('!H', self._read(2))
        elif length == 127:
            (length,) = struct.unpack('!Q', self._read(8))
        if opcode in CONTROL and (length > 125 or not fin):
            raise ProtocolError('control frames are at most 125 bytes and not fragmented')
        if length > MAX_MESSAGE:
            raise ProtocolError('message too big', TOO_BIG)
        key = self._read(4) if masked else b''
        payload = self._read(length)
        return fin, opcode, _mask(payload, key) if masked else payload

    def receive(self) -> Message:
        """The next text or binary message; raises ConnectionClosedError once
        the peer closes (after answering its close frame)."""
        if self.closed:
            raise self.closed
        try:
            return self._receive()
        except ProtocolError as e:
            self.close(e.code, str(e))
            self.closed = ConnectionClosedError(e.code, str(e))
        except ConnectionClosedError as e:
            self.closed = e
        except OSError as e:
            self.closed = ConnectionClosedError(None, str(e))
        raise self.closed

    def _receive(self) -> Message:
        parts, first = [], None
        while True:
            fin, opcode, payload = self.read_frame()
            if opcode in CONTROL:
                self._control(opcode, payload)
                continue
            if opcode == CONT and first is None:
                raise ProtocolError('continuation frame without a message to continue')
            if opcode != CONT and first is not None:
                raise ProtocolError('new message before the last one ended')
            first = first if first is not None else opcode
            parts.append(payload)
            if sum(len(p) for p in parts) > MAX_MESSAGE:
                raise ProtocolError('message too big', TOO_BIG)
            if fin:
                message = Message(first, b''.join(parts))
                if first == TEXT:
                    try:
                        message.text
                    except UnicodeDecodeError:
                        raise ProtocolError('text message is not UTF-8', INVALID_DATA) \
                            from None
                return message

    def _control(self, opcode: int, payload: bytes) -> None:
        if opcode == PING:
            try:
                self._send(PONG, payload)
            except ConnectionClosedError:
                pass
            return
        if opcode == PONG:
            return
        code, reason = None, ''
        if len(payload) == 1:
            raise ProtocolError('close frame with a one-byte payload')
        if len(payload) >= 2:
            (code,) = struct.unpack('!H', payload[:2])
            reason = payload[2:].decode('utf-8', 'replace')
        self.close(code if code is not None else NORMAL, '')  # echo it
        raise ConnectionClosedError(code, reason)


# -- taking connections over from cheroot -------------------------------------


class UpgradeGateway(wsgi.Gateway_10):
    """cheroot's WSGI 1.0 gateway plus ``environ[TAKEOVER_KEY]``: a
    function that detaches the connection from cheroot and returns its
    socket (a duplicate, blocking), after which cheroot sends nothing more
    on it and does not shut it down."""

    def get_environ(self):
        environ = super().get_environ()
        environ[TAKEOVER_KEY] = self._takeover
        return environ

    def _takeover(self) -> socket.socket:
        req = self.req
        try:
            sock = req.conn.socket.dup()
        except (NotImplementedError, OSError):   # an SSLSocket cannot be duplicated
            sock = req.conn.socket                # linger below keeps cheroot off it
        sock.settimeout(None)
        req.sent_headers = True        # cheroot must not answer this request
        req.close_connection = True    # nor read another from it
        req.conn.linger = True         # and its close() must not shut the TCP connection
        return sock


class Route:
    """A websocket endpoint: ``pattern`` matches PATH_INFO; ``accept``
    (environ, match) runs before the upgrade and may raise HandshakeError;
    ``serve`` (WebSocket, match, environ) runs the session in its own
    thread and need not close the socket."""

    def __init__(self, pattern: str, accept, serve):
        self.pattern = re.compile(pattern)
        self.accept = accept
        self.serve = serve


class WebSocketMiddleware:
    """Sends upgrade requests for a route's path to the route; everything
    else (and plain requests to the same path) to ``app``."""

    def __init__(self, app, routes: list[Route]):
        self.app = app
        self.routes = routes

    def __call__(self, environ, start_response):
        if 'websocket' not in _tokens(environ.get('HTTP_UPGRADE', '')):
            return self.app(environ, start_response)
        for route in self.routes:
            match = route.pattern.match(environ.get('PATH_INFO', ''))
            if match:
                return self._upgrade(route, match, environ, start_response)
        return self.app(environ, start_response)

    def _upgrade(self, route, match, environ, start_response):
        takeover = environ.get(TAKEOVER_KEY)
        try:
            if takeover is None:
                raise HandshakeError(501, 'this server cannot upgrade connections')
            key = check_handshake(environ)
            route.accept(environ, match)
        except HandshakeError as e:
            body = json.dumps({'error': e.message}).encode()
            headers = [('Content-Type', 'application/json'),
                       ('Content-Length', str(len(body)))] + list(e.headers.items())
            start_response(f'{e.status} {_REASONS.get(e.status, "Error")}', headers)
            return [body]
        sock = takeover()
        try:
            sock.sendall(handshake_response(key))
        except OSError:
            sock.close()
            return []
        ws = WebSocket(sock)
        threading.Thread(target=_run, args=(route, ws, match, environ), daemon=True,
                         name='websocket').start()
        return []


_REASONS = {400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found',
            426: 'Upgrade Required', 501: 'Not Implemented', 503: 'Service Unavailable'}


def _run(route: Route, ws: WebSocket, match, environ) -> None:
    try:
        route.serve(ws, match, environ)
    except Exception:
        log.exception('websocket session on %s failed', environ.get('PATH_INFO'))
        ws.close(1011, 'internal error')
    finally:
        ws.shutdown()


def install(server: wsgi.Server, routes: list[Route]) -> None:
    """Serve ``routes`` as websockets on a cheroot WSGI ``server``."""
    server.wsgi_app = WebSocketMiddleware(server.wsgi_app, routes)
    server.gateway = UpgradeGateway


# -- client -----------------------------------------------------------------


def connect(host: str, port: int, path: str, headers: dict | None = None,
            timeout: float | None = 60) -> WebSocket:
    """Open a websocket to ``ws://host:port/path``; HandshakeError with
    the HTTP status if the server does not switch protocols."""
    sock = socket.create_connection((host, port), timeout=timeout)
    key = base64.b64encode(os.urandom(16)).decode('ascii')
    lines = [f'GET {path} HTTP/1.1', f'Host: {host}:{port}', 'Upgrade: websocket',
             'Connection: Upgrade', f'Sec-WebSocket-Key: {key}', 'Sec-WebSocket-Version: 13']
    lines += [f'{k}: {v}' for k, v in (headers or {}).items()]
    sock.sendall(('\r\n'.join(lines) + '\r\n\r\n').encode('utf-8'))
    data = b''
    while b'\r\n\r\n' not in data:
        chunk = sock.recv(65536)
        if not chunk:
            sock.close()
            raise HandshakeError(502, 'connection closed during the handshake')
        data += chunk
    head, rest = data.split(b'\r\n\r\n', 1)
    status_line, *header_lines = head.decode('latin-1').split('\r\n')
    status = int(status_line.split()[1])
    answer = {k.strip().lower(): v.strip() for k, v in
              (h.split(':', 1) for h in header_lines if ':' in h)}
    if status != 101:
        length = int(answer.get('content-length', '0') or 0)
        while len(rest) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
        sock.close()
        raise HandshakeError(status, rest.decode('utf-8', 'replace'), answer)
    if answer.get('sec-websocket-accept') != accept_key(key):
        sock.close()
        raise HandshakeError(502, 'wrong Sec-WebSocket-Accept from the server')
    return WebSocket(sock, client=True, buffered=rest)
