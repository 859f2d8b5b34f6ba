"""Metrics (nodepool/driver/metrics.py and the daemons' stats modules):
statsd lines reach a real UDP socket, the same figures are served to
Prometheus with released Zuul's health paths, and each daemon's figures
carry the names released Zuul and Nodepool document."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest

from nodepool.builder.dib import BuildResult
from nodepool.builder.stats import BuilderStats
from nodepool.driver import QuotaError
from nodepool.driver import metrics as metrics_module
from nodepool.driver.metrics import Metrics, MetricsServer, from_environment
from nodepool.launcher.stats import LauncherStats, TimedAdapter
from zuul.executor.stats import ExecutorStats
from zuul.lib.stats import SchedulerStats, StatsClient
from zuul.model import item as m
from zuul.model.change import Change
from zuul.scheduler.gearman_stats import component_figures


@pytest.fixture
def listener():
    """A statsd "server": ``lines()`` is every line received so far."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(('127.0.0.1', 0))
    sock.settimeout(0.2)

    def lines(expect: int = 0):
        out, deadline = [], time.monotonic() + 10
        while True:
            try:
                out.extend(sock.recv(65536).decode().splitlines())
            except socket.timeout:
                if len(out) >= expect or time.monotonic() > deadline:
                    return out
    yield SimpleNamespace(port=sock.getsockname()[1], lines=lines)
    sock.close()


def _item():
    return m.QueueItem(change=Change('gerrit', 'org/project', 'refs/changes/01/1/1',
                                     number=1, patchset=1, branch_name='master'))


def test_stats_lines_on_the_wire(listener):
    stats = SchedulerStats(StatsClient('127.0.0.1', listener.port, 'ci'))
    pipeline = SimpleNamespace(name='gate')
    item = _item()
    stats.item_enqueued('main', pipeline, item)
    build = m.Build(m.JobRef('unit'), item.current_build_set, result='SUCCESS',
                    start_time=10.0, end_time=12.5)
    stats.build_completed('main', pipeline, item, build, hostname='review.example.org')
    lines = listener.lines(3)
    assert lines[0] == 'ci.zuul.tenant.main.pipeline.gate.total_changes:1|c'
    job_key = ('ci.zuul.tenant.main.pipeline.gate.project.review_example_org.org.project.'
               'master.job.unit.SUCCESS')
    assert lines[1:] == [f'{job_key}:1|c', f'{job_key}:2500|ms']


class _Recorder:
    """Stands in for socket.socket: records every socket made and sent to."""

    made: list = []

    def __init__(self, *args):
        _Recorder.made.append(('socket', args))

    def sendto(self, data, address):
        _Recorder.made.append(('sendto', data))


def test_stats_disabled_is_silent(monkeypatch):
    """No statsd server: no socket is even opened, nothing is sent, by the
    scheduler's stats (SchedulerStats(None)) or a daemon's Metrics(None);
    the figures are still kept for Prometheus. (The same calls with a
    server do reach the recorder: it would see a send.)"""
    _Recorder.made = []
    monkeypatch.setattr(metrics_module.socket, 'socket', _Recorder)
    pipeline, item = SimpleNamespace(name='gate'), _item()
    build = m.Build(m.JobRef('unit'), item.current_build_set, result='SUCCESS',
                    start_time=1.0, end_time=2.0)

    def everything(stats):
        stats.item_enqueued('t', pipeline, item)
        item.dequeue_time = item.enqueue_time + 1
        stats.item_dequeued('t', pipeline, item)
        stats.queue_lengths('t', [SimpleNamespace(pipeline=pipeline, all_items=lambda: [])])
        stats.build_completed('t', pipeline, item, build, hostname='h')
    everything(SchedulerStats(None))
    quiet = Metrics(None)
    everything(SchedulerStats(quiet))
    quiet.incr('zuul.executor.h.builds')
    assert _Recorder.made == []
    assert quiet.value('zuul.executor.h.builds', 'c') == 1
    everything(SchedulerStats(Metrics('127.0.0.1', 9)))
    assert [kind for kind, _ in _Recorder.made].count('sendto') == 5


