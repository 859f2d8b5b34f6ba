"""A standalone ZooKeeper server on this machine, from the Debian package.

Used by the test suite, the benchmarks and the quickstart ("embedded
defaults"); production deployments point at their own ensemble.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import time

log = logging.getLogger('nodepool.zk.localserver')

ZOOKEEPER_JARS = ('/usr/share/java/zookeeper.jar',)
# TLS needs ZooKeeper's Netty connection factory (Debian's libnetty-java).
NETTY_JARS = '/usr/share/java/netty-*[a-z].jar'

_TLS_CFG = """\
secureClientPort={secure_port}
secureClientPortAddress={address}
serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory
ssl.keyStore.location={keystore}
ssl.keyStore.type=PEM
ssl.trustStore.location={truststore}
ssl.trustStore.type=PEM
"""
MAIN_CLASS = 'org.apache.zookeeper.server.quorum.QuorumPeerMain'

_LOG4J = """\
log4j.rootLogger=WARN, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File={log_file}
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d{{ISO8601}} %-5p %c: %m%n
"""

_PLAIN_CFG = """\
clientPort={port}
clientPortAddress={address}
"""

_ZOO_CFG = """\
tickTime={tick_ms}
initLimit=10
syncLimit=5
dataDir={data_dir}
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,stat,srvr,mntr,cons
minSessionTimeout={min_session_ms}
maxSessionTimeout=60000
snapCount=100000
forceSync=no
"""


class ZooKeeperUnavailableError(RuntimeError):
    pass


def free_port(address: str = '127.0.0.1') -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def four_letter_word(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command and return the reply."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode())
        chunks = []
        while True:
            data = s.recv(4096)
            if not data:
                break
            chunks.append(data)
    return b''.join(chunks).decode(errors='replace')


def find_java() -> str:
    java = shutil.which('java')
    if not java:
        raise ZooKeeperUnavailableError('java not found: install the Debian "zookeeper" package')
    return java


class LocalZooKeeper:
    """Start/stop one standalone ZooKeeper server process.

    ``tick_ms`` is small by default so tests can use short session
    timeouts (the minimum session timeout is two ticks).
    """

    #: JVM options; an ensemble member runs with a smaller heap.
    heap = '-Xmx256m'
    #: Further JVM system properties (``-Dname=value``).
    jvm_properties: tuple[str, ...] = ()

    def __init__(self, base_dir: str | None = None, port: int | None = None,
                 address: str = '127.0.0.1', tick_ms: int = 250,
                 tls: tuple[str, str] | None = None,
                 tls_only: tuple[str, str, str] | None = None):
        """``tls``: (PEM file with the server's key and certificate, PEM
        file of the CA clients' certificates must come from) to serve TLS
        on ``secure_port`` as well (``secure_hosts``).  ``tls_only``: a
        client's (certificate, key, CA) PEM files: then TLS is all it
        serves (no plain port; ``hosts`` is the TLS address), and that
        certificate is what asks it whether it is ready."""
        self.address = address
        self.tls_only = tls_only
        if tls_only and not tls:
            raise ValueError('tls_only needs the server\'s tls files too')
        self.port = None if tls_only else (port or free_port(address))
        self.tls = tls
        self.secure_port = free_port(address) if tls else None
        self.tick_ms = tick_ms
        self._own_dir = base_dir is None
        self.base_dir = base_dir or tempfile.mkdtemp(prefix='zookeeper-')
        self.proc: subprocess.Popen | None = None

    @property
    def hosts(self) -> str:
        if self.tls_only:
            return self.secure_hosts
        return f'{self.address}:{self.port}'

    @property
    def secure_hosts(self) -> str | None:
        return f'{self.address}:{self.secure_port}' if self.secure_port else None

    def _write_config(self) -> str:
        conf_dir = os.path.join(self.base_dir, 'conf')
        data_dir = os.path.join(self.base_dir, 'data')
        os.makedirs(conf_dir, exist_ok=True)
        os.makedirs(data_dir, exist_ok=True)
        cfg = os.path.join(conf_dir, 'zoo.cfg')
        with open(cfg, 'w') as f:
            f.write(_ZOO_CFG.format(
                tick_ms=self.tick_ms, data_dir=data_dir,
                min_session_ms=2 * self.tick_ms))
            if self.port is not None:
                f.write(_PLAIN_CFG.format(port=self.port, address=self.address))
            if self.tls:
                f.write(_TLS_CFG.format(secure_port=self.secure_port, address=self.address,
                                        keystore=self.tls[0], truststore=self.tls[1]))
            f.write(self._extra_config(data_dir))
        with open(os.path.join(conf_dir, 'log4j.properties'), 'w') as f:
            f.write(_LOG4J.format(log_file=os.path.join(self.base_dir, 'zookeeper.log')))
        return cfg

    def _extra_config(self, data_dir: str) -> str:
        return ''

    def start(self, timeout: float = 60.0) -> None:
        self.spawn()
        self._wait_ready(timeout)
        log.info('ZooKeeper running at %s (pid %s)', self.hosts, self.proc.pid)

    def spawn(self) -> None:
        """Start the server process without waiting for it."""
        for jar in ZOOKEEPER_JARS:
            if not os.path.exists(jar):
                raise ZooKeeperUnavailableError(
                    f'{jar} not found: install the Debian "zookeeper" package')
        cfg = self._write_config()
        jars = list(ZOOKEEPER_JARS)
        if self.tls:
            jars += sorted(glob.glob(NETTY_JARS))
        classpath = ':'.join([os.path.join(self.base_dir, 'conf'), *jars])
        cmd = [find_java(), self.heap, '-XX:+UseSerialGC', '-XX:TieredStopAtLevel=1',
               '-Dzookeeper.jmx.log4j.disable=true', *self.jvm_properties,
               '-cp', classpath, MAIN_CLASS, cfg]
        out = open(os.path.join(self.base_dir, 'stdout.log'), 'wb')
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        out.close()

    def _wait_ready(self, timeout: float) -> None:
        # A server process gives no readiness signal but its port: ask it
        # "ruok" until it answers, bounded by the timeout.
        deadline = time.monotonic() + timeout
        delay = 0.05
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ZooKeeperUnavailableError(
                    f'ZooKeeper exited with {self.proc.returncode}; see {self.base_dir}')
            try:
                if self._ruok() == 'imok':
                    return
            except OSError:
                pass
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)
        self.stop()
        raise ZooKeeperUnavailableError(f'ZooKeeper did not start within {timeout}s')

    def _ruok(self) -> str:
        if not self.tls_only:
            return four_letter_word(self.address, self.port, 'ruok')
        import ssl
        cert, key, ca = self.tls_only
        context = ssl.create_default_context(cafile=ca)
        context.load_cert_chain(cert, key)
        with socket.create_connection((self.address, self.secure_port), timeout=1.0) as raw:
            with context.wrap_socket(raw, server_hostname=self.address) as s:
                s.sendall(b'ruok')
                return s.recv(16).decode(errors='replace')

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()


class EnsembleMember(LocalZooKeeper):
    """One server of a ``LocalZooKeeperEnsemble``: its data survives a
    stop or a kill, so it rejoins with what it had."""

    heap = '-Xmx128m'
    # Election connections to a member that is down fail fast here (no
    # five-second connect timeout per notification round).
    jvm_properties = ('-Dzookeeper.cnxTimeout=1000',)

    def __init__(self, ensemble: LocalZooKeeperEnsemble, myid: int, base_dir: str):
        super().__init__(base_dir=base_dir, address=ensemble.address, tick_ms=ensemble.tick_ms)
        self._own_dir = False
        self.ensemble = ensemble
        self.myid = myid
        self.quorum_port = free_port(self.address)
        self.election_port = free_port(self.address)

    def _extra_config(self, data_dir: str) -> str:
        with open(os.path.join(data_dir, 'myid'), 'w') as f:
            f.write(f'{self.myid}\n')
        return ''.join(f'server.{m.myid}={m.address}:{m.quorum_port}:{m.election_port}\n'
                       for m in self.ensemble.members)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def mode(self) -> str | None:
        """'leader', 'follower', or None (down, or not serving: no quorum)."""
        if not self.running:
            return None
        try:
            reply = four_letter_word(self.address, self.port, 'srvr')
        except OSError:
            return None
        for line in reply.splitlines():
            if line.startswith('Mode:'):
                return line.split(':', 1)[1].strip()
        return None

    def kill(self) -> None:
        """SIGKILL: no goodbye to clients or peers."""
        if self.running:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


class LocalZooKeeperEnsemble:
    """``size`` ZooKeeper servers on this machine forming one ensemble
    (quorum: a majority), for tests and demonstrations of member loss.

    ``hosts`` lists every member, as zuul.conf and nodepool.yaml would.
    Members are numbered from 0 here (their ``myid`` is one more).
    """

    def __init__(self, base_dir: str | None = None, size: int = 3,
                 address: str = '127.0.0.1', tick_ms: int = 200):
        self.address = address
        self.tick_ms = tick_ms
        self._own_dir = base_dir is None
        self.base_dir = base_dir or tempfile.mkdtemp(prefix='zookeeper-ensemble-')
        self.members: list[EnsembleMember] = []
        for i in range(size):
            self.members.append(EnsembleMember(self, i + 1,
                                               os.path.join(self.base_dir, f'zk{i + 1}')))

    @property
    def hosts(self) -> str:
        return ','.join(m.hosts for m in self.members)

    @property
    def quorum(self) -> int:
        return len(self.members) // 2 + 1

    def start(self, timeout: float = 60.0) -> None:
        # Every member's process first, then wait: a member alone never
        # gets past leader election.
        for member in self.members:
            if not member.running:
                member.spawn()
        self.wait_for_quorum(timeout)
        log.info('ZooKeeper ensemble running at %s', self.hosts)

    def start_member(self, index: int, timeout: float = 60.0) -> None:
        """Start member ``index`` again (its data kept); wait until it
        serves, when a quorum can form."""
        member = self.members[index]
        if not member.running:
            member.spawn()
        running = sum(1 for m in self.members if m.running)
        if running >= self.quorum:
            self._wait(lambda: member.mode() is not None, timeout,
                       f'member {index} to serve')

    def stop_member(self, index: int) -> None:
        """SIGTERM member ``index`` (a clean shutdown)."""
        member = self.members[index]
        if member.running:
            member.proc.terminate()
            try:
                member.proc.wait(10)
            except subprocess.TimeoutExpired:
                member.proc.kill()
                member.proc.wait()
        member.proc = None

    def kill_member(self, index: int) -> None:
        """SIGKILL member ``index``."""
        self.members[index].kill()

    def modes(self) -> list[str | None]:
        return [m.mode() for m in self.members]

    def leader(self) -> int | None:
        """The index of the member leading now, if any."""
        modes = self.modes()
        return modes.index('leader') if 'leader' in modes else None

    def followers(self) -> list[int]:
        return [i for i, mode in enumerate(self.modes()) if mode == 'follower']

    def wait_for_quorum(self, timeout: float = 60.0) -> None:
        """Until every running member serves (one leads, the rest follow)."""
        def formed():
            modes = [m.mode() for m in self.members if m.running]
            return len(modes) >= self.quorum and None not in modes and \
                modes.count('leader') == 1
        self._wait(formed, timeout, 'a quorum')

    def _wait(self, predicate, timeout: float, what: str) -> None:
        # Only the members' ports tell their state: ask on a backoff.
        deadline = time.monotonic() + timeout
        delay = 0.05
        while not predicate():
            if time.monotonic() > deadline:
                raise ZooKeeperUnavailableError(
                    f'timed out waiting for {what}; modes {self.modes()}; see {self.base_dir}')
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    def stop(self) -> None:
        for index in range(len(self.members)):
            self.stop_member(index)
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
