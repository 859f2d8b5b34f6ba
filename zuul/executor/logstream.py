"""Live log streaming: the growing job-output.txt over HTTP.

``GET /<build uuid>`` answers ``200`` with ``Transfer-Encoding: chunked``
and sends the build's text log from the start, then every line as it is
written, and ends the response when the build has finished and the file
has been read to its end.  Unknown builds get ``404``.  The executor
announces ``url(uuid)`` in its first WORK_DATA packet; zuul-web (or curl)
follows it.
"""

from __future__ import annotations

import logging
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger('zuul.executor.logstream')

# ansible appends to the log from another process; nothing can wake us on
# a write, so an idle stream looks again after this long.
FOLLOW_INTERVAL = 0.2
CHUNK = 65536


class _Stream:
    def __init__(self, path: str):
        self.path = path
        self.finished = False
        self.cond = threading.Condition()


class LogStreamServer:
    """Serves the live logs of the builds registered with it."""

    def __init__(self, host: str = '0.0.0.0', port: int = 0,
                 public_host: str | None = None):
        self._streams: dict[str, _Stream] = {}
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), _handler_class(self))
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.public_host = public_host or ('127.0.0.1' if host in ('0.0.0.0', '') else host)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        name='log-stream', daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            streams = list(self._streams.values())
        for stream in streams:
            self._mark_finished(stream)

    def url(self, uuid: str) -> str:
        return f'http://{self.public_host}:{self.port}/{uuid}'

    def register(self, uuid: str, path: str) -> None:
        """Make ``uuid``'s log at ``path`` followable (it may not exist yet)."""
        with self._lock:
            self._streams[uuid] = _Stream(path)

    def finish(self, uuid: str) -> None:
        """The build ended: readers drain the file and end their response."""
        with self._lock:
            stream = self._streams.pop(uuid, None)
        if stream is not None:
            self._mark_finished(stream)

    @staticmethod
    def _mark_finished(stream: _Stream) -> None:
        with stream.cond:
            stream.finished = True
            stream.cond.notify_all()

    def get(self, uuid: str) -> _Stream | None:
        with self._lock:
            return self._streams.get(uuid)


def _open_when_present(stream: _Stream):
    with stream.cond:
        while not os.path.exists(stream.path):
            if stream.finished:
                return None
            stream.cond.wait(FOLLOW_INTERVAL)
    try:
        return open(stream.path, 'rb')
    except FileNotFoundError:
        return None


def follow(stream: _Stream, write) -> None:
    """Call ``write(bytes)`` with the log's content until it is complete."""
    f = _open_when_present(stream)
    if f is None:
        return
    with f:
        while True:
            data = f.read(CHUNK)
            if data:
                write(data)
                continue
            with stream.cond:
                if stream.finished:
                    finished = True
                else:
                    finished = False
                    stream.cond.wait(FOLLOW_INTERVAL)
            if finished:
                rest = f.read()
                if rest:
                    write(rest)
                return


def _handler_class(server: LogStreamServer):
    class LogStreamHandler(BaseHTTPRequestHandler):
        protocol_version = 'HTTP/1.1'

        def log_message(self, fmt, *args):  # route to logging, not stderr
            log.debug('%s - ' + fmt, self.address_string(), *args)

        def do_GET(self):  # noqa: N802 - http.server API
            stream = server.get(self.path.strip('/').split('/')[0].split('?')[0])
            if stream is None:
                self.send_error(404, 'No such build running here')
                return
            self.send_response(200)
            self.send_header('Content-Type', 'text/plain; charset=utf-8')
            self.send_header('Transfer-Encoding', 'chunked')
            self.end_headers()

            def write(data: bytes) -> None:
                self.wfile.write(b'%x\r\n%s\r\n' % (len(data), data))
                self.wfile.flush()
            try:
                follow(stream, write)
                self.wfile.write(b'0\r\n\r\n')
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.close_connection = True

    return LogStreamHandler
