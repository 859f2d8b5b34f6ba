"""The SSH side of the development Gerrit (paramiko)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import queue
import shlex
import socket
import stat
import subprocess
import threading
import time

import paramiko

from zuul.devtools.gerrit import hooks
from zuul.devtools.gerrit.query import run_query
from zuul.devtools.gerrit.receive import receive_pack
from zuul.devtools.gerrit.store import Change, ReviewError, ReviewStore

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

    ``http_port`` (0: a free port; None, the default: none) adds a
    read-only HTTP server (web.py) with a page per change at
    ``/c/<project>/+/<number>``; ``http_port`` and ``http_url`` then give
    its address. Change URLs in events and queries come from the store's
    ``canonical_url``: ``store.set_canonical_url(server.http_url)`` makes
    them (and the links Zuul builds from a connection ``baseurl`` of the
    same value) lead to these pages.
    """

    def __init__(self, store: ReviewStore, host_key_path: str, port: int = 0,
                 address: str = '127.0.0.1', authorized_keys=None,
                 http_port: int | None = None):
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
        self._http = None
        self.http_port: int | None = None
        self.http_url: str | None = None
        if http_port is not None:
            from zuul.devtools.gerrit.web import DevGerritHTTPServer
            try:
                self._http = DevGerritHTTPServer(store, address, http_port)
            except OSError:
                self._sock.close()
                raise
            self.http_port = self._http.port
            host = f'[{address}]' if ':' in address else address
            self.http_url = f'http://{host}:{self.http_port}'

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> None:
        self._running = True
        threading.Thread(target=self._accept_loop, name='devgerrit-accept',
                         daemon=True).start()
        if self._http is not None:
            self._http.start()

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
        if self._http is not None:
            self._http.stop()
            self._http = None

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
        # As the client (zuul/driver/gerrit/ssh.py): no Nagle delay on
        # the small messages that end each command.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport = paramiko.Transport(sock)
        transport.add_server_key(self.host_key)
        # scp from OpenSSH 9+ speaks SFTP: serves hooks/commit-msg.
        transport.set_subsystem_handler('sftp', _SFTPServer, _HookSFTP)
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
                return self._git(channel, argv, username)
            if argv[:1] == ['scp']:
                return self._scp(channel, argv[1:])
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
                self._review(args, username, channel)
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

    def _review(self, args: list[str], username: str, channel=None) -> None:
        opts = _parse_review(args)
        if opts.json:
            _apply_review_input(opts, _read_stdin(channel))
        targets = [self._find_patchset(key, opts.project, opts.branch)
                   for key in opts.changes]
        for change, patchset in targets:
            if opts.restore:
                self.store.restore(change, username, opts.message or '')
            message = '' if (opts.abandon or opts.restore) else (opts.message or '')
            if message or opts.labels or opts.submit:
                self.store.review(change, patchset, username, message, opts.labels,
                                  submit=opts.submit, tag=opts.tag, notify=opts.notify)
            if opts.abandon:
                self.store.abandon(change, username, opts.message or '')

    def _find_patchset(self, key: str, project: str | None,
                       branch: str | None) -> tuple[Change, int]:
        """A change and patch set number from ``N,P`` or a (possibly
        abbreviated) commit sha, as ``gerrit review`` takes them."""
        store = self.store
        with store.lock:
            if ',' in key:
                number, _, ps = key.partition(',')
                if not number.isdigit() or not ps.isdigit():
                    raise ReviewError(f'"{key}" is not a valid patch set')
                change = store.changes.get(int(number))
                if change is None or (project and change.project != project) or \
                        (branch and change.branch != branch):
                    raise ReviewError(f'change {key} not found')
                if not 1 <= int(ps) <= len(change.patchsets):
                    raise ReviewError(f'patch set {key} not found')
                return change, int(ps)
            if len(key) < 4 or any(c not in '0123456789abcdef' for c in key.lower()):
                raise ReviewError(f'"{key}" is not a valid patch set')
            found = [(c, ps.number) for c in store.changes.values()
                     for ps in c.patchsets if ps.revision.startswith(key.lower())
                     and (not project or c.project == project)
                     and (not branch or c.branch == branch)]
            if not found:
                raise ReviewError(f'patch set {key} not found')
            if len(found) > 1:
                raise ReviewError(f'"{key}" matches multiple patch sets')
            return found[0]

    def _scp(self, channel, args: list[str]) -> None:
        """The source side of scp's original protocol (``scp -O``), for
        ``scp -p -P <port> <user>@<host>:hooks/commit-msg .git/hooks/``."""
        flags = [a for a in args if a.startswith('-')]
        paths = [a for a in args if not a.startswith('-')]
        if '-f' not in flags or len(paths) != 1:
            return _finish(channel, 1, err='scp: only downloads (scp -f) are served\n')
        served = hooks.lookup(paths[0])
        if served is None:
            channel.sendall(f'\x01scp: {paths[0]}: No such file or directory\n'.encode())
            return _finish(channel, 1)
        mode, data = served
        name = paths[0].rstrip('/').rsplit('/', 1)[-1]

        def acked():
            return channel.recv(1) == b'\0'
        if not acked():
            return _finish(channel, 1)
        if '-p' in flags:
            now = int(time.time())
            channel.sendall(f'T{now} 0 {now} 0\n'.encode())
            if not acked():
                return _finish(channel, 1)
        channel.sendall(f'C{mode:04o} {len(data)} {name}\n'.encode())
        if not acked():
            return _finish(channel, 1)
        channel.sendall(data + b'\0')
        acked()
        _finish(channel, 0)

    def _git(self, channel, argv: list[str], username: str) -> None:
        service = argv[0] if argv[0].startswith('git-') else f'git-{argv[1]}'
        project = argv[-1].strip("'\"").strip('/')
        if project.endswith('.git'):
            project = project[:-4]
        if project not in self.store.projects:
            return _finish(channel, 128, err=f"fatal: '{project}' does not appear to be a "
                                             'git repository\n')
        if service == 'git-receive-pack':
            return _finish(channel, receive_pack(self.store, channel, project, username,
                                                 self.port))
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


