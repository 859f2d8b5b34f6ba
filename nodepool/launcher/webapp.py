"""nodepool-launcher's status web app (nodepool.yaml ``webapp``).

    webapp:
      port: 8005                 # the default
      listen_address: 0.0.0.0    # the default

Plain GET endpoints, as released Nodepool serves them: each answers with
the ``nodepool`` command's table (``text/plain``), or with JSON for the
``.json`` form of the path or a request that accepts
``application/json`` (the same objects as the command's ``--json``):

``/node-list``       every node (``?node_id=ID`` for one)
``/request-list``    every node request
``/label-list``      configured labels, min-ready and ready counts
``/dib-image-list``  image builds
``/image-list``      image uploads
``/ready``           200 once every pool worker is registered, else 503

and, for Prometheus, the launcher's metrics (nodepool/launcher/stats.py) at
``/metrics`` with the health paths of released Zuul's endpoint:
``/health/live`` (200), ``/health/ready`` (as ``/ready``) and
``/health/status`` (``running`` or ``starting``).
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from urllib.parse import parse_qs, urlparse

from nodepool.cmd import client, images

log = logging.getLogger('nodepool.webapp')

DEFAULT_PORT = 8005
DEFAULT_LISTEN_ADDRESS = '0.0.0.0'


def _nodes(app, query):
    nodes = app.zk.get_nodes()
    wanted = query.get('node_id')
    if wanted:
        nodes = [n for n in nodes if n.id in wanted]
    return (client.node_objects(app.zk, nodes),
            lambda objs: client.render_table(
                client.NODE_COLUMNS + client.DETAIL_COLUMNS,
                [[o[k] for k, _ in client.NODE_FIELDS] for o in objs]))


def _requests(app, query):
    requests = app.zk.get_requests()
    return client.request_objects(requests), lambda objs: client.request_table(requests)


def _labels(app, query):
    nodes = app.zk.get_nodes()
    return (client.label_objects(app.config, nodes),
            lambda objs: client.label_table(app.config, nodes))


def _builds(app, query):
    return images.build_objects(app.args, app.zk), images.dib_image_table


def _uploads(app, query):
    return images.upload_objects(app.args, app.zk), images.image_table


ENDPOINTS = {
    '/node-list': _nodes,
    '/request-list': _requests,
    '/label-list': _labels,
    '/dib-image-list': _builds,
    '/image-list': _uploads,
}


class WebApp:
    """The HTTP server, in a thread of its own."""

    def __init__(self, config, zk, launcher=None):
        self.config = config
        self.zk = zk
        self.launcher = launcher
        self.args = SimpleNamespace(config_obj=config)
        settings = config.webapp or {}
        self.listen_address = settings.get('listen_address', DEFAULT_LISTEN_ADDRESS)
        self.port = settings.get('port', DEFAULT_PORT)
        self.server: ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        app = self

        class Handler(_Handler):
            webapp = app
        self.server = ThreadingHTTPServer((self.listen_address, self.port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]     # port 0: the one chosen
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                       name='webapp')
        self.thread.start()
        log.info('Web app listening on %s:%s', self.listen_address, self.port)

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def ready(self) -> bool:
        return self.launcher is not None and self.launcher.registered()

    def _metrics_answer(self, route: str) -> tuple[int, str, str]:
        from nodepool.driver.metrics import Metrics, MetricsServer
        metrics = getattr(self.launcher, 'metrics', None) or Metrics(None)
        status, ctype, body = MetricsServer.answer_for(
            metrics, route, lambda: 'running' if self.ready() else 'starting')
        return status, ctype.split(';')[0], body

    def answer(self, path: str, accept: str) -> tuple[int, str, str]:
        """(status, content type, body) for a GET of ``path``."""
        url = urlparse(path)
        route = url.path.rstrip('/') or '/'
        if route == '/ready':
            return (200, 'text/plain', 'OK\n') if self.ready() else \
                (503, 'text/plain', 'not ready\n')
        if route == '/metrics' or route.startswith('/health/'):
            return self._metrics_answer(route)
        as_json = route.endswith('.json') or 'application/json' in (accept or '')
        route = route.removesuffix('.json')
        make = ENDPOINTS.get(route)
        if make is None:
            return 404, 'text/plain', f'no such page: {url.path}\n'
        objs, table = make(self, parse_qs(url.query))
        if as_json:
            return 200, 'application/json', json.dumps(objs, indent=2)
        return 200, 'text/plain', table(objs) + '\n'


class _Handler(BaseHTTPRequestHandler):
    webapp: WebApp

    def do_GET(self):  # noqa: N802 (http.server's name)
        try:
            status, ctype, body = self.webapp.answer(self.path, self.headers.get('Accept'))
        except Exception as e:
            log.exception('Web app: %s failed', self.path)
            status, ctype, body = 500, 'text/plain', f'error: {e}\n'
        data = body.encode('utf8')
        self.send_response(status)
        self.send_header('Content-Type', f'{ctype}; charset=utf-8')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, fmt, *args):
        log.debug('%s %s', self.address_string(), fmt % args)
