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

Restarts: gear reconnects a lost connection by itself (every two seconds)
and a worker then sends its functions again.  What this module adds:

- TCP keepalive on every client and worker connection, so a server whose
  host vanished without closing its sockets is noticed within minutes;
- a submit waiting for JOB_CREATED on a connection that is lost is woken
  at once (gear waits out its whole timeout otherwise);
- a worker job answers only over the connection it was assigned on.  A
  restarted server numbers its job handles from 1 again, so an answer to
  a job of the old server sent over the new connection could complete
  some other client's job.  Such answers (and any that fail to send) are
  dropped and logged, never raised into the worker's job loop: the client
  saw the connection go and submits its job again.  The embedded server
  likewise passes on work packets only from the worker it assigned the
  job to.

Wake-ups: a Gearman worker with nothing to do sleeps (PRE_SLEEP) until
the server sends it a NOOP for a job it can do.  Two holes in that:
gear's server wakes workers only when a job is submitted, so a worker
that registers a function (CAN_DO) while it sleeps -- an executor whose
governor re-registers, a merger resumed -- was never told of the jobs
already queued for it; and any NOOP that does not arrive leaves a job
queued beside an idle worker until unrelated work arrives.  The
embedded server wakes a sleeping worker when it registers a function
with queued work, and every idle worker asks again for work every
``IDLE_REGRAB_INTERVAL`` seconds whatever it was told, so no wake-up
lost for any reason holds a job longer than that.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import ssl
import threading
import time
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


# TCP keepalive on client and worker connections: a dead server host is
# noticed after about KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_COUNT s.
KEEPALIVE_IDLE = 60
KEEPALIVE_INTERVAL = 15
KEEPALIVE_COUNT = 4

log = logging.getLogger('zuul.gearlib')


class _ConnectionMixin:
    def addServer(self, host, port=4730, ssl_key=None, ssl_cert=None,  # noqa: N802 - gear API
                  ssl_ca=None, keepalive=True, tcp_keepidle=KEEPALIVE_IDLE,
                  tcp_keepintvl=KEEPALIVE_INTERVAL, tcp_keepcnt=KEEPALIVE_COUNT):
        super().addServer(host, port, ssl_key=ssl_key, ssl_cert=ssl_cert, ssl_ca=ssl_ca,
                          keepalive=keepalive, tcp_keepidle=tcp_keepidle,
                          tcp_keepintvl=tcp_keepintvl, tcp_keepcnt=tcp_keepcnt)

    def _onConnect(self, conn):  # noqa: N802 - gear API
        _nodelay(conn.conn)
        super()._onConnect(conn)

    def _lostConnection(self, conn):  # noqa: N802 - gear API
        # Requests still waiting for the server's reply on this connection
        # will never get one: wake them now (a submit then moves on).
        waiting = list(conn.pending_tasks)
        super()._lostConnection(conn)
        for task in waiting:
            job = getattr(task, 'job', None)
            if job is not None:
                job.submit_connection_lost = True
            task.setComplete()

    def shutdown(self):
        # Likewise for requests still waiting when we shut down.
        with self.connections_condition:
            conns = self.active_connections + self.inactive_connections
        waiting = [task for conn in conns for task in list(conn.pending_tasks)]
        super().shutdown()
        for task in waiting:
            task.setComplete()


