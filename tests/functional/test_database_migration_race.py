"""Schedulers and webs started together on a fresh database: every one of
them migrates the build history schema at start, and all of them must
come up (zuul.driver.sql.migration_lock).  Without the lock, two
processes created the same index and one died with ``index
zuul_buildset_tenant_id_idx already exists``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import urllib.request

import pytest
import sqlalchemy as sa

from nodepool.zk.localserver import free_port
from tests.functional.test_web_postgres import _skip_reason, postgres  # noqa: F401
from zuul.driver.sql.history import MIGRATIONS, BuildHistory

MIGRATE = """
import sys, time
from zuul.driver.sql.history import BuildHistory
history = BuildHistory(sys.argv[1])
start = float(sys.argv[2])
while time.time() < start:
    pass
print(history.migrate())
"""


def _migrate_together(url: str, processes: int) -> list[str]:
    start = time.time() + 2.0   # all of them imported and waiting by then
    procs = [subprocess.Popen([sys.executable, '-c', MIGRATE, url, str(start)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(processes)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(out.strip())
    return results


def _tables(url: str) -> list[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return sorted(sa.inspect(conn).get_table_names())
    finally:
        engine.dispose()


def test_many_processes_migrate_one_sqlite_database_at_once(tmp_path):
    for round_ in range(8):
        url = f'sqlite:///{tmp_path}/history-{round_}.db'
        assert _migrate_together(url, 6) == [str(len(MIGRATIONS))] * 6
    assert BuildHistory(url).schema_version() == len(MIGRATIONS)
    assert 'zuul_buildset' in _tables(url)


@pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))
def test_many_processes_migrate_one_postgresql_database_at_once(postgres):  # noqa: F811
    admin = sa.create_engine(postgres, isolation_level='AUTOCOMMIT')
    base = postgres.rsplit('/', 1)[0]
    try:
        for round_ in range(5):
            with admin.connect() as conn:
                conn.execute(sa.text(f'CREATE DATABASE race{round_}'))
            url = f'{base}/race{round_}'
            assert _migrate_together(url, 6) == [str(len(MIGRATIONS))] * 6
            assert BuildHistory(url).schema_version() == len(MIGRATIONS)
    finally:
        admin.dispose()


def test_webs_started_together_on_a_fresh_database_all_serve(tmp_path, gearman_server):
    """The daemon itself, several copies at the same moment, many times."""
    for round_ in range(3):
        db = tmp_path / f'history-{round_}.sqlite'
        procs, ports = [], []
        for n in range(4):
            port = free_port()
            conf = tmp_path / f'zuul-{round_}-{n}.conf'
            conf.write_text(textwrap.dedent(f"""
                [gearman]
                server = 127.0.0.1
                port = {gearman_server.port}
                [web]
                listen_address = 127.0.0.1
                port = {port}
                [database]
                dburi = sqlite:///{db}
                """))
            procs.append(subprocess.Popen(
                [sys.executable, '-m', 'zuul.cmd.web', '-c', str(conf), '-d'],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                env=dict(os.environ, PYTHONUNBUFFERED='1')))
            ports.append(port)
        try:
            for proc, port in zip(procs, ports):
                _wait_serving(proc, port)
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(30)
        assert BuildHistory(f'sqlite:///{db}').schema_version() == len(MIGRATIONS)


def _wait_serving(proc, port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f'zuul-web exited {proc.returncode}: {proc.stderr.read()}')
        try:
            with urllib.request.urlopen(f'http://127.0.0.1:{port}/api/info', timeout=5) as r:
                assert r.status == 200
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f'zuul-web on port {port} did not answer')
