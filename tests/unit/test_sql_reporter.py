"""The ``sql`` reporter: a pipeline listing an SQL connection among an
action's reporters records the item's buildset in that connection's
database (real SQLite files through SQLAlchemy; the real Scheduler,
managers and Layouts), while ``[database]`` stays the history of every
pipeline."""

from __future__ import annotations

import pytest

from tests.unit.scheduler_support import ONE_CONFIG_PROJECT, check_config, enqueue_ref, start_system
from zuul.driver.registry import default_registry
from zuul.driver.sql.history import BuildHistory

MAIN = ONE_CONFIG_PROJECT

CONFIG = check_config(reports=('start', 'success', 'failure'),
                      pipelines=('check', 'quiet'))


def _connection(tmp_path, name='reports', driver='sql', prefix=''):
    config = {'dburi': f'sqlite:///{tmp_path}/{name}.db'}
    if prefix:
        config['table_prefix'] = prefix
    connection = default_registry().get(driver).get_connection(name, config)
    connection.driver_name = driver
    return connection


@pytest.fixture
def system(tmp_path):
    started = []

    def start(connection, history=None):
        scheduler, executor = start_system(tmp_path, MAIN,
                                           {'org/config': {'master': CONFIG}},
                                           connections=[connection], history=history)
        started.append(scheduler)
        return scheduler, executor
    yield start
    for scheduler in started:
        scheduler.stop()


def _run(scheduler, executor, pipeline, result):
    enqueue_ref(scheduler, 't1', pipeline, 'org/config')
    [(request, _, _)] = executor.running
    executor.finish(request, result)
    assert scheduler.wait_until_settled(60)


@pytest.mark.parametrize('driver,prefix', [('sql', ''), ('mysql', 'ci_')])
def test_sql_reporter_records_results_in_its_connection_database(system, tmp_path,
                                                                 driver, prefix):
    connection = _connection(tmp_path, driver=driver, prefix=prefix)
    scheduler, executor = system(connection)
    _run(scheduler, executor, 'check', 'SUCCESS')
    _run(scheduler, executor, 'check', 'FAILURE')
    # A fresh reader of the same file: the rows are in the database.
    reader = BuildHistory(f'sqlite:///{tmp_path}/reports.db', prefix)
    buildsets = reader.get_buildsets('t1')
    # Newest first; the start report recorded nothing.
    assert [(b['pipeline'], b['result']) for b in buildsets] == [
        ('check', 'FAILURE'), ('check', 'SUCCESS')]
    assert buildsets[0]['message'].startswith('Build failed.')
    assert [(b['job_name'], b['result']) for b in reader.get_builds('t1')] == [
        ('unit', 'FAILURE'), ('unit', 'SUCCESS')]


def test_pipelines_without_the_sql_reporter_write_nothing_there(system, tmp_path):
    database = BuildHistory(f'sqlite:///{tmp_path}/database.db')
    database.migrate()
    scheduler, executor = system(_connection(tmp_path), history=database)
    _run(scheduler, executor, 'quiet', 'SUCCESS')
    # [database] has it (every pipeline); the reporter's database does not.
    assert [b['pipeline'] for b in database.get_buildsets('t1')] == ['quiet']
    reports = BuildHistory(f'sqlite:///{tmp_path}/reports.db')
    assert reports.schema_version() == 0
    _run(scheduler, executor, 'check', 'SUCCESS')
    assert [b['pipeline'] for b in reports.get_buildsets('t1')] == ['check']
    assert sorted(b['pipeline'] for b in database.get_buildsets('t1')) == ['check', 'quiet']


def test_a_database_that_cannot_be_written_does_not_stop_the_report(system, tmp_path):
    connection = _connection(tmp_path)
    connection.engine.dispose()
    (tmp_path / 'reports.db').mkdir()   # a directory: SQLite cannot open it
    scheduler, executor = system(connection)
    _run(scheduler, executor, 'check', 'SUCCESS')
    # The item was reported and left the pipeline all the same.
    assert all(not list(m.all_items()) for m in scheduler.tenants['t1'].managers.values())


def test_the_reporter_writes_on_its_connections_thread_not_the_loop(system, tmp_path):
    """The scheduler's loop never waits for a reporter's database (slow,
    locked, far away): the rows are taken on the loop and written on the
    connection's own thread, in the order the reports were made."""
    import threading
    connection = _connection(tmp_path)
    writers = []
    write = connection.write_buildset

    def recording(rows):
        writers.append((threading.current_thread().name, rows['buildset']['result']))
        return write(rows)
    connection.write_buildset = recording
    scheduler, executor = system(connection)
    _run(scheduler, executor, 'check', 'SUCCESS')
    _run(scheduler, executor, 'check', 'FAILURE')
    assert [result for _, result in writers] == ['SUCCESS', 'FAILURE']
    assert {name for name, _ in writers} == {'reports-reports'}
    assert scheduler.loop._thread.name not in {name for name, _ in writers}
    connection.stop()
