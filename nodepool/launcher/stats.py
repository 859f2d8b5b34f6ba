"""nodepool-launcher's metrics, under released Nodepool's documented
names (statsd from ``STATSD_HOST``/``STATSD_PORT``/``STATSD_PREFIX``;
Prometheus on the web app's ``/metrics``):

- ``nodepool.nodes.<state>``, ``nodepool.provider.<provider>.nodes.<state>``,
  ``nodepool.label.<label>.nodes.<state>`` (gauges; every state, 0 when
  no node is in it) and ``nodepool.provider.<provider>.max_servers``;
- ``nodepool.launch.<result>``,
  ``nodepool.launch.provider.<provider>.<az>.<result>``,
  ``nodepool.launch.image.<image>.<result>`` (built images),
  ``nodepool.launch.requestor.<requestor>.<result>`` (counter and timer of
  the launch), ``<result>`` one of ``ready``, ``error.quota``,
  ``error.zksession``, ``error.unknown``; ``<az>`` is ``None`` for a
  provider without availability zones;
- ``nodepool.task.<provider>.<call>`` (counter and timer): each call the
  launcher makes to a provider (``create``, ``poll``, ``delete``,
  ``list``).

Names are made of the names in nodepool.yaml, ``.`` and ``/`` as ``_``.
Node gauges are sent when nodes change, at most once a second
(``StatsReporter``), so they cost nothing per node event.
"""

from __future__ import annotations

import logging
import threading
import time

from nodepool.driver import QuotaError
from nodepool.driver.metrics import Metrics, flat_part
from nodepool.zk.records import NODE_STATES

log = logging.getLogger('nodepool.launcher.stats')

READY, QUOTA, ZKSESSION, UNKNOWN = 'ready', 'error.quota', 'error.zksession', 'error.unknown'


def launch_result(machine) -> str:
    if machine.succeeded:
        return READY
    if getattr(machine, 'abandoned', False):
        return ZKSESSION
    if isinstance(getattr(machine, 'exception', None), QuotaError):
        return QUOTA
    return UNKNOWN


class LauncherStats:
    def __init__(self, metrics: Metrics | None, config):
        self.metrics = metrics or Metrics(None)
        self.config = config

    def launch_done(self, machine) -> None:
        """A node's launch ended (the launch state machine's outcome)."""
        node = machine.node
        result = launch_result(machine)
        ms = max(0.0, (machine.ended_at or time.monotonic()) -
                 (machine.started_at or time.monotonic())) * 1000
        keys = ['nodepool.launch',
                f'nodepool.launch.provider.{flat_part(node.provider)}.{flat_part(node.az)}']
        if machine.image is not None:
            keys.append(f'nodepool.launch.image.{flat_part(machine.image.image_name)}')
        requestor = (machine.request or {}).get('requestor')
        if requestor:
            keys.append(f'nodepool.launch.requestor.{flat_part(requestor)}')
        for key in keys:
            self.metrics.incr(f'{key}.{result}')
            self.metrics.timing(f'{key}.{result}', ms)

    def task(self, provider: str, call: str, seconds: float) -> None:
        key = f'nodepool.task.{flat_part(provider)}.{call}'
        self.metrics.incr(key)
        self.metrics.timing(key, seconds * 1000)

    def node_states(self, nodes) -> None:
        """The node gauges for the current ``nodes`` (every record)."""
        providers = set(self.config.providers)
        labels = set(self.config.labels)
        total = {s: 0 for s in NODE_STATES}
        by_provider = {p: dict(total) for p in providers}
        by_label = {lb: dict(total) for lb in labels}
        for node in nodes:
            state = node.state
            total[state] = total.get(state, 0) + 1
            if node.provider in by_provider:
                by_provider[node.provider][state] = by_provider[node.provider].get(state, 0) + 1
            for label in _labels(node):
                if label in by_label:
                    by_label[label][state] = by_label[label].get(state, 0) + 1
        m = self.metrics
        for state, count in total.items():
            m.gauge(f'nodepool.nodes.{state}', count)
        for provider, counts in by_provider.items():
            for state, count in counts.items():
                m.gauge(f'nodepool.provider.{flat_part(provider)}.nodes.{state}', count)
            m.gauge(f'nodepool.provider.{flat_part(provider)}.max_servers',
                    _max_servers(self.config.providers[provider]))
        for label, counts in by_label.items():
            for state, count in counts.items():
                m.gauge(f'nodepool.label.{flat_part(label)}.nodes.{state}', count)


def _labels(node) -> list:
    kind = node.type
    return list(kind) if isinstance(kind, (list, tuple)) else [kind]


def _max_servers(provider) -> int:
    total = 0
    for pool in provider.pools.values():
        value = getattr(pool, 'max_servers', None)
        if value is None or value < 0:
            continue
        total += value
    return total


class TimedAdapter:
    """An adapter whose provider calls are counted and timed
    (``nodepool.task.<provider>.<call>``); every other attribute, read or
    set, is the wrapped adapter's."""

    CALLS = ('create', 'poll', 'delete', 'list')
    _OWN = ('adapter', '_provider', '_stats')

    def __init__(self, adapter, provider: str, stats: LauncherStats):
        object.__setattr__(self, 'adapter', adapter)
        object.__setattr__(self, '_provider', provider)
        object.__setattr__(self, '_stats', stats)

    def __setattr__(self, name, value):
        if name in self._OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self.adapter, name, value)

    def __getattr__(self, name):
        attr = getattr(self.adapter, name)
        if name not in self.CALLS:
            return attr

        def timed(*args, **kw):
            start = time.monotonic()
            try:
                return attr(*args, **kw)
            finally:
                self._stats.task(self._provider, name, time.monotonic() - start)
        return timed


class StatsReporter:
    """Sends the node gauges when ``changed()`` was called, at most every
    ``interval`` seconds, in a thread of its own."""

    def __init__(self, stats: LauncherStats, nodes, interval: float = 1.0):
        self.stats = stats
        self.nodes = nodes          # callable: every node record
        self.interval = interval
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> StatsReporter:
        self._dirty.set()
        self._thread = threading.Thread(target=self._loop, name='launcher-stats',
                                        daemon=True)
        self._thread.start()
        return self

    def changed(self) -> None:
        self._dirty.set()

    def stop(self) -> None:
        self._stop.set()
        self._dirty.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._dirty.wait()
            if self._stop.is_set():
                return
            self._dirty.clear()
            try:
                self.stats.node_states(self.nodes())
            except Exception:
                log.exception('Unable to report the node gauges')
            self._stop.wait(self.interval)
