"""Keeping finished builds' logs: the safe copy of work/logs, its size
cap, the log URL and its precedence, retention."""

from __future__ import annotations

import configparser
import os
import time
from types import SimpleNamespace

import pytest

from zuul.executor import logarchive
from zuul.executor.protocol import BuildResult
from zuul.executor.settings import ExecutorSettings
from zuul.scheduler.builds import ExecutorAdapter

UUID = 'a' * 32


@pytest.fixture
def job_root(tmp_path):
    """A job dir whose work/logs holds what a build would leave."""
    root = tmp_path / 'job'
    logs = root / 'work' / 'logs'
    (logs / 'node' / 'etc').mkdir(parents=True)
    (logs / 'job-output.txt').write_text('hello\n')
    (logs / 'job-output.json').write_text('[]\n')
    (logs / 'node' / 'etc' / 'hosts').write_text('127.0.0.1 localhost\n')
    return root


def _tree(path) -> dict:
    out = {}
    for dirpath, dirs, files in os.walk(path):
        for name in dirs + files:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, path)
            out[rel] = None if os.path.isdir(full) else open(full).read()
    return out


def test_the_log_tree_is_copied_under_the_build_uuid(job_root, tmp_path):
    report = logarchive.archive_build_logs(str(job_root), UUID, str(tmp_path / 'keep'), 1000)
    assert _tree(tmp_path / 'keep') == {
        UUID: None, f'{UUID}/job-output.txt': 'hello\n', f'{UUID}/job-output.json': '[]\n',
        f'{UUID}/node': None, f'{UUID}/node/etc': None,
        f'{UUID}/node/etc/hosts': '127.0.0.1 localhost\n'}
    assert (report.files, report.directories, report.truncated) == (3, 2, None)
    assert report.bytes == len('hello\n[]\n127.0.0.1 localhost\n')
    # copies get their own permissions, whatever the job set
    assert os.stat(tmp_path / 'keep' / UUID / 'job-output.txt').st_mode & 0o7777 == 0o644


def test_symlinks_fifos_and_sockets_are_skipped(job_root, tmp_path):
    canary = tmp_path / 'canary'
    canary.write_text('SECRET\n')
    (tmp_path / 'canary-dir').mkdir()
    (tmp_path / 'canary-dir' / 'key').write_text('SECRET\n')
    logs = job_root / 'work' / 'logs'
    (logs / 'stolen.txt').symlink_to(canary)
    (logs / 'stolen-dir').symlink_to(tmp_path / 'canary-dir')
    (logs / 'node' / 'up').symlink_to('../../../..')
    os.mkfifo(logs / 'pipe')
    report = logarchive.archive_build_logs(str(job_root), UUID, str(tmp_path / 'keep'), 1000)
    kept = _tree(tmp_path / 'keep' / UUID)
    assert 'SECRET\n' not in kept.values()
    assert set(kept) == {'job-output.txt', 'job-output.json', 'node', 'node/etc',
                         'node/etc/hosts'}
    assert sorted(report.skipped) == ['node/up', 'pipe', 'stolen-dir', 'stolen.txt']


def test_a_symlinked_log_dir_is_not_followed(tmp_path):
    (tmp_path / 'job' / 'work').mkdir(parents=True)
    (tmp_path / 'secret').mkdir()
    (tmp_path / 'secret' / 'key').write_text('SECRET\n')
    (tmp_path / 'job' / 'work' / 'logs').symlink_to(tmp_path / 'secret')
    with pytest.raises(logarchive.LogArchiveError):
        logarchive.archive_build_logs(str(tmp_path / 'job'), UUID, str(tmp_path / 'keep'), 1000)
    assert os.listdir(tmp_path / 'keep') == []  # no partial copy left behind


def test_the_size_cap_stops_the_copy_with_a_note(job_root, tmp_path):
    logs = job_root / 'work' / 'logs'
    (logs / 'zz-big.log').write_bytes(b'x' * 5000)
    report = logarchive.archive_build_logs(str(job_root), UUID, str(tmp_path / 'keep'), 4096)
    kept = _tree(tmp_path / 'keep' / UUID)
    assert 'zz-big.log' not in kept
    assert 'job-output.txt' in kept
    assert 'zz-big.log' in report.truncated and report.bytes <= 4096
    assert 'stopped archiving' in kept[logarchive.TRUNCATED_NOTE]


