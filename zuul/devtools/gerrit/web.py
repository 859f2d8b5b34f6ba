"""The read-only HTTP side of the development Gerrit: a page per change at
the address change links point to (``<canonical url>/c/<project>/+/<n>``,
as the store's ``change_url`` and Zuul's status page build them), ``/<n>``
redirecting there, ``/`` listing the open changes and
``/tools/hooks/commit-msg`` (the hook also served over scp); the
authenticated REST API under ``/a/`` and the ``/login`` form go to rest.py.

Plain HTML written for this server; everything taken from the store is
escaped.
"""

from __future__ import annotations

import html
import json
import logging
import re
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, unquote, urlsplit

from zuul.devtools.gerrit import hooks, rest
from zuul.devtools.gerrit.query import _dependencies
from zuul.devtools.gerrit.store import Change, ReviewStore

log = logging.getLogger('zuul.devtools.gerrit.web')

_CHANGE_PATH = re.compile(r'^/c/(?P<project>.+?)/\+/(?P<number>\d+)(?:/\d+)?/?$')
_NUMBER_PATH = re.compile(r'^/(?P<number>\d+)/?$')
_DEPENDS_ON = re.compile(r'^Depends-On:\s*(\S+)\s*$', re.M | re.I)
HOOK_PATH = '/tools/hooks/commit-msg'

_STYLE = ('body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}'
          'td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;'
          'vertical-align:top}pre{background:#f6f6f6;padding:.5em}')


class DevGerritHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # Binding happens in the constructor: a port of 0 is known at once.
    allow_reuse_address = True

    def __init__(self, store: ReviewStore, address: str, port: int):
        self.store = store
        super().__init__((address, port), _Handler)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.server_address[1]

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, args=(0.1,),
                                        name='devgerrit-http', daemon=True)
        self._thread.start()

    def stop(self) -> None:
        # shutdown() waits for serve_forever(): only when it was started.
        if self._thread is not None:
            self.shutdown()
            self._thread.join(10)
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: DevGerritHTTPServer
    server_version = 'DevGerrit'

    def log_message(self, fmt, *args):
        log.debug('%s %s', self.address_string(), fmt % args)

    def do_GET(self):  # noqa: N802 - http.server API
        self._respond(body=True)

    def do_HEAD(self):  # noqa: N802 - http.server API
        self._respond(body=False)

    def do_POST(self):  # noqa: N802 - http.server API
        if not self._is_rest(urlsplit(self.path).path):
            return self._send(405, _page('Not allowed', '<p>Method not allowed</p>'))
        self._rest('POST')

    @staticmethod
    def _is_rest(path: str) -> bool:
        return path.startswith('/a/') or path == '/login'

    def _rest(self, method: str) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get('Content-Length') or 0)
        body = self.rfile.read(length) if length else b''
        try:
            status, value, headers = rest.handle(self.server.store, method,
                                                 parts.path, parts.query,
                                                 self.headers, body)
        except Exception:  # a handler bug must not kill the thread silently
            log.exception('%s %s failed', method, self.path)
            status, value, headers = 500, 'Internal error', {}
        if status == 200:
            data = (")]}'\n" + json.dumps(value, indent=2)).encode('utf-8')
            ctype = 'application/json; charset=UTF-8'
        else:
            data = f'{value}\n'.encode('utf-8') if value is not None else b''
            ctype = 'text/plain; charset=UTF-8'
        self.send_response(status)
        self.send_header('Content-Type', ctype)
        self.send_header('Content-Length', str(len(data)))
        for name, values in headers.items():
            for value in values if isinstance(values, list) else [values]:
                self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _respond(self, body: bool) -> None:
        path = urlsplit(self.path).path
        store = self.server.store
        if body and self._is_rest(path):
            return self._rest('GET')
        try:
            if path == '/':
                return self._send(200, _index_page(store), body=body)
            if path == HOOK_PATH:
                mode_data = hooks.lookup('hooks/commit-msg')
                return self._send(200, mode_data[1], 'text/x-shellscript', body=body)
            m = _NUMBER_PATH.match(path)
            if m:
                change = store.changes.get(int(m['number']))
                if change is None:
                    return self._not_found(body)
                return self._redirect(change_path(change), body)
            m = _CHANGE_PATH.match(path)
            if m:
                change = store.changes.get(int(m['number']))
                if change is None or change.project != unquote(m['project']):
                    return self._not_found(body)
                return self._send(200, _change_page(store, change), body=body)
        except Exception:  # a rendering bug must not kill the thread silently
            log.exception('GET %s failed', self.path)
            return self._send(500, _page('Internal error', '<p>Internal error</p>'),
                              body=body)
        return self._not_found(body)

    def _not_found(self, body: bool) -> None:
        self._send(404, _page('Not found', '<h1>Not found</h1>'
                              f'<p>{_e(urlsplit(self.path).path)}</p>'), body=body)

    def _redirect(self, location: str, body: bool) -> None:
        self._send(HTTPStatus.FOUND, _page('Moved', f'<a href="{_e(location)}">'
                                                    f'{_e(location)}</a>'),
                   body=body, headers={'Location': location})

    def _send(self, status: int, content, ctype: str = 'text/html; charset=utf-8',
              body: bool = True, headers: dict | None = None) -> None:
        data = content.encode('utf-8') if isinstance(content, str) else content
        self.send_response(status)
        self.send_header('Content-Type', ctype)
        self.send_header('Content-Length', str(len(data)))
        self.send_header('Cache-Control', 'no-store')
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if body:
            self.wfile.write(data)


