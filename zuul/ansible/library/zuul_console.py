#!/usr/bin/python
"""``zuul_console``: start the console log server on a node.

As released Zuul's module (zuul-jobs' ``start-zuul-console`` role runs it
with no arguments): a daemon that listens on TCP ``port`` (19885) and
serves the console logs Zuul's ``command`` module writes
(``path``, default ``/tmp/console-{log_uuid}.log``) to the executor, which
streams them into the build's live log.  Running it again while a server
already listens on the port changes nothing; the daemon stays for the
node's life.

Protocol (one request per connection, each a line of at most 1 KiB, sent
within 10 s):

* ``<log id>\\n`` -- the log of that id from its start, then every byte
  appended, until the client disconnects.  While the file does not exist
  the server sends ``[Zuul] Log not found\\n`` every half second.
* ``v:<version>\\n`` -- the server answers its protocol version
  (``1\\n``) and reads the next request on the same connection.
* ``f:<log id>\\n`` -- the server deletes that log (the executor has
  read it to its end) and closes the connection.

A log id is used as a file name in ``/tmp`` only: every character but
letters, digits, ``.``, ``_`` and ``-`` is replaced, so no request names
another file.

This module runs on the node, shipped by Ansible: standard library and
``ansible.module_utils`` only.
"""

from __future__ import annotations

import os
import re
import select
import socket
import sys
import threading
import time

from ansible.module_utils.basic import AnsibleModule

LOG_STREAM_FILE = '/tmp/console-{log_uuid}.log'
LOG_STREAM_PORT = 19885
PROTOCOL_VERSION = 1
MAX_REQUEST = 1024
REQUEST_TIMEOUT = 10
FOLLOW_INTERVAL = 0.1
NOT_FOUND_INTERVAL = 0.5
NOT_FOUND = b'[Zuul] Log not found\n'
CHUNK = 65536
_UNSAFE_ID = re.compile(r'[^A-Za-z0-9._-]')


def clean_id(text: str) -> str:
    return _UNSAFE_ID.sub('_', text.strip())


def read_request(conn, buffer: bytes) -> tuple[str | None, bytes]:
    """One request line and what came after it; None on a closed,
    silent or oversized request."""
    deadline = time.monotonic() + REQUEST_TIMEOUT
    while b'\n' not in buffer:
        if len(buffer) > MAX_REQUEST:
            return None, b''
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None, b''
        ready, _, _ = select.select([conn], [], [], remaining)
        if not ready:
            return None, b''
        data = conn.recv(MAX_REQUEST)
        if not data:
            return None, b''
        buffer += data
    line, rest = buffer.split(b'\n', 1)
    if len(line) > MAX_REQUEST:
        return None, b''
    return line.decode('utf-8', 'replace'), rest


class ConsoleServer:
    def __init__(self, path: str, port: int):
        self.path = path
        self.sock = self._listen(port)

    @staticmethod
    def _listen(port: int) -> socket.socket:
        try:
            sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            address = ('::', port)
        except OSError:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            address = ('0.0.0.0', port)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError:
            if sock.family != socket.AF_INET6:
                raise
            sock.close()
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(('0.0.0.0', port))
        sock.listen(64)
        return sock

    def serve_forever(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def log_path(self, log_id: str) -> str:
        return self.path.format(log_uuid=clean_id(log_id))

    def handle(self, conn) -> None:
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            request, rest = read_request(conn, b'')
            if request is not None and request.startswith('v:'):
                conn.sendall(f'{PROTOCOL_VERSION}\n'.encode())
                request, rest = read_request(conn, rest)
            if request is None:
                return
            if request.startswith('f:'):
                try:
                    os.unlink(self.log_path(request[2:]))
                except OSError:
                    pass
                return
            self.stream(conn, self.log_path(request))
        except OSError:
            pass
        finally:
            try:
                conn.close()
            except OSError:
                pass

    @staticmethod
    def _gone(conn) -> bool:
        """The client closed (anything it sends now has no meaning)."""
        ready, _, _ = select.select([conn], [], [], 0)
        if not ready:
            return False
        try:
            return not conn.recv(4096)
        except OSError:
            return True

    def stream(self, conn, path: str) -> None:
        flags = os.O_RDONLY | getattr(os, 'O_NOFOLLOW', 0) | getattr(os, 'O_CLOEXEC', 0)
        while True:
            try:
                fd = os.open(path, flags)
                break
            except FileNotFoundError:
                conn.sendall(NOT_FOUND)
                time.sleep(NOT_FOUND_INTERVAL)
                if self._gone(conn):
                    return
        try:
            while True:
                data = os.read(fd, CHUNK)
                if data:
                    conn.sendall(data)
                    continue
                time.sleep(FOLLOW_INTERVAL)
                if self._gone(conn):
                    return
        finally:
            os.close(fd)


def daemonize() -> bool:
    """Fork the server off; True in the daemon."""
    if os.fork():
        return False
    os.setsid()
    if os.fork():
        os._exit(0)
    os.chdir('/')
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    return True


def run_daemon(path: str, port: int) -> None:
    try:
        server = ConsoleServer(path, port)
    except OSError:
        os._exit(0)     # a server listens already (an earlier playbook's)
    try:
        server.serve_forever()
    finally:
        os._exit(0)


def main():
    module = AnsibleModule(argument_spec=dict(
        path=dict(default=LOG_STREAM_FILE),
        port=dict(default=LOG_STREAM_PORT, type='int'),
    ))
    path, port = module.params['path'], module.params['port']
    if '{log_uuid}' not in path:
        module.fail_json(msg='path must contain {log_uuid}')
    if daemonize():
        run_daemon(path, port)
    else:
        os.wait()   # the first child exits at once; the daemon is its child
        module.exit_json(changed=True)


if __name__ == '__main__':
    if len(sys.argv) == 3 and sys.argv[1] == '--serve':   # tests: run in the foreground
        ConsoleServer(LOG_STREAM_FILE, int(sys.argv[2])).serve_forever()
    else:
        main()
