"""``git push`` to the development code-review server: the receive side of
git's pack protocol (v0), answering as Gerrit does.

A push to ``refs/for/<branch>`` becomes a change under review (or a new
patch set of the open change with the same ``Change-Id`` footer); the
branches themselves only move by submit. The pushed pack is indexed by the
real ``git index-pack`` into a quarantine object directory, and moves into
the repository only when the push is accepted.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import tempfile
import threading

import paramiko

from zuul.devtools.gerrit.store import ZERO_SHA, PushedCommit, ReviewError, ReviewStore

log = logging.getLogger('zuul.devtools.gerrit.receive')

CAPABILITIES = ('report-status', 'side-band-64k', 'quiet', 'ofs-delta', 'push-options',
                'agent=gerrit/devserver')
_MAX_DATA = 65515   # a side-band packet's payload, below git's 65520 limit


class ProtocolError(Exception):
    pass


def pkt(data: bytes) -> bytes:
    return b'%04x' % (len(data) + 4) + data


FLUSH = b'0000'


class _Reader:
    """Buffered reads from a paramiko channel."""

    def __init__(self, channel):
        self.channel = channel
        self.buf = b''

    def read(self, n: int) -> bytes:
        while len(self.buf) < n:
            data = self.channel.recv(65536)
            if not data:
                raise ProtocolError('unexpected end of input')
            self.buf += data
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def pkt_line(self) -> bytes | None:
        """One pkt-line's payload; None for a flush packet."""
        size = int(self.read(4), 16)
        if size == 0:
            return None
        if size < 4:
            raise ProtocolError(f'bad pkt-line length {size}')
        return self.read(size - 4)


