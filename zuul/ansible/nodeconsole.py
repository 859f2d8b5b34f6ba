"""Live output of command and shell tasks: the executor's side.

Zuul's ``command`` module (zuul/ansible/library/command.py) writes every
line a task prints on a node to ``/tmp/console-<log id>.log`` on that
node, stamped with the time it was read; the ``zuul_console`` daemon
(zuul/ansible/library/zuul_console.py, started by a base job's
``start-zuul-console`` role) serves it on port 19885.  For each command
task and host the zuul_stream callback starts a :class:`ConsoleStreamer`
that connects there, asks for the task's log and hands every line, with
the node's own time, to the callback, which writes it to job-output.txt
(followed by the live log) and keeps it for job-output.json.

The log id is ``<task uuid>-<n>-<host>``: ``n`` counts the times the task
started in this playbook run (a task included twice, a handler notified
twice); loop items add ``.<item index>`` to ``n``.  The callback counts
task starts in the parent process (:func:`task_started`); the worker
process that runs the task for a host is forked after that, so the action
(:func:`module_log_id`) sees the same count.

Which hosts are streamed from: only hosts of the executor-written
inventory (``ZUUL_INVENTORY_FILE``), at the address written there --
never a host a playbook added (``add_host``) or an address a playbook set
(``set_fact: ansible_host``), and never a loopback address: a playbook
cannot make the executor connect anywhere but to its own build's nodes.
What a node sends is only ever written, as text, to this build's own log;
lines are cut at MAX_LINE and the reader holds at most one line.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import threading
import time

import yaml

CONSOLE_PORT = 19885
CONNECT_TIMEOUT = 5.0
RETRY_INTERVAL = 0.5
# After the task's result, how long a stream may take to reach its end.
DRAIN_TIMEOUT = 10.0
MAX_LINE = 65536
EXIT_MARKER = '[Zuul] Task exit code: '
NOT_FOUND = '[Zuul] Log not found'
INVENTORY_ENV = 'ZUUL_INVENTORY_FILE'
_UNSAFE = re.compile(r'[^A-Za-z0-9._-]')

# task uuid -> times the task started in this ansible-playbook run
_task_counts: dict[str, int] = {}
# (task uuid, host) -> loop items run so far (in the worker process)
_item_counts: dict[tuple, int] = {}


def sanitize(name: str) -> str:
    return _UNSAFE.sub('_', str(name))


def task_started(task_uuid: str) -> int:
    """Count a start of the task (in the callback, before the workers
    fork); returns its index."""
    count = _task_counts.get(task_uuid, -1) + 1
    _task_counts[task_uuid] = count
    return count


def log_id(task_uuid: str, host: str, count: int, item: int | None = None) -> str:
    run = str(count) if item is None else f'{count}.{item}'
    return f'{task_uuid}-{run}-{sanitize(host)}'


def module_log_id(task_uuid: str, host: str, in_loop: bool) -> str:
    """The log id a worker passes to the command module (its count is the
    one the callback had when the worker was forked)."""
    count = max(_task_counts.get(task_uuid, 0), 0)
    if not in_loop:
        return log_id(task_uuid, host, count)
    key = (task_uuid, host)
    item = _item_counts.get(key, 0)
    _item_counts[key] = item + 1
    return log_id(task_uuid, host, count, item)


def parse_line(line: str) -> tuple[str | None, str]:
    """``<time> | <text>`` -> (time, text); (None, line) if unstamped."""
    stamp, sep, text = line.partition(' | ')
    if sep and re.fullmatch(r'\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{1,6})?', stamp):
        return stamp, text
    return None, line


# -- which hosts ------------------------------------------------------------

def inventory_addresses(path: str | None = None) -> dict[str, str]:
    """Host name -> address of the nodes in the executor's inventory."""
    path = path or os.environ.get(INVENTORY_ENV)
    if not path:
        return {}
    try:
        with open(path) as f:
            data = yaml.load(f, Loader=_TolerantLoader) or {}
    except (OSError, ValueError, yaml.YAMLError):
        return {}
    hosts = ((data.get('all') or {}).get('hosts') or {}) if isinstance(data, dict) else {}
    out = {}
    for name, hostvars in hosts.items():
        address = (hostvars or {}).get('ansible_host') if isinstance(hostvars, dict) else None
        if isinstance(address, str) and streamable_address(address):
            out[str(name)] = address
    return out


class _TolerantLoader(yaml.SafeLoader):
    """Safe YAML that reads tagged values (``!unsafe``) as plain ones."""


_TolerantLoader.add_multi_constructor(
    '!', lambda loader, suffix, node: (
        loader.construct_scalar(node) if isinstance(node, yaml.ScalarNode) else
        loader.construct_sequence(node) if isinstance(node, yaml.SequenceNode) else
        loader.construct_mapping(node)))


def streamable_address(address: str) -> bool:
    """A node's address we may connect to: not the executor itself."""
    if address in ('localhost', 'localhost.localdomain', '') or '{' in address:
        return False
    try:
        ip = ipaddress.ip_address(address.strip('[]'))
    except ValueError:
        return True     # a DNS name of a node
    return not (ip.is_loopback or ip.is_unspecified)


