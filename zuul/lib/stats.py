"""statsd metrics (UDP, the plain statsd line protocol).

Metric names follow released Zuul where it has them, e.g.
``zuul.tenant.<t>.pipeline.<p>.current_changes`` (gauge),
``zuul.tenant.<t>.pipeline.<p>.total_changes`` (counter),
``zuul.tenant.<t>.pipeline.<p>.project.<host>.<project>.<branch>.job.<job>.<RESULT>``
(timer and counter).
"""

from __future__ import annotations

import logging
import socket

log = logging.getLogger('zuul.stats')


def _key(part: str) -> str:
    return str(part).replace('.', '_').replace('/', '.').replace(':', '_')


class StatsClient:
    def __init__(self, host: str, port: int = 8125, prefix: str | None = None):
        self.address = (host, int(port))
        self.prefix = prefix
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def _send(self, name: str, value, kind: str) -> None:
        if self.prefix:
            name = f'{self.prefix}.{name}'
        try:
            self.sock.sendto(f'{name}:{value}|{kind}'.encode(), self.address)
        except OSError as e:  # metrics must never break the scheduler
            log.debug('statsd send failed: %s', e)

    def incr(self, name: str, count: int = 1) -> None:
        self._send(name, count, 'c')

    def gauge(self, name: str, value) -> None:
        self._send(name, value, 'g')

    def timing(self, name: str, ms) -> None:
        self._send(name, int(ms), 'ms')


class SchedulerStats:
    """What the scheduler reports; a no-op when no statsd is configured."""

    def __init__(self, client: StatsClient | None):
        self.client = client

    def _pipeline_key(self, tenant, pipeline) -> str:
        return f'zuul.tenant.{_key(tenant)}.pipeline.{_key(pipeline.name)}'

    def item_enqueued(self, tenant, pipeline, item) -> None:
        if not self.client:
            return
        key = self._pipeline_key(tenant, pipeline)
        self.client.incr(f'{key}.total_changes')

    def item_dequeued(self, tenant, pipeline, item) -> None:
        if not self.client or item.dequeue_time is None:
            return
        key = self._pipeline_key(tenant, pipeline)
        self.client.timing(f'{key}.resident_time',
                           (item.dequeue_time - item.enqueue_time) * 1000)

    def queue_lengths(self, tenant, managers) -> None:
        if not self.client:
            return
        for manager in managers:
            key = self._pipeline_key(tenant, manager.pipeline)
            self.client.gauge(f'{key}.current_changes', sum(1 for _ in manager.all_items()))

    def build_completed(self, tenant, pipeline, item, build, hostname: str = '') -> None:
        """``hostname``: the canonical hostname of the change's connection,
        which released Zuul puts before the project name."""
        if not self.client:
            return
        change = item.change
        project = f'{hostname}/{change.project}' if hostname else change.project
        key = (f'{self._pipeline_key(tenant, pipeline)}.project.{_key(project)}.'
               f'{_key(getattr(change, "branch", None) or "none")}.job.{_key(build.job.name)}.'
               f'{build.result}')
        self.client.incr(key)
        if build.duration is not None:
            self.client.timing(key, build.duration * 1000)
