"""Metrics from every daemon, end to end: zuul-merger and zuul-executor
(real processes on zuul.conf's [statsd]), the scheduler, nodepool-launcher
and nodepool-builder (real processes on STATSD_HOST/STATSD_PORT) send
statsd lines under the names released Zuul and Nodepool document to a
real UDP listener that parses what arrives; each serves the same figures
on its Prometheus endpoint, with released Zuul's health paths."""

from __future__ import annotations

import configparser
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from nodepool.driver.metrics import prometheus_name
from nodepool.zk.localserver import free_port
from tests.functional import test_builder_support as builder_support
from tests.functional import test_nodepool_support as nodepool_support
from tests.functional.system_support import zuul_system  # noqa: F401 - fixture
from tests.functional.test_builder_cli import zk_section
from tests.functional.test_nodepool_failover import CONFIG as SIM_CONFIG
from tests.harness import docs
from tests.harness.waiting import wait_for
from zuul.configloader.zuulconf import load_zuul_conf
from zuul.driver.registry import default_registry
from zuul.scheduler.service import SchedulerService

requestor = nodepool_support.requestor
upload_provider = builder_support.upload_provider

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class StatsdListener:
    """A UDP socket that parses what arrives: ``metrics[name]`` is the
    list of (value, type) received for that name."""

    def __init__(self, sock=None):
        if sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind(('127.0.0.1', 0))
        sock.settimeout(0.05)
        self.sock = sock
        self.port = sock.getsockname()[1]
        self.metrics: dict[str, list[tuple[str, str]]] = {}

    def drain(self) -> dict:
        while True:
            try:
                data = self.sock.recv(65536)
            except (socket.timeout, BlockingIOError):
                return self.metrics
            for line in data.decode().splitlines():
                name, _, rest = line.partition(':')
                value, _, kind = rest.partition('|')
                assert name and value and kind in ('c', 'g', 'ms'), line
                self.metrics.setdefault(name, []).append((value, kind))

    def has(self, *names) -> bool:
        self.drain()
        return all(n in self.metrics for n in names)

    def last(self, name: str) -> str:
        return self.metrics[name][-1][0]

    def kinds(self, name: str) -> set[str]:
        return {kind for _, kind in self.metrics[name]}


DOC = 'doc/source/operations/monitoring.rst'


def documented(daemon: str) -> list[tuple[str, list[str], str | None]]:
    """The page's list for ``daemon`` (``# zuul-executor`` ...): (statsd
    name pattern, types, Prometheus series pattern or None)."""
    (block,) = docs.code_blocks(DOC, 'text')
    out, current = [], None
    for line in block.splitlines():
        if line.startswith('# '):
            current = line[2:].strip()
        elif line.strip() and current == daemon:
            fields = line.split()
            out.append((fields[0], fields[1].split(','), fields[2] if len(fields) > 2
                        else None))
    assert out, f'no metrics listed for {daemon}'
    return out


def check_documented(daemon: str, statsd, parts: dict, prometheus_text: str | None,
                     unobserved=()) -> int:
    """Every metric the page lists for ``daemon`` (its ``<part>``s filled
    from ``parts``) was received with the listed types, and its
    Prometheus series, as the page writes it, is served. Returns how many
    were checked."""
    checked = 0
    for pattern, kinds, prom in documented(daemon):
        if pattern in unobserved:
            continue
        name = re.sub(r'<([^>]+)>', lambda m: parts[m.group(1)], pattern)
        assert name in statsd.metrics, f'{name} (listed as {pattern}) was not received'
        wanted = {'counter': 'c', 'gauge': 'g', 'timer': 'ms'}
        assert {wanted[k] for k in kinds} <= statsd.kinds(name), (name, statsd.kinds(name))
        if prom is not None and prometheus_text is not None:
            series = re.sub(r'<([^>]+)>', lambda m: prometheus_name(parts[m.group(1)]), prom)
            assert re.search(rf'^{re.escape(series)}(_count|_sum)? ', prometheus_text,
                             re.MULTILINE), f'{series} (listed as {prom}) is not served'
        checked += 1
    return checked


