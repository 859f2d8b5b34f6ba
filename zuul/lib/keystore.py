"""Per-project secret keys, generated on first need and kept under the
state dir at ``keys/<connection>/<project>.pem`` (0600; directories 0700),
optionally encrypted with the ``[keystore] password``."""

from __future__ import annotations

import os
import threading

from zuul.lib import encryption


class KeyStore:
    def __init__(self, state_dir: str, password: str | None = None,
                 key_bits: int = encryption.KEY_BITS):
        self.root = os.path.join(state_dir, 'keys')
        self.password = password.encode() if password else None
        self.key_bits = key_bits
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str], object] = {}

    def path(self, connection: str, project: str) -> str:
        if '..' in project.split('/') or project.startswith('/'):
            raise ValueError(f'invalid project name "{project}"')
        return os.path.join(self.root, connection, project + '.pem')

    def get_project_key(self, connection: str, project: str):
        """The project's private key, created (once) on first use."""
        key = (connection, project)
        with self._lock:
            if key in self._cache:
                return self._cache[key]
            path = self.path(connection, project)
            if os.path.exists(path):
                with open(path, 'rb') as f:
                    private = encryption.deserialize_private_key(f.read(), self.password)
            else:
                private, _ = encryption.generate_rsa_keypair(self.key_bits)
                self._write(path, encryption.serialize_private_key(private, self.password))
            self._cache[key] = private
            return private

    def _write(self, path: str, data: bytes) -> None:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        d = os.path.dirname(path)
        while d.startswith(self.root) and len(d) >= len(self.root):
            os.chmod(d, 0o700)
            d = os.path.dirname(d)
        tmp = path + '.tmp'
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, 'wb') as f:
            f.write(data)
        os.replace(tmp, path)

    def get_public_key_pem(self, connection: str, project: str) -> str:
        private = self.get_project_key(connection, project)
        return encryption.serialize_public_key(private.public_key()).decode()

    def decrypt(self, connection: str, project: str, chunks) -> str:
        private = self.get_project_key(connection, project)
        return encryption.decrypt_chunks(chunks, private).decode('utf-8')