def change_path(change: Change) -> str:
    """The path of a change's page (as ``ReviewStore.change_url`` ends)."""
    return f'/c/{quote(change.project)}/+/{change.number}'


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _when(ts: int | None) -> str:
    if not ts:
        return ''
    return time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(ts))


def _page(title: str, content: str) -> str:
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
            f'<title>{_e(title)}</title><style>{_STYLE}</style></head>\n'
            f'<body>\n<p><a href="/">Open changes</a></p>\n{content}\n</body></html>\n')


def _table(headers: list[str], rows: list[list[str]]) -> str:
    """``rows`` hold HTML already escaped."""
    head = ''.join(f'<th>{_e(h)}</th>' for h in headers)
    body = ''.join('<tr>' + ''.join(f'<td>{c}</td>' for c in row) + '</tr>\n'
                   for row in rows)
    return f'<table>\n<tr>{head}</tr>\n{body}</table>'


def _link(href: str, text) -> str:
    return f'<a href="{_e(href)}">{_e(text)}</a>'


def _index_page(store: ReviewStore) -> str:
    with store.lock:
        changes = sorted((c for c in store.changes.values() if c.is_open),
                         key=lambda c: c.number, reverse=True)
        rows = [[_link(change_path(c), c.number), _link(change_path(c), c.subject),
                 _e(c.project), _e(c.branch), _e(c.owner.username), _e(c.status),
                 _e(_when(c.last_updated))] for c in changes]
    content = '<h1>Open changes</h1>\n' + (
        _table(['#', 'Subject', 'Project', 'Branch', 'Owner', 'Status', 'Updated'], rows)
        if rows else '<p>No open changes.</p>')
    return _page('Open changes', content)


def _depends_on_footers(change: Change) -> list[str]:
    return _DEPENDS_ON.findall(change.message)


def _refers_to(url: str, store: ReviewStore, change: Change) -> bool:
    """Whether a Depends-On footer value names ``change``."""
    url = url.rstrip('/')
    if url == change.change_id or url == store.change_url(change):
        return True
    path = urlsplit(url).path.rstrip('/')
    return path.endswith(f'/c/{change.project}/+/{change.number}') or \
        path.endswith(f'/c/{quote(change.project)}/+/{change.number}')


def _change_ref_link(store: ReviewStore, ref: dict) -> str:
    other = store.changes.get(ref['number'])
    text = f'{ref["number"]},{ref["ref"].rsplit("/", 1)[-1]}'
    if other is None:
        return _e(text)
    return f'{_link(change_path(other), text)} {_e(other.subject)} ({_e(other.status)})'


