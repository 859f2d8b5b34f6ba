"""The unparsed configuration cache in ZooKeeper.

What mergers read of each project for the tenant layouts -- its branches
and, per branch, the text of its configuration files -- is kept under
``/zuul/config-cache/<connection>/<project>`` (the project name
%-quoted, one znode per project, zlib-compressed JSON), so that a
scheduler that starts (a restart, a standby taking over, another
scheduler added) builds its layouts from ZooKeeper instead of asking the
mergers to read every repository again.

A scheduler that reconfigures a tenant because a project's configuration
changed deletes that project's entry before reading it again and writes
the new one, so no scheduler builds a layout from files older than those
the entry was written from.  An operator's full reconfiguration empties
the cache.  An entry that cannot be read (written by another version,
damaged) counts as missing: the project is read again through a merger.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
import zlib

from kazoo.exceptions import NoNodeError, NotEmptyError

log = logging.getLogger('zuul.zk.config_cache')

CONFIG_CACHE_ROOT = '/zuul/config-cache'
VERSION = 1
# ZooKeeper refuses znodes over 1 MiB (jute.maxbuffer): bigger entries
# are not cached (that project is read through a merger every time).
MAX_ENTRY_BYTES = 1000 * 1000


def _path(connection: str, project: str) -> str:
    return (f'{CONFIG_CACHE_ROOT}/{urllib.parse.quote(connection, safe="")}/'
            f'{urllib.parse.quote(project, safe="")}')


class ConfigCacheStore:
    """Get, put and drop one project's unparsed configuration:
    ``{'branches': [...], 'files': {branch: {path: text}}}``."""

    def __init__(self, client):
        self.client = client

    def get(self, connection: str, project: str) -> dict | None:
        try:
            raw, _ = self.client.get(_path(connection, project))
        except NoNodeError:
            return None
        try:
            data = json.loads(zlib.decompress(raw))
            if data.get('version') != VERSION or not isinstance(data.get('branches'), list) \
                    or not isinstance(data.get('files'), dict):
                raise ValueError('not a config cache entry of this version')
        except (ValueError, TypeError, zlib.error, AttributeError) as exc:
            log.warning('Ignoring the cached configuration of %s %s: %s', connection,
                        project, exc)
            return None
        return {'branches': data['branches'], 'files': data['files']}

    def put(self, connection: str, project: str, branches: list, files: dict) -> bool:
        raw = zlib.compress(json.dumps({'version': VERSION, 'branches': list(branches),
                                        'files': files}).encode('utf8'))
        if len(raw) > MAX_ENTRY_BYTES:
            log.info('Configuration of %s %s too big to cache in ZooKeeper (%d bytes)',
                     connection, project, len(raw))
            return False
        path = _path(connection, project)
        try:
            self.client.set(path, raw)
        except NoNodeError:
            self.client.create(path, raw, makepath=True)
        return True

    def delete(self, connection: str, project: str) -> None:
        try:
            self.client.delete(_path(connection, project))
        except NoNodeError:
            pass

    def clear(self) -> None:
        try:
            self.client.delete(CONFIG_CACHE_ROOT, recursive=True)
        except (NoNodeError, NotEmptyError):
            pass
