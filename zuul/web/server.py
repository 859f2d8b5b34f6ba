"""zuul-web: the cherrypy application and the HTTP server that serves it.

    /api/...                  JSON API (zuul/web/api.py)
    /t/<tenant>/status        the self-refreshing status page
    /t/<tenant>/status/change/<N,P>  the same for one change
    /t/<tenant>/builds        build history
    /t/<tenant>/build/<uuid>  one build
    /t/<tenant>/buildsets, /t/<tenant>/buildset/<uuid>  buildsets
    /t/<tenant>/stream/<uuid> a running build's live log (websocket)
    /logs/<uuid>/...          finished builds' logs from [web] log_root (zuul/web/logs.py)
    /static/...               the pages' JS and CSS (zuul/web/static/)
    /                         the tenant list

Cache headers: pages ``no-cache`` (they name the current static files),
/static/ files ``public, max-age=<static_cache_expiry>`` (the pages ask
for them with a ``?v=<content hash>``, so a new release is fetched at
once), the status API ``max-age=1`` (many pages poll it; never ``public``:
a tenant's access-rules may make it private), the rest of the API
``no-cache``.

The application is served by cheroot directly rather than through
cherrypy's process-wide engine, so one process (a test) can run several
independent servers.
"""

from __future__ import annotations

import functools
import hashlib
import html
import logging
import os
import re
import threading

import cherrypy
from cheroot import wsgi

from zuul.web.api import APIRoot, HTTPError, ZuulWebAPI
from zuul.web.console import ConsoleStreamSocket
from zuul.web.logs import LogsRoot
from zuul.web.status_cache import CachedStatusRPC
from zuul.web.websocket import install as install_websockets

log = logging.getLogger('zuul.web.server')

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'static')

PAGES = {
    # page name -> (title, script)
    'status': ('Status', 'status.js'),
    'builds': ('Builds', 'builds.js'),
    'build': ('Build', 'build.js'),
    'tenants': ('Tenants', 'tenants.js'),
    'buildsets': ('Buildsets', 'buildsets.js'),
    'buildset': ('Buildset', 'buildset.js'),
    'stream': ('Live log', 'stream.js'),
}
# The configuration views: list pages at /t/<tenant>/<page>, and the job
# and project pages at /t/<tenant>/job/<name>, /t/<tenant>/project/<name>.
CONFIG_LIST_PAGES = {'jobs': 'Jobs', 'projects': 'Projects', 'nodes': 'Nodes',
                     'labels': 'Labels', 'semaphores': 'Semaphores', 'autoholds': 'Autoholds',
                     'config-errors': 'Configuration errors', 'info': 'Tenant info'}
PAGES.update({page: (title, page.replace('-', '_') + '.js')
              for page, title in CONFIG_LIST_PAGES.items()})
PAGES.update({'job': ('Job', 'job.js'), 'project': ('Project', 'project.js')})


GZIP_TYPES = ['application/json', 'text/html', 'text/css', 'text/javascript',
              'application/javascript']
_STATUS_API_RE = re.compile(r'^/api/tenant/[^/]+/status(/change/[^/]+)?$')


@functools.lru_cache(maxsize=1)
def static_version() -> str:
    """A hash of the static files: the ``?v=`` of the pages' links, so a
    browser holding cached files of another release fetches them anew."""
    digest = hashlib.sha1()
    for name in sorted(os.listdir(STATIC_DIR)):
        with open(os.path.join(STATIC_DIR, name), 'rb') as f:
            digest.update(name.encode() + b'\0' + f.read())
    return digest.hexdigest()[:12]


def render_page(page: str, tenant: str = '', arg: str = '') -> str:
    title, script = PAGES[page]
    with open(os.path.join(STATIC_DIR, 'page.html'), encoding='utf-8') as f:
        template = f.read()
    values = {'title': html.escape(f'{title} - {tenant}' if tenant else title),
              'tenant': html.escape(tenant), 'arg': html.escape(arg),
              'page': page, 'script': script, 'version': static_version()}
    for key, value in values.items():
        template = template.replace('{{' + key + '}}', value)
    return template


class PageRoot:
    """The HTML pages; the data comes from /api through the page's script."""

    def __init__(self, web_api: ZuulWebAPI):
        self.web_api = web_api
        self.api = APIRoot(web_api)  # /api

    @cherrypy.expose
    def index(self):
        return render_page('tenants')

    @cherrypy.expose
    def favicon_ico(self):
        from zuul.web.favicon import favicon_ico
        cherrypy.response.headers['Content-Type'] = 'image/x-icon'
        cherrypy.response.headers['Cache-Control'] = 'public, max-age=86400'
        return favicon_ico()

    @cherrypy.expose
    def t(self, tenant=None, page=None, *rest, **kw):
        if not tenant or not page:
            raise cherrypy.HTTPError(404, 'no such page')
        if page in ('buildset', 'stream') and len(rest) == 1:
            self._check_tenant(tenant)
            return render_page(page, tenant, rest[0])
        if page == 'buildsets' and not rest:
            self._check_tenant(tenant)
            return render_page(page, tenant)
        if page == 'build' and len(rest) == 1:
            self._check_tenant(tenant)
            return render_page('build', tenant, rest[0])
        if page == 'status' and len(rest) == 2 and rest[0] == 'change':
            self._check_tenant(tenant)
            return render_page('status', tenant, rest[1])
        if page in ('status', 'builds') and not rest:
            self._check_tenant(tenant)
            return render_page(page, tenant)
        if (page in CONFIG_LIST_PAGES and not rest) or (page in ('job', 'project') and rest):
            self._check_tenant(tenant)
            return render_page(page, tenant, '/'.join(rest))
        raise cherrypy.HTTPError(404, 'no such page')

    def _check_tenant(self, tenant: str) -> None:
        # every tenant, private ones too: a browser sends no token when it
        # loads a page; the page's API calls carry it (login.js)
        try:
            names = [t['name'] for t in self.web_api.all_tenants()]
        except HTTPError:
            return  # scheduler unreachable: the page's script reports it
        if tenant not in names:
            raise cherrypy.HTTPError(404, f'Unknown tenant {tenant}')


