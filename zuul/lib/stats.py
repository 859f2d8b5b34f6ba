"""statsd metrics (UDP, the plain statsd line protocol).

Metric names follow released Zuul where it has them, e.g.
``zuul.tenant.<t>.pipeline.<p>.current_changes`` (gauge),
``zuul.tenant.<t>.pipeline.<p>.total_changes`` (counter),
``zuul.tenant.<t>.pipeline.<p>.project.<host>.<project>.<branch>.job.<job>.<RESULT>``
(timer and counter).
"""

from __future__ import annotations

from nodepool.driver.metrics import Metrics, key_part

# zuul.conf's [statsd]: one Metrics per daemon (nodepool/driver/metrics.py
# sends the lines and keeps the figures for its Prometheus endpoint).
StatsClient = Metrics
_key = key_part


def daemon_metrics(statsd_settings, background: bool = False) -> Metrics:
    """A daemon's Metrics from zuul.conf's ``[statsd]`` (server, port,
    prefix); without a server nothing is sent, figures are still kept.
    ``background``: sent by a thread of their own (the scheduler's loop)."""
    if statsd_settings is None or not getattr(statsd_settings, 'server', None):
        return Metrics(None)
    return Metrics(statsd_settings.server, statsd_settings.port, statsd_settings.prefix,
                   background=background)


class SchedulerStats:
    """What the scheduler reports; a no-op when no statsd is configured."""

    def __init__(self, client: StatsClient | None):
        self.client = client
        # pipeline key -> the current_changes gauge last sent.
        self._lengths: dict[str, int] = {}

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
            length = sum(1 for _ in manager.all_items())
            # A gauge keeps its value: a length that did not change is
            # not sent again (each send is a system call on the loop).
            if self._lengths.get(key) != length:
                self._lengths[key] = length
                self.client.gauge(f'{key}.current_changes', length)

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


def metrics_server(metrics: Metrics, port, addr: str | None = None, status=None):
    """Released Zuul's ``prometheus_port``/``prometheus_addr`` of a
    daemon's section: a started MetricsServer (``/metrics`` and
    ``/health/*``), or None when no port is set. A port that cannot be
    bound is logged; the daemon runs on without it."""
    import logging

    from nodepool.driver.metrics import MetricsServer
    if port in (None, ''):
        return None
    try:
        return MetricsServer(metrics, int(port), addr or '0.0.0.0', status).start()
    except (OSError, ValueError) as e:
        logging.getLogger('zuul.stats').error('Prometheus endpoint not started on %s:%s: %s',
                                              addr or '0.0.0.0', port, e)
        return None