class ReceivePack:
    """One ``git-receive-pack '/<project>'`` session on an SSH channel."""

    def __init__(self, store: ReviewStore, channel, project: str, username: str,
                 ssh_host: str, ssh_port: int):
        self.store = store
        self.channel = channel
        self.project = project
        self.username = username
        self.ssh_host = ssh_host
        self.ssh_port = ssh_port
        self.repo = store.repos.path(project)
        self.reader = _Reader(channel)
        self.sideband = False
        self.messages: list[str] = []

    # -- protocol -----------------------------------------------------------

    def run(self) -> None:
        self.channel.sendall(self._advertisement())
        commands, caps = self._read_commands()
        if not commands:
            return
        self.sideband = 'side-band-64k' in caps
        options = []
        if 'push-options' in caps:
            while (line := self.reader.pkt_line()) is not None:
                options.append(line.decode('utf-8', 'replace').rstrip('\n'))
        quarantine = tempfile.mkdtemp(prefix='incoming-',
                                      dir=os.path.join(self.repo, 'objects'))
        try:
            unpack = 'ok'
            if any(new != ZERO_SHA for _, new, _ in commands):
                unpack = self._index_pack(quarantine)
            if unpack == 'ok':
                results = [self._process(old, new, ref, options, quarantine)
                           for old, new, ref in commands]
            else:
                results = ['n/a (unpacker error)'] * len(commands)
        finally:
            shutil.rmtree(quarantine, ignore_errors=True)
        report = [pkt(f'unpack {unpack}\n'.encode())]
        for (_, _, ref), error in zip(commands, results):
            line = f'ok {ref}\n' if error is None else f'ng {ref} {error}\n'
            report.append(pkt(line.encode()))
        report.append(FLUSH)
        if self.messages:
            self._send_message(''.join(self.messages))
        if self.sideband:
            self._send_band(1, b''.join(report))
            self.channel.sendall(FLUSH)
        else:
            self.channel.sendall(b''.join(report))

    def _advertisement(self) -> bytes:
        out = self.store.repos.git(self.project, 'for-each-ref',
                                   '--format=%(objectname) %(refname)',
                                   'refs/heads', 'refs/tags')
        refs = [line.split(' ', 1) for line in out.splitlines() if line]
        advertised = {sha for sha, _ in refs}
        with self.store.lock:
            # Open changes' patch sets: the client sends only what is new.
            haves = sorted({c.current.revision for c in self.store.changes.values()
                            if c.project == self.project and c.is_open} - advertised)
        refs += [(sha, '.have') for sha in haves]
        caps = ' '.join(CAPABILITIES)
        if not refs:
            refs = [(ZERO_SHA, 'capabilities^{}')]
        lines = [pkt(f'{refs[0][0]} {refs[0][1]}\0{caps}\n'.encode())]
        lines += [pkt(f'{sha} {name}\n'.encode()) for sha, name in refs[1:]]
        return b''.join(lines) + FLUSH

    def _read_commands(self):
        commands, caps = [], set()
        while (line := self.reader.pkt_line()) is not None:
            text = line.decode('utf-8', 'replace').rstrip('\n')
            if '\0' in text:
                text, _, cap_text = text.partition('\0')
                caps = set(cap_text.split())
            if text.startswith('shallow '):
                continue
            old, new, ref = text.split(' ', 2)
            commands.append((old, new, ref))
        return commands, caps

    def _index_pack(self, quarantine: str) -> str:
        """Receive the pack into ``quarantine``; 'ok' or the error."""
        env = self._quarantine_env(quarantine)
        os.makedirs(os.path.join(quarantine, 'pack'), exist_ok=True)
        errors = tempfile.TemporaryFile()
        proc = subprocess.Popen(['git', '--git-dir', self.repo, 'index-pack', '--stdin',
                                 '--fix-thin'], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=errors, env=env)
        done = threading.Event()

        def feed():
            # index-pack stops at the end of the pack; the client then waits
            # for our report, so poll rather than block on the channel.
            try:
                if self.reader.buf:
                    proc.stdin.write(self.reader.buf)
                    self.reader.buf = b''
                old_timeout = self.channel.gettimeout()
                self.channel.settimeout(0.2)
                try:
                    while not done.is_set():
                        try:
                            data = self.channel.recv(65536)
                        except socket.timeout:
                            continue
                        if not data:
                            break
                        proc.stdin.write(data)
                        proc.stdin.flush()
                finally:
                    self.channel.settimeout(old_timeout)
            except (OSError, ValueError):
                pass    # index-pack exited: it reports why
            finally:
                try:
                    proc.stdin.close()
                except OSError:
                    pass

        feeder = threading.Thread(target=feed, name='devgerrit-pack', daemon=True)
        feeder.start()
        rc = proc.wait()
        done.set()
        feeder.join()
        with errors:
            errors.seek(0)
            err = errors.read().decode(errors='replace').strip()
        if rc:
            log.warning('index-pack failed: %s', err)
            return 'index-pack failed'
        return 'ok'

    def _quarantine_env(self, quarantine: str) -> dict:
        return dict(os.environ, GIT_OBJECT_DIRECTORY=quarantine,
                    GIT_ALTERNATE_OBJECT_DIRECTORIES=os.path.join(self.repo, 'objects'),
                    GIT_QUARANTINE_PATH=quarantine)

    def _send_band(self, band: int, data: bytes) -> None:
        for i in range(0, max(len(data), 1), _MAX_DATA):
            self.channel.sendall(pkt(bytes([band]) + data[i:i + _MAX_DATA]))

    def _send_message(self, text: str) -> None:
        if self.sideband:
            self._send_band(2, text.encode())
        else:
            self.channel.sendall_stderr(text.encode())

    # -- what a push means ----------------------------------------------------

    def _process(self, old: str, new: str, ref: str, options: list[str],
                 quarantine: str) -> str | None:
        """Handle one ref update: None when accepted, else the reason."""
        if not ref.startswith('refs/for/'):
            return self._refuse(old, new, ref)
        target, _, opts = ref[len('refs/for/'):].partition('%')
        branch = target[len('refs/heads/'):] if target.startswith('refs/heads/') else target
        topic = None
        for opt in opts.split(',') + options:
            if opt.startswith('topic='):
                topic = opt[len('topic='):] or None
        if new == ZERO_SHA:
            return 'prohibited by Gerrit: not permitted: delete'
        if not branch or self.store.branch_head(self.project, branch) is None:
            return f'branch {branch or target} not found'
        env = self._quarantine_env(quarantine)
        try:
            with self.store.lock:
                commits = self._new_commits(new, env)
                actions = self.store.plan_push(self.project, branch, commits)
                self._migrate(quarantine)
                results = self.store.apply_push(self.project, branch, actions,
                                                self.username, topic)
        except ReviewError as e:
            reason = str(e)
            self.messages.append(f'ERROR: {reason}\n')
            if 'missing Change-Id' in reason:
                self.messages.append(self.commit_msg_hint())
            return reason
        self._success(results)
        return None

    def commit_msg_hint(self) -> str:
        return ('\n'
                'Hint: to automatically insert a Change-Id, install the hook:\n'
                f'  gitdir=$(git rev-parse --git-dir); scp -p -P {self.ssh_port} '
                f'{self.username}@{self.ssh_host}:hooks/commit-msg ${{gitdir}}/hooks/\n'
                'and then amend the commit:\n'
                '  git commit --amend --no-edit\n'
                'Finally, push your changes again\n\n')

    def _refuse(self, old: str, new: str, ref: str) -> str:
        if ref.startswith('refs/changes/'):
            self.messages.append('ERROR: upload to refs/changes not allowed; push to '
                                 'refs/for/<branch> instead\n')
            return 'upload to refs/changes not allowed'
        what = 'delete' if new == ZERO_SHA else ('create' if old == ZERO_SHA else 'update')
        if ref.startswith('refs/heads/'):
            self.messages.append(
                f'ERROR: branches only move by submitting reviewed changes here; push for '
                f'review with: git push origin HEAD:refs/for/{ref[len("refs/heads/"):]}\n')
        return f'prohibited by Gerrit: not permitted: {what}'

    def _new_commits(self, new: str, env: dict) -> list[PushedCommit]:
        """Commits reachable from ``new`` and not from any branch, oldest
        first (read through the quarantine)."""
        def git(*args):
            proc = subprocess.run(['git', '--git-dir', self.repo, *args],
                                  capture_output=True, env=env)
            if proc.returncode:
                raise ReviewError(f'invalid commit {new[:7]}: '
                                  f'{proc.stderr.decode(errors="replace").strip()}')
            return proc.stdout.decode('utf-8', 'replace')
        if git('cat-file', '-t', new).strip() != 'commit':
            raise ReviewError(f'{new[:7]} is not a commit')
        shas = git('rev-list', '--reverse', new, '--not', '--branches').split()
        commits = []
        for sha in shas:
            raw = git('cat-file', 'commit', sha)
            header, _, message = raw.partition('\n\n')
            tree, parents = '', []
            for line in header.splitlines():
                key, _, value = line.partition(' ')
                if key == 'tree':
                    tree = value
                elif key == 'parent':
                    parents.append(value)
            commits.append(PushedCommit(sha, tree, parents, message))
        return commits

    def _migrate(self, quarantine: str) -> None:
        """Move the received objects into the repository (index last, so a
        pack is never visible without its data)."""
        objects = os.path.join(self.repo, 'objects')
        for dirpath, _, files in os.walk(quarantine):
            rel = os.path.relpath(dirpath, quarantine)
            os.makedirs(os.path.join(objects, rel), exist_ok=True)
            for name in sorted(files, key=lambda n: n.endswith('.idx')):
                os.replace(os.path.join(dirpath, name), os.path.join(objects, rel, name))

    def _success(self, results) -> None:
        new = sum(1 for _, is_new in results if is_new)
        updated = len(results) - new
        counts = ', '.join(f'{label}: {n}' for label, n in (('new', new),
                                                             ('updated', updated)) if n)
        lines = [f'Processing changes: {counts}, done\n', '\n', 'SUCCESS\n', '\n']
        for change, is_new in results:
            lines.append(f'  {self.store.change_url(change)} {change.subject}'
                         f'{" [NEW]" if is_new else ""}\n')
        lines.append('\n')
        self.messages.extend(lines)


def receive_pack(store: ReviewStore, channel, project: str, username: str,
                 ssh_port: int) -> int:
    """Serve one push; returns the exit status for the SSH channel."""
    try:
        host = channel.get_transport().sock.getsockname()[0]
    except (AttributeError, OSError):
        host = '127.0.0.1'
    session = ReceivePack(store, channel, project, username, host, ssh_port)
    try:
        session.run()
        return 0
    except (ProtocolError, ValueError) as e:
        log.warning('push to %s: %s', project, e)
        return 128
    except (OSError, EOFError, paramiko.SSHException):
        return 128