def test_too_many_entries_and_too_deep_are_bounded(job_root, tmp_path, monkeypatch):
    monkeypatch.setattr(logarchive, 'MAX_DEPTH', 2)
    deep = job_root / 'work' / 'logs' / 'a' / 'b' / 'c'
    deep.mkdir(parents=True)
    (deep / 'f').write_text('deep')
    report = logarchive.archive_build_logs(str(job_root), UUID, str(tmp_path / 'keep'), 1000)
    assert 'a/b/c' in report.skipped
    assert os.path.isdir(tmp_path / 'keep' / UUID / 'a' / 'b')
    monkeypatch.setattr(logarchive, 'MAX_ENTRIES', 2)
    report = logarchive.archive_build_logs(str(job_root), UUID, str(tmp_path / 'keep'), 1000)
    assert 'more than 2' in report.truncated
    assert logarchive.TRUNCATED_NOTE in os.listdir(tmp_path / 'keep' / UUID)


def test_a_second_copy_of_the_same_build_replaces_the_first(job_root, tmp_path):
    keep = tmp_path / 'keep'
    logarchive.archive_build_logs(str(job_root), UUID, str(keep), 1000)
    (job_root / 'work' / 'logs' / 'job-output.txt').write_text('again\n')
    logarchive.archive_build_logs(str(job_root), UUID, str(keep), 1000)
    assert (keep / UUID / 'job-output.txt').read_text() == 'again\n'
    assert os.listdir(keep) == [UUID]


def test_a_uuid_that_is_not_a_name_is_refused(job_root, tmp_path):
    for bad in ('../x', '', '.hidden', 'a/b'):
        with pytest.raises(logarchive.LogArchiveError):
            logarchive.archive_build_logs(str(job_root), bad, str(tmp_path / 'keep'), 1000)


def test_log_url_template():
    assert logarchive.log_url_for('http://z/logs/{build}/', UUID) == f'http://z/logs/{UUID}/'
    assert logarchive.log_url_for('http://z/l/{uuid}/index', UUID) == f'http://z/l/{UUID}/index'
    assert logarchive.log_url_for('http://z/logs', UUID) == f'http://z/logs/{UUID}/'


def test_settings_from_zuul_conf():
    config = configparser.ConfigParser()
    config.read_string('[executor]\nlog_root = /srv/logs\nlog_url = http://z/logs/{build}/\n'
                       'max_log_bytes = 1000\nlog_retention_days = 7\n')
    settings = ExecutorSettings.from_config(config)
    assert (settings.log_root, settings.log_url, settings.max_log_bytes,
            settings.log_retention_days) == ('/srv/logs', 'http://z/logs/{build}/', 1000, 7)
    default = ExecutorSettings.from_config(configparser.ConfigParser())
    assert (default.log_root, default.max_log_bytes, default.log_retention_days) == (
        None, 1 << 30, 0)


def test_retention_removes_only_old_build_dirs(tmp_path):
    root = tmp_path / 'logs'
    now = time.time()
    ages = {'b' * 32: 10, 'c' * 32: 1, f'.{"d" * 32}.tmp-123': 10, 'not a build': 10}
    for name, days in ages.items():
        (root / name).mkdir(parents=True)
        (root / name / 'job-output.txt').write_text('x')
        os.utime(root / name, (now - days * 86400, now - days * 86400))
    old_file = root / ('e' * 32)
    old_file.write_text('a file, not a build dir')
    os.utime(old_file, (now - 30 * 86400, now - 30 * 86400))
    assert logarchive.remove_expired(str(root), 0) == []
    assert logarchive.remove_expired(str(root), 5, now=now) == [f'.{"d" * 32}.tmp-123',
                                                                 'b' * 32]
    assert sorted(os.listdir(root)) == sorted(['c' * 32, 'not a build', 'e' * 32])
    # a day later nothing more is old enough; 2 days later the 1-day-old one goes
    assert logarchive.remove_expired(str(root), 5, now=now + 86400) == []
    assert logarchive.remove_expired(str(root), 5, now=now + 5 * 86400) == ['c' * 32]


class _Scheduler:
    def __init__(self):
        self.events = []

    def add_result_event(self, kind, **args):
        self.events.append((kind, args))


@pytest.mark.parametrize('data, kept, expected', [
    ({}, None, 'http://executor:7900/' + UUID),
    ({}, 'http://z/logs/' + UUID + '/', 'http://z/logs/' + UUID + '/'),
    ({'zuul': {'log_url': 'https://logs.example.org/x/'}}, 'http://z/logs/' + UUID + '/',
     'https://logs.example.org/x/'),
    ({'zuul': {'log_url': ''}}, 'http://z/kept/', 'http://z/kept/'),
])
def test_zuul_return_log_url_wins_over_the_kept_copy(data, kept, expected):
    scheduler = _Scheduler()
    adapter = ExecutorAdapter(None, scheduler, {}, None)
    build = SimpleNamespace(uuid=UUID)
    handle = SimpleNamespace(url='http://executor:7900/' + UUID)
    result = BuildResult(result='SUCCESS', data=data, log_url=kept, end_time=1.0)
    adapter._complete(build)(handle, BuildResult.from_json(result.to_json()))
    assert scheduler.events[0][1]['log_url'] == expected
