"""The component gauges released Zuul's scheduler sends, read from the
Gearman server's ``status`` (its administrative protocol):

- ``zuul.mergers.online`` (processes registered for ``merger:merge``,
  executors that serve the merger functions included),
  ``zuul.mergers.jobs_running``, ``zuul.mergers.jobs_queued`` (every
  ``merger:*`` function);
- ``zuul.executors.online`` (executors registered: each keeps its
  ``executor:stop:<host>`` function), ``zuul.executors.accepting``
  (registered for ``executor:execute``), ``zuul.executors.jobs_running``
  and ``zuul.executors.jobs_queued``; the same under
  ``zuul.executors.unzoned`` (this Zuul has no executor zones).

``GearmanStatsReporter`` asks every ``interval`` seconds, in a thread of
its own (never on the scheduler's event loop).
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading

log = logging.getLogger('zuul.scheduler.gearman_stats')

INTERVAL = 10.0


def gearman_status(host: str, port: int, tls=None, timeout: float = 10.0) -> dict:
    """function -> (jobs queued or running, running, workers)."""
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        if tls is not None:
            context = ssl.create_default_context(cafile=tls.ca)
            context.check_hostname = False
            context.load_cert_chain(tls.cert, tls.key)
            sock = context.wrap_socket(sock)
        sock.sendall(b'status\n')
        data = b''
        while not (data == b'.\n' or data.endswith(b'\n.\n')):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        sock.close()
    out = {}
    for line in data.decode('utf8', 'replace').splitlines():
        fields = line.split('\t')
        if len(fields) >= 4:
            try:
                out[fields[0]] = (int(fields[1]), int(fields[2]), int(fields[3]))
            except ValueError:
                continue
    return out


def component_figures(status: dict) -> dict[str, int]:
    """The gauges for one ``gearman_status`` answer."""
    def jobs(names):
        total = sum(status[n][0] for n in names)
        running = sum(status[n][1] for n in names)
        return running, total - running
    mergers = [n for n in status if n.startswith('merger:')]
    running, queued = jobs(mergers)
    figures = {'zuul.mergers.online': status.get('merger:merge', (0, 0, 0))[2],
               'zuul.mergers.jobs_running': running, 'zuul.mergers.jobs_queued': queued}
    execute = status.get('executor:execute', (0, 0, 0))
    online = sum(1 for n, (_, _, workers) in status.items()
                 if n.startswith('executor:stop:') and workers)
    executors = {'online': online, 'accepting': execute[2], 'jobs_running': execute[1],
                 'jobs_queued': execute[0] - execute[1]}
    for name, value in executors.items():
        figures[f'zuul.executors.{name}'] = value
        figures[f'zuul.executors.unzoned.{name}'] = value
    return figures


class GearmanStatsReporter:
    def __init__(self, metrics, host: str, port: int, tls=None, interval: float = INTERVAL):
        self.metrics = metrics
        self.address = (host, port)
        self.tls = tls
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def report_once(self) -> bool:
        try:
            status = gearman_status(*self.address, tls=self.tls)
        except (OSError, ssl.SSLError) as e:
            log.debug('Gearman status unavailable: %s', e)
            return False
        for name, value in component_figures(status).items():
            self.metrics.gauge(name, value)
        return True

    def start(self) -> GearmanStatsReporter:
        self._thread = threading.Thread(target=self._loop, name='gearman-stats', daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while True:
            self.report_once()
            if self._stop.wait(self.interval):
                return

    def stop(self) -> None:
        self._stop.set()
