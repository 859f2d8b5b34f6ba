"""statsd lines reach a real UDP socket."""

import socket
from types import SimpleNamespace

from zuul.lib.stats import SchedulerStats, StatsClient
from zuul.model import item as m
from zuul.model.change import Change


def test_stats_lines_on_the_wire():
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(('127.0.0.1', 0))
    server.settimeout(10)
    stats = SchedulerStats(StatsClient('127.0.0.1', server.getsockname()[1], 'ci'))
    pipeline = SimpleNamespace(name='gate')
    item = m.QueueItem(change=Change('gerrit', 'org/project', 'refs/changes/01/1/1',
                                     number=1, patchset=1, branch_name='master'))
    stats.item_enqueued('main', pipeline, item)
    build = m.Build(m.JobRef('unit'), item.current_build_set, result='SUCCESS',
                    start_time=10.0, end_time=12.5)
    stats.build_completed('main', pipeline, item, build, hostname='review.example.org')
    lines = [server.recv(1024).decode() for _ in range(3)]
    assert lines[0] == 'ci.zuul.tenant.main.pipeline.gate.total_changes:1|c'
    job_key = ('ci.zuul.tenant.main.pipeline.gate.project.review_example_org.org.project.'
               'master.job.unit.SUCCESS')
    assert lines[1:] == [f'{job_key}:1|c', f'{job_key}:2500|ms']


def test_stats_disabled_is_silent():
    SchedulerStats(None).item_enqueued('t', SimpleNamespace(name='p'), None)
