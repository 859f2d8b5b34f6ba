"""Metrics every daemon keeps: statsd lines and a Prometheus endpoint.

One ``Metrics`` per daemon takes counters, gauges and timers under the
statsd names released Zuul and Nodepool document
(``zuul.executor.<host>.running_builds``, ``nodepool.launch.ready``...).
Each is sent at once as a statsd line over UDP when a statsd server is
configured (``name:value|c``, ``|g``, ``|ms``; the configured prefix
before the name), and kept in memory, where ``MetricsServer`` serves
the same figures to Prometheus (``/metrics``, the text exposition
format) beside released Zuul's health paths (``/health/live``,
``/health/ready``, ``/health/status``).

Prometheus names are the statsd names with every character Prometheus
does not allow (``.``, ``-``...) turned into ``_``; a counter is
``<name>_total``, a gauge ``<name>``, a timer a summary ``<name>_ms``
(``_count`` and ``_sum`` in milliseconds). Process figures
(``process_resident_memory_bytes``, ``process_open_fds``,
``process_cpu_seconds_total``, ``process_start_time_seconds``) come
first, as released Zuul serves them.

It lives under nodepool.driver because the daemons around the provider
drivers (nodepool-launcher, nodepool-builder, zuul-launcher) and the Zuul
daemons share it, and nodepool.driver is the one part of Nodepool Zuul
may import. Sending never raises: metrics must not break a daemon.
"""

from __future__ import annotations

import http.server
import logging
import os
import re
import socket
import threading
import time

log = logging.getLogger('nodepool.metrics')

COUNTER, GAUGE, TIMER = 'c', 'g', 'ms'
# The most a statsd packet carries (lines sent together, in background).
PACKET_SIZE = 1400
_UNSAFE = re.compile(r'[^a-zA-Z0-9_:]')


def key_part(value) -> str:
    """One component of a statsd name: dots (and colons, which end a
    name on the wire) become ``_``; ``/`` becomes ``.`` so a project's
    path reads as nested components, as released Zuul writes them."""
    return str(value).replace('.', '_').replace(':', '_').replace('/', '.')


def flat_part(value) -> str:
    """A component with every ``.`` and ``/`` turned into ``_``
    (released Zuul's project names and branches; Nodepool's labels)."""
    return str(value).replace('.', '_').replace('/', '_').replace(':', '_')


def prometheus_name(name: str) -> str:
    out = _UNSAFE.sub('_', name)
    return f'_{out}' if out[:1].isdigit() else out


class Metrics:
    """``host`` None: nothing is sent (the figures are still kept for
    Prometheus)."""

    def __init__(self, host: str | None = None, port: int = 8125, prefix: str | None = None,
                 background: bool = False):
        self.address = (host, int(port)) if host else None
        self.prefix = prefix or None
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM) if host else None
        self._lock = threading.Lock()
        # ``background``: lines are sent by a thread of their own, several
        # to a packet (statsd takes lines separated by newlines), so the
        # caller (the scheduler's loop) makes no system call per figure.
        self._outbox = None
        if background and self._sock is not None:
            import collections
            self._outbox = collections.deque()
            self._ready = threading.Event()
            threading.Thread(target=self._sender, name='statsd-sender', daemon=True).start()
        # (name, kind) -> (value or sum, count): statsd sends a counter and
        # a timer under one name (nodepool.launch.ready); both are kept.
        self._values: dict[tuple[str, str], tuple[float, float]] = {}

    @property
    def sending(self) -> bool:
        return self.address is not None

    def incr(self, name: str, count: int = 1) -> None:
        self._keep(name, COUNTER, count)
        self._send(name, count, COUNTER)

    def gauge(self, name: str, value) -> None:
        self._keep(name, GAUGE, value)
        self._send(name, value, GAUGE)

    def timing(self, name: str, ms) -> None:
        self._keep(name, TIMER, ms)
        self._send(name, int(ms), TIMER)

    def _keep(self, name: str, kind: str, value) -> None:
        with self._lock:
            old = self._values.get((name, kind))
            if kind == GAUGE or old is None:
                self._values[(name, kind)] = (float(value), 1.0)
            elif kind == COUNTER:
                self._values[(name, kind)] = (old[0] + value, 1.0)
            else:       # a timer: sum and count
                self._values[(name, kind)] = (old[0] + float(value), old[1] + 1)

    def _send(self, name: str, value, kind: str) -> None:
        if self._sock is None:
            return
        if self.prefix:
            name = f'{self.prefix}.{name}'
        line = f'{name}:{value}|{kind}'.encode()
        if self._outbox is not None:
            self._outbox.append(line)
            if not self._ready.is_set():
                # (The sender clears the flag before it drains the outbox:
                # a line put while it is set is drained all the same.
                # Setting it again would take a lock and wake nobody.)
                self._ready.set()
            return
        self._sendto(line)

    def _sendto(self, packet: bytes) -> None:
        try:
            self._sock.sendto(packet, self.address)
        except OSError as e:
            log.debug('statsd send failed: %s', e)

    def _sender(self) -> None:
        while True:
            self._ready.wait()
            self._ready.clear()
            packet = b''
            while self._outbox:
                line = self._outbox.popleft()
                if packet and len(packet) + len(line) + 1 > PACKET_SIZE:
                    self._sendto(packet)
                    packet = b''
                packet = packet + b'\n' + line if packet else line
            if packet:
                self._sendto(packet)

    def values(self) -> dict[tuple[str, str], tuple[float, float]]:
        """(statsd name, kind) -> (value, or a timer's sum; count)."""
        with self._lock:
            return dict(self._values)

    def value(self, name: str, kind: str = GAUGE) -> float | None:
        found = self.values().get((name, kind))
        return found[0] if found is not None else None

    def prometheus_text(self) -> str:
        lines = process_lines()
        for (name, kind), (value, count) in sorted(self.values().items()):
            metric = prometheus_name(name)
            if kind == COUNTER:
                lines += [f'# TYPE {metric}_total counter', f'{metric}_total {_num(value)}']
            elif kind == GAUGE:
                lines += [f'# TYPE {metric} gauge', f'{metric} {_num(value)}']
            else:
                lines += [f'# TYPE {metric}_ms summary', f'{metric}_ms_count {_num(count)}',
                          f'{metric}_ms_sum {_num(value)}']
        return '\n'.join(lines) + '\n'


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


