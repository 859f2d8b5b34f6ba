"""Zuul daemons as real OS processes for fault tests, and the Gearman
server's administrative protocol (``status``, ``workers``) to watch
what they registered."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

from tests.harness.waiting import wait_for


def gear_admin(port: int, command: str, host: str = '127.0.0.1') -> list[str]:
    """One Gearman administrative command (``status``, ``workers``) and
    its answer lines (without the closing ``.``)."""
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(command.encode() + b'\n')
        data = b''
        while not (data == b'.\n' or data.endswith(b'\n.\n')):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return data.decode().splitlines()[:-1]


def gear_workers(port: int) -> dict[str, set[str]]:
    """The connected Gearman workers: client id -> registered functions."""
    workers: dict[str, set[str]] = {}
    for line in gear_admin(port, 'workers'):
        head, _, functions = line.partition(' : ')
        client_id = head.split(' ', 2)[2] if head.count(' ') >= 2 else '-'
        workers.setdefault(client_id, set()).update(functions.split())
    return workers


def gear_jobs(port: int) -> dict[str, tuple[int, int]]:
    """Per Gearman function: (jobs queued or running, of which running)."""
    jobs = {}
    for line in gear_admin(port, 'status'):
        fields = line.split('\t')
        if len(fields) >= 3:
            jobs[fields[0]] = (int(fields[1]), int(fields[2]))
    return jobs


def _started_in(home: str) -> list[int]:
    """Processes whose command line names a path under ``home`` (a
    daemon's own directory): ssh-agent detaches itself, so it is not
    among the daemon's descendants."""
    found = []
    needle = home.rstrip('/').encode() + b'/'
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            try:
                with open(f'/proc/{entry}/cmdline', 'rb') as f:
                    if needle in f.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


def _descendants(pid: int) -> list[int]:
    """Every live process under ``pid`` (children first-level and below),
    from /proc: ansible-playbook runs in a session of its own, so the
    daemon's process group does not hold it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open(f'/proc/{entry}/stat') as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(')', 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


class DaemonProcess:
    """One Zuul daemon as a real OS process: ``python -m zuul.cmd.<kind>
    -c <conf> -d`` in a session of its own, output appended to
    ``<root>/<name>.log``.

    ``kill()`` is what a host or OOM killer does: SIGKILL to the daemon's
    process group and to every process below it (ansible-playbook, ssh,
    ssh-agent: as systemd kills a unit's cgroup). ``terminate()`` is a
    normal stop (SIGTERM). ``start()`` starts it again on the same
    configuration, ``restart(kill=...)`` does both. ``start`` waits until
    the daemon serves: an executor or merger has registered its Gearman
    functions, a scheduler has loaded its tenants and listens to Gerrit's
    event stream.
    """

    def __init__(self, system, kind: str, name: str, conf_path: str,
                 hostname: str | None = None):
        self.system = system
        self.kind = kind
        self.name = name
        self.conf_path = conf_path
        self.hostname = hostname
        self.log_path = os.path.join(system.root, f'{name}.log')
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def __repr__(self) -> str:
        return f'<DaemonProcess {self.name} ({self.kind}) pid={self.pid}>'

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, wait: bool = True, timeout: float = 60.0) -> DaemonProcess:
        if self.running:
            raise RuntimeError(f'{self.name} is already running')
        offset = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        with open(self.log_path, 'ab') as log:
            log.write(f'--- start {self.starts + 1} of {self.name}\n'.encode())
            log.flush()
            self.proc = subprocess.Popen(
                [sys.executable, '-m', f'zuul.cmd.{self.kind}', '-c', self.conf_path, '-d'],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.system.root,
                start_new_session=True)
        self.starts += 1
        if wait:
            wait_for(lambda: self._ready(offset), timeout=timeout,
                     what=f'{self.name} ({self.kind}) serving')
        return self

    def _ready(self, offset: int) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f'{self.name} exited with {self.proc.returncode}:\n'
                                 + self.log()[-4000:])
        port = self.system.gear_port
        if self.kind == 'executor':
            return 'executor:execute' in gear_workers(port).get(
                f'executor:{self.hostname}', ())
        if self.kind == 'merger':
            return 'merger:merge' in gear_workers(port).get(
                f'zuul-merger:{self.hostname}:0', ())
        # scheduler: tenants loaded (logged after the event stream was
        # started) and Gerrit serving that stream.
        return ('Scheduler started with tenants' in self.log()[offset:]
                and self.system.gerrit.server.stream_count() >= 1)

    def kill(self) -> None:
        """SIGKILL the daemon and everything it started; returns once the
        daemon is reaped (and, for a scheduler, Gerrit has dropped its
        event stream, so a new one can be told apart)."""
        if self.proc is None:
            return
        below = _descendants(self.proc.pid)
        for kill in (lambda: os.killpg(self.proc.pid, signal.SIGKILL),
                     *(lambda p=p: os.kill(p, signal.SIGKILL) for p in below)):
            try:
                kill()
            except OSError:
                pass    # already gone
        self.proc.wait(30)
        self._kill_strays()
        if self.kind == 'scheduler':
            wait_for(lambda: self.system.gerrit.server.stream_count() == 0, timeout=30,
                     what='the killed scheduler\'s event stream closed')

    def terminate(self, timeout: float = 60.0) -> int | None:
        """SIGTERM (a normal stop); SIGKILL after ``timeout`` seconds.
        Returns the exit status."""
        if not self.running:
            return self.proc.returncode if self.proc is not None else None
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode
        finally:
            self._kill_strays()

    def _kill_strays(self) -> None:
        """What the daemon left running: its detached ssh-agent, builds'
        processes it did not wait for."""
        if self.kind == 'scheduler':
            return
        for pid in _started_in(os.path.join(self.system.root, self.name)):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the daemon (e.g. SIGSTOP/SIGCONT to freeze it)."""
        os.kill(self.proc.pid, signum)

    def restart(self, kill: bool = False, wait: bool = True) -> DaemonProcess:
        """Stop (SIGKILL with ``kill``, else SIGTERM) and start again on
        the same configuration."""
        if kill:
            self.kill()
        else:
            self.terminate()
        return self.start(wait=wait)

    def log(self) -> str:
        """Everything the daemon wrote so far, over all its starts."""
        if not os.path.exists(self.log_path):
            return ''
        with open(self.log_path, errors='replace') as f:
            return f.read()

    def command(self, command: str) -> str:
        """One command on the daemon's command socket (``pause``,
        ``resume``, ``stop``...); returns its answer."""
        from zuul.lib.commandsocket import send_command
        return send_command(self.socket_path, command)

    @property
    def socket_path(self) -> str:
        return os.path.join(self.system.root, self.name, f'{self.kind}.socket') \
            if self.kind != 'scheduler' else os.path.join(self.system.root, 'state',
                                                          'scheduler.socket')

    # executors
    @property
    def job_dir(self) -> str:
        return os.path.join(self.system.root, self.name, 'b')

    def build_dirs(self) -> set[str]:
        """An executor's build directories (one per build it holds)."""
        if not os.path.isdir(self.job_dir):
            return set()
        return set(os.listdir(self.job_dir))


# The ZooKeeper session timeout of daemon processes (seconds): what a
# killed daemon leaves there (a scheduler's leader lock, an executor's
# registration under its build records) goes this long after the kill.