def test_figures_kept_for_prometheus_are_those_sent(listener):
    metrics = Metrics('127.0.0.1', listener.port, prefix='site')
    metrics.incr('zuul.executor.ex1_example_org.builds')
    metrics.incr('zuul.executor.ex1_example_org.builds')
    metrics.gauge('nodepool.label.small.nodes.in-use', 3)
    metrics.timing('nodepool.launch.ready', 250)
    metrics.timing('nodepool.launch.ready', 750)
    metrics.incr('nodepool.launch.ready')       # a counter and a timer of one name
    assert listener.lines(6) == [
        'site.zuul.executor.ex1_example_org.builds:1|c',
        'site.zuul.executor.ex1_example_org.builds:1|c',
        'site.nodepool.label.small.nodes.in-use:3|g',
        'site.nodepool.launch.ready:250|ms', 'site.nodepool.launch.ready:750|ms',
        'site.nodepool.launch.ready:1|c']
    text = metrics.prometheus_text()
    assert '# TYPE zuul_executor_ex1_example_org_builds_total counter\n' \
           'zuul_executor_ex1_example_org_builds_total 2\n' in text
    assert 'nodepool_label_small_nodes_in_use 3\n' in text
    assert 'nodepool_launch_ready_ms_count 2\nnodepool_launch_ready_ms_sum 1000\n' in text
    assert 'nodepool_launch_ready_total 1\n' in text
    assert text.startswith('# TYPE process_start_time_seconds gauge\n')
    assert 'process_resident_memory_bytes ' in text and 'process_open_fds ' in text


def test_nodepool_statsd_settings_come_from_its_environment():
    assert from_environment({}).sending is False
    metrics = from_environment({'STATSD_HOST': '127.0.0.1', 'STATSD_PORT': '9125',
                                'STATSD_PREFIX': 'np'})
    assert metrics.address == ('127.0.0.1', 9125) and metrics.prefix == 'np'
    assert from_environment({'STATSD_HOST': 'h', 'STATSD_PORT': 'x'}).sending is False


def _get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_the_endpoint_serves_metrics_and_released_health_paths():
    metrics = Metrics(None)
    metrics.gauge('zuul.executor.h.running_builds', 2)
    state = ['initializing']
    server = MetricsServer(metrics, 0, '127.0.0.1', status=lambda: state[0]).start()
    base = f'http://127.0.0.1:{server.port}'
    try:
        status, body = _get(f'{base}/metrics')
        assert status == 200 and 'zuul_executor_h_running_builds 2\n' in body
        assert _get(f'{base}/health/live')[0] == 200
        assert _get(f'{base}/health/ready') == (503, 'initializing\n')
        assert _get(f'{base}/health/status') == (200, 'initializing\n')
        state[0] = 'paused'
        assert _get(f'{base}/health/ready') == (200, 'paused\n')
        assert _get(f'{base}/nope')[0] == 404
    finally:
        server.stop()


def test_gearman_status_gives_released_component_gauges():
    status = {'merger:merge': (3, 1, 2), 'merger:cat': (1, 1, 2),
              'merger:refstate': (0, 0, 2), 'executor:execute': (5, 2, 1),
              'executor:stop:ex1.example.org': (0, 0, 1),
              'executor:stop:ex2.example.org': (0, 0, 1),
              'executor:stop:gone.example.org': (0, 0, 0), 'zuul:status_get': (0, 0, 1)}
    figures = component_figures(status)
    assert figures['zuul.mergers.online'] == 2
    assert (figures['zuul.mergers.jobs_running'], figures['zuul.mergers.jobs_queued']) == \
        (2, 2)
    assert {k: v for k, v in figures.items() if k.startswith('zuul.executors.')
            and '.unzoned.' not in k} == {
        'zuul.executors.online': 2, 'zuul.executors.accepting': 1,
        'zuul.executors.jobs_running': 2, 'zuul.executors.jobs_queued': 3}
    assert figures['zuul.executors.unzoned.online'] == 2


