"""zuul-web's authenticated actions (released Zuul's tenant-scoped REST
API), each carried out by the scheduler over the existing RPC:

    POST   /api/tenant/<t>/project/<p>/enqueue   {"pipeline", "change"} or
                                                 {"pipeline", "ref", "oldrev", "newrev"}
    POST   /api/tenant/<t>/project/<p>/dequeue   {"pipeline", "change"} or {"pipeline", "ref"}
    POST   /api/tenant/<t>/project/<p>/autohold  {"job", "change" or "ref", "reason",
                                                  "count", "node_hold_expiration"}
    POST   /api/tenant/<t>/promote               {"pipeline", "changes": [...]}
    DELETE /api/tenant/<t>/autohold/<id>
    GET    /api/tenant/<t>/authorizations        {"zuul": {"admin": bool, "scope": [t]}}

Each needs a bearer token allowed to act on the tenant (zuul/web/access.py);
without one nothing reaches the scheduler. A POST answers ``true``, the
DELETE 204.
"""

from __future__ import annotations

import json
import logging

from zuul.lib import rpc_protocol as p

log = logging.getLogger('zuul.web.actions')

PROJECT_ACTIONS = ('enqueue', 'dequeue', 'autohold')


class NoContent:
    """A handler result answered as 204 with no body."""


def _body(request) -> dict:
    try:
        body = json.loads(request.body or b'{}')
    except ValueError as e:
        raise _bad(f'the request body is not JSON: {e}') from None
    if not isinstance(body, dict):
        raise _bad('the request body must be a JSON object')
    return body


def _bad(message: str):
    from zuul.web.errors import HTTPError
    return HTTPError(400, message)


def _text(body: dict, key: str, required: bool = True) -> str | None:
    value = body.get(key)
    if value is None or value == '':
        if required:
            raise _bad(f'Missing "{key}" in the request body')
        return None
    if not isinstance(value, str):
        raise _bad(f'"{key}" must be a string')
    return value


def _int(body: dict, key: str, default: int) -> int:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f'"{key}" must be an integer')
    return value


class AdminActions:
    """``api`` is the ZuulWebAPI (its RPC ``_call`` and access policy)."""

    def __init__(self, api):
        self.api = api

    def route(self, tenant: str, what: str, rest: list[str], request):
        """The action's result, or None when the path names no action."""
        method = request.method
        if what == 'project' and len(rest) >= 2 and rest[-1] in PROJECT_ACTIONS \
                and method == 'POST':
            project = '/'.join(rest[:-1])
            return self._act(tenant, rest[-1], request, project=project)
        if what == 'promote' and not rest and method == 'POST':
            return self._act(tenant, 'promote', request)
        if what == 'autohold' and len(rest) == 1 and method == 'DELETE':
            return self._act(tenant, 'autohold_delete', request, request_id=rest[0])
        if what == 'authorizations' and not rest and method == 'GET':
            return self.api.access_policy().authorizations(tenant, request.authorization)
        return None

    def _act(self, tenant, action, request, **args):
        caller = self.api.access_policy().check_admin(tenant, request.authorization)
        body = _body(request) if action != 'autohold_delete' else {}
        log.info('User %s authenticated from %s requesting %s on %s/%s', caller.uid,
                 caller.issuer, action, tenant, args.get('project', ''))
        log.debug('Request body of %s: %s', action, body)
        return getattr(self, action)(tenant, body, **args)

    def enqueue(self, tenant, body, project):
        pipeline = _text(body, 'pipeline')
        change = _text(body, 'change', required=False)
        ref = _text(body, 'ref', required=False)
        if change and ref:
            raise _bad('change and ref are mutually exclusive')
        if change:
            self.api._call(p.ENQUEUE, tenant=tenant, pipeline=pipeline, project=project,
                           change=change)
        elif ref:
            self.api._call(p.ENQUEUE_REF, tenant=tenant, pipeline=pipeline, project=project,
                           ref=ref, oldrev=_text(body, 'oldrev', required=False),
                           newrev=_text(body, 'newrev', required=False))
        else:
            raise _bad('Invalid request body: give "change" or "ref"')
        return True

    def dequeue(self, tenant, body, project):
        pipeline = _text(body, 'pipeline')
        change = _text(body, 'change', required=False)
        ref = _text(body, 'ref', required=False)
        if bool(change) == bool(ref):
            raise _bad('Invalid request body: give one of "change" or "ref"')
        self.api._call(p.DEQUEUE, tenant=tenant, pipeline=pipeline, project=project,
                       change=change, ref=ref)
        return True

    def promote(self, tenant, body):
        pipeline = _text(body, 'pipeline')
        changes = body.get('changes')
        if not isinstance(changes, list) or not changes or \
                not all(isinstance(c, str) for c in changes):
            raise _bad('"changes" must be a non-empty list of changes ("N,P")')
        self.api._call(p.PROMOTE, tenant=tenant, pipeline=pipeline, changes=changes)
        return True

    def autohold(self, tenant, body, project):
        job = _text(body, 'job')
        change = _text(body, 'change', required=False)
        ref = _text(body, 'ref', required=False)
        if change and ref:
            raise _bad('change and ref are mutually exclusive')
        count = _int(body, 'count', 1)
        if count < 1:
            raise _bad('"count" must be at least 1')
        reason = body.get('reason') or ''
        if not isinstance(reason, str):
            raise _bad('"reason" must be a string')
        self.api._call(p.AUTOHOLD, tenant=tenant, project=project, job=job, change=change,
                       ref=ref, reason=reason, count=count,
                       node_hold_expiration=_int(body, 'node_hold_expiration', 86400))
        return True

    def autohold_delete(self, tenant, body, request_id):
        self.api._call(p.AUTOHOLD_DELETE, tenant=tenant, build=request_id)
        return NoContent()
