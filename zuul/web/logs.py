"""``/logs/<build uuid>/...``: finished builds' logs from ``[web] log_root``.

The executor copies each build's ``work/logs`` to ``<log_root>/<uuid>/``
(``zuul.executor.logarchive``); on a single host zuul-web serves the
same directory.  Files are sent with a Content-Type from their name
(``.txt``/``.log`` as UTF-8 text, ``.json``, ``.html``; ``x.txt.gz`` as
gzip-encoded text so browsers show it, other ``.gz`` as
``application/gzip``); directories as a small HTML index.

What a build wrote is untrusted: paths are checked one component at a
time (no ``..``, no absolute or empty components) and opened through
``zuul.lib.safefile`` so no symlink is ever followed out of the root;
only regular files and directories are served.  Every response carries
``Content-Security-Policy: sandbox`` and ``X-Content-Type-Options:
nosniff``, so an HTML or SVG file a job wrote runs no script on
zuul-web's origin.  The log root itself is not listed: a build's uuid is
what gives access to its logs, as on a log server.

For the build page, ``?format=listing`` gives a directory listing as JSON
(``[{"name", "type": "dir"|"file", "size", "mtime"}]``) and ``?format=json``
a YAML file (``zuul-info/inventory.yaml``) parsed to JSON with secret-looking values
(keys naming passwords, tokens, secrets or private keys, and PEM private
keys anywhere) replaced by ``"<redacted>"``.
"""

from __future__ import annotations

import html
import json
import mimetypes
import os
import re
import stat
import time
import urllib.parse

import cherrypy
import yaml

from zuul.executor.logarchive import BUILD_DIR_RE
from zuul.lib import safefile

CHUNK = 65536
TEXT = 'text/plain; charset=utf-8'
TYPES = {
    '.txt': TEXT, '.log': TEXT, '.yaml': TEXT, '.yml': TEXT, '.conf': TEXT, '.cfg': TEXT,
    '.ini': TEXT, '.sh': TEXT, '.py': TEXT, '.out': TEXT, '.err': TEXT, '.csv': TEXT,
    '.json': 'application/json', '.html': 'text/html; charset=utf-8',
    '.htm': 'text/html; charset=utf-8', '.xml': 'application/xml', '.css': 'text/css',
    '.svg': 'image/svg+xml', '.png': 'image/png', '.jpg': 'image/jpeg',
    '.gif': 'image/gif',
}
# A YAML file larger than this is not parsed for ?format=json.
MAX_YAML = 4 << 20
REDACTED = '<redacted>'
_SECRET_KEY_RE = re.compile(r'(passw|secret|token|private|privkey|api_?key|credential|'
                            r'auth_?key)', re.IGNORECASE)
_PRIVATE_KEY_RE = re.compile(r'-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----')
SECURITY_HEADERS = {'Content-Security-Policy': 'sandbox', 'X-Content-Type-Options': 'nosniff'}


def content_type(name: str) -> tuple[str, str | None]:
    """(Content-Type, Content-Encoding) for a file called ``name``."""
    lower = name.lower()
    if lower.endswith('.gz'):
        inner = os.path.splitext(lower[:-3])[1]
        if inner in TYPES:
            return TYPES[inner], 'gzip'
        return 'application/gzip', None
    ext = os.path.splitext(lower)[1]
    if ext in TYPES:
        return TYPES[ext], None
    if not ext:
        return TEXT, None  # syslog, dmesg, ...: logs without an extension
    guessed, _ = mimetypes.guess_type(lower, strict=False)
    return guessed or 'application/octet-stream', None


def _components(parts) -> list[str]:
    """The request path's components; None if any is unsafe or the first
    is not a build dir name (so neither a dot file of the log root nor an
    archive still being written, ``.<uuid>.tmp-<pid>/``, is served)."""
    out = []
    for part in parts:
        if part in ('', '.', '..') or '/' in part or '\x00' in part:
            return None
        out.append(part)
    if not out or not BUILD_DIR_RE.match(out[0]):
        return None
    return out


