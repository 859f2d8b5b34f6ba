"""``POST /api/connection/<name>/payload``: webhook deliveries for a
connection (GitHub, GitLab), as released Zuul receives them.

A delivery is checked (signature, readable payload) and stored in
ZooKeeper for the scheduler; the answer does not wait for the scheduler.
Answers: 200 ``{"stored": true|false}`` (false: nothing to act on, e.g. a
ping), 401 on a bad or missing signature or token, 400 for a body that
cannot be read (GitLab), 404 for a connection that takes
no webhooks, 405 for anything but POST, 503 when ZooKeeper is away (GitHub
shows the failed delivery, and it can be redelivered).
"""

from __future__ import annotations

import logging

log = logging.getLogger('zuul.web.webhooks')


class WebhookReceiver:
    def __init__(self, connections: dict):
        # Only connections that can take deliveries (GitHub's, GitLab's).
        self.connections = {name: c for name, c in connections.items()
                            if hasattr(c, 'enqueue_webhook')}

    def receive(self, name: str, method: str, headers: dict, body: bytes
                ) -> tuple[int, dict]:
        from zuul.driver.github.connection import WebhookRejectedError as GithubRejected
        from zuul.driver.webhooks import WebhookRejectedError
        connection = self.connections.get(name)
        if connection is None:
            return 404, {'message': f'no connection {name!r} takes webhooks'}
        if method != 'POST':
            return 405, {'message': 'deliveries are POSTed'}
        try:
            stored = connection.enqueue_webhook(headers, body)
        except (GithubRejected, WebhookRejectedError) as exc:
            lowered = {k.lower(): v for k, v in headers.items()}
            delivery = lowered.get('x-github-delivery') or lowered.get('x-gitlab-event-uuid')
            log.warning('Rejected delivery %s for %s: %s', delivery, name, exc)
            return getattr(exc, 'status', 401), {'message': str(exc)}
        except Exception as exc:   # ZooKeeper away: GitHub may redeliver
            log.exception('Unable to store a delivery for %s', name)
            return 503, {'message': f'unable to store the delivery: {exc}'}
        return 200, {'stored': stored is not None}
