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

    def get_trigger(self, connection, config):
        entries = config if isinstance(config, list) else [config]
        return [GitEventFilter(e, connection) for e in entries]


class GitEventFilter:
    """One entry of a pipeline's ``trigger: <git connection>:`` list:
    ``ref-updated`` events the connection's poller found, optionally only
    for refs matching ``ref``; branch deletions are ignored unless
    ``ignore-deletes: false``."""

    def __init__(self, conf: dict, connection: str = ''):
        from zuul.lib.regex import compile_regex
        self.connection = connection
        events = conf.get('event')
        self.types = set(events if isinstance(events, list) else [events])
        refs = conf.get('ref')
        refs = refs if isinstance(refs, list) else ([refs] if refs else [])
        self.refs = [compile_regex(r)[0] for r in refs]
        self.ignore_deletes = conf.get('ignore-deletes', True)

    def matches_event(self, event) -> bool:
        """What the event alone decides (a git trigger never needs the
        change)."""
        return self.matches(event)

    def matches(self, event, change=None) -> bool:
        if self.connection and event.connection != self.connection:
            return False
        if event.type not in self.types:
            return False
        if self.refs and not any(r.search(event.ref or '') for r in self.refs):
            return False
        if self.ignore_deletes and event.newrev == '0' * 40:
            return False
        return True
