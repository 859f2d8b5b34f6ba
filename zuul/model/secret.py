"""Secrets: data encrypted with a project's public key (seed 000)."""

from __future__ import annotations

from dataclasses import dataclass, field

from zuul.lib import yamlutil
from zuul.model.base import ConfigObject


@dataclass(eq=False)
class Secret(ConfigObject):
    """``data`` is the stanza's mapping with EncryptedPKCS1OAEP values left
    encrypted: decryption needs the project's private key and happens only
    when a job using the secret is about to run."""

    data: dict = field(default_factory=dict)

    def content(self):
        return yamlutil.dump(dict(self.data))

    def encrypted_values(self):
        """Every EncryptedPKCS1OAEP in ``data`` (at any depth)."""
        stack = [self.data]
        while stack:
            value = stack.pop()
            if isinstance(value, yamlutil.EncryptedPKCS1OAEP):
                yield value
            elif isinstance(value, dict):
                stack.extend(value.values())
            elif isinstance(value, list):
                stack.extend(value)