# Labels with their own ``--<label>`` option (Gerrit derives one per label
# configured on the project) and the values the dev server allows.
LABELS = {'Code-Review': range(-2, 3), 'Verified': range(-2, 3), 'Workflow': range(-1, 2)}


class _ReviewParser(argparse.ArgumentParser):
    def error(self, message):
        raise ReviewError(message)


def _parse_review(args: list[str]):
    """``gerrit review``'s options, with Gerrit's (args4j) wording for
    errors."""
    p = _ReviewParser(prog='gerrit review', add_help=False, allow_abbrev=False,
                      exit_on_error=False)
    p.add_argument('--project', '-p')
    p.add_argument('--branch', '-b')
    p.add_argument('--message', '-m')
    p.add_argument('--label', '-l', action='append', default=[])
    for label in LABELS:
        p.add_argument(f'--{label.lower()}', dest=f'label_{label}', metavar='N')
    p.add_argument('--submit', '-s', action='store_true')
    p.add_argument('--abandon', action='store_true')
    p.add_argument('--restore', action='store_true')
    p.add_argument('--tag', '-t')
    p.add_argument('--notify', '-n', choices=['NONE', 'OWNER', 'OWNER_REVIEWERS', 'ALL'])
    p.add_argument('--json', '-j', action='store_true')
    p.add_argument('changes', nargs='*')
    try:
        opts, unknown = p.parse_known_args(args)
    except argparse.ArgumentError as e:
        if e.argument_name and e.message.startswith('expected one argument'):
            raise ReviewError(f'Option "{e.argument_name.split("/")[0]}" takes an '
                              'operand') from None
        raise ReviewError(str(e)) from None
    for arg in unknown:
        if arg.startswith('-'):
            raise ReviewError(f'"{arg}" is not a valid option')
    opts.changes += unknown
    if not opts.changes:
        raise ReviewError('Argument "{COMMIT | CHANGE,PATCHSET}" is required')
    if opts.abandon and opts.restore:
        raise ReviewError('abandon and restore actions are mutually exclusive')
    if opts.submit and (opts.abandon or opts.restore):
        raise ReviewError('submit and abandon/restore actions are mutually exclusive')
    labels = {}
    items = [item.partition('=') for item in opts.label]
    for name, sep, value in items:
        if not sep or not name:
            raise ReviewError(f'"{name}{sep}{value}" is not a valid label vote '
                              '(use Label-Name=N)')
        labels[name] = _vote(name, value)
    for label in LABELS:
        value = getattr(opts, f'label_{label}')
        if value is not None:
            labels[label] = _vote(label, value)
    opts.labels = labels
    return opts


