"""Per-project secret keys in ZooKeeper, shared by every scheduler.

Each project's private key lives in one znode, so that every scheduler
(the leader and its standbys, on any host) decrypts with the same key and a
lost host loses no key::

    /keystorage/<quoted connection>/<quoted project>     ProjectKeys (JSON)

``ProjectKeys`` is ``{"schema_version": 1, "connection": ..., "project":
..., "keys": [{"version": 0, "created": <unix time>, "private_key": <PEM>}]}``.
The PEM is PKCS#8, encrypted with ``[keystore] password`` when one is set
(as released Zuul keeps its keys); the last entry of ``keys`` is the one in
use. ``/keystorage`` is outside ``/zuul`` on purpose: tools that clear
Zuul's runtime state must never take the keys with it.

A key is created on first need. Two schedulers may race to create the same
project's key: both try to create the znode, the loser reads the winner's
key, so one key results. A project whose key is missing from ZooKeeper but
present in the file store of earlier releases (``<state_dir>/keys/...``,
see ``zuul.lib.keystore``) gets that key imported instead of a new one, so
an upgrade keeps every secret decryptable.

``export_keys``/``import_keys``/``delete_keys`` are what ``zuul-admin
export-keys``/``import-keys``/``delete-keys`` do; an export holds every
record exactly as stored (still encrypted with the password).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import quote

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.retry import KazooRetry

from zuul.lib import encryption

log = logging.getLogger('zuul.zk.keys')

KEY_ROOT = '/keystorage'
SCHEMA_VERSION = 1
EXPORT_SCHEMA_VERSION = 1


class KeyStoreError(ValueError):
    """A key that cannot be read or written; the message names the
    project (and connection) and what to do."""


class KeyPasswordError(KeyStoreError):
    """A stored key that does not open with ``[keystore] password``."""


class KeyConflictError(KeyStoreError):
    """An import would replace a different key (``--force`` allows it)."""


def key_path(connection: str, project: str) -> str:
    if not connection or not project:
        raise KeyStoreError('a key needs a connection and a project name')
    return f'{KEY_ROOT}/{quote(connection, safe="")}/{quote(project, safe="")}'


def _name(connection: str, project: str) -> str:
    return f'project {project} (connection {connection})'


# -- the record ---------------------------------------------------------------


@dataclass
class StoredKey:
    private_key: str       # PEM (PKCS#8), encrypted when a password is set
    created: float
    version: int = 0

    def to_dict(self) -> dict:
        return {'version': self.version, 'created': self.created,
                'private_key': self.private_key}


@dataclass
class ProjectKeys:
    """The body of one project's znode (and one entry of an export):
    its secrets keys and, once a post-review job or the web asked for it,
    its SSH keys (``ssh_keys``, zuul/zk/ssh_keys.py), kept the same way."""

    connection: str
    project: str
    keys: list[StoredKey] = field(default_factory=list)
    ssh_keys: list[StoredKey] = field(default_factory=list)

    @property
    def current(self) -> StoredKey:
        return self.keys[-1]

    def to_dict(self) -> dict:
        out = {'schema_version': SCHEMA_VERSION, 'connection': self.connection,
               'project': self.project, 'keys': [k.to_dict() for k in self.keys]}
        if self.ssh_keys:
            out['ssh_keys'] = [k.to_dict() for k in self.ssh_keys]
        return out

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True).encode()

    @classmethod
    def from_dict(cls, data, where: str) -> ProjectKeys:
        """Validate ``data``; errors say ``where`` it came from."""
        if not isinstance(data, dict):
            raise KeyStoreError(f'{where}: a key record must be a JSON object')
        if data.get('schema_version') != SCHEMA_VERSION:
            raise KeyStoreError(f'{where}: key record schema version '
                                f'{data.get("schema_version")!r}; this release reads '
                                f'version {SCHEMA_VERSION}')
        connection, project = data.get('connection'), data.get('project')
        if not isinstance(connection, str) or not isinstance(project, str) or \
                not connection or not project:
            raise KeyStoreError(f'{where}: a key record needs "connection" and "project"')
        keys = data.get('keys')
        if not isinstance(keys, list) or not keys:
            raise KeyStoreError(f'{where}: {_name(connection, project)} has no keys')
        ssh_keys = data.get('ssh_keys', [])
        if not isinstance(ssh_keys, list):
            raise KeyStoreError(f'{where}: {_name(connection, project)}: "ssh_keys" must be '
                                'a list')
        return cls(connection, project, _stored_keys(keys, where, connection, project),
                   _stored_keys(ssh_keys, where, connection, project))

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> ProjectKeys:
        try:
            data = json.loads(raw.decode('utf-8'))
        except (UnicodeDecodeError, ValueError) as e:
            raise KeyStoreError(f'{where}: not a JSON key record ({e})') from None
        return cls.from_dict(data, where)


MISSING_PASSWORD = (
    '[keystore] password is not set. Every project\'s secrets key is kept in '
    'ZooKeeper, encrypted with this password; without one, whoever can read '
    'ZooKeeper can decrypt every secret. Set [keystore] password in zuul.conf, the '
    'same on every scheduler (keys stored without one are encrypted with it at '
    'start; see "Upgrading" in the documentation).')


def require_password(password) -> None:
    """KeyStoreError (MISSING_PASSWORD) unless a password is set."""
    if not password:
        raise KeyStoreError(MISSING_PASSWORD)


def _is_plain_pem(pem: str) -> bool:
    return 'ENCRYPTED' not in pem


def _stored_keys(keys: list, where: str, connection: str, project: str) -> list[StoredKey]:
    out = []
    for k in keys:
        if not isinstance(k, dict) or not isinstance(k.get('private_key'), str) or \
                not isinstance(k.get('created', 0), (int, float)) or \
                not isinstance(k.get('version', 0), int):
            raise KeyStoreError(f'{where}: {_name(connection, project)}: each key needs '
                                '"private_key" (PEM), "created" and "version"')
        out.append(StoredKey(k['private_key'], float(k.get('created', 0)),
                             k.get('version', 0)))
    return out


def load_private_key(pem: str | bytes, password: bytes | None, what: str):
    """The private key of a PEM, or a KeyPasswordError saying why not."""
    data = pem.encode() if isinstance(pem, str) else pem
    try:
        return encryption.deserialize_private_key(data, password)
    except TypeError:
        # cryptography: TypeError when a password is given for a plain key,
        # or none for an encrypted one.
        if password:
            why = 'it is not encrypted, but [keystore] password is set'
        else:
            why = 'it is encrypted, and [keystore] password is not set'
    except ValueError:
        why = 'wrong [keystore] password, or the key is corrupted'
    raise KeyPasswordError(f'the secrets key of {what} cannot be read: {why}')


def _password(password: str | bytes | None) -> bytes | None:
    if not password:
        return None
    return password.encode() if isinstance(password, str) else password


def _retry() -> KazooRetry:
    # A few quick tries over a passing connection loss; longer outages
    # surface to the caller.
    return KazooRetry(max_tries=5, delay=0.1, backoff=2, max_delay=2, ignore_expire=False)


# -- the store ------------------------------------------------------------------


class ProjectKeyCache:
    """Each project's key read (or created) once however many threads ask
    at once: ``load(connection, project)`` gives ``(private, stored)``,
    then ``watch(key, stored)`` drops the entry (``pop``) when ZooKeeper's
    copy changes."""

    def __init__(self, load, watch):
        self._load = load
        self._watch = watch
        self._lock = threading.Lock()
        self._project_locks: dict[tuple[str, str], threading.Lock] = {}
        self._entries: dict[tuple[str, str], object] = {}

    def get(self, connection: str, project: str):
        key = (connection, project)
        private = self._entries.get(key)
        if private is not None:
            return private
        with self._lock:
            project_lock = self._project_locks.setdefault(key, threading.Lock())
        with project_lock:
            private = self._entries.get(key)
            if private is None:
                private, stored = self._load(connection, project)
                self._entries[key] = private
                self._watch(key, stored)
            return private

    def pop(self, key: tuple[str, str], default=None):
        return self._entries.pop(key, default)


class ZooKeeperKeyStore:
    """``zuul.lib.keystore.KeyStore``'s interface over ZooKeeper.

    ``client`` is a started KazooClient; ``password`` the ``[keystore]
    password``; ``state_dir`` the ``[scheduler] state_dir`` whose
    ``keys/`` earlier releases used (keys found there are imported on
    first need). Keys are cached in memory; a cached key is dropped when
    its znode changes or goes (``zuul-admin import-keys --force`` or
    ``delete-keys``), so the next use reads the new one.
    """

    def __init__(self, client, password: str | bytes | None = None,
                 state_dir: str | None = None, key_bits: int = encryption.KEY_BITS):
        self.client = client
        self.password = _password(password)
        self.state_dir = state_dir
        self.key_bits = key_bits
        self._cache = ProjectKeyCache(self._load_or_create, self._watch)

    def get_project_key(self, connection: str, project: str):
        """The project's private key, created (once, by whichever scheduler
        gets there first) on first use."""
        return self._cache.get(connection, project)

    def get_public_key_pem(self, connection: str, project: str) -> str:
        private = self.get_project_key(connection, project)
        return encryption.serialize_public_key(private.public_key()).decode()

    def decrypt(self, connection: str, project: str, chunks) -> str:
        private = self.get_project_key(connection, project)
        return encryption.decrypt_chunks(chunks, private).decode('utf-8')

    def _read(self, path: str) -> tuple[ProjectKeys, bytes] | None:
        try:
            raw, _ = _retry()(self.client.get, path)
        except NoNodeError:
            return None
        return ProjectKeys.from_json(raw, f'ZooKeeper {path}'), raw

    def _load_or_create(self, connection: str, project: str):
        path, what = key_path(connection, project), _name(connection, project)
        found = self._read(path)
        if found is None:
            record = self._new_record(connection, project)
            body = record.to_json()
            try:
                _retry()(self.client.create, path, body, makepath=True)
                log.info('Stored the secrets key of %s in ZooKeeper', what)
                found = record, body
            except NodeExistsError:
                # Another scheduler was first (or our create went through
                # before a connection loss): use what is there.
                found = self._read(path)
                if found is None:
                    raise KeyStoreError(f'the key of {what} vanished while being created; '
                                        'try again') from None
        record, body = found
        if self.password and any(_is_plain_pem(k.private_key)
                                 for k in record.keys + record.ssh_keys):
            record, body = self._encrypt_stored(path, record, what)
        return load_private_key(record.current.private_key, self.password, what), body

    def _encrypt_stored(self, path: str, record: ProjectKeys, what: str):
        """A record an installation without ``[keystore] password`` wrote:
        its keys encrypted with the password now set, written back unless
        another scheduler changed the record meanwhile (then re-read)."""
        def encrypted(stored_keys):
            out = []
            for stored in stored_keys:
                pem = stored.private_key
                if _is_plain_pem(pem):
                    private = load_private_key(pem, None, what)
                    pem = encryption.serialize_private_key(private, self.password).decode()
                out.append(StoredKey(pem, stored.created, stored.version))
            return out
        # The project's SSH keys (zuul/zk/ssh_keys.py) share the record.
        updated = ProjectKeys(record.connection, record.project, encrypted(record.keys),
                              encrypted(record.ssh_keys))
        raw, stat = _retry()(self.client.get, path)
        if ProjectKeys.from_json(raw, f'ZooKeeper {path}').to_dict() != record.to_dict():
            return self._read(path)
        body = updated.to_json()
        try:
            _retry()(self.client.set, path, body, version=stat.version)
        except BadVersionError:
            return self._read(path)
        log.info('Encrypted the stored secrets key of %s with [keystore] password', what)
        return updated, body

    def _new_record(self, connection: str, project: str) -> ProjectKeys:
        private = self._legacy_key(connection, project)
        if private is None:
            log.info('Generating a %d-bit secrets key for %s', self.key_bits,
                     _name(connection, project))
            private, _ = encryption.generate_rsa_keypair(self.key_bits)
        pem = encryption.serialize_private_key(private, self.password).decode()
        return ProjectKeys(connection, project, [StoredKey(pem, time.time())])

    def _legacy_key(self, connection: str, project: str):
        """The key an earlier release kept under ``state_dir``, if any."""
        if not self.state_dir:
            return None
        from zuul.lib.keystore import KeyStore
        path = KeyStore(self.state_dir).path(connection, project)
        if not os.path.exists(path):
            return None
        with open(path, 'rb') as f:
            data = f.read()
        private = load_private_key(data, self.password, f'{_name(connection, project)} '
                                   f'in {path}')
        log.info('Copying the secrets key of %s from %s into ZooKeeper',
                 _name(connection, project), path)
        return private

    def migrate_state_dir(self) -> int:
        """Copy every key file of ``state_dir/keys`` that ZooKeeper lacks
        into ZooKeeper (at scheduler start, so that keys of projects not
        used yet are not left behind on one host); the number copied. A
        project that already has a key in ZooKeeper keeps it."""
        from zuul.lib.keystore import KeyStore
        root = KeyStore(self.state_dir).root if self.state_dir else None
        if not root or not os.path.isdir(root):
            return 0
        copied = 0
        for dirpath, _, files in os.walk(root):
            for name in sorted(files):
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                connection, _, project = rel.partition(os.sep)
                if not name.endswith('.pem') or not project:
                    continue
                project = project[:-len('.pem')].replace(os.sep, '/')
                copied += self._migrate_one(connection, project)
        return copied

    def _migrate_one(self, connection: str, project: str) -> int:
        if _retry()(self.client.exists, key_path(connection, project)):
            return 0
        self.get_project_key(connection, project)
        return 1

    def _watch(self, key: tuple[str, str], body: bytes) -> None:
        def changed(data, stat):
            if data == body:
                return True
            self._cache.pop(key, None)
            return False   # stop watching; the next use reads and watches again
        self.client.DataWatch(key_path(*key), changed)


# -- export, import, delete (zuul-admin) -----------------------------------------


def read_all(client) -> list[ProjectKeys]:
    """Every stored record, in connection and project order."""
    out = []
    try:
        connections = sorted(client.get_children(KEY_ROOT))
    except NoNodeError:
        return out
    for conn in connections:
        try:
            projects = sorted(client.get_children(f'{KEY_ROOT}/{conn}'))
        except NoNodeError:
            continue
        for proj in projects:
            path = f'{KEY_ROOT}/{conn}/{proj}'
            try:
                raw, _ = client.get(path)
            except NoNodeError:
                continue
            out.append(ProjectKeys.from_json(raw, f'ZooKeeper {path}'))
    return out


def export_keys(client, path: str) -> int:
    """Write every record to ``path`` (JSON, mode 0600, replaced
    atomically); the number of projects."""
    records = read_all(client)
    doc = {'schema_version': EXPORT_SCHEMA_VERSION, 'exported': time.time(),
           'keys': [r.to_dict() for r in records]}
    tmp = f'{path}.tmp{os.getpid()}'
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, 'w', encoding='utf-8') as f:
            json.dump(doc, f, indent=2, sort_keys=True)
            f.write('\n')
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return len(records)


def read_export(path: str) -> list[ProjectKeys]:
    """The records of an export file (OSError when it cannot be read,
    KeyStoreError when it is not an export)."""
    with open(path, 'rb') as f:
        raw = f.read()
    try:
        doc = json.loads(raw.decode('utf-8'))
    except (UnicodeDecodeError, ValueError) as e:
        raise KeyStoreError(f'{path}: not a key export (invalid JSON: {e})') from None
    if not isinstance(doc, dict) or not isinstance(doc.get('keys'), list):
        raise KeyStoreError(f'{path}: not a key export (no "keys" list)')
    if doc.get('schema_version') != EXPORT_SCHEMA_VERSION:
        raise KeyStoreError(f'{path}: key export schema version '
                            f'{doc.get("schema_version")!r}; this release reads version '
                            f'{EXPORT_SCHEMA_VERSION}')
    records = [ProjectKeys.from_dict(r, f'{path}: entry {i + 1}')
               for i, r in enumerate(doc['keys'])]
    seen = set()
    for r in records:
        if (r.connection, r.project) in seen:
            raise KeyStoreError(f'{path}: {_name(r.connection, r.project)} appears twice')
        seen.add((r.connection, r.project))
    return records


@dataclass
class ImportResult:
    imported: list[str] = field(default_factory=list)    # new in ZooKeeper
    replaced: list[str] = field(default_factory=list)    # different key overwritten
    unchanged: list[str] = field(default_factory=list)   # the same key was there


def _public_pem(record: ProjectKeys, password: bytes | None) -> bytes:
    private = load_private_key(record.current.private_key, password,
                               _name(record.connection, record.project))
    return encryption.serialize_public_key(private.public_key())


def _ssh_public(record: ProjectKeys, password: bytes | None) -> bytes | None:
    if not record.ssh_keys:
        return None
    private = load_private_key(record.ssh_keys[-1].private_key, password,
                               f'{_name(record.connection, record.project)} (its SSH key)')
    return encryption.serialize_public_key(private.public_key())


def _differs(stored: ProjectKeys, wanted: ProjectKeys, password: bytes | None) -> bool:
    """A different secrets key, or a different SSH key where both have
    one (an export without the SSH key leaves the stored one alone)."""
    if _public_pem(stored, password) != _public_pem(wanted, password):
        return True
    ours, theirs = _ssh_public(stored, password), _ssh_public(wanted, password)
    return ours is not None and theirs is not None and ours != theirs


def import_keys(client, records: list[ProjectKeys], password: str | bytes | None,
                force: bool = False) -> ImportResult:
    """Write ``records`` into ZooKeeper. Every key must open with
    ``password``. A project that already has a different key is a
    KeyConflictError naming every such project, and nothing is written,
    unless ``force``; the same key already stored is left as it is."""
    password = _password(password)
    for r in records:
        _public_pem(r, password)
        _ssh_public(r, password)
    wanted = {(r.connection, r.project): r for r in records}
    existing = {}
    for (connection, project) in wanted:
        path = key_path(connection, project)
        try:
            raw, _ = client.get(path)
        except NoNodeError:
            continue
        existing[(connection, project)] = ProjectKeys.from_json(raw, f'ZooKeeper {path}')
    conflicts = [_name(*k) for k, stored in existing.items()
                 if _differs(stored, wanted[k], password)]
    if conflicts and not force:
        raise KeyConflictError('a different key is already stored for '
                               + ', '.join(conflicts)
                               + ' (nothing imported; --force replaces them)')
    result = ImportResult()
    for k, record in wanted.items():
        path = key_path(*k)
        if k in existing and _name(*k) not in conflicts:
            stored = existing[k]
            if record.ssh_keys and not stored.ssh_keys:
                stored.ssh_keys = record.ssh_keys     # the export adds the SSH key
                client.set(path, stored.to_json())
            result.unchanged.append(_name(*k))
        elif k in existing:
            client.set(path, record.to_json())
            result.replaced.append(_name(*k))
        else:
            try:
                client.create(path, record.to_json(), makepath=True)
            except NodeExistsError:
                raise KeyConflictError(f'a key for {_name(*k)} was created during the '
                                       'import; run it again') from None
            result.imported.append(_name(*k))
    return result


def delete_keys(client, connection: str, project: str) -> bool:
    """Delete a project's keys (and its connection's znode once empty).
    False when there were none."""
    path = key_path(connection, project)
    try:
        client.delete(path)
    except NoNodeError:
        return False
    try:
        client.delete(path.rsplit('/', 1)[0])
    except (NoNodeError, NotEmptyError):
        pass
    return True
