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

_ZOO_CFG = """\
tickTime={tick_ms}
initLimit=10
syncLimit=5
dataDir={data_dir}
clientPort={port}
clientPortAddress={address}
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

    def __init__(self, base_dir: str | None = None, port: int | None = None,
                 address: str = '127.0.0.1', tick_ms: int = 250,
                 tls: tuple[str, str] | None = None):
        """``tls``: (PEM file with the server's key and certificate, PEM
        file of the CA clients' certificates must come from) to serve TLS
        on ``secure_port`` as well (``secure_hosts``)."""
        self.address = address
        self.port = port or free_port(address)
        self.tls = tls
        self.secure_port = free_port(address) if tls else None
        self.tick_ms = tick_ms
        self._own_dir = base_dir is None
        self.base_dir = base_dir or tempfile.mkdtemp(prefix='zookeeper-')
        self.proc: subprocess.Popen | None = None

    @property
    def hosts(self) -> str:
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
                tick_ms=self.tick_ms, data_dir=data_dir, port=self.port,
                address=self.address, min_session_ms=2 * self.tick_ms))
            if self.tls:
                f.write(_TLS_CFG.format(secure_port=self.secure_port, address=self.address,
                                        keystore=self.tls[0], truststore=self.tls[1]))
        with open(os.path.join(conf_dir, 'log4j.properties'), 'w') as f:
            f.write(_LOG4J.format(log_file=os.path.join(self.base_dir, 'zookeeper.log')))
        return cfg

    def start(self, timeout: float = 60.0) -> None:
        for jar in ZOOKEEPER_JARS:
            if not os.path.exists(jar):
                raise ZooKeeperUnavailableError(
                    f'{jar} not found: install the Debian "zookeeper" package')
        cfg = self._write_config()
        jars = list(ZOOKEEPER_JARS)
        if self.tls:
            jars += sorted(glob.glob(NETTY_JARS))
        classpath = ':'.join([os.path.join(self.base_dir, 'conf'), *jars])
        cmd = [find_java(), '-Xmx256m', '-XX:+UseSerialGC', '-XX:TieredStopAtLevel=1',
               '-Dzookeeper.jmx.log4j.disable=true', '-cp', classpath, MAIN_CLASS, cfg]
        out = open(os.path.join(self.base_dir, 'stdout.log'), 'wb')
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        out.close()
        self._wait_ready(timeout)
        log.info('ZooKeeper running at %s (pid %s)', self.hosts, self.proc.pid)

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
                if four_letter_word(self.address, self.port, 'ruok') == 'imok':
                    return
            except OSError:
                pass
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)
        self.stop()
        raise ZooKeeperUnavailableError(f'ZooKeeper did not start within {timeout}s')

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
