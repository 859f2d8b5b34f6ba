"""Build history on a real PostgreSQL, started by the test, through the
web API. Skipped with a reason when the PostgreSQL server binaries
(Debian ``postgresql``) or the psycopg2 driver are absent."""

import glob
import json
import os
import pathlib
import pwd
import shutil
import subprocess
import tempfile
import urllib.request

import pytest

from nodepool.zk.localserver import free_port
from tests.fakes.scheduler_rpc import fill_history

PG_BIN = next(iter(sorted(glob.glob('/usr/lib/postgresql/*/bin'), reverse=True)), None)



def _skip_reason():
    if PG_BIN is None or not os.path.exists(os.path.join(PG_BIN, 'initdb')):
        return 'PostgreSQL server binaries not installed (Debian package postgresql)'
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        return 'psycopg2 is not installed (pip psycopg2-binary)'
    if os.getuid() == 0:
        try:
            pwd.getpwnam('postgres')
        except KeyError:
            return 'running as root and there is no postgres user to run the server as'
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))


def _as_server_user(command):
    # initdb and postgres refuse to run as root.
    if os.getuid() == 0:
        return ['runuser', '-u', 'postgres', '--'] + command
    return command


@pytest.fixture
def postgres():
    """A throw-away PostgreSQL cluster; yields its SQLAlchemy URL."""
    # Not under pytest's tmp_path: as root that is private to root, and the
    # server runs as the postgres user.
    root = pathlib.Path(tempfile.mkdtemp(prefix='zuul-pg-'))
    if os.getuid() == 0:
        shutil.chown(root, 'postgres', 'postgres')
    data, port = root / 'data', free_port()
    subprocess.run(_as_server_user([f'{PG_BIN}/initdb', '-D', str(data), '-U', 'zuul',
                                    '--auth=trust', '-E', 'UTF8', '--no-sync']),
                   check=True, capture_output=True, timeout=120)
    options = f'-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off'
    subprocess.run(_as_server_user([f'{PG_BIN}/pg_ctl', '-D', str(data), '-o', options,
                                    '-l', str(root / 'log'), '-w', 'start']),
                   check=True, capture_output=True, timeout=120)
    try:
        subprocess.run(_as_server_user([f'{PG_BIN}/createdb', '-h', '127.0.0.1', '-p',
                                        str(port), '-U', 'zuul', 'zuul']),
                       check=True, capture_output=True, timeout=60)
        yield f'postgresql+psycopg2://zuul@127.0.0.1:{port}/zuul'
    finally:
        subprocess.run(_as_server_user([f'{PG_BIN}/pg_ctl', '-D', str(data), '-m', 'fast',
                                        '-w', 'stop']), capture_output=True, timeout=120)
        shutil.rmtree(root, ignore_errors=True)


def test_history_on_postgresql_through_the_web(postgres, rpc_client):
    from zuul.driver.sql.history import MIGRATIONS, BuildHistory
    from zuul.web.server import ZuulWeb
    history = BuildHistory(postgres, table_prefix='zuul_')
    assert history.migrate() == len(MIGRATIONS)
    assert history.migrate() == len(MIGRATIONS)  # idempotent
    uuids = fill_history(history)
    web = ZuulWeb('127.0.0.1', 0, rpc_client, history)
    web.start()
    base = f'http://127.0.0.1:{web.port}/api/tenant'
    try:
        with urllib.request.urlopen(f'{base}/tenant-one/builds?result=FAILURE') as r:
            builds = json.loads(r.read())
        assert [(b['change'], b['patchset'], b['job_name']) for b in builds] == [
            (1, '1', 'project-test1')]
        with urllib.request.urlopen(f'{base}/tenant-one/build/{builds[0]["uuid"]}') as r:
            assert json.loads(r.read())['artifacts'][0]['name'] == 'test report'
        with urllib.request.urlopen(f'{base}/tenant-two/buildsets') as r:
            assert [s['change'] for s in json.loads(r.read())] == [10]
        assert uuids[('tenant-two', '10,1', 'secret-job')] not in json.dumps(
            history.get_builds('tenant-one'))
        assert history.average_duration('tenant-one', 'project-merge') == 60.0
    finally:
        web.stop()