def eventually_documented(daemon: str, statsd, parts: dict, metrics_url: str | None,
                          unobserved=(), timeout: float = 60) -> int:
    """``check_documented`` once what is sent has arrived (the daemon's
    /metrics read again each time); on timeout its assertion tells what
    is missing."""
    def attempt():
        statsd.drain()
        text = _get(metrics_url)[1] if metrics_url else None
        return check_documented(daemon, statsd, parts, text, unobserved)

    def ok():
        try:
            return attempt() > 0
        except AssertionError:
            return False
    try:
        wait_for(ok, timeout=timeout, what=f'the metrics listed for {daemon}')
    except TimeoutError:
        pass
    return attempt()


def _wait_for_metrics(statsd, wanted, timeout: float = 60, stop=lambda: False) -> None:
    try:
        wait_for(lambda: stop() or statsd.has(*wanted), timeout=timeout, what='metrics')
    except TimeoutError:
        raise AssertionError(f'missing: {sorted(set(wanted) - set(statsd.metrics))}; '
                             f'received: {sorted(statsd.metrics)}') from None


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _scheduler_prometheus(system, port: int) -> None:
    config = configparser.RawConfigParser()
    config.read(system.conf_path)
    config['scheduler']['prometheus_port'] = str(port)
    config['scheduler']['prometheus_addr'] = '127.0.0.1'
    with open(system.conf_path, 'w') as f:
        config.write(f)
    system.conf = load_zuul_conf(system.conf_path, default_registry())
    system.service = SchedulerService(system.conf)


def test_zuul_daemons_send_metrics_and_serve_them(zuul_system):  # noqa: F811
    system = zuul_system
    statsd = StatsdListener(system.statsd)
    system.create_projects()
    ports = {name: free_port() for name in ('scheduler', 'merger', 'executor')}
    _scheduler_prometheus(system, ports['scheduler'])
    system.start_daemon('merger', prometheus_port=ports['merger'],
                        prometheus_addr='127.0.0.1')
    system.start_daemon('executor', disable_merger='true', prometheus_port=ports['executor'],
                        prometheus_addr='127.0.0.1')
    system.start(executor=False, merger=False)
    change = system.store.create_change('org/app', 'master', 'Metrics', {'m.txt': '1\n'})
    wait_for(lambda: system.verified(change) == 1, timeout=240, what='the check vote')

    executor = 'zuul.executor.executor1_example_org'
    merger = 'zuul.merger.merger1_example_org'
    wanted = [f'{executor}.builds', f'{executor}.running_builds',
              f'{executor}.starting_builds', f'{executor}.phase.run.RESULT_NORMAL',
              f'{executor}.load_average', f'{executor}.pct_used_ram',
              f'{executor}.pct_used_hdd', f'{executor}.pause',
              f'{merger}.merger.SUCCESS', 'zuul.mergers.online', 'zuul.executors.online',
              'zuul.executors.accepting']
    _wait_for_metrics(statsd, wanted)
    assert statsd.metrics[f'{executor}.builds'] == [('1', 'c')]
    assert statsd.kinds(f'{executor}.starting_builds') == {'g', 'ms'}
    assert statsd.kinds(f'{executor}.running_builds') == {'g'}
    assert statsd.last(f'{executor}.pause') == '0'
    assert 0 < int(statsd.last(f'{executor}.pct_used_hdd')) <= 10000
    assert ('1', 'g') in statsd.metrics['zuul.mergers.online']
    assert ('1', 'g') in statsd.metrics['zuul.executors.online']
    # the executor served no merges: its merger functions are disabled
    assert not [n for n in statsd.metrics if n.startswith(f'{executor}.merger.')]

    for name, expected in (('executor', f'{executor}_builds_total 1\n'.replace('.', '_')),
                           ('merger', f'{merger}_merger_SUCCESS_total '.replace('.', '_')),
                           ('scheduler', 'zuul_mergers_online 1\n')):
        base = f'http://127.0.0.1:{ports[name]}'
        status, text = _get(f'{base}/metrics')
        assert status == 200 and expected in text, (name, text[-2000:])
        assert 'process_resident_memory_bytes ' in text
        assert _get(f'{base}/health/live')[0] == 200
        assert _get(f'{base}/health/ready') == (200, 'running\n'), name
    # Everything the page lists for these daemons, under the names it gives.
    scheduler_parts = {'tenant': 'example', 'pipeline': 'check', 'host': '127_0_0_1',
                       'project': 'org.app', 'branch': 'master', 'job': 'check-marker',
                       'RESULT': 'SUCCESS'}
    assert eventually_documented('zuul-scheduler', statsd, scheduler_parts,
                                 f'http://127.0.0.1:{ports["scheduler"]}/metrics') == 11
    assert eventually_documented(
        'zuul-executor', statsd,
        {'executor': 'executor1_example_org', 'phase': 'run', 'result': 'RESULT_NORMAL'},
        f'http://127.0.0.1:{ports["executor"]}/metrics',
        # its merger functions are disabled here: zuul-merger's test below
        unobserved={'zuul.executor.<executor>.merger.<result>'}) == 10
    assert eventually_documented('zuul-merger', statsd,
                                 {'merger': 'merger1_example_org', 'result': 'SUCCESS'},
                                 f'http://127.0.0.1:{ports["merger"]}/metrics') == 1
    # a paused executor says so, and is still ready (released Zuul's rule)
    subprocess.run([sys.executable, '-m', 'zuul.cmd.executor', '-c',
                    system.daemon('executor1').conf_path, 'pause'], check=True,
                   capture_output=True, cwd=system.root)
    wait_for(lambda: _get(f'http://127.0.0.1:{ports["executor"]}/health/status')[1] ==
             'paused\n', timeout=30, what='the executor paused')
    assert _get(f'http://127.0.0.1:{ports["executor"]}/health/ready')[0] == 200
    wait_for(lambda: statsd.has(f'{executor}.pause') and
             statsd.last(f'{executor}.pause') == '1', timeout=30, what='pause gauge 1')


