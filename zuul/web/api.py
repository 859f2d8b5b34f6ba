"""zuul-web's JSON API under /api/.

Status and configuration come from the scheduler over Gearman RPC; build
history from the SQL database. Every tenant-scoped URL only ever shows
that tenant's data: the tenant is checked first, and every query below
it is filtered by it. Errors are JSON ``{"error": message}`` with a 4xx
status (5xx only when the scheduler cannot be reached).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass

import cherrypy

from zuul.driver.sql.history import (
    BUILD_RESULTS,
    BUILD_SORT_KEYS,
    BUILDSET_RESULTS,
    BUILDSET_SORT_KEYS,
    BuildQuery,
)
from zuul.executor.reproduction import valid_build_uuid
from zuul.lib import rpc_protocol as p
from zuul.lib.auth import Authenticators
from zuul.lib.urls import web_artifacts
from zuul.web import console, openapi
from zuul.web.access import AccessDeniedError, AccessPolicy
from zuul.web.actions import AdminActions, NoContent
from zuul.web.config_api import ConfigViewsAPI
from zuul.web.errors import HTTPError, TextResult, int_param

log = logging.getLogger('zuul.web')

_CHANGE_RE = re.compile(r'^\d+$')
_CHANGE_PS_RE = re.compile(r'^\d+,\d+$')
_NAME_RE = re.compile(r'^[^\x00-\x1f]+$')

# Query parameters of /builds and /buildsets (released Zuul's names).
BUILD_FILTERS = ('project', 'pipeline', 'job_name', 'change', 'patchset', 'ref', 'newrev',
                 'result', 'uuid', 'branch', 'nodeset', 'voting', 'held', 'final', 'complete')
BUILDSET_FILTERS = ('project', 'pipeline', 'change', 'patchset', 'ref', 'newrev', 'result',
                    'uuid', 'branch', 'complete')
_BOOLEANS = {'true': True, '1': True, 'yes': True, 'false': False, '0': False, 'no': False}
# /api/tenant/<t>/<what> -> RPC function listing seed 001's config objects.
LAUNCHER_OBJECT_ROUTES = {kind: function for function, kind in p.LAUNCHER_LISTS.items()}
IMAGE_BUILD_ROUTES = {'image-builds': p.IMAGE_BUILD_LIST, 'image-uploads': p.IMAGE_UPLOAD_LIST}


@dataclass
class WebRequest:
    """What a handler needs of the HTTP request besides path and query."""

    method: str = 'GET'
    authorization: str | None = None   # the Authorization header
    body: bytes = b''


def _rpc_status(message: str) -> int:
    lower = message.lower()
    if lower.startswith(('unknown', 'no such')) or 'not found' in lower:
        return 404
    if 'is zuul-scheduler running' in lower:
        return 503
    return 400


class ZuulWebAPI:
    """Routes /api/... paths to handlers.

    ``rpc`` is an RPCClient-like object with ``call(function, request)``;
    ``history`` a BuildHistory or None (history endpoints then answer 404).
    ``authenticators`` (zuul/lib/auth.py, from zuul.conf's ``[auth]``
    sections) check bearer tokens. With ``enforce_access`` (zuul-web
    always sets it) every tenant's ``access-rules`` are enforced, which
    asks the scheduler for the rules on each request; without it only
    the actions are guarded (they need a token the tenant's rules admit).
    """

    def __init__(self, rpc, history=None, webhooks=None, authenticators=None,
                 enforce_access=False):
        self.rpc = rpc
        self.history = history
        self.webhooks = webhooks     # zuul.web.webhooks.WebhookReceiver or None
        self.authenticators = authenticators or Authenticators()
        self.enforce_access = enforce_access
        self.actions = AdminActions(self)
        self.config_views = ConfigViewsAPI(self)   # zuul/web/config_api.py

    def access_policy(self) -> AccessPolicy:
        return AccessPolicy(self.authenticators, lambda: self._call(p.AUTH_RULES))

    # -- routing -------------------------------------------------------------

    def dispatch(self, parts: list[str], kw: dict, request: WebRequest | None = None):
        request = request or WebRequest()
        try:
            return self._dispatch(parts, kw, request)
        except AccessDeniedError as e:
            headers = {'WWW-Authenticate': e.www_authenticate} if e.www_authenticate else {}
            raise HTTPError(e.status, e.message, headers) from None

    def _dispatch(self, parts, kw, request):
        if len(parts) >= 3 and parts[0] == 'tenant':
            tenant, what, rest = parts[1], parts[2], parts[3:]
            if not _NAME_RE.match(tenant):
                raise HTTPError(400, 'invalid tenant name')
            result = self.actions.route(tenant, what, rest, request)
            if result is not None:
                return result
            self._only_get(request)
            if self.enforce_access:
                self.access_policy().check_read(tenant, request.authorization)
            return self._tenant_route(tenant, what, rest, kw)
        self._only_get(request)
        if parts == ['tenants']:
            return self.tenants(request)
        if parts == ['info']:
            return {'info': {'capabilities': {'job_history': self.history is not None,
                                              'auth': self._auth_info()}}}
        if parts == ['openapi.yaml']:
            return TextResult(openapi.spec_text())
        raise HTTPError(404, f'no such endpoint: /api/{"/".join(parts)}')

    def check_read(self, tenant: str, authorization: str | None = None) -> None:
        """HTTPError unless ``tenant`` exists (404) and, with
        ``enforce_access``, this caller may read it (401/403); for
        endpoints outside ``dispatch`` (the console websocket)."""
        if not _NAME_RE.match(tenant):
            raise HTTPError(400, 'invalid tenant name')
        try:
            if self.enforce_access:
                self.access_policy().check_read(tenant, authorization)
        except AccessDeniedError as e:
            headers = {'WWW-Authenticate': e.www_authenticate} if e.www_authenticate else {}
            raise HTTPError(e.status, e.message, headers) from None
        self._check_tenant(tenant)

    @staticmethod
    def _only_get(request) -> None:
        if request.method not in ('GET', 'HEAD'):
            raise HTTPError(405, f'{request.method} is not allowed here', {'Allow': 'GET'})

    def _auth_info(self) -> dict:
        """What a web client needs to log in: the OpenIDConnect realms."""
        realms = {}
        for a in self.authenticators.by_name.values():
            if a.config.driver == 'OpenIDConnect' and a.config.realm:
                realms[a.config.realm] = {'authority': a.config.issuer_id,
                                          'client_id': a.config.client_id,
                                          'type': 'JWT', 'scope': a.config.scope,
                                          'driver': 'OpenIDConnect'}
        return {'realms': realms, 'default_realm': self.authenticators.default_realm()
                if self.authenticators else None}

    def _tenant_route(self, tenant, what, rest, kw):
        result = self.config_views.route(tenant, what, rest, kw)
        if result is not None:
            return result
        no_args = {'status': self.status, 'jobs': self.jobs, 'projects': self.projects,
                   'pipelines': self.pipelines}
        if what in no_args and not rest:
            self._no_params(kw)
            return no_args[what](tenant)
        if what in LAUNCHER_OBJECT_ROUTES and not rest:
            self._no_params(kw)
            return self.launcher_objects(tenant, what)
        if what in IMAGE_BUILD_ROUTES and not rest:
            return self.image_builds(tenant, what, kw)
        with_args = {'builds': self.builds, 'buildsets': self.buildsets,
                     'console-stream': self.console_stream}
        if what in with_args and not rest:
            return with_args[what](tenant, kw)
        if what == 'status' and len(rest) == 2 and rest[0] == 'change':
            return self.status_change(tenant, rest[1])
        if what == 'job' and len(rest) == 1 and rest[0]:
            return self.job(tenant, rest[0], kw)
        if what == 'project' and len(rest) >= 2 and rest[-1] == 'autohold':
            return self.autoholds(tenant, project='/'.join(rest[:-1]))
        if what == 'project' and rest:
            return self.project(tenant, '/'.join(rest))
        if what == 'autohold' and len(rest) == 1:
            return self.autohold(tenant, rest[0])
        if what == 'key' and rest and rest[-1].endswith('.pub'):
            return self.key(tenant, '/'.join(rest)[:-len('.pub')])
        if what == 'build' and len(rest) == 1:
            return self.build(tenant, rest[0])
        if what == 'build' and len(rest) == 2 and rest[1] == 'reproduction':
            self._no_params(kw)
            return self.reproduction(tenant, rest[0])
        if what == 'buildset' and len(rest) == 1:
            return self.buildset(tenant, rest[0])
        raise HTTPError(404, f'no such endpoint: /api/tenant/{tenant}/{"/".join([what] + rest)}')

    @staticmethod
    def _no_params(kw):
        if kw:
            raise HTTPError(400, f'unexpected parameter(s): {", ".join(sorted(kw))}')

    # -- RPC-backed ------------------------------------------------------------

    def _call(self, function, **fields):
        try:
            return self.rpc.call(function, p.RPCRequest(**fields))
        except p.RPCError as e:
            message = str(e)
            raise HTTPError(_rpc_status(message), message) from None
        except TimeoutError as e:
            raise HTTPError(503, str(e)) from None

    def all_tenants(self):
        return self._call(p.TENANT_LIST)

    def tenants(self, request: WebRequest | None = None):
        """The tenant list, without the tenants this caller may not read."""
        tenants = self.all_tenants()
        if not self.enforce_access:
            return tenants
        request = request or WebRequest()
        return self.access_policy().visible_tenants(tenants, request.authorization)

    def _check_tenant(self, tenant):
        names = [t['name'] for t in self.all_tenants()]
        if tenant not in names:
            raise HTTPError(404, f'Unknown tenant {tenant}')

    def status(self, tenant):
        return self._call(p.STATUS_GET, tenant=tenant)

    def status_change(self, tenant, change):
        if not _CHANGE_PS_RE.match(change):
            raise HTTPError(400, f'change must look like NUMBER,PATCHSET, not "{change}"')
        status = self.status(tenant)
        return [item for item in _status_items(status) if item.get('id') == change]

    def pipelines(self, tenant):
        status = self.status(tenant)
        return [{'name': pl['name'], 'manager': pl.get('manager')}
                for pl in status.get('pipelines', [])]

    def jobs(self, tenant):
        return self._call(p.JOB_LIST, tenant=tenant)

    def job(self, tenant, name, kw):
        unknown = set(kw) - {'project', 'branch', 'pipeline'}
        if unknown:
            raise HTTPError(400, f'unexpected parameter(s): {", ".join(sorted(unknown))}')
        if (kw.get('branch') or kw.get('pipeline')) and not kw.get('project'):
            raise HTTPError(400, 'branch and pipeline need a project to freeze the job for')
        return self._call(p.JOB_GET, tenant=tenant, job=name, project=kw.get('project') or None,
                          branch=kw.get('branch') or None, pipeline=kw.get('pipeline') or None)

    def projects(self, tenant):
        return self._call(p.PROJECT_LIST, tenant=tenant)

    def project(self, tenant, name):
        return self._call(p.PROJECT_GET, tenant=tenant, project=name)

    def launcher_objects(self, tenant, what):
        """/images, /flavors, /labels, /providers: seed 001's configuration
        objects of the tenant (names and references, never settings)."""
        return self._call(LAUNCHER_OBJECT_ROUTES[what], tenant=tenant)

    def image_builds(self, tenant, what, kw):
        """/image-builds, /image-uploads[?image=NAME]: builds and uploads
        of ``type: zuul`` images (seed 001), read-only; building and
        deleting are ``zuul image-build``/``image-delete`` commands (this
        server has no authentication, so it offers no write endpoints)."""
        unknown = set(kw) - {'image'}
        if unknown:
            raise HTTPError(400, f'unexpected parameter(s): {", ".join(sorted(unknown))}')
        image = kw.get('image') or None
        if image is not None and not isinstance(image, str):
            raise HTTPError(400, 'give image once')
        return self._call(IMAGE_BUILD_ROUTES[what], tenant=tenant, image=image)

    def autoholds(self, tenant, project=None):
        holds = self._call(p.AUTOHOLD_LIST, tenant=tenant)
        if project is None:
            return holds
        short = project.split('/', 1)[1] if '.' in project.split('/')[0] else project
        return [h for h in holds if h['project'] in (project, short)]

    def autohold(self, tenant, request_id):
        for hold in self._call(p.AUTOHOLD_LIST, tenant=tenant):
            if hold['id'] == request_id:
                return hold
        raise HTTPError(404, f'no autohold request {request_id} in tenant {tenant}')

    def key(self, tenant, project):
        if not project:
            raise HTTPError(404, 'no project named')
        return TextResult(self._call(p.KEY_GET, tenant=tenant, project=project))

    def console_stream(self, tenant, kw):
        uuid = kw.get('uuid', '')
        unknown = set(kw) - {'uuid'}
        if unknown:
            raise HTTPError(400, f'unexpected parameter(s): {", ".join(sorted(unknown))}')
        if not console.UUID_RE.match(uuid):
            raise HTTPError(400, f'uuid must be a build uuid, not "{uuid}"')
        status = self.status(tenant)
        url = console.find_build_url(status, uuid)
        if url is None:
            raise HTTPError(404, f'no running build {uuid} in tenant {tenant}')
        try:
            return console.open_stream(url)
        except console.StreamUnavailableError as e:
            raise HTTPError(404, str(e)) from None

    # -- history-backed ----------------------------------------------------------

    def _require_history(self, tenant):
        if self.history is None:
            raise HTTPError(404, 'build history is not configured ([database] dburi)')
        self._check_tenant(tenant)

    @staticmethod
    def _filters(kw, allowed, results, sort_keys) -> BuildQuery:
        """The BuildQuery of a /builds or /buildsets request; 400 for an
        unknown parameter or a value of the wrong kind."""
        kw = dict(kw)
        if 'job' in kw and 'job_name' in allowed:  # the short name the CLI uses
            kw.setdefault('job_name', kw.pop('job'))
        unknown = set(kw) - set(allowed) - {'limit', 'skip', 'sort'}
        if unknown:
            raise HTTPError(400, f'unknown filter(s): {", ".join(sorted(unknown))}')
        for key, value in kw.items():
            if not isinstance(value, str):
                raise HTTPError(400, f'give {key} once')
        f = {k: kw[k] for k in allowed if kw.get(k)}
        if 'change' in f:
            if not _CHANGE_RE.match(f['change']):
                raise HTTPError(400, f'change must be a number, not "{f["change"]}"')
            f['change'] = int(f['change'])
        if 'result' in f:
            f['result'] = f['result'].upper()
            if f['result'] not in results:
                raise HTTPError(400, f'invalid result "{kw["result"]}"; one of '
                                     f'{", ".join(sorted(results))}')
        for key in ('voting', 'held', 'final', 'complete'):
            if key in f:
                if f[key].lower() not in _BOOLEANS:
                    raise HTTPError(400, f'{key} must be true or false, not "{f[key]}"')
                f[key] = _BOOLEANS[f[key].lower()]
        sort = kw.get('sort') or '-id'
        if sort.lstrip('-') not in sort_keys:
            raise HTTPError(400, f'cannot sort by "{sort}"; sort by one of '
                                 f'{", ".join(sort_keys)} (prefix - for descending)')
        return BuildQuery(**f, sort=sort, limit=int_param(kw, 'limit', 50, 1),
                          offset=int_param(kw, 'skip', 0, 0, 10 ** 7))

    def builds(self, tenant, kw):
        self._require_history(tenant)
        query = self._filters(kw, BUILD_FILTERS, BUILD_RESULTS, BUILD_SORT_KEYS)
        return self.history.get_builds(tenant, query)

    def buildsets(self, tenant, kw):
        self._require_history(tenant)
        query = self._filters(kw, BUILDSET_FILTERS, BUILDSET_RESULTS, BUILDSET_SORT_KEYS)
        return self.history.get_buildsets(tenant, query)

    def build(self, tenant, uuid):
        """One build, its artifacts, and its reruns: the other builds of
        the same job in the same buildset (retried attempts), oldest first."""
        self._require_history(tenant)
        rows = self.history.get_builds(tenant, uuid=uuid, limit=1)
        if not rows:
            raise HTTPError(404, f'no build {uuid} in tenant {tenant}')
        build = rows[0]
        # Links only (rows may hold file:// image artifacts, or links an
        # earlier release stored unchecked).
        build['artifacts'] = web_artifacts(self.history.get_build_artifacts(uuid))
        attempts = self.history.get_builds(tenant, buildset_uuid=build['buildset']['uuid'],
                                           job_name=build['job_name'], sort='id', limit=100)
        build['reruns'] = [{'uuid': b['uuid'], 'result': b['result'], 'final': b['final'],
                            'start_time': b['start_time']}
                           for b in attempts if b['uuid'] != uuid]
        return build

    def reproduction(self, tenant, uuid):
        """What build ``uuid`` ran with, secrets left out (``zuul
        reproduce``, zuul/executor/reproduction.py)."""
        self._require_history(tenant)
        if not valid_build_uuid(uuid):
            raise HTTPError(400, 'invalid build uuid')
        data = self.history.get_reproduction(tenant, uuid)
        if data is None:
            raise HTTPError(404, f'nothing is known of what build {uuid} of tenant {tenant} '
                                 'ran with')
        rows = self.history.get_builds(tenant, uuid=uuid, limit=1)
        data['build'] = ({k: rows[0][k] for k in ('uuid', 'job_name', 'result', 'project',
                                                   'pipeline', 'change', 'patchset')}
                         if rows else {'uuid': uuid, 'result': None})
        data['tenant'] = tenant
        return data

    def buildset(self, tenant, uuid):
        self._require_history(tenant)
        rows = self.history.get_buildsets(tenant, uuid=uuid, limit=1)
        if not rows:
            raise HTTPError(404, f'no buildset {uuid} in tenant {tenant}')
        buildset = rows[0]
        buildset['builds'] = self.history.get_builds(tenant, buildset_uuid=uuid, sort='id',
                                                     limit=1000)
        return buildset


def _status_items(status: dict):
    for pipeline in status.get('pipelines', []):
        for queue in pipeline.get('change_queues', []):
            for head in queue.get('heads', []):
                yield from head


class APIRoot:
    """The cherrypy object mounted at /api."""

    def __init__(self, api: ZuulWebAPI):
        self.api = api

    @cherrypy.expose
    def default(self, *parts, **kw):
        response = cherrypy.response
        if len(parts) == 3 and parts[0] == 'connection' and parts[2] == 'payload':
            return self._payload(parts[1])
        response.headers['Access-Control-Allow-Origin'] = '*'
        request = cherrypy.request
        if request.method == 'OPTIONS':
            return self._preflight()
        try:
            body = _read_body() if request.method in ('POST', 'PUT', 'DELETE') else b''
            result = self.api.dispatch(list(parts), kw, WebRequest(
                request.method, request.headers.get('Authorization'), body))
        except HTTPError as e:
            response.headers.update(e.headers)
            return _json_error(e.status, e.message)
        except Exception as e:  # never leak a traceback page
            log.exception('API error on /api/%s', '/'.join(parts))
            return _json_error(500, f'internal error: {e}')
        if isinstance(result, console.LogStream):
            response.headers['Content-Type'] = 'text/plain; charset=utf-8'
            response.headers['Cache-Control'] = 'no-cache'
            response.stream = True
            return result.chunks()
        if isinstance(result, NoContent):
            response.status = 204
            return b''
        if isinstance(result, TextResult):
            response.headers['Content-Type'] = 'text/plain; charset=utf-8'
            return str(result).encode()
        response.headers['Content-Type'] = 'application/json'
        return json.dumps(result, default=str).encode()

    default._cp_config = {'response.stream': True, 'request.process_request_body': False}

    @staticmethod
    def _preflight() -> bytes:
        """CORS preflight of a browser's authenticated request."""
        headers = cherrypy.response.headers
        headers['Access-Control-Allow-Methods'] = 'GET, POST, DELETE, OPTIONS'
        headers['Access-Control-Allow-Headers'] = 'Authorization, Content-Type'
        cherrypy.response.status = 204
        return b''

    def _payload(self, connection: str) -> bytes:
        """A webhook delivery (``POST /api/connection/<name>/payload``)."""
        request = cherrypy.request
        receiver = self.api.webhooks
        if receiver is None:
            return _json_error(404, f'no connection {connection!r} takes webhooks')
        body = _read_body() if request.method == 'POST' else b''
        status, answer = receiver.receive(connection, request.method,
                                          dict(request.headers), body)
        cherrypy.response.status = status
        cherrypy.response.headers['Content-Type'] = 'application/json'
        return json.dumps(answer).encode()


def _read_body() -> bytes:
    """The raw request body (cherrypy does not process bodies under /api,
    so a form-encoded JSON body from ``curl -d`` reads the same)."""
    return cherrypy.request.rfile.read()


def _json_error(status: int, message: str) -> bytes:
    cherrypy.response.status = status
    cherrypy.response.headers['Content-Type'] = 'application/json'
    return json.dumps({'error': message}).encode()
