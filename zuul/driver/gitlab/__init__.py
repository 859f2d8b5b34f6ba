"""The GitLab driver: schemas for connections, triggers, reporters and
requirements with released Zuul's keys; webhook events (events.py),
trigger filters and requirements (filters.py), merge requests
(model.py), the connection (connection.py), its API client (client.py)
and catching up missed events (catchup.py). Where git clones from is
zuul.merger.repos.gitlab_remote.
"""

from __future__ import annotations

import voluptuous as vs

from zuul.driver.base import (
    ConnectionInterface,
    Driver,
    ReporterInterface,
    SourceInterface,
    TriggerInterface,
)
from zuul.driver.schema_util import regex_or_list, scalar_or_list

GITLAB_EVENTS = ('gl_merge_request', 'gl_push')
MR_ACTIONS = ('opened', 'changed', 'merged', 'comment', 'approved', 'unapproved',
              'labeled', 'unlabeled')

_require = vs.Schema({
    'open': bool, 'merged': bool, 'approved': bool, 'labels': scalar_or_list(str),
})

_trigger = vs.Schema({
    vs.Required('event'): scalar_or_list(vs.Any(*GITLAB_EVENTS)),
    'action': scalar_or_list(vs.Any(*MR_ACTIONS)),
    'comment': regex_or_list(), 'labels': scalar_or_list(str),
    'unlabels': scalar_or_list(str), 'ref': regex_or_list(), 'debug': bool,
})

_reporter = vs.Schema({
    'comment': bool, 'approval': bool, 'merge': bool,
    'label': scalar_or_list(str), 'unlabel': scalar_or_list(str),
})

_bool_text = vs.Any(bool, vs.All(str, vs.Lower, vs.Any('true', 'false', 'yes', 'no', '1',
                                                       '0', 'on', 'off')))

_connection = vs.Schema({
    'server': str, 'baseurl': str, 'canonical_hostname': str, 'api_token': str,
    'api_token_name': str, 'webhook_token': str, 'sshkey': str, 'cloneurl': str,
    'keepalive': vs.All(vs.Coerce(int), vs.Range(min=0)),
    'disable_connection_pool': _bool_text,
    'request_timeout': vs.All(vs.Coerce(float), vs.Range(min=0, min_included=False)),
    'retries': vs.All(vs.Coerce(int), vs.Range(min=0)),
    'catchup_interval': vs.All(vs.Coerce(float), vs.Range(min=0)),
    'event_workers': vs.All(vs.Coerce(int), vs.Range(min=1)),
}, extra=vs.ALLOW_EXTRA)


class GitlabDriver(Driver, ConnectionInterface, TriggerInterface, ReporterInterface,
                   SourceInterface):
    name = 'gitlab'
    # exclude-unprotected-branches acts on GitLab connections.
    supports_branch_protection = True

    def connection_schema(self):
        return _connection

    def get_connection(self, name, config):
        from zuul.driver.gitlab.connection import GitlabConnection
        return GitlabConnection(name, config)

    def get_trigger_schema(self):
        return scalar_or_list(_trigger)

    def get_trigger(self, connection, config):
        from zuul.driver.gitlab.filters import GitlabEventFilter
        entries = config if isinstance(config, list) else [config]
        return [GitlabEventFilter(e, connection) for e in entries]

    def get_reporter_schema(self):
        return vs.Any(None, _reporter)

    def get_reporter(self, connection, pipeline, config):
        from zuul.driver.gitlab.reporter import GitlabReporter
        return GitlabReporter(connection, config)

    def get_require_schema(self):
        return _require

    def get_reject_schema(self):
        return _require

    def get_requirement(self, config, reject=False):
        from zuul.driver.gitlab.filters import GitlabRequirement
        return GitlabRequirement(config, reject=reject)
