"""The released ``finger`` protocol for live logs, beside the HTTP stream.

A client connects to the executor's finger port, sends a build uuid and
a newline (``echo UUID | nc executor 7900``, or ``finger UUID@executor``),
and reads the build's console log as it is written, from the start; the
connection closes when the build ends.  An unknown build gets ``Build ID
<uuid> not found`` and the connection closes.  The builds and their log
files are those registered with the executor's LogStreamServer, read the
same safe way (``zuul.executor.logstream.follow``).
"""

from __future__ import annotations

import logging
import re
import socketserver
import threading

from zuul.executor.logstream import LogStreamServer, UnsafeLogError, follow, open_log

log = logging.getLogger('zuul.executor.finger')

# A finger request is a line; anything longer is not one.
MAX_REQUEST = 256
REQUEST_TIMEOUT = 10
_UUID_RE = re.compile(r'^[0-9A-Za-z][0-9A-Za-z_-]{0,127}$')


class FingerServer:
    """Serves ``streams``' builds over finger on ``host``:``port``
    (``port`` 0 picks a free one, see ``.port``)."""

    def __init__(self, streams: LogStreamServer, host: str = '0.0.0.0', port: int = 7900):
        self.streams = streams
        self._server = socketserver.ThreadingTCPServer((host, port), _handler_class(streams),
                                                       bind_and_activate=False)
        self._server.daemon_threads = True
        self._server.allow_reuse_address = True
        self._server.server_bind()
        self._server.server_activate()
        self.port = self._server.server_address[1]
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, name='finger',
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def parse_request(line: bytes) -> str | None:
    """The build uuid of a finger request line (``/W`` verbose flag
    allowed, as finger clients send it), or None if it is not one."""
    text = line.decode('ascii', 'replace').strip()
    if text.startswith('/W'):
        text = text[2:].strip()
    return text if _UUID_RE.match(text) else None


def _handler_class(streams: LogStreamServer):
    class FingerHandler(socketserver.StreamRequestHandler):
        def handle(self):
            self.request.settimeout(REQUEST_TIMEOUT)
            try:
                line = self.rfile.readline(MAX_REQUEST + 1)
            except OSError:
                return
            self.request.settimeout(None)
            uuid = parse_request(line) if len(line) <= MAX_REQUEST else None
            if uuid is None:
                self._send(b'Invalid request: send a build uuid and a newline\n')
                return
            stream = streams.get(uuid)
            if stream is None:
                self._send(f'Build ID {uuid} not found\n'.encode())
                return
            try:
                f = open_log(stream)
            except UnsafeLogError:
                self._send(f'Build ID {uuid}: the log is not available\n'.encode())
                return
            try:
                follow(stream, self._send, f)
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                if f is not None:
                    f.close()

        def _send(self, data: bytes) -> None:
            self.wfile.write(data)
            self.wfile.flush()

    return FingerHandler
