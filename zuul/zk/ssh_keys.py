"""Per-project SSH keys (released Zuul's "project key").

Each project has an SSH key pair besides its secrets key: kept in the
same ZooKeeper record (``ssh_keys`` of zuul/zk/keys.py's ProjectKeys,
PKCS#8 encrypted with ``[keystore] password``), so ``zuul-admin
export-keys``/``import-keys``/``delete-keys`` carry it with the secrets
key. zuul-web serves the public half at
``/api/tenant/<tenant>/project-ssh-key/<project>.pub`` (one OpenSSH
``ssh-rsa`` line); the private half is given to the ssh-agent of the
builds of the project's post-review jobs, so they can push or deploy with
it -- never to a pre-review job, never written into a job's directory
(zuul.executor.sshagent), never logged.

A key is created on first need (2048-bit RSA, as released Zuul's). Two
schedulers may race: each writes the record only if it is unchanged since
it read it (the znode's version); the loser reads the winner's key.
"""

from __future__ import annotations

import logging
import time

from cryptography.hazmat.primitives import serialization
from kazoo.exceptions import BadVersionError

from zuul.lib import encryption
from zuul.zk.keys import (
    KeyPasswordError,
    KeyStoreError,
    ProjectKeyCache,
    ProjectKeys,
    StoredKey,
    ZooKeeperKeyStore,
    _name,
    _retry,
    key_path,
    load_private_key,
)

log = logging.getLogger('zuul.zk.ssh_keys')

SSH_KEY_BITS = 2048
_WRITE_TRIES = 5


def public_key_line(private) -> str:
    """The public half as one OpenSSH line (``ssh-rsa AAAA...``)."""
    return private.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                             serialization.PublicFormat.OpenSSH).decode()


def private_key_text(private) -> str:
    """The private half in OpenSSH's format, unencrypted: what an
    ssh-agent is given (``ssh-add``)."""
    return private.private_bytes(serialization.Encoding.PEM,
                                 serialization.PrivateFormat.OpenSSH,
                                 serialization.NoEncryption()).decode()


class ProjectSshKeys:
    """The SSH keys of ``keystore``'s projects (same ZooKeeper client and
    password). Keys are cached; a cached key is dropped when its record
    changes (``import-keys --force``, ``delete-keys``)."""

    def __init__(self, keystore: ZooKeeperKeyStore, key_bits: int = SSH_KEY_BITS):
        self.keystore = keystore
        self.key_bits = key_bits
        self._cache = ProjectKeyCache(self._load_or_create, self._watch)

    def get(self, connection: str, project: str):
        return self._cache.get(connection, project)

    def public_key(self, connection: str, project: str) -> str:
        return public_key_line(self.get(connection, project))

    def private_key(self, connection: str, project: str) -> str:
        return private_key_text(self.get(connection, project))

    # -- ZooKeeper --------------------------------------------------------

    def _load_or_create(self, connection: str, project: str):
        # The record (with the secrets key) exists first: the SSH key is
        # added to it.
        self.keystore.get_project_key(connection, project)
        client, path = self.keystore.client, key_path(connection, project)
        for _ in range(_WRITE_TRIES):
            raw, stat = _retry()(client.get, path)
            record = ProjectKeys.from_json(raw, f'ZooKeeper {path}')
            if record.ssh_keys:
                pem = record.ssh_keys[-1].private_key
                return self._open(pem, connection, project), pem
            private, pem = self._new_key(connection, project)
            record.ssh_keys = [StoredKey(pem, time.time())]
            try:
                _retry()(client.set, path, record.to_json(), version=stat.version)
            except BadVersionError:
                continue    # another scheduler wrote meanwhile: read again
            log.info('Stored the SSH key of %s in ZooKeeper', _name(connection, project))
            return private, pem
        raise KeyStoreError(f'the key record of {_name(connection, project)} kept changing '
                            'while its SSH key was being added; try again')

    def _new_key(self, connection: str, project: str):
        log.info('Generating a %d-bit SSH key for %s', self.key_bits,
                 _name(connection, project))
        private, _ = encryption.generate_rsa_keypair(self.key_bits)
        pem = encryption.serialize_private_key(private, self.keystore.password).decode()
        return private, pem

    def _open(self, pem: str, connection: str, project: str):
        try:
            return load_private_key(pem, self.keystore.password, _name(connection, project))
        except KeyPasswordError as e:
            raise KeyPasswordError(str(e).replace('the secrets key of', 'the SSH key of')) \
                from None

    def _watch(self, key: tuple[str, str], pem: str) -> None:
        def changed(data, stat):
            try:
                record = ProjectKeys.from_json(data, 'ZooKeeper') if data else None
            except KeyStoreError:
                record = None
            if record is not None and record.ssh_keys and \
                    record.ssh_keys[-1].private_key == pem:
                return True
            self._cache.pop(key, None)
            return False   # stop watching; the next use reads and watches again
        self.keystore.client.DataWatch(key_path(*key), changed)
