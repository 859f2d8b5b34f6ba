"""The SMTP driver: reports by email."""

from __future__ import annotations

import voluptuous as vs

from zuul.driver.base import ConnectionInterface, Driver, ReporterInterface

_connection = vs.Schema({vs.Required('server'): str, 'port': vs.Coerce(int),
                         'default_from': str, 'default_to': str, 'user': str,
                         'password': str, 'use_starttls': str}, extra=vs.ALLOW_EXTRA)
_reporter = vs.Schema({'from': str, 'to': str, 'subject': str})


class SMTPDriver(Driver, ConnectionInterface, ReporterInterface):
    name = 'smtp'

    def connection_schema(self):
        return _connection

    def get_connection(self, name, config):
        from zuul.driver.smtp.connection import SMTPConnection
        return SMTPConnection(name, config)

    def get_reporter(self, connection, pipeline, config):
        from zuul.driver.smtp.connection import SMTPReporter
        return SMTPReporter(connection, config)

    def get_reporter_schema(self):
        return vs.Any(None, _reporter)
