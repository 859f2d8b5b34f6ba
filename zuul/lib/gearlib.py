"""Gearman (gear) with TCP_NODELAY on every connection.

gear leaves Nagle's algorithm on: every round trip then waits about 44 ms
for delayed ACKs (measured here: ~23 jobs/s). With TCP_NODELAY on both ends
a round trip is ~0.7 ms. Every Gearman client, worker and server in this
system comes from this module.

TLS: ``GearTLS`` carries the ``ssl_ca``/``ssl_cert``/``ssl_key`` of
zuul.conf's ``[gearman]`` (clients and workers: their certificate, and
the CA that signed the server's) or ``[gearman_server]`` (the embedded
server: its certificate, and the CA its clients' certificates must come
from).  gear then speaks TLS with mutual certificate checks.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import ssl
import threading
from dataclasses import dataclass

import gear


@dataclass(frozen=True)
class GearTLS:
    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    @classmethod
    def of(cls, settings) -> GearTLS | None:
        """From a settings object with ``ssl_ca/ssl_cert/ssl_key``; None
        when TLS is not configured."""
        if isinstance(settings, GearTLS):
            tls = settings
        else:
            tls = cls(getattr(settings, 'ssl_ca', None), getattr(settings, 'ssl_cert', None),
                      getattr(settings, 'ssl_key', None))
        return tls if (tls.ca or tls.cert or tls.key) else None

    @classmethod
    def from_config(cls, config, section: str = 'gearman') -> GearTLS | None:
        """From a ConfigParser's ``[gearman]`` (or other) section."""
        def get(key):
            return config.get(section, key, fallback=None) if config.has_section(section) \
                else None
        return cls.of(cls(get('ssl_ca'), get('ssl_cert'), get('ssl_key')))

    def kwargs(self) -> dict:
        return {'ssl_ca': self.ca, 'ssl_cert': self.cert, 'ssl_key': self.key}


def tls_kwargs(tls: GearTLS | None) -> dict:
    """Keyword arguments for gear's ``addServer``/``Server``."""
    return tls.kwargs() if tls is not None else {}


def _nodelay(sock) -> None:
    if sock is None:
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:  # pragma: no cover - e.g. a socket already closed
        pass


class _NoDelayMixin:
    def _onConnect(self, conn):  # noqa: N802 - gear API
        _nodelay(conn.conn)
        super()._onConnect(conn)


class GearClient(_NoDelayMixin, gear.Client):
    """A gear.Client whose connections have TCP_NODELAY set."""


class GearWorker(_NoDelayMixin, gear.Worker):
    """A gear.Worker whose connections have TCP_NODELAY set."""


# How long a connecting client has to complete the TLS handshake.
HANDSHAKE_TIMEOUT = 10.0


class GearServer(gear.Server):
    """The embedded Gearman server, with TCP_NODELAY on accepted sockets.

    With TLS, each new connection's handshake runs on its own short-lived
    thread with a deadline, so a client that connects and says nothing
    (or speaks plain Gearman) cannot stop the server from accepting
    others; gear's own loop does the handshake inline, without one.
    """

    def __init__(self, port=4730, host=None, tls: GearTLS | None = None, **kw):
        super().__init__(port=port, host=host, **tls_kwargs(tls), **kw)
        self.log = logging.getLogger('zuul.GearServer')
        self.refused_handshakes = 0

    def connectLoop(self):  # noqa: N802 - gear API
        poller = select.poll()
        events = select.POLLIN | select.POLLERR | select.POLLHUP | select.POLLNVAL
        poller.register(self.connect_wake_read, events)
        poller.register(self.socket.fileno(), events)
        while self.running:
            for fd, event in poller.poll():
                if fd == self.connect_wake_read:
                    # shutdown() wrote a line to the wake pipe
                    while os.read(self.connect_wake_read, 1) != b"\n":
                        pass
                    return
                if not event & select.POLLIN:
                    continue
                sock, addr = self.socket.accept()
                if self.use_ssl:
                    threading.Thread(target=self._tls_accept, args=(sock, addr), daemon=True,
                                     name=f'gear-tls-{addr[0]}:{addr[1]}').start()
                else:
                    self._add_connection(sock, addr)

    def _tls_accept(self, sock, addr) -> None:
        context = gear.create_ssl_context()
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_cert_chain(self.ssl_cert, self.ssl_key)
        context.load_verify_locations(self.ssl_ca)
        sock.settimeout(HANDSHAKE_TIMEOUT)
        try:
            wrapped = context.wrap_socket(sock, server_side=True)
        except (OSError, ValueError) as e:
            self.refused_handshakes += 1
            self.log.warning('TLS handshake with %s:%s failed: %s', addr[0], addr[1], e)
            try:
                sock.close()
            except OSError:
                pass
            return
        wrapped.settimeout(None)
        if self.running:
            self._add_connection(wrapped, addr)
        else:
            wrapped.close()

    def _add_connection(self, sock, addr) -> None:
        conn = gear.ServerConnection(addr, sock, self.use_ssl, self.client_id)
        self.log.info('Accepted connection %s', conn)
        with self.connections_condition:
            self.active_connections.append(conn)
            self._registerConnection(conn)
            self.connections_condition.notify_all()

    def _registerConnection(self, conn):  # noqa: N802 - gear API
        _nodelay(conn.conn)
        super()._registerConnection(conn)
