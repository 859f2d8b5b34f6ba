"""The server side of RFC 6455 websockets, for stand-ins built on
``http.server``: the handshake and frames (unmasked out, masked in)."""

from __future__ import annotations

import base64
import hashlib
import struct
import threading

GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11'
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10


def accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()


def handshake(handler, subprotocol: str | None) -> None:
    """Answer the upgrade request ``handler`` (a BaseHTTPRequestHandler) holds."""
    handler.send_response(101, 'Switching Protocols')
    handler.send_header('Upgrade', 'websocket')
    handler.send_header('Connection', 'Upgrade')
    handler.send_header('Sec-WebSocket-Accept',
                        accept_key(handler.headers.get('Sec-WebSocket-Key', '')))
    if subprotocol:
        handler.send_header('Sec-WebSocket-Protocol', subprotocol)
    handler.end_headers()
    handler.wfile.flush()


class WebSocket:
    """Frames over a handler's rfile/wfile; ``send`` is thread-safe."""

    def __init__(self, rfile, wfile):
        self.rfile = rfile
        self.wfile = wfile
        self._lock = threading.Lock()
        self.closed = False

    def send(self, data: bytes, opcode: int = OP_BINARY) -> None:
        header = bytes([0x80 | opcode])
        n = len(data)
        if n < 126:
            header += bytes([n])
        elif n < 1 << 16:
            header += bytes([126]) + struct.pack('!H', n)
        else:
            header += bytes([127]) + struct.pack('!Q', n)
        with self._lock:
            if self.closed:
                return
            try:
                self.wfile.write(header + data)
                self.wfile.flush()
            except OSError:
                self.closed = True

    def close(self, code: int = 1000) -> None:
        self.send(struct.pack('!H', code), OP_CLOSE)
        self.closed = True

    def _read(self, n: int) -> bytes:
        data = b''
        while len(data) < n:
            chunk = self.rfile.read(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    def receive(self) -> tuple[int, bytes]:
        """The next whole message: (opcode, payload); pings are answered."""
        message, first_op = b'', None
        while True:
            b1, b2 = self._read(2)
            fin, opcode = b1 & 0x80, b1 & 0x0F
            n = b2 & 0x7F
            if n == 126:
                n = struct.unpack('!H', self._read(2))[0]
            elif n == 127:
                n = struct.unpack('!Q', self._read(8))[0]
            mask = self._read(4) if b2 & 0x80 else b''
            payload = self._read(n)
            if mask:
                payload = bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
            if opcode == OP_PING:
                self.send(payload, OP_PONG)
                continue
            if opcode in (OP_CLOSE, OP_PONG):
                if opcode == OP_CLOSE:
                    return OP_CLOSE, payload
                continue
            if first_op is None:
                first_op = opcode
            message += payload
            if fin:
                return first_op, message
