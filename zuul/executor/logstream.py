"""Live log streaming: the growing job-output.txt over HTTP.

``GET /<build uuid>`` answers ``200`` with ``Transfer-Encoding: chunked``
and sends the build's text log from the start, then every line as it is
written, and ends the response when the build has finished and the file
has been read to its end.  Unknown builds get ``404``.  The executor
announces ``url(uuid)`` in its first WORK_DATA packet; zuul-web (or curl)
follows it.

The same port speaks the released ``finger`` protocol (``[executor]
finger_port``): a client that sends a build uuid and a newline instead of
an HTTP request (``echo UUID | nc executor 7900``, ``finger
UUID@executor``) reads the console from the start until the build ends;
an unknown build gets ``Build ID <uuid> not found``.  The two are told
apart by the first bytes: an HTTP request starts with its method.

The log lives in the build's ``work/`` directory, which untrusted
playbooks can write to: they may replace the file, or any directory above
it, with a symlink to a file of the executor.  The log is therefore opened
below a ``root`` (the job dir) one component at a time without following
any link (``zuul.lib.safefile``); anything that is not a plain regular
file there is refused: ``404`` if it is already so when a reader arrives,
an error line at the end of the stream if it appears later.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from zuul.lib import safefile

log = logging.getLogger('zuul.executor.logstream')

# ansible appends to the log from another process; nothing can wake us on
# a write, so an idle stream looks again after this long.
FOLLOW_INTERVAL = 0.2
CHUNK = 65536


REFUSED_LINE = (b'\n*** Zuul: the log file is not a regular file inside the build directory '
                b'(a symlink?); not streamed ***\n')


# A finger request is a line; anything longer is not one.
FINGER_MAX_REQUEST = 256
FINGER_REQUEST_TIMEOUT = 10
_FINGER_UUID_RE = re.compile(r'^[0-9A-Za-z][0-9A-Za-z_-]{0,127}$')
_HTTP_METHODS = (b'GET ', b'HEAD', b'POST', b'PUT ', b'DELE', b'OPTI', b'PATC', b'CONN',
                 b'TRAC')


class UnsafeLogError(Exception):
    """The log path passes through a symlink or is not a regular file."""


class _Stream:
    def __init__(self, path: str, root: str, check_root: bool = False):
        self.path = os.path.abspath(path)
        self.root = os.path.abspath(root)
        self.check_root = check_root
        # raises UnsafePathError when the path is not below the root
        self.relpath = safefile.relative_to(self.root, self.path)
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

    def register(self, uuid: str, path: str, root: str | None = None) -> None:
        """Make ``uuid``'s log at ``path`` followable (it may not exist yet).

        The log is only ever opened below ``root`` and never through a
        symlink; ``root`` itself must not be replaceable by untrusted code
        (the job dir is the sandbox's mount point).  Default: the directory
        two levels above ``path`` (``work/`` of ``work/logs/job-output.txt``),
        which is then itself checked not to be a symlink."""
        stream = _Stream(path, root or os.path.dirname(os.path.dirname(os.path.abspath(path))),
                         check_root=root is None)
        with self._lock:
            self._streams[uuid] = stream

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


def open_log(stream: _Stream):
    """The log opened for reading, or None while it does not exist yet.
    Raises UnsafeLogError for a symlink (at the file or any directory
    between it and the root) or anything but a regular file."""
    try:
        if stream.check_root:
            safefile.check_root(stream.root)
        fd = safefile.open_regular_beneath(stream.root, stream.relpath, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning('Refusing to stream %s: %s', stream.path, exc)
        raise UnsafeLogError(str(exc)) from None
    return os.fdopen(fd, 'rb')


def _open_when_present(stream: _Stream):
    with stream.cond:
        while True:
            f = open_log(stream)
            if f is not None:
                return f
            if stream.finished:
                return None
            stream.cond.wait(FOLLOW_INTERVAL)


def follow(stream: _Stream, write, f=None) -> None:
    """Call ``write(bytes)`` with the log's content until it is complete
    (``f``: the log already opened by ``open_log``)."""
    if f is None:
        try:
            f = _open_when_present(stream)
        except UnsafeLogError:
            write(REFUSED_LINE)
            return
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


def parse_finger_request(line: bytes) -> str | None:
    """The build uuid of a finger request line (``/W`` verbose flag
    allowed, as finger clients send it), or None if it is not one."""
    text = line.decode('ascii', 'replace').strip()
    if text.startswith('/W'):
        text = text[2:].strip()
    return text if _FINGER_UUID_RE.match(text) else None


def answer_finger(server: LogStreamServer, rfile, send) -> None:
    """Read one finger request from ``rfile`` and stream the build's
    console with ``send`` until it ends."""
    line = rfile.readline(FINGER_MAX_REQUEST + 1)
    uuid = parse_finger_request(line) if len(line) <= FINGER_MAX_REQUEST else None
    if uuid is None:
        send(b'Invalid request: send a build uuid and a newline\n')
        return
    stream = server.get(uuid)
    if stream is None:
        send(f'Build ID {uuid} not found\n'.encode())
        return
    try:
        f = open_log(stream)
    except UnsafeLogError:
        send(f'Build ID {uuid}: the log is not available\n'.encode())
        return
    try:
        follow(stream, send, f)
    finally:
        if f is not None:
            f.close()


def _handler_class(server: LogStreamServer):
    class LogStreamHandler(BaseHTTPRequestHandler):
        protocol_version = 'HTTP/1.1'

        def handle(self):
            self.request.settimeout(FINGER_REQUEST_TIMEOUT)
            try:
                head = self.rfile.peek(4)[:4]
            except OSError:
                return
            self.request.settimeout(None)
            if not head or head.startswith(_HTTP_METHODS):
                super().handle()
                return
            try:
                answer_finger(server, self.rfile, self._send_raw)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _send_raw(self, data: bytes) -> None:
            self.wfile.write(data)
            self.wfile.flush()

        def log_message(self, fmt, *args):  # route to logging, not stderr
            log.debug('%s - ' + fmt, self.address_string(), *args)

        def do_GET(self):  # noqa: N802 - http.server API
            stream = server.get(self.path.strip('/').split('/')[0].split('?')[0])
            if stream is None:
                self.send_error(404, 'No such build running here')
                return
            try:
                f = open_log(stream)  # None: not there yet, followed below
            except UnsafeLogError:
                self.send_error(404, 'The log of this build is not available')
                return
            self.send_response(200)
            self.send_header('Content-Type', 'text/plain; charset=utf-8')
            self.send_header('Transfer-Encoding', 'chunked')
            self.end_headers()

            def write(data: bytes) -> None:
                self.wfile.write(b'%x\r\n%s\r\n' % (len(data), data))
                self.wfile.flush()
            try:
                follow(stream, write, f)
                self.wfile.write(b'0\r\n\r\n')
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                if f is not None:
                    f.close()
            self.close_connection = True

    return LogStreamHandler