_STARTED = time.time()


def process_lines() -> list[str]:
    """The process figures released Zuul's endpoint serves (Linux /proc)."""
    lines = ['# TYPE process_start_time_seconds gauge',
             f'process_start_time_seconds {_num(round(_STARTED, 3))}']
    try:
        with open('/proc/self/statm') as f:
            pages = [int(x) for x in f.read().split()[:2]]
        size = os.sysconf('SC_PAGE_SIZE')
        lines += ['# TYPE process_virtual_memory_bytes gauge',
                  f'process_virtual_memory_bytes {pages[0] * size}',
                  '# TYPE process_resident_memory_bytes gauge',
                  f'process_resident_memory_bytes {pages[1] * size}',
                  '# TYPE process_open_fds gauge',
                  f'process_open_fds {len(os.listdir("/proc/self/fd"))}']
    except (OSError, ValueError):
        pass
    times = os.times()
    lines += ['# TYPE process_cpu_seconds_total counter',
              f'process_cpu_seconds_total {_num(round(times.user + times.system, 2))}']
    return lines


class MetricsServer:
    """``/metrics`` for Prometheus and the health paths, on ``port`` (0:
    any free port, then ``self.port``). ``status()`` names the daemon's
    state: ``running`` or ``paused`` is ready, anything else (e.g.
    ``initializing``, ``stopping``) answers 503 on ``/health/ready``."""

    def __init__(self, metrics: Metrics, port: int, host: str = '0.0.0.0', status=None):
        self.metrics = metrics
        self.status = status or (lambda: 'running')
        self.httpd = http.server.ThreadingHTTPServer((host, port), _handler(self))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread: threading.Thread | None = None

    def start(self) -> MetricsServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name='metrics-http',
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def answer(self, path: str) -> tuple[int, str, str]:
        """(status, content type, body) for ``path``."""
        return self.answer_for(self.metrics, path, self.status)

    @staticmethod
    def answer_for(metrics: Metrics, path: str, status) -> tuple[int, str, str]:
        """The same for any web server that serves these paths (the
        nodepool-launcher's web app)."""
        path = path.split('?', 1)[0]
        if path == '/metrics':
            return 200, 'text/plain; version=0.0.4; charset=utf-8', \
                metrics.prometheus_text()
        state = str(status())
        if path == '/health/live':
            return 200, 'text/plain; charset=utf-8', 'OK\n'
        if path == '/health/ready':
            ready = state in ('running', 'paused')
            return (200 if ready else 503), 'text/plain; charset=utf-8', f'{state}\n'
        if path == '/health/status':
            return 200, 'text/plain; charset=utf-8', f'{state}\n'
        return 404, 'text/plain; charset=utf-8', 'Not found\n'


def _handler(server: MetricsServer):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server API
            status, ctype, body = server.answer(self.path)
            data = body.encode()
            self.send_response(status)
            self.send_header('Content-Type', ctype)
            self.send_header('Content-Length', str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, fmt, *args):
            log.debug('metrics http: ' + fmt, *args)
    return Handler


def from_environment(environ=None) -> Metrics:
    """Released Nodepool's statsd settings: ``STATSD_HOST``,
    ``STATSD_PORT`` (8125) and ``STATSD_PREFIX``."""
    env = os.environ if environ is None else environ
    host = env.get('STATSD_HOST') or None
    try:
        port = int(env.get('STATSD_PORT') or 8125)
    except ValueError:
        log.error('STATSD_PORT=%r is not a number: statsd disabled', env.get('STATSD_PORT'))
        host, port = None, 8125
    return Metrics(host, port, env.get('STATSD_PREFIX') or None)