def _read_stdin(channel, limit: int = 1 << 20) -> bytes:
    data = b''
    while channel is not None and len(data) < limit:
        chunk = channel.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _apply_review_input(opts, raw: bytes) -> None:
    """``--json``: a ReviewInput (message, labels, tag) read from stdin."""
    try:
        review = json.loads(raw or b'{}')
    except ValueError as e:
        raise ReviewError(f'invalid JSON on stdin: {e}') from None
    if not isinstance(review, dict):
        raise ReviewError('the JSON on stdin must be a ReviewInput object')
    if review.get('message'):
        opts.message = str(review['message'])
    if review.get('tag'):
        opts.tag = str(review['tag'])
    for label, value in (review.get('labels') or {}).items():
        opts.labels[label] = _vote(label, str(value))


def _vote(label: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ReviewError(f'"{text}" is not a valid value for "{label}"') from None
    allowed = LABELS.get(label)
    if allowed is not None and value not in allowed:
        raise ReviewError(f'"{text}" is not a valid value for "{label}" (allowed: '
                          f'{allowed.start:+d}..{allowed.stop - 1:+d})')
    return value


class _SFTPServer(paramiko.SFTPServer):
    def finish_subsystem(self):
        # scp (OpenSSH 9+) reports a failure without an exit status.
        try:
            self.sock.send_exit_status(0)
        except (OSError, EOFError, paramiko.SSHException):
            pass
        super().finish_subsystem()


class _HookSFTP(paramiko.SFTPServerInterface):
    """A read-only SFTP view of the served client files (hooks/commit-msg)."""

    def canonicalize(self, path):
        parts = []
        for part in path.replace('\\', '/').split('/'):
            if part in ('', '.', '~'):
                continue
            if part == '..':
                if parts:
                    parts.pop()
            else:
                parts.append(part)
        return '/' + '/'.join(parts)

    def _attr(self, path):
        path = self.canonicalize(path)
        now = int(time.time())
        attr = paramiko.SFTPAttributes()
        attr.st_uid = attr.st_gid = 0
        attr.st_atime = attr.st_mtime = now
        served = hooks.lookup(path)
        if served is not None:
            attr.st_mode = stat.S_IFREG | served[0]
            attr.st_size = len(served[1])
            attr.filename = path.rsplit('/', 1)[-1]
            return attr
        prefix = path.rstrip('/') + '/'
        if path == '/' or any(('/' + f).startswith(prefix) for f in hooks.FILES):
            attr.st_mode = stat.S_IFDIR | 0o755
            attr.st_size = 0
            attr.filename = path.rsplit('/', 1)[-1] or '/'
            return attr
        return paramiko.SFTP_NO_SUCH_FILE

    def stat(self, path):
        return self._attr(path)

    lstat = stat

    def list_folder(self, path):
        prefix = self.canonicalize(path).rstrip('/') + '/'
        names = {('/' + f)[len(prefix):].split('/')[0] for f in hooks.FILES
                 if ('/' + f).startswith(prefix)}
        if not names:
            return paramiko.SFTP_NO_SUCH_FILE
        return [self._attr(prefix + n) for n in sorted(names)]

    def open(self, path, flags, attr):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND):
            return paramiko.SFTP_PERMISSION_DENIED
        served = hooks.lookup(self.canonicalize(path))
        if served is None:
            return paramiko.SFTP_NO_SUCH_FILE
        handle = _MemoryHandle(served[1], self._attr(path))
        return handle


class _MemoryHandle(paramiko.SFTPHandle):
    def __init__(self, data: bytes, attr):
        super().__init__()
        self.data = data
        self.attr = attr

    def read(self, offset, length):
        return self.data[offset:offset + length]

    def stat(self):
        return self.attr


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
