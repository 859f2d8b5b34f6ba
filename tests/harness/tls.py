"""Certificates for TLS tests: a CA and certificates it signs, written
as PEM files (zuul.lib.tlsgen, which the quickstart uses too)."""

from __future__ import annotations

from zuul.lib.tlsgen import CertFiles, LocalCA

__all__ = ['CertFiles', 'TestCA']


class TestCA(LocalCA):
    """A certificate authority in ``directory``; ``issue(name)`` writes
    ``name.pem``/``name.key`` signed by it (valid for localhost and
    127.0.0.1, one day)."""

    __test__ = False   # not a pytest class

    def __init__(self, directory: str, name: str = 'test-ca'):
        super().__init__(directory, name)