def _change_page(store: ReviewStore, change: Change) -> str:
    with store.lock:
        return _render_change(store, change)


def _render_change(store: ReviewStore, change: Change) -> str:
    parts = [f'<h1>Change {change.number}: {_e(change.subject)}</h1>']
    facts = [('Project', change.project), ('Branch', change.branch),
             ('Status', change.status), ('Owner', f'{change.owner.name} '
                                                   f'<{change.owner.email}>'),
             ('Change-Id', change.change_id), ('Topic', change.topic or ''),
             ('Created', _when(change.created_on)),
             ('Updated', _when(change.last_updated)),
             ('URL', store.change_url(change))]
    if change.hashtags:
        facts.append(('Hashtags', ', '.join(change.hashtags)))
    parts.append(_table(['Field', 'Value'], [[_e(k), _e(v)] for k, v in facts]))
    parts.append(f'<h2>Commit message</h2>\n<pre>{_e(change.message)}</pre>')

    current = change.current
    votes = [[_e(a.label), _e(f'{a.value:+d}'), _e(a.by.username), _e(_when(a.granted_on))]
             for a in current.approvals]
    parts.append(f'<h2>Votes on patch set {current.number}</h2>')
    parts.append(_table(['Label', 'Value', 'By', 'When'], votes) if votes
                 else '<p>No votes.</p>')

    depends, needed = _dependencies(store, change)
    footers = _depends_on_footers(change)
    footer_needed = [c for c in store.changes.values() if c is not change and any(
        _refers_to(u, store, change) for u in _depends_on_footers(c))]
    if depends or needed or footers or footer_needed:
        parts.append('<h2>Dependencies</h2>\n<ul>')
        for ref in depends:
            parts.append(f'<li>Depends on (git parent): {_change_ref_link(store, ref)}</li>')
        for url in footers:
            target = _link(url, url) if url.startswith(('http://', 'https://')) else _e(url)
            parts.append(f'<li>Depends-On: {target}</li>')
        for ref in needed:
            parts.append(f'<li>Needed by (git child): {_change_ref_link(store, ref)}</li>')
        for other in sorted(footer_needed, key=lambda c: c.number):
            parts.append(f'<li>Needed by (Depends-On): {_link(change_path(other), other.number)}'
                         f' {_e(other.subject)} ({_e(other.status)})</li>')
        parts.append('</ul>')

    parts.append('<h2>Patch sets</h2>')
    rows = []
    for ps in reversed(change.patchsets):
        approvals = '<br>'.join(_e(f'{a.label} {a.value:+d} by {a.by.username}')
                                for a in ps.approvals)
        files = '<br>'.join(_e(f'{kind[:1]} {path}') for path, kind in ps.files)
        rows.append([_e(ps.number), f'<code>{_e(ps.ref)}</code>',
                     f'<code>{_e(ps.revision)}</code>', _e(ps.uploader.username),
                     _e(_when(ps.created_on)), _e(ps.kind), files, approvals])
    parts.append(_table(['#', 'Ref', 'Revision', 'Uploader', 'Created', 'Kind', 'Files',
                         'Votes'], rows))

    messages = [r for r in store.review_log if r['change'] == change.number]
    parts.append('<h2>Messages</h2>')
    if messages:
        rows = []
        for r in messages:
            labels = ', '.join(f'{k} {int(v):+d}' for k, v in r['labels'].items())
            extra = ' (submit)' if r.get('submit') else ''
            rows.append([_e(r['patchset']), _e(r['user']), _e(labels + extra),
                         _e(r.get('tag') or ''), f'<pre>{_e(r["message"])}</pre>'
                         if r['message'] else ''])
        parts.append(_table(['Patch set', 'By', 'Votes', 'Tag', 'Message'], rows))
    else:
        parts.append('<p>No messages.</p>')
    return _page(f'{change.number}: {change.subject}', '\n'.join(parts))