# -- one stream ------------------------------------------------------------

class ConsoleStreamer:
    """Follows the console log(s) of one task on one host in a thread.

    ``emit(host, time, text)`` is called for every line; ``lines`` keeps
    them, ``done`` the logs read whole (0, or each loop item's index).  ``items``: the
    task loops, so its logs are ``<n>.0``, ``<n>.1``...; the streamer
    follows them in turn.  ``stop(items)`` is called with the task's
    result (``items``: how many loop items ran); ``join()`` then waits for
    the logs to be read to their ends (at most DRAIN_TIMEOUT)."""

    def __init__(self, host: str, address: str, task_uuid: str, count: int, emit,
                 loop: bool = False, port: int = CONSOLE_PORT):
        self.host = host
        self.address = address
        self.port = port
        self.task_uuid = task_uuid
        self.count = count
        self.emit = emit
        self.loop = loop
        self.lines: list[list[str]] = []
        self.streamed = False       # at least one line came
        self.done: set[int] = set()  # logs read to their exit code (loop item indexes)
        self._stop = threading.Event()
        self._items: int | None = None
        self._sock: socket.socket | None = None
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f'console-{sanitize(host)}')

    def start(self) -> ConsoleStreamer:
        self._thread.start()
        return self

    def stop(self, items: int | None = None) -> None:
        self._items = items
        self._stop.set()

    def abandon(self) -> None:
        """Nothing ran (skipped, unreachable): end without waiting."""
        self._items = 0
        self._stop.set()
        self._close()
        self._thread.join(1.0)

    def join(self, timeout: float = DRAIN_TIMEOUT) -> bool:
        """True if the stream ended by itself within ``timeout``."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._close()
            self._thread.join(1.0)
            return False
        return True

    def _close(self) -> None:
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # -- the thread ----------------------------------------------------
    def _ids(self):
        """(index, log id) of the logs to follow, in turn."""
        if not self.loop:
            yield 0, log_id(self.task_uuid, self.host, self.count)
            return
        item = 0
        while self._items is None or item < self._items:
            yield item, log_id(self.task_uuid, self.host, self.count, item)
            item += 1

    def _run(self) -> None:
        for index, lid in self._ids():
            state = self._follow(lid)
            if state == 'done':
                self.done.add(index)
                self._finalize(lid)
                continue
            if state == 'missing' and self._stop.is_set() and self.loop \
                    and self._items is not None:
                continue    # that item printed nothing (skipped): try the next
            break

    def _connect(self) -> socket.socket | None:
        while True:
            try:
                sock = socket.create_connection((self.address, self.port), CONNECT_TIMEOUT)
                sock.settimeout(None)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return sock
            except OSError:
                # No console server (yet): the output comes with the result.
                if self._stop.wait(RETRY_INTERVAL):
                    return None

    def _follow(self, lid: str) -> str:
        """'done' (exit code seen), 'missing' (no log, and asked to
        stop), 'unreachable', or 'cut' (connection ended early)."""
        sock = self._connect()
        if sock is None:
            return 'unreachable'
        self._sock = sock
        try:
            sock.sendall(f'{lid}\n'.encode())
            return self._read(sock)
        except OSError:
            return 'cut'
        finally:
            self._sock = None
            try:
                sock.close()
            except OSError:
                pass

    def _read(self, sock: socket.socket) -> str:
        buffer = b''
        found = False
        while True:
            if not found and self._stop.is_set():
                # the result came while the log was missing: nothing ran
                sock.settimeout(RETRY_INTERVAL * 2)
            try:
                data = sock.recv(65536)
            except socket.timeout:
                return 'missing'
            if not data:
                return 'cut'
            buffer += data
            while True:
                cut = buffer.find(b'\n')
                if cut < 0 and len(buffer) < MAX_LINE:
                    break
                end = cut if cut >= 0 else MAX_LINE
                raw, buffer = buffer[:end], buffer[end + (1 if cut >= 0 else 0):]
                line = raw.decode('utf-8', 'backslashreplace').rstrip('\r')
                if line.startswith(NOT_FOUND):
                    if self._stop.is_set():
                        return 'missing'
                    continue
                found = True
                self.streamed = True
                stamp, text = parse_line(line)
                if text.startswith(EXIT_MARKER):
                    return 'done'
                stamp = stamp or time.strftime('%Y-%m-%d %H:%M:%S.000000')
                self.lines.append([stamp, text])
                self.emit(self.host, stamp, text)

    def _finalize(self, lid: str) -> None:
        """Ask the node to delete the log it has sent us whole."""
        try:
            with socket.create_connection((self.address, self.port), CONNECT_TIMEOUT) as sock:
                sock.sendall(b'v:1\n')
                sock.settimeout(CONNECT_TIMEOUT)
                sock.recv(16)
                sock.sendall(f'f:{lid}\n'.encode())
        except OSError:
            pass