class GearClient(_ConnectionMixin, gear.Client):
    """A gear.Client with TCP_NODELAY and keepalive on its connections.

    Submits are serialized: gear queues a submit's task and sends its
    packet in two steps and pairs each JOB_CREATED with the oldest queued
    task, so two threads submitting at once could each get the other's
    job handle, and so the other's answer (zuul-web serving two requests
    at the same time).  One submit is one round trip (about a
    millisecond), so the lock costs little."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self._submit_lock = threading.Lock()

    def submitJob(self, job, *args, **kw):  # noqa: N802 - gear API
        """gear's submitJob; a submit cut short by a lost connection raises
        NoConnectedServersError, as it does when none is connected."""
        job.submit_connection_lost = False
        try:
            with self._submit_lock:
                return super().submitJob(job, *args, **kw)
        except (gear.GearmanError, gear.NoConnectedServersError):
            if job.submit_connection_lost:
                raise gear.NoConnectedServersError(
                    'lost the connection to the Gearman server while submitting') from None
            raise


class _AnswerChannel:
    """What a worker job sends its answers through: the connection it was
    assigned on, as long as that is still the same socket.  Answers after
    a reconnect, and answers that fail to send, are dropped (``lost``)."""

    def __init__(self, conn):
        self.conn = conn
        self.sock = conn.conn
        self.lost = False

    def sendPacket(self, packet):  # noqa: N802 - gear API
        if self.sock is None or self.conn.conn is not self.sock:
            self._drop(packet, 'the connection it came on is gone')
            return
        try:
            self.conn.sendPacket(packet)
        except Exception as exc:  # the server went away
            self._drop(packet, f'sending failed: {exc}')

    def _drop(self, packet, why: str) -> None:
        self.lost = True
        log.warning('Dropping %s for job %s: %s', gear.constants.types.get(packet.ptype),
                    packet.getArgument(0), why)

    def __getattr__(self, name):
        return getattr(self.conn, name)


class GuardedWorkerJob(gear.WorkerJob):
    """A WorkerJob whose answers go through an :class:`_AnswerChannel`;
    ``answer_lost`` is true once one of them was dropped."""

    @property
    def connection(self):
        return self._channel

    @connection.setter
    def connection(self, conn):
        self._channel = None if conn is None else _AnswerChannel(conn)

    @property
    def answer_lost(self) -> bool:
        return self._channel is not None and self._channel.lost


# An idle worker asks its server for work again this often (seconds),
# whether or not it was woken: the bound on any lost wake-up.
IDLE_REGRAB_INTERVAL = 2.0


class GearWorker(_ConnectionMixin, gear.Worker):
    """A gear.Worker with TCP_NODELAY and keepalive on its connections.
    Its jobs (:class:`GuardedWorkerJob`) answer only over the connection
    they came on and never raise when the server is gone; gear sends the
    registered functions again after every reconnect.  While a thread
    waits in ``getJob``, a connection asleep for ``regrab_interval``
    seconds asks for a job again (GRAB_JOB_UNIQ), so a job the server
    did not wake it for is taken within that time."""

    job_class = GuardedWorkerJob
    regrab_interval = IDLE_REGRAB_INTERVAL

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self._regrab_stop = threading.Event()
        self.regrabs = 0
        threading.Thread(target=self._regrab_loop, daemon=True,
                         name=f'gear-regrab-{self.client_id!r}').start()

    def _regrab_loop(self) -> None:
        while not self._regrab_stop.wait(self.regrab_interval / 2):
            try:
                self.regrab_idle()
            except Exception:  # never let the safety net die
                log.exception('Asking the Gearman server for work again failed')

    def regrab_idle(self) -> int:
        """Ask again for work on every connection asleep for at least
        ``regrab_interval`` while a thread waits for a job; returns how
        many asked."""
        asked = 0
        now = time.time()
        with self.job_lock:
            if not self.running or self.waiting_for_jobs < 1:
                return 0
            for conn in list(self.active_connections):
                if conn.state != 'SLEEP' or now - conn.state_time < self.regrab_interval:
                    continue
                try:
                    self._sendGrabJobUniq(conn)
                except Exception:  # lost: the reconnect asks again
                    continue
                conn.changeState('GRAB_WAIT')
                asked += 1
        self.regrabs += asked
        return asked

    def shutdown(self):
        self._regrab_stop.set()
        super().shutdown()


# How long a connecting client has to complete the TLS handshake.
HANDSHAKE_TIMEOUT = 10.0

#: The loggers of the embedded Gearman server (gear's server classes and
#: ours): what ``[gearman_server] log_config`` configures.
SERVER_LOGGERS = ('zuul.GearServer', 'gear.Server', 'gear.ServerConnection',
                  'gear.BaseClientServer')


def configure_server_logging(path: str) -> list[str]:
    """Apply the logging configuration file ``path`` (``[gearman_server]
    log_config``) to the embedded server's loggers only: their records go
    where that file says (its entry for the logger, else its root entry)
    instead of to the scheduler's log.  The rest of the process keeps its
    own logging.  LoggingConfigError names what is wrong."""
    from zuul.lib import scoped_logging
    config = scoped_logging.load(path)
    return scoped_logging.apply(path, config, SERVER_LOGGERS, prefixes=SERVER_LOGGERS)


class GearServer(gear.Server):
    """The embedded Gearman server, with TCP_NODELAY on accepted sockets.

    With TLS, each new connection's handshake runs on its own short-lived
    thread with a deadline, so a client that connects and says nothing
    (or speaks plain Gearman) cannot stop the server from accepting
    others; gear's own loop does the handshake inline, without one.
    """

    # gear.Server starts its connection threads before it sets these, so a
    # client that connects at once (workers reconnecting to a restarted
    # server) could have its first SUBMIT_JOB fail on a missing ``statsd``
    # and lose its connection.  Class defaults cover that window.
    statsd = None
    refused_handshakes = 0

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

    def handleCanDo(self, packet):  # noqa: N802 - gear API
        super().handleCanDo(packet)
        self._wake_for_queued(packet.connection)

    def _wake_for_queued(self, conn) -> None:
        """A sleeping worker that can now do a queued job is woken (gear
        wakes workers only when a job is submitted)."""
        if getattr(conn, 'state', None) == 'SLEEP' and \
                self.getJobForConnection(conn, peek=True) is not None:
            self.wakeConnection(conn)

    def handlePassthrough(self, packet, finished=False):  # noqa: N802 - gear API
        # WORK_* packets count only from the worker the job was assigned to:
        # a worker still answering a job of a previous server process may
        # use a handle this process has since given to another job.
        job = self.jobs.get(packet.getArgument(0))
        if job is not None and job.worker_connection is not packet.connection:
            self.log.warning('Ignoring %s for job %s from %s, which is not running it',
                             gear.constants.types.get(packet.ptype), job.handle,
                             packet.connection)
            return
        super().handlePassthrough(packet, finished)