def _cache_headers() -> None:
    """The Cache-Control of a page or API answer (see the module doc);
    an answer that set its own (a live log stream) keeps it."""
    headers = cherrypy.response.headers
    path = cherrypy.request.path_info
    if path.startswith('/static/') or 'Cache-Control' in headers:
        return
    if _STATUS_API_RE.match(path) and str(cherrypy.response.status or 200).startswith('200'):
        headers['Cache-Control'] = 'max-age=1'
    else:
        headers['Cache-Control'] = 'no-cache'
    if path.startswith('/api/'):
        headers['Vary'] = 'Authorization'


cherrypy.tools.zuul_cache_headers = cherrypy.Tool('before_finalize', _cache_headers)

# Script only from zuul-web's own files: no inline script, no eval, no
# plugins, no framing; a link a job managed to smuggle into a page cannot
# run script in it (see also zuul.lib.urls).  Styles may be inline (the
# pages set a few style attributes).  Build logs under /logs/ set their
# own, stricter policy (a sandbox).
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'self'; img-src 'self' data:; "
    "style-src 'self' 'unsafe-inline'; connect-src 'self'")


def _security_headers() -> None:
    headers = cherrypy.response.headers
    headers.setdefault('Content-Security-Policy', CONTENT_SECURITY_POLICY)
    headers.setdefault('X-Content-Type-Options', 'nosniff')
    headers.setdefault('Referrer-Policy', 'same-origin')


cherrypy.tools.zuul_security_headers = cherrypy.Tool('before_finalize', _security_headers)


def build_app(api: ZuulWebAPI, log_root: str | None = None,
              static_cache_expiry: int = 3600) -> cherrypy.Application:
    """``static_cache_expiry`` ([web] static_cache_expiry): the
    Cache-Control max-age, in seconds, of the files under /static/."""
    root = PageRoot(api)
    root.logs = LogsRoot(log_root)  # /logs
    config = {
        '/': {'tools.encode.on': True, 'tools.encode.encoding': 'utf-8',
              'tools.zuul_cache_headers.on': True,
              'tools.zuul_security_headers.on': True,
              # the status JSON of hundreds of items shrinks tenfold; never
              # text/plain, which live log streams are (gzip would hold
              # their lines back)
              'tools.gzip.on': True, 'tools.gzip.mime_types': GZIP_TYPES},
        # logs keep their own encoding (x.json.gz is sent gzip-encoded as is)
        '/logs': {'tools.gzip.on': False},
        '/static': {'tools.staticdir.on': True, 'tools.staticdir.dir': STATIC_DIR,
                    'tools.response_headers.on': True,
                    'tools.response_headers.headers': [
                        ('Cache-Control', f'public, max-age={int(static_cache_expiry)}')]},
    }
    return cherrypy.Application(root, '', config)


class ZuulWeb:
    """The zuul-web HTTP server. ``port=0`` picks a free port (see ``.port``)."""

    def __init__(self, listen_address: str, port: int, rpc, history=None,
                 log_root: str | None = None, static_cache_expiry: int = 3600,
                 webhooks=None, authenticators=None, enforce_access: bool = False,
                 status_cache_ttl: float = 0.0, published_status=None):
        """``authenticators`` and ``enforce_access``: see ZuulWebAPI;
        ``status_cache_ttl``: seconds a tenant's status is reused
        (zuul/web/status_cache.py); the daemon uses 1, as released Zuul;
        0 (no cache) for embedded servers whose scheduler is a test's;
        ``published_status``: a zuul.zk.status.StatusStore to read the
        tenants' status from instead of asking the scheduler."""
        cherrypy.config.update({'environment': 'embedded', 'log.screen': False,
                                'engine.autoreload.on': False})
        # many open status pages: one status RPC per tenant per ttl
        self.api = ZuulWebAPI(CachedStatusRPC(rpc, status_cache_ttl,
                                              published=published_status), history, webhooks,
                              authenticators, enforce_access)
        self.app = build_app(self.api, log_root, static_cache_expiry)
        self.server = wsgi.Server((listen_address, port), self.app, numthreads=10,
                                  server_name='zuul-web')
        # /api/tenant/<t>/console-stream also as a websocket (zuul/web/websocket.py)
        install_websockets(self.server, [ConsoleStreamSocket(self.api).route()])
        # cheroot's selector loop wakes this often; stop() waits for it
        # (0.5 s by default, which dominated test teardown).
        self.server.expiration_interval = 0.1
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.server.bind_addr[1]

    def start(self) -> None:
        self.server.prepare()
        self._thread = threading.Thread(target=self.server.serve, name='zuul-web',
                                        daemon=True)
        self._thread.start()
        log.info('zuul-web listening on %s:%s', *self.server.bind_addr[:2])

    def stop(self) -> None:
        self.server.stop()
        if self._thread is not None:
            self._thread.join(10)
