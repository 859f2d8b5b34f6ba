"""Gerrit over SSH (paramiko): commands, and the stream-events consumer.

The stream consumer reconnects with exponential backoff; after every
reconnect it calls ``on_reconnect(last_event_time)`` so the connection can
catch up on changes updated while it was away (Gerrit does not replay
stream-events).
"""

from __future__ import annotations

import json
import logging
import shlex
import socket
import threading
import time

import paramiko

log = logging.getLogger('zuul.driver.gerrit.ssh')


def _no_delay(transport) -> None:
    """TCP_NODELAY: a command is several small SSH messages each way
    (channel open, exec, EOF; output, exit status, close). With Nagle's
    algorithm each small write waits for the peer's delayed ACK (40 ms
    on Linux): a query to the development Gerrit took ~87 ms, ~30 ms with it."""
    sock = getattr(transport, 'sock', None)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except (AttributeError, OSError):
        pass    # not a TCP socket (a proxy command's pipe)


class GerritCommandError(Exception):
    def __init__(self, command: str, status: int, stderr: str):
        super().__init__(f'gerrit command failed ({status}): {command}: {stderr.strip()}')
        self.status = status
        self.stderr = stderr


class GerritSSH:
    """Runs gerrit commands over a cached SSH connection (one per thread)."""

    def __init__(self, server: str, port: int = 29418, user: str = 'zuul',
                 key_filename: str | None = None, keepalive: int = 60,
                 known_hosts: str | None = None, timeout: float = 30.0):
        self.server = server
        self.port = int(port)
        self.user = user
        self.key_filename = key_filename
        self.keepalive = keepalive
        self.known_hosts = known_hosts
        self.timeout = timeout
        # One connection per thread that runs commands (the scheduler's
        # loop, each report worker): a connection that breaks under one is
        # re-made by that one without cutting the others' commands short.
        self._local = threading.local()
        self._clients: list[paramiko.SSHClient] = []
        self._lock = threading.Lock()

    def connect(self) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        if self.known_hosts:
            client.load_host_keys(self.known_hosts)
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
        else:
            # As released Zuul does: trust on first use, with a warning.
            client.set_missing_host_key_policy(paramiko.WarningPolicy())
        client.connect(self.server, port=self.port, username=self.user,
                       key_filename=self.key_filename, timeout=self.timeout,
                       allow_agent=False, look_for_keys=self.key_filename is None)
        transport = client.get_transport()
        if self.keepalive:
            transport.set_keepalive(self.keepalive)
        _no_delay(transport)
        return client

    def _get_client(self) -> paramiko.SSHClient:
        client = getattr(self._local, 'client', None)
        if client is None or not client.get_transport() or \
                not client.get_transport().is_active():
            self._drop_own()
            client = self.connect()
            self._local.client = client
            with self._lock:
                self._clients.append(client)
        return client

    def _drop_own(self) -> None:
        client = getattr(self._local, 'client', None)
        self._local.client = None
        if client is not None:
            with self._lock:
                if client in self._clients:
                    self._clients.remove(client)
            client.close()

    def close(self) -> None:
        """Close every thread's connection."""
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            client.close()

    def run(self, command: str, stdin: bytes | None = None) -> str:
        """Run one command; raise GerritCommandError on a non-zero exit.
        Retries once on a broken connection."""
        for attempt in (1, 2):
            try:
                client = self._get_client()
                stdin_f, stdout_f, stderr_f = client.exec_command(command, timeout=self.timeout)
                if stdin:
                    stdin_f.write(stdin)
                stdin_f.channel.shutdown_write()
                out = stdout_f.read().decode('utf-8', 'replace')
                err = stderr_f.read().decode('utf-8', 'replace')
                status = stdout_f.channel.recv_exit_status()
                break
            except (paramiko.SSHException, OSError, EOFError):
                self._drop_own()
                if attempt == 2:
                    raise
        if status:
            raise GerritCommandError(command, status, err)
        return out

    def query(self, query: str) -> list[dict]:
        """``gerrit query --format JSON`` with everything Zuul reads."""
        out = self.run('gerrit query --format JSON --all-approvals --comments '
                       '--commit-message --current-patch-set --dependencies --files '
                       '--patch-sets --submit-records ' + shlex.quote(query))
        rows = []
        for line in out.splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            if row.get('type') == 'stats':
                continue
            rows.append(row)
        return rows

    def review(self, project: str, change: str, message: str = '',
               labels: dict[str, int] | None = None, submit: bool = False,
               tag: str | None = None, notify: str | None = None) -> None:
        """Post a review message and votes (and submit) on ``N,P``;
        ``notify`` (NONE, OWNER, OWNER_REVIEWERS, ALL) is passed on as
        ``--notify``."""
        cmd = ['gerrit', 'review', '--project', project]
        if message:
            cmd += ['--message', message]
        for label, value in (labels or {}).items():
            cmd += ['--label', f'{label}={value}']
        if submit:
            cmd.append('--submit')
        if tag:
            cmd += ['--tag', tag]
        if notify:
            cmd += ['--notify', notify]
        cmd.append(change)
        self.run(' '.join(shlex.quote(c) for c in cmd))

    def version(self) -> str:
        return self.run('gerrit version').strip().split()[-1]


