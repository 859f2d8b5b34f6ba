"""The git driver: ref-updated events by polling a plain git URL."""

from __future__ import annotations

import voluptuous as vs

from zuul.driver.base import ConnectionInterface, Driver, SourceInterface, TriggerInterface
from zuul.driver.schema_util import regex_or_list, scalar_or_list

_trigger = vs.Schema({vs.Required('event'): scalar_or_list(vs.Any('ref-updated')),
                      'ref': regex_or_list(), 'ignore-deletes': bool})
_connection = vs.Schema({vs.Required('baseurl'): str, 'poll_delay': vs.Coerce(int),
                         'canonical_hostname': str}, extra=vs.ALLOW_EXTRA)


class GitDriver(Driver, ConnectionInterface, TriggerInterface, SourceInterface):
    name = 'git'

    def connection_schema(self):
        return _connection

    def get_connection(self, name, config):
        from zuul.driver.git.connection import GitConnection
        return GitConnection(name, config)

    def get_trigger_schema(self):
        return scalar_or_list(_trigger)
