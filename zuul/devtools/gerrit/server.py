"""The SSH side of the development Gerrit (paramiko)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import queue
import shlex
import socket
import subprocess
import threading

import paramiko

from zuul.devtools.gerrit.query import run_query
from zuul.devtools.gerrit.store import ReviewError, ReviewStore

log = logging.getLogger('zuul.devtools.gerrit')

GERRIT_VERSION = '3.9.0-devserver'


class _SSHInterface(paramiko.ServerInterface):
    def __init__(self, server: DevGerritServer):
        self.server = server
        self.username = None
        self.commands: queue.Queue = queue.Queue()

    def check_auth_publickey(self, username, key):
        if self.server.accepts_key(key):
            self.username = username
            return paramiko.AUTH_SUCCESSFUL
        return paramiko.AUTH_FAILED

    def get_allowed_auths(self, username):
        return 'publickey'

    def check_channel_request(self, kind, chanid):
        if kind == 'session':
            return paramiko.OPEN_SUCCEEDED
        return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel, command):
        self.commands.put((channel, command.decode('utf-8', 'replace')))
        return True


class DevGerritServer:
    """Serves a ReviewStore over SSH on a loopback port.

    ``authorized_keys`` is a list of paramiko PKey objects (or public key
    lines); None accepts any key (the quickstart's default is to authorize
    the keys it generates).
    """

    def __init__(self, store: ReviewStore, host_key_path: str, port: int = 0,
                 address: str = '127.0.0.1', authorized_keys=None):
        self.store = store
        self.address = address
        self.host_key = _load_or_create_host_key(host_key_path)
        self._authorized = None if authorized_keys is None else {
            _key_blob(k) for k in authorized_keys}
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((address, port))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        self._running = False
        self._transports: list[paramiko.Transport] = []
        self._streams: list = []
        self._lock = threading.Lock()
        # Fault injection for tests: refuse stream-events while False.
        self.accept_streams = True

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> None:
        self._running = True
        threading.Thread(target=self._accept_loop, name='devgerrit-accept',
                         daemon=True).start()

    def stop(self) -> None:
        self._running = False
        # shutdown() wakes the accept loop, which then closes the socket: a
        # bare close() would leave it blocked on a file descriptor number
        # that the next server could reuse.
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.drop_stream_connections()
        with self._lock:
            for t in self._transports:
                t.close()

    def accepts_key(self, key) -> bool:
        return self._authorized is None or key.asbytes() in self._authorized

    def host_key_line(self) -> str:
        return f'{self.host_key.get_name()} {self.host_key.get_base64()}'

    def drop_stream_connections(self) -> int:
        """Cut every open ``stream-events`` session (as a Gerrit restart or
        a network failure would). Returns how many were cut."""
        with self._lock:
            streams, self._streams = self._streams, []
        for channel in streams:
            try:
                channel.get_transport().close()
            except Exception:  # pragma: no cover - already gone
                pass
        return len(streams)

    def stream_count(self) -> int:
        with self._lock:
            return len(self._streams)

    def _accept_loop(self) -> None:
        while self._running:
            try:
                sock, _ = self._sock.accept()
            except OSError:
                break
            if not self._running:
                sock.close()
                break
            threading.Thread(target=self._serve_connection, args=(sock,),
                             name='devgerrit-conn', daemon=True).start()
        self._sock.close()

    def _serve_connection(self, sock) -> None:
        transport = paramiko.Transport(sock)
        transport.add_server_key(self.host_key)
        iface = _SSHInterface(self)
        try:
            transport.start_server(server=iface)
        except (paramiko.SSHException, EOFError, OSError):
            return
        with self._lock:
            self._transports.append(transport)
        try:
            while transport.is_active() and self._running:
                try:
                    channel, command = iface.commands.get(timeout=1.0)
                except queue.Empty:
                    continue
                threading.Thread(target=self._run_command,
                                 args=(channel, command, iface.username),
                                 name='devgerrit-cmd', daemon=True).start()
        finally:
            with self._lock:
                if transport in self._transports:
                    self._transports.remove(transport)

    # -- commands -----------------------------------------------------------

    def _run_command(self, channel, command: str, username: str) -> None:
        try:
            argv = shlex.split(command)
        except ValueError as e:
            return _finish(channel, 1, err=f'fatal: {e}\n')
        log.debug('%s: %s', username, command)
        try:
            if argv[:1] in (['git-upload-pack'], ['git-receive-pack']) or \
                    argv[:2] in (['git', 'upload-pack'], ['git', 'receive-pack']):
                return self._git(channel, argv)
            if argv[:1] != ['gerrit'] or len(argv) < 2:
                return _finish(channel, 127, err=f'fatal: unavailable command "{command}"\n')
            verb, args = argv[1], argv[2:]
            if verb == 'version':
                return _finish(channel, 0, f'gerrit version {GERRIT_VERSION}\n')
            if verb == 'stream-events':
                return self._stream_events(channel)
            if verb == 'query':
                return _finish(channel, 0, run_query(self.store, args))
            if verb == 'review':
                self._review(args, username)
                return _finish(channel, 0)
            if verb == 'ls-projects':
                return _finish(channel, 0, ''.join(f'{p}\n' for p in sorted(
                    self.store.projects)))
            return _finish(channel, 1, err=f'fatal: "{verb}" is not a gerrit command\n')
        except ReviewError as e:
            _finish(channel, 1, err=f'fatal: {e}\n')
        except Exception as e:  # a bug here must not take the server down
            log.exception('command failed: %s', command)
            _finish(channel, 1, err=f'fatal: internal error: {e}\n')

    def _stream_events(self, channel) -> None:
        if not self.accept_streams:
            return _finish(channel, 1, err='fatal: stream-events unavailable\n')
        events: queue.Queue = queue.Queue()
        self.store.subscribe(events.put)
        with self._lock:
            self._streams.append(channel)
        try:
            while not channel.closed and channel.get_transport().is_active():
                try:
                    event = events.get(timeout=0.5)
                except queue.Empty:
                    continue
                channel.sendall((json.dumps(event) + '\n').encode())
        except (OSError, EOFError, paramiko.SSHException):
            pass
        finally:
            self.store.unsubscribe(events.put)
            with self._lock:
                if channel in self._streams:
                    self._streams.remove(channel)
            channel.close()

    def _review(self, args: list[str], username: str) -> None:
        opts = _parse_review(args)
        number, _, ps = opts.change.partition(',')
        change = self.store.get_change(number)
        if opts.project and opts.project != change.project:
            raise ReviewError(f'change {number} is not in project {opts.project}')
        patchset = int(ps) if ps else change.current.number
        self.store.review(change, patchset, username, opts.message or '', opts.labels,
                          submit=opts.submit, tag=opts.tag)
        if opts.abandon:
            self.store.abandon(change, username)
        if opts.restore:
            self.store.restore(change, username)

    def _git(self, channel, argv: list[str]) -> None:
        service = argv[0] if argv[0].startswith('git-') else f'git-{argv[1]}'
        project = argv[-1].strip("'\"").strip('/')
        if project.endswith('.git'):
            project = project[:-4]
        if project not in self.store.projects:
            return _finish(channel, 128, err=f"fatal: '{project}' does not appear to be a "
                                             'git repository\n')
        proc = subprocess.Popen(['git', service[4:], self.store.repos.path(project)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)

        def pump_in():
            try:
                while True:
                    data = channel.recv(65536)
                    if not data:
                        break
                    proc.stdin.write(data)
                    proc.stdin.flush()
            except (OSError, ValueError):
                pass
            finally:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
        t = threading.Thread(target=pump_in, daemon=True)
        t.start()
        while True:
            data = proc.stdout.read1(65536)
            if not data:
                break
            channel.sendall(data)
        err = proc.stderr.read()
        rc = proc.wait()
        if err:
            channel.sendall_stderr(err)
        _finish(channel, rc)


def _parse_review(args: list[str]):
    p = argparse.ArgumentParser(prog='gerrit review', add_help=False, exit_on_error=False)
    p.add_argument('--project', '-p')
    p.add_argument('--message', '-m')
    p.add_argument('--label', '-l', action='append', default=[])
    p.add_argument('--verified', type=int)
    p.add_argument('--code-review', type=int)
    p.add_argument('--submit', '-s', action='store_true')
    p.add_argument('--abandon', action='store_true')
    p.add_argument('--restore', action='store_true')
    p.add_argument('--tag', '-t')
    p.add_argument('--notify', '-n')
    p.add_argument('--json', '-j', action='store_true')
    p.add_argument('change')
    try:
        opts = p.parse_args(args)
    except (argparse.ArgumentError, SystemExit) as e:
        raise ReviewError(f'bad review arguments: {e}') from None
    labels = {}
    for item in opts.label:
        name, sep, value = item.partition('=')
        if not sep:
            raise ReviewError(f'bad label "{item}"')
        labels[name] = int(value)
    if opts.verified is not None:
        labels['Verified'] = opts.verified
    if opts.code_review is not None:
        labels['Code-Review'] = opts.code_review
    opts.labels = labels
    return opts


def _finish(channel, status: int, out: str = '', err: str = '') -> None:
    try:
        if out:
            channel.sendall(out.encode())
        if err:
            channel.sendall_stderr(err.encode())
        channel.send_exit_status(status)
    except (OSError, EOFError, paramiko.SSHException):
        pass
    finally:
        channel.close()


def _key_blob(key) -> bytes:
    if isinstance(key, paramiko.PKey):
        return key.asbytes()
    parts = str(key).split()
    return paramiko.PKey.from_type_string(parts[0], __import__('base64').b64decode(
        parts[1])).asbytes()


def _load_or_create_host_key(path: str) -> paramiko.PKey:
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
        subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', path],
                       check=True)
    return paramiko.Ed25519Key.from_private_key_file(path)