def test_executor_figures(listener, tmp_path):
    stats = ExecutorStats(Metrics('127.0.0.1', listener.port), 'ex1.example.org',
                          str(tmp_path))
    stats.build_started()
    stats.starting_ended(1.5)
    stats.playbook_ended('pre_run', 'RESULT_NORMAL')
    stats.playbook_ended('run', 'RESULT_TIMED_OUT')
    stats.report(running=2, starting=1, paused=True)
    key = 'zuul.executor.ex1_example_org'
    lines = listener.lines(10)
    assert lines[:4] == [f'{key}.builds:1|c', f'{key}.starting_builds:1500|ms',
                         f'{key}.phase.pre.RESULT_NORMAL:1|c',
                         f'{key}.phase.run.RESULT_TIMED_OUT:1|c']
    gauges = dict(line.split('|')[0].split(':') for line in lines[4:])
    assert {k: gauges[f'{key}.{k}'] for k in ('running_builds', 'starting_builds',
                                               'paused_builds', 'pause')} == \
        {'running_builds': '2', 'starting_builds': '1', 'paused_builds': '0', 'pause': '1'}
    for name in ('load_average', 'pct_used_ram', 'pct_used_hdd', 'pct_used_inodes'):
        assert 0 <= int(gauges[f'{key}.{name}']) <= 10000 * 64, name
    assert 0 < int(gauges[f'{key}.pct_used_hdd']) <= 10000


def _machine(result, provider='sim', az=None, requestor='zuul-scheduler', image=None):
    node = SimpleNamespace(provider=provider, az=az, type='small')
    return SimpleNamespace(node=node, succeeded=result == 'ready',
                           abandoned=result == 'zksession',
                           exception=QuotaError('over quota') if result == 'quota' else
                           RuntimeError('boom'),
                           started_at=100.0, ended_at=102.5, image=image,
                           request={'requestor': requestor})


def test_launch_results_by_provider_az_image_and_requestor(listener):
    stats = LauncherStats(Metrics('127.0.0.1', listener.port), config=None)
    stats.launch_done(_machine('ready', az='az1',
                               image=SimpleNamespace(image_name='tiny')))
    stats.launch_done(_machine('quota'))
    stats.launch_done(_machine('zksession', requestor='nodepool'))
    stats.launch_done(_machine('other'))
    lines = listener.lines(26)
    assert lines[:8] == [
        'nodepool.launch.ready:1|c', 'nodepool.launch.ready:2500|ms',
        'nodepool.launch.provider.sim.az1.ready:1|c',
        'nodepool.launch.provider.sim.az1.ready:2500|ms',
        'nodepool.launch.image.tiny.ready:1|c', 'nodepool.launch.image.tiny.ready:2500|ms',
        'nodepool.launch.requestor.zuul-scheduler.ready:1|c',
        'nodepool.launch.requestor.zuul-scheduler.ready:2500|ms']
    counted = [line for line in lines if line.endswith('|c')]
    assert 'nodepool.launch.provider.sim.None.error.quota:1|c' in counted
    assert 'nodepool.launch.requestor.nodepool.error.zksession:1|c' in counted
    assert 'nodepool.launch.error.unknown:1|c' in counted


def test_node_gauges_cover_every_state_provider_and_label():
    config = SimpleNamespace(
        providers={'sim': SimpleNamespace(pools={'main': SimpleNamespace(max_servers=5),
                                                 'more': SimpleNamespace(max_servers=2)})},
        labels={'small': None, 'large': None})
    metrics = Metrics(None)
    nodes = [SimpleNamespace(state='ready', provider='sim', type='small'),
             SimpleNamespace(state='in-use', provider='sim', type='small'),
             SimpleNamespace(state='in-use', provider='sim', type=['large'])]
    LauncherStats(metrics, config).node_states(nodes)
    values = {name: v[0] for (name, kind), v in metrics.values().items()}
    assert values['nodepool.nodes.in-use'] == 2 and values['nodepool.nodes.ready'] == 1
    assert values['nodepool.nodes.building'] == 0 and values['nodepool.nodes.deleting'] == 0
    assert values['nodepool.provider.sim.nodes.in-use'] == 2
    assert values['nodepool.label.small.nodes.ready'] == 1
    assert values['nodepool.label.large.nodes.in-use'] == 1
    assert values['nodepool.label.large.nodes.ready'] == 0
    assert values['nodepool.provider.sim.max_servers'] == 7


def test_provider_calls_are_counted_and_timed_and_attributes_pass_through():
    metrics = Metrics(None)
    calls = []

    class Adapter:
        provider = SimpleNamespace(name='sim')
        delete_timeout = 10

        def create(self, spec):
            calls.append(spec)
            return 'id-1'
    timed = TimedAdapter(Adapter(), 'sim', LauncherStats(metrics, None))
    assert timed.create('spec') == 'id-1' and calls == ['spec']
    assert metrics.value('nodepool.task.sim.create', 'c') == 1
    assert metrics.values()[('nodepool.task.sim.create', 'ms')][1] == 1    # timed once
    timed.delete_timeout = 0.5
    assert timed.adapter.delete_timeout == 0.5 and timed.provider.name == 'sim'