class LogsRoot:
    """Mounted at ``/logs``; ``log_root`` None answers 404 to everything."""

    _cp_config = {'tools.encode.on': False, 'response.stream': True}

    def __init__(self, log_root: str | None):
        self.log_root = os.path.abspath(log_root) if log_root else None

    @cherrypy.expose
    def default(self, *parts, **kw):
        for key, value in SECURITY_HEADERS.items():
            cherrypy.response.headers[key] = value
        components = _components(parts)
        if self.log_root is None or components is None:
            raise cherrypy.HTTPError(404, 'No such log')
        fmt = kw.get('format')
        if set(kw) - {'format'} or fmt not in (None, 'json', 'listing'):
            raise cherrypy.HTTPError(400, 'the only parameter is format=listing or format=json')
        rel = '/'.join(components)
        try:
            fd = safefile.open_beneath(self.log_root, rel, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:  # not a directory (or not there): a file?
            if len(components) == 1:
                # The first part names a build's directory; a file lying
                # directly in the log root is nobody's log.
                raise cherrypy.HTTPError(404, 'No such log') from None
            if fmt == 'listing':
                raise cherrypy.HTTPError(404, 'No such directory') from None
            if fmt == 'json':
                return self._yaml_as_json(rel, components[-1])
            return self._file(rel, components[-1])
        try:
            if fmt == 'json':
                raise cherrypy.HTTPError(400, 'format=json is for YAML files')
            return self._listing(fd) if fmt == 'listing' else self._index(fd, components)
        finally:
            os.close(fd)

    def _listing(self, fd: int):
        entries = []
        for name, is_dir, st in _entries(fd):
            entries.append({'name': _display(name), 'type': 'dir' if is_dir else 'file',
                            'size': None if is_dir else st.st_size,
                            'mtime': int(st.st_mtime)})
        return _json_body(entries)

    def _yaml_as_json(self, rel: str, name: str):
        if not name.lower().endswith(('.yaml', '.yml')):
            raise cherrypy.HTTPError(400, 'format=json is for YAML files')
        try:
            fd = safefile.open_regular_beneath(self.log_root, rel)
        except OSError:
            raise cherrypy.HTTPError(404, 'No such log') from None
        with os.fdopen(fd, 'rb') as f:
            data = f.read(MAX_YAML + 1)
        if len(data) > MAX_YAML:
            raise cherrypy.HTTPError(413, 'the file is too large to parse')
        try:
            value = yaml.safe_load(data.decode('utf-8', 'replace'))
        except yaml.YAMLError as e:
            raise cherrypy.HTTPError(422, f'not valid YAML: {e}') from None
        return _json_body(redact(value))

    def _file(self, rel: str, name: str):
        try:
            fd = safefile.open_regular_beneath(self.log_root, rel)
        except OSError:
            raise cherrypy.HTTPError(404, 'No such log') from None
        headers = cherrypy.response.headers
        ctype, encoding = content_type(name)
        headers['Content-Type'] = ctype
        if encoding:
            headers['Content-Encoding'] = encoding
        headers['Content-Length'] = str(os.fstat(fd).st_size)
        return _read_chunks(os.fdopen(fd, 'rb', buffering=0))

    def _index(self, fd: int, components: list[str]):
        request = cherrypy.request
        if not request.path_info.endswith('/'):
            raise cherrypy.HTTPRedirect(request.script_name + request.path_info + '/', 301)
        rows = [_row(name, is_dir, st) for name, is_dir, st in _entries(fd)]
        title = html.escape('/logs/' + '/'.join(_display(c) for c in components) + '/')
        up = ('<tr><td><a href="../">../</a></td><td></td><td></td></tr>\n'
              if len(components) > 1 else '')
        body = (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{title}</title>'
                f'</head>\n<body><h1>Index of {title}</h1>\n<table>\n'
                '<tr><th>Name</th><th>Size</th><th>Last modified</th></tr>\n'
                f'{up}{"".join(row[1] for row in rows)}</table>\n</body></html>\n')
        data = body.encode('utf-8')
        cherrypy.response.headers['Content-Type'] = 'text/html; charset=utf-8'
        cherrypy.response.headers['Content-Length'] = str(len(data))
        return [data]


def _entries(fd: int):
    """(name, is_dir, stat) of the directories and regular files in
    ``fd``, directories first, each group by name; never a symlink or a
    special file."""
    entries = []
    for name in sorted(os.listdir(fd)):
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue
        is_dir = stat.S_ISDIR(st.st_mode)
        if is_dir or stat.S_ISREG(st.st_mode):
            entries.append((name, is_dir, st))
    entries.sort(key=lambda entry: not entry[1])
    return entries


def redact(value, key: str = ''):
    """``value`` with secret-looking entries replaced by REDACTED."""
    if isinstance(value, dict):
        return {k: REDACTED if _SECRET_KEY_RE.search(str(k)) and v not in (None, '')
                and not isinstance(v, (dict, list)) else redact(v, str(k))
                for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, key) for v in value]
    if isinstance(value, str) and _PRIVATE_KEY_RE.search(value):
        return REDACTED
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    return value if isinstance(value, str) else str(value)


def _json_body(value) -> list[bytes]:
    data = json.dumps(value, default=str).encode('utf-8')
    cherrypy.response.headers['Content-Type'] = 'application/json'
    cherrypy.response.headers['Content-Length'] = str(len(data))
    return [data]


def _display(name: str) -> str:
    """A file name as text (names that are not UTF-8 get U+FFFD)."""
    return os.fsencode(name).decode('utf-8', 'replace')


def _row(name: str, is_dir: bool, st) -> tuple[bool, str]:
    href = urllib.parse.quote(os.fsencode(name)) + ('/' if is_dir else '')
    label = html.escape(_display(name) + ('/' if is_dir else ''))
    size = '' if is_dir else str(st.st_size)
    mtime = time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(st.st_mtime))
    return is_dir, (f'<tr><td><a href="{html.escape(href)}">{label}</a></td>'
                    f'<td>{size}</td><td>{mtime}</td></tr>\n')


def _read_chunks(f):
    """The file's content; it is closed at the end, or with the generator
    if the body is never read (HEAD)."""
    with f:
        while True:
            data = f.read(CHUNK)
            if not data:
                return
            yield data