@pytest.fixture
def launcher_process(zk_chroot, tmp_path):
    statsd = StatsdListener()
    host, _, rest = zk_chroot.hosts.partition(':')
    port, _, chroot = rest.partition('/')
    web = free_port()
    text = SIM_CONFIG.format(host=host, port=port, chroot=chroot,
                             state_dir=tmp_path / 'cloud')
    text += f'webapp:\n  port: {web}\n  listen_address: 127.0.0.1\n'
    path = tmp_path / 'nodepool.yaml'
    path.write_text(text)
    log = open(tmp_path / 'launcher.log', 'w')
    env = dict(os.environ, STATSD_HOST='127.0.0.1', STATSD_PORT=str(statsd.port),
               STATSD_PREFIX='')
    proc = subprocess.Popen([sys.executable, '-m', 'nodepool.cmd.launcher', '-c', str(path),
                             '-d'], stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    try:
        yield proc, statsd, f'http://127.0.0.1:{web}', tmp_path / 'launcher.log'
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        statsd.sock.close()


def test_nodepool_launcher_sends_node_and_launch_metrics(launcher_process, requestor):
    proc, statsd, web, log = launcher_process
    wait_for(lambda: proc.poll() is not None or _ready(web), timeout=60,
             what='the launcher ready')
    assert proc.poll() is None, log.read_text()
    handle = requestor.submit(['small'])
    assert handle.wait(60) and handle.fulfilled, log.read_text()[-3000:]
    wanted = ['nodepool.launch.ready', 'nodepool.launch.provider.shared-sim.sim-az.ready',
              'nodepool.launch.requestor.test-zuul.ready', 'nodepool.task.shared-sim.create',
              'nodepool.nodes.in-use', 'nodepool.label.small.nodes.in-use',
              'nodepool.provider.shared-sim.nodes.in-use',
              'nodepool.provider.shared-sim.max_servers']
    _wait_for_metrics(statsd, wanted)
    assert statsd.kinds('nodepool.launch.ready') == {'c', 'ms'}
    assert statsd.last('nodepool.provider.shared-sim.max_servers') == '5'
    wait_for(lambda: statsd.has('nodepool.nodes.in-use') and
             statsd.last('nodepool.nodes.in-use') == '1', timeout=30, what='one node in use')
    requestor.release(handle)
    wait_for(lambda: statsd.has('nodepool.nodes.in-use') and
             statsd.last('nodepool.nodes.in-use') == '0' and
             statsd.last('nodepool.nodes.used') in ('0', '1'), timeout=30,
             what='the node released')
    parts = {'state': 'in-use', 'provider': 'shared-sim', 'label': 'small', 'result': 'ready',
             'az': 'sim-az', 'requestor': 'test-zuul', 'call': 'create'}
    assert eventually_documented('nodepool-launcher', statsd, parts, f'{web}/metrics',
                                 # no diskimage here: tests/unit/test_stats.py
                                 unobserved={'nodepool.launch.image.<image>.<result>'}) == 8
    status, text = _get(f'{web}/metrics')
    assert status == 200 and 'nodepool_launch_ready_total 1\n' in text
    assert 'nodepool_launch_ready_ms_count 1\n' in text
    assert 'nodepool_provider_shared_sim_max_servers 5\n' in text
    assert _get(f'{web}/health/ready') == (200, 'running\n')


def _ready(web: str) -> bool:
    try:
        return _get(f'{web}/ready')[0] == 200
    except OSError:
        return False


@builder_support.needs_netns
def test_nodepool_builder_sends_build_and_upload_metrics(upload_provider, zk_chroot,
                                                         tmp_path):
    statsd = StatsdListener()
    config = tmp_path / 'nodepool.yaml'
    config.write_text(zk_section(zk_chroot) +
                      builder_support.builder_config(upload_provider, tmp_path))
    port = free_port()
    env = dict(os.environ, STATSD_HOST='127.0.0.1', STATSD_PORT=str(statsd.port))
    log = open(tmp_path / 'builder.log', 'w')
    proc = subprocess.Popen([sys.executable, '-m', 'nodepool.cmd.builder', '-c', str(config),
                             '-d', '-p', str(tmp_path / 'builder.pid'),
                             '--prometheus-port', str(port),
                             '--prometheus-address', '127.0.0.1'],
                            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    provider = upload_provider['name']
    try:
        wanted = ['nodepool.dib_image_build.tiny.status.rc',
                  'nodepool.dib_image_build.tiny.status.duration',
                  'nodepool.dib_image_build.tiny.status.last_build',
                  f'nodepool.image_update.tiny.{provider}']
        _wait_for_metrics(statsd, wanted, timeout=120, stop=lambda: proc.poll() is not None)
        assert proc.poll() is None, (tmp_path / 'builder.log').read_text()
        assert statsd.last('nodepool.dib_image_build.tiny.status.rc') == '0'
        assert abs(int(statsd.last('nodepool.dib_image_build.tiny.status.last_build')) -
                   time.time()) < 300
        sizes = [n for n in statsd.metrics if n.startswith('nodepool.dib_image_build.tiny.')
                 and n.endswith('.size')]
        assert sizes and all(int(statsd.last(n)) > 0 for n in sizes)
        assert statsd.kinds(f'nodepool.image_update.tiny.{provider}') == {'c', 'ms'}
        fmt = sizes[0].split('.')[-2]
        assert eventually_documented(
            'nodepool-builder', statsd, {'image': 'tiny', 'format': fmt, 'provider': provider},
            f'http://127.0.0.1:{port}/metrics') == 5
        status, text = _get(f'http://127.0.0.1:{port}/metrics')
        assert status == 200 and 'nodepool_dib_image_build_tiny_status_rc 0\n' in text
        assert _get(f'http://127.0.0.1:{port}/health/live')[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        statsd.sock.close()
