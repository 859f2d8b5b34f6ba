"""The GitHub driver: schemas for connections, triggers, reporters and
requirements with released Zuul's keys; webhook events (events.py);
trigger filters and requirements (filters.py); pull requests (model.py).
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

GITHUB_EVENTS = ('pull_request', 'pull_request_review', 'push', 'check_run')
PR_ACTIONS = ('opened', 'changed', 'closed', 'reopened', 'edited', 'comment', 'labeled',
              'unlabeled', 'status')
REVIEW_ACTIONS = ('submitted', 'dismissed')
CHECK_ACTIONS = ('requested', 'rerequested', 'completed', 'requested_action')

_review = vs.Schema({'username': regex_or_list(), 'email': regex_or_list(),
                     'older-than': str, 'newer-than': str,
                     'type': scalar_or_list(str), 'permission': scalar_or_list(str)})

_require = vs.Schema({
    'review': scalar_or_list(_review), 'open': bool, 'merged': bool,
    'current-patchset': bool, 'draft': bool, 'status': regex_or_list(),
    'label': scalar_or_list(str),
})

_trigger = vs.Schema({
    vs.Required('event'): scalar_or_list(vs.Any(*GITHUB_EVENTS)),
    'action': scalar_or_list(vs.Any(*PR_ACTIONS, *REVIEW_ACTIONS, *CHECK_ACTIONS)),
    'branch': regex_or_list(), 'ref': regex_or_list(), 'comment': regex_or_list(),
    'label': scalar_or_list(str), 'unlabel': scalar_or_list(str),
    'state': scalar_or_list(str), 'status': regex_or_list(), 'check': regex_or_list(),
    'require-status': regex_or_list(), 'require': _require, 'reject': _require,
    'debug': bool,
})

_reporter = vs.Schema({
    'status': vs.Any('pending', 'success', 'failure', 'error'),
    'status-url': str,
    'check': vs.Any('queued', 'cancelled', 'failure', 'in_progress', 'neutral', 'skipped',
                    'success'),
    'comment': bool, 'merge': bool,
    'review': vs.Any('approve', 'comment', 'request-changes'), 'review-body': str,
    'label': scalar_or_list(str), 'unlabel': scalar_or_list(str),
})

_connection = vs.Schema({
    'app_id': vs.Coerce(int), 'app_key': str, 'api_token': str, 'webhook_token': str,
    'sshkey': str, 'server': str, 'canonical_hostname': str, 'verify_ssl': str,
    'rate_limit_logging': str, 'repo_cache': str, 'repo_retry_timeout': vs.Coerce(int),
    'max_threads_per_installation': vs.Coerce(int), 'sslkey': str, 'git_host': str,
    'api_url': str, 'request_timeout': vs.Coerce(float), 'retries': vs.Coerce(int),
}, extra=vs.ALLOW_EXTRA)


class GithubDriver(Driver, ConnectionInterface, TriggerInterface, ReporterInterface,
                   SourceInterface):
    name = 'github'
    # exclude-unprotected-branches acts on GitHub connections.
    supports_branch_protection = True

    def connection_schema(self):
        return _connection

    def get_connection(self, name, config):
        from zuul.driver.github.connection import GithubConnection
        return GithubConnection(name, config)

    def get_trigger_schema(self):
        return scalar_or_list(_trigger)

    def get_trigger(self, connection, config):
        from zuul.driver.github.filters import GithubEventFilter
        entries = config if isinstance(config, list) else [config]
        return [GithubEventFilter(e, connection) for e in entries]

    def get_reporter_schema(self):
        return vs.Any(None, _reporter)

    def get_reporter(self, connection, pipeline, config):
        from zuul.driver.github.reporter import GithubReporter
        return GithubReporter(connection, config)

    def get_require_schema(self):
        return _require

    def get_reject_schema(self):
        return _require

    def get_requirement(self, config, reject=False):
        from zuul.driver.github.filters import GithubRequirement
        return GithubRequirement(config, reject=reject)
