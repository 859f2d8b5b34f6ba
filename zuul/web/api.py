"""zuul-web's JSON API under /api/.

Status and configuration come from the scheduler over Gearman RPC; build
history from the SQL database. Every tenant-scoped URL only ever shows
that tenant's data. Errors are JSON with a 4xx status and a message.
"""

from __future__ import annotations

import json
import logging
import re

import cherrypy

from zuul.scheduler import rpc_protocol as p

log = logging.getLogger('zuul.web')

_CHANGE_RE = re.compile(r'^\d+$')
_RESULT_RE = re.compile(r'^[A-Z_]+$')


class HTTPError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def _int_param(kw, name, default, low=0, high=1000):
    value = kw.get(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise HTTPError(400, f'{name} must be an integer') from None
    if not low <= number <= high:
        raise HTTPError(400, f'{name} must be between {low} and {high}')
    return number


class ZuulWebAPI:
    """Routes /api/... paths to handlers. ``rpc`` is an RPCClient-like
    object with ``call(function, request)``; ``history`` a BuildHistory or
    None."""

    def __init__(self, rpc, history=None, keys=None):
        self.rpc = rpc
        self.history = history
        self.keys = keys

    # -- routing -------------------------------------------------------------

    def dispatch(self, parts: list[str], kw: dict):
        if parts == ['tenants']:
            return self.tenants()
        if parts == ['info']:
            return {'info': {'capabilities': {'job_history': self.history is not None}}}
        if len(parts) >= 3 and parts[0] == 'tenant':
            tenant, what, rest = parts[1], parts[2], parts[3:]
            return self._tenant_route(tenant, what, rest, kw)
        raise HTTPError(404, f'no such endpoint: /api/{"/".join(parts)}')

    def _tenant_route(self, tenant, what, rest, kw):
        simple = {'status': self.status, 'jobs': self.jobs, 'projects': self.projects,
                  'config-errors': self.config_errors, 'builds': self.builds,
                  'buildsets': self.buildsets}
        if what in simple and not rest:
            return simple[what](tenant, **kw) if what in ('builds', 'buildsets') \
                else simple[what](tenant)
        if what == 'job' and len(rest) == 1:
            return self.job(tenant, rest[0], kw)
        if what == 'project' and rest:
            return self.project(tenant, '/'.join(rest))
        if what == 'key' and rest and rest[-1].endswith('.pub'):
            return self.key(tenant, '/'.join(rest)[:-len('.pub')])
        if what == 'build' and len(rest) == 1:
            return self.build(tenant, rest[0])
        if what == 'buildset' and len(rest) == 1:
            return self.buildset(tenant, rest[0])
        raise HTTPError(404, f'no such endpoint: /api/tenant/{tenant}/{what}')

    # -- RPC-backed ------------------------------------------------------------

    def _call(self, function, **fields):
        try:
            return self.rpc.call(function, p.RPCRequest(**fields))
        except p.RPCError as e:
            message = str(e)
            status = 404 if message.lower().startswith(('unknown', 'no such')) or \
                'not found' in message.lower() else 400
            raise HTTPError(status, message) from None

    def tenants(self):
        return self._call(p.TENANT_LIST)

    def status(self, tenant):
        return self._call(p.STATUS_GET, tenant=tenant)

    def jobs(self, tenant):
        return self._call(p.JOB_LIST, tenant=tenant)

    def job(self, tenant, name, kw):
        return self._call(p.JOB_GET, tenant=tenant, job=name, project=kw.get('project'),
                          branch=kw.get('branch'), pipeline=kw.get('pipeline'))

    def projects(self, tenant):
        return self._call(p.PROJECT_LIST, tenant=tenant)

    def project(self, tenant, name):
        return self._call(p.PROJECT_GET, tenant=tenant, project=name)

    def config_errors(self, tenant):
        return self._call(p.CONFIG_ERRORS, tenant=tenant)

    def key(self, tenant, project):
        return ('text/plain', self._call(p.KEY_GET, tenant=tenant, project=project))

    # -- history-backed ----------------------------------------------------------

    def _require_history(self, tenant):
        if self.history is None:
            raise HTTPError(404, 'build history is not configured ([database] dburi)')
        self._call(p.STATUS_GET, tenant=tenant)  # 404 for an unknown tenant

    def _filters(self, kw, allowed):
        unknown = set(kw) - set(allowed) - {'limit', 'skip'}
        if unknown:
            raise HTTPError(400, f'unknown filter(s): {", ".join(sorted(unknown))}')
        f = {k: kw[k] for k in allowed if kw.get(k)}
        if 'change' in f:
            if not _CHANGE_RE.match(f['change']):
                raise HTTPError(400, f'change must be a number, not "{f["change"]}"')
            f['change'] = int(f['change'])
        if 'result' in f and not _RESULT_RE.match(f['result']):
            raise HTTPError(400, f'invalid result "{f["result"]}"')
        return f

    def builds(self, tenant, **kw):
        self._require_history(tenant)
        f = self._filters(kw, ('project', 'pipeline', 'job_name', 'change', 'patchset',
                               'result', 'uuid', 'branch'))
        return self.history.get_builds(tenant, limit=_int_param(kw, 'limit', 50, 1),
                                       offset=_int_param(kw, 'skip', 0, 0, 10 ** 7), **f)

    def buildsets(self, tenant, **kw):
        self._require_history(tenant)
        f = self._filters(kw, ('project', 'pipeline', 'change', 'result', 'uuid', 'branch'))
        return self.history.get_buildsets(tenant, limit=_int_param(kw, 'limit', 50, 1),
                                          offset=_int_param(kw, 'skip', 0, 0, 10 ** 7), **f)

    def build(self, tenant, uuid):
        self._require_history(tenant)
        rows = self.history.get_builds(tenant, uuid=uuid, limit=1)
        if not rows:
            raise HTTPError(404, f'no build {uuid} in tenant {tenant}')
        build = rows[0]
        build['artifacts'] = self.history.get_build_artifacts(uuid)
        return build

    def buildset(self, tenant, uuid):
        self._require_history(tenant)
        rows = self.history.get_buildsets(tenant, uuid=uuid, limit=1)
        if not rows:
            raise HTTPError(404, f'no buildset {uuid} in tenant {tenant}')
        return rows[0]


class APIRoot:
    """The cherrypy object mounted at /api."""

    def __init__(self, api: ZuulWebAPI):
        self.api = api

    @cherrypy.expose
    def default(self, *parts, **kw):
        cherrypy.response.headers['Access-Control-Allow-Origin'] = '*'
        try:
            result = self.api.dispatch(list(parts), kw)
        except HTTPError as e:
            cherrypy.response.status = e.status
            cherrypy.response.headers['Content-Type'] = 'application/json'
            return json.dumps({'error': e.message}).encode()
        except Exception as e:  # never leak a traceback page
            log.exception('API error on /api/%s', '/'.join(parts))
            cherrypy.response.status = 500
            cherrypy.response.headers['Content-Type'] = 'application/json'
            return json.dumps({'error': f'internal error: {e}'}).encode()
        if isinstance(result, tuple) and result and result[0] == 'text/plain':
            cherrypy.response.headers['Content-Type'] = 'text/plain'
            return str(result[1]).encode()
        cherrypy.response.headers['Content-Type'] = 'application/json'
        return json.dumps(result, default=str).encode()
