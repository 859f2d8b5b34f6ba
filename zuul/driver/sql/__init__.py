"""The SQL driver: build history (released names: sql, mysql, postgresql)."""

from __future__ import annotations

import voluptuous as vs

from zuul.driver.base import ConnectionInterface, Driver, ReporterInterface

_connection = vs.Schema({vs.Required('dburi'): str, 'table_prefix': str,
                         'max_overflow': str, 'pool_recycle': str}, extra=vs.ALLOW_EXTRA)


class SQLDriver(Driver, ConnectionInterface, ReporterInterface):
    name = 'sql'

    def connection_schema(self):
        return _connection

    def get_connection(self, name, config):
        from zuul.driver.sql.history import BuildHistory
        history = BuildHistory(config['dburi'], config.get('table_prefix', ''))
        history.name = name
        return history

    def get_reporter(self, connection, pipeline, config):
        from zuul.driver.sql.reporter import SQLReporter
        return SQLReporter(connection, pipeline, config)

    def get_reporter_schema(self):
        return vs.Any(None, {})


class MySQLDriver(SQLDriver):
    name = 'mysql'


class PostgreSQLDriver(SQLDriver):
    name = 'postgresql'
