"""The Gerrit driver: connection, source, trigger and reporter."""

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

GERRIT_EVENTS = (
    'patchset-created', 'draft-published', 'change-abandoned', 'change-restored',
    'change-merged', 'comment-added', 'ref-updated', 'pending-check', 'vote-deleted',
    'wip-state-changed', 'hashtags-changed', 'topic-changed', 'reviewer-added',
    'private-state-changed', 'change-deleted')

_approval = vs.Schema({'username': regex_or_list(), 'email': regex_or_list(),
                       'email-filter': regex_or_list(), 'username-filter': regex_or_list(),
                       'newer-than': str, 'older-than': str,
                       str: scalar_or_list(vs.Any(int, str))})

_require = vs.Schema({
    'approval': scalar_or_list(_approval), 'open': bool, 'current-patchset': bool,
    'wip': bool, 'status': scalar_or_list(str), 'hashtags': regex_or_list(),
})

_trigger = vs.Schema({
    vs.Required('event'): scalar_or_list(vs.Any(*GERRIT_EVENTS)),
    'branch': regex_or_list(), 'ref': regex_or_list(), 'ignore-deletes': bool,
    'approval': scalar_or_list(_approval), 'require-approval': scalar_or_list(_approval),
    'reject-approval': scalar_or_list(_approval), 'require': _require, 'reject': _require,
    'comment': regex_or_list(), 'comment_filter': regex_or_list(),
    'email': regex_or_list(), 'email_filter': regex_or_list(),
    'username': regex_or_list(), 'username_filter': regex_or_list(),
    'added': regex_or_list(), 'removed': regex_or_list(), 'scheme': str,
    'uuid': str,
})

CHECK_STATES = ('NOT_STARTED', 'SCHEDULED', 'RUNNING', 'SUCCESSFUL', 'FAILED',
                'NOT_RELEVANT')


def _one_checker(value: dict) -> dict:
    if ('uuid' in value) == ('scheme' in value):
        raise vs.Invalid('checks-api needs exactly one of uuid and scheme')
    return value


_checks_api = vs.All({'uuid': str, 'scheme': str,
                      vs.Required('state'): vs.Any(*CHECK_STATES), 'message': str},
                     _one_checker)

_reporter = vs.Schema({'submit': bool, 'comment': bool,
                       'notify': vs.Any('NONE', 'OWNER', 'OWNER_REVIEWERS', 'ALL'),
                       'checks-api': _checks_api, str: vs.Any(int, str, bool)})

_connection = vs.Schema({
    vs.Required('server'): str, 'port': vs.Coerce(int), 'baseurl': str, 'user': str,
    'sshkey': str, 'keepalive': vs.Coerce(int), 'canonical_hostname': str,
    'git_over_ssh': str, 'password': str,
    'auth_type': vs.Any('basic', 'digest', 'form', 'gcloud_service'), 'verify_ssl': str,
    'poll_interval': vs.Coerce(int), 'known_hosts': str, 'max_dependencies': str,
    'event_delay': str, 'ref_filter': str, 'gitweb_url_template': str,
}, extra=vs.ALLOW_EXTRA)


class GerritDriver(Driver, ConnectionInterface, TriggerInterface, ReporterInterface,
                   SourceInterface):
    name = 'gerrit'

    def connection_schema(self):
        return _connection

    def get_connection(self, name, config):
        from zuul.driver.gerrit.gerrit_connection import GerritConnection
        return GerritConnection(name, config)

    def get_trigger_schema(self):
        return scalar_or_list(_trigger)

    def get_trigger(self, connection, config):
        from zuul.driver.gerrit.filters import GerritEventFilter
        entries = config if isinstance(config, list) else [config]
        return [GerritEventFilter(e, connection) for e in entries]

    def get_reporter_schema(self):
        return vs.Any(None, _reporter)

    def get_reporter(self, connection, pipeline, config):
        from zuul.driver.gerrit.gerrit_reporter import GerritReporter
        return GerritReporter(connection, config)

    def get_require_schema(self):
        return _require

    def get_reject_schema(self):
        return _require

    def get_requirement(self, config, reject=False):
        from zuul.driver.gerrit.filters import GerritRequirement
        return GerritRequirement(config, reject=reject)