class GerritEventStream(threading.Thread):
    """Consumes ``gerrit stream-events`` forever, until stop().

    ``on_event(dict)`` gets every well-formed event; malformed lines are
    logged and skipped. ``on_reconnect(last_event_time)`` runs after each
    successful reconnect (not the first connect), before new events flow.
    """

    def __init__(self, ssh: GerritSSH, on_event, on_reconnect=None,
                 min_backoff: float = 0.5, max_backoff: float = 30.0, name: str = ''):
        super().__init__(name=f'gerrit-stream-{name or ssh.server}', daemon=True)
        self.ssh = ssh
        self.on_event = on_event
        self.on_reconnect = on_reconnect
        self.min_backoff = min_backoff
        self.max_backoff = max_backoff
        self._stop_event = threading.Event()
        self._client: paramiko.SSHClient | None = None
        self.connected = threading.Event()
        self.connections = 0
        self.last_event_time: float | None = None

    def stop(self) -> None:
        self._stop_event.set()
        client = self._client
        if client is not None:
            client.close()

    def run(self) -> None:
        backoff = self.min_backoff
        while not self._stop_event.is_set():
            try:
                self._consume()
                backoff = self.min_backoff
            except Exception as e:
                if self._stop_event.is_set():
                    break
                log.warning('stream-events from %s lost: %s; reconnecting in %.1fs',
                            self.ssh.server, e, backoff)
            finally:
                self.connected.clear()
            if self._stop_event.wait(backoff):
                break
            backoff = min(backoff * 2, self.max_backoff)

    def _consume(self) -> None:
        client = self.ssh.connect()
        self._client = client
        try:
            transport = client.get_transport()
            channel = transport.open_session()
            channel.exec_command('gerrit stream-events')
            stdout = channel.makefile('rb')
            self.connections += 1
            if self.connections > 1 and self.on_reconnect is not None:
                self.on_reconnect(self.last_event_time)
            self.connected.set()
            first = True
            for raw in stdout:
                if first:
                    first = False
                self._handle_line(raw)
            status = channel.recv_exit_status() if channel.exit_status_ready() else -1
            stderr = channel.makefile_stderr('rb').read().decode('utf-8', 'replace')
            raise ConnectionError(f'stream ended (status {status}) {stderr.strip()}')
        finally:
            self._client = None
            client.close()

    def _handle_line(self, raw: bytes) -> None:
        line = raw.decode('utf-8', 'replace').strip()
        if not line:
            return
        try:
            event = json.loads(line)
            if not isinstance(event, dict) or 'type' not in event:
                raise ValueError('not a Gerrit event object')
        except ValueError as e:
            log.error('Skipping malformed stream-events line from %s: %s: %r',
                      self.ssh.server, e, line[:500])
            return
        self.last_event_time = float(event.get('eventCreatedOn') or time.time())
        try:
            self.on_event(event)
        except Exception:
            log.exception('Error handling Gerrit event %s', event.get('type'))