def test_builder_figures(listener, tmp_path):
    stats = BuilderStats(Metrics('127.0.0.1', listener.port))
    image = tmp_path / 'tiny-0000000001.qcow2'
    image.write_bytes(b'x' * 1234)
    stats.build_done('tiny', BuildResult(True, ['qcow2'], '', 2.0, 0),
                     {'qcow2': str(image)})
    stats.build_done('broken', BuildResult(False, [], 'dib exited with 3', 1.0, 3), {})
    stats.upload_done('tiny', 'cloud1', 4.0)
    lines = listener.lines(9)
    assert lines[0] == 'nodepool.dib_image_build.tiny.status.rc:0|g'
    assert lines[1] == 'nodepool.dib_image_build.tiny.status.duration:2000|ms'
    assert lines[2].startswith('nodepool.dib_image_build.tiny.status.last_build:')
    assert lines[3] == 'nodepool.dib_image_build.tiny.qcow2.size:1234|g'
    assert lines[4] == 'nodepool.dib_image_build.broken.status.rc:3|g'
    assert lines[-2:] == ['nodepool.image_update.tiny.cloud1:1|c',
                          'nodepool.image_update.tiny.cloud1:4000|ms']


# -- the monitoring page's examples, as printed -----------------------------------------

MONITORING = 'doc/source/operations/monitoring.rst'


def test_the_documented_prometheus_settings_load_as_printed(tmp_path, caplog):
    import shlex

    from nodepool.cmd.builder import parser as builder_parser
    from tests.harness import docs
    from zuul.configloader.zuulconf import load_zuul_conf
    (ini,) = docs.code_blocks(MONITORING, 'ini')
    path = tmp_path / 'zuul.conf'
    path.write_text(ini)
    with caplog.at_level('WARNING'):
        conf = load_zuul_conf(str(path))
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    assert (conf.scheduler.prometheus_port, conf.merger.prometheus_port,
            conf.executor.prometheus_port) == (9091, 9092, 9093)
    assert conf.scheduler.prometheus_addr == '0.0.0.0'
    (console,) = docs.code_blocks(MONITORING, 'console')
    argv = shlex.split(console.strip().removeprefix('$ '))
    assert argv[0] == 'nodepool-builder'
    args = builder_parser().parse_args(argv[1:])
    assert (args.prometheus_port, args.prometheus_address) == (9094, '0.0.0.0')


def test_queue_length_gauges_are_sent_when_they_change():
    sent = []
    client = SimpleNamespace(gauge=lambda name, value: sent.append((name, value)))
    stats = SchedulerStats(client)
    items = []
    manager = SimpleNamespace(pipeline=SimpleNamespace(name='check'),
                              all_items=lambda: iter(items))
    stats.queue_lengths('t', [manager])
    stats.queue_lengths('t', [manager])         # the same: nothing sent
    items.append(object())
    stats.queue_lengths('t', [manager])
    assert sent == [('zuul.tenant.t.pipeline.check.current_changes', 0),
                    ('zuul.tenant.t.pipeline.check.current_changes', 1)]


def test_figures_sent_in_background_leave_the_callers_thread(listener):
    import threading
    client = StatsClient('127.0.0.1', listener.port, 'ci', background=True)
    real = client._sock
    senders = []

    class Watched:
        def sendto(self, data, address):
            senders.append(threading.current_thread().name)
            return real.sendto(data, address)
    client._sock = Watched()
    stats = SchedulerStats(client)
    pipeline = SimpleNamespace(name='gate')
    stats.item_enqueued('main', pipeline, _item())
    client.gauge('zuul.x', 3)
    client.timing('zuul.y', 12.7)
    assert listener.lines(3) == ['ci.zuul.tenant.main.pipeline.gate.total_changes:1|c',
                                 'ci.zuul.x:3|g', 'ci.zuul.y:12|ms']
    assert senders and threading.current_thread().name not in senders
    # Kept for Prometheus as when sent at once.
    assert client.value('zuul.x') == 3.0
