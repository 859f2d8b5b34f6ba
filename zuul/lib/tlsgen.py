"""A small certificate authority for one installation's own TLS.

The quickstart (and the test suite) run ZooKeeper with TLS and client
certificates: ``LocalCA`` writes a CA and certificates it signs as PEM
files (``cryptography``, no openssl command), each valid for localhost
and 127.0.0.1.  Production sites bring certificates of their own.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class CertFiles:
    """PEM files: the CA's certificate, this certificate, its key."""

    ca: str
    cert: str
    key: str


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(key, path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, 'wb') as f:
        f.write(key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    os.chmod(path, 0o600)


def _write_cert(cert, path: str) -> None:
    with open(path, 'wb') as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))


class LocalCA:
    """A certificate authority in ``directory``; ``issue(name)`` writes
    ``name.pem``/``name.key`` signed by it, valid ``days`` days."""

    def __init__(self, directory: str, name: str = 'local-ca', days: int = 1):
        self.directory = directory
        self.days = days
        os.makedirs(directory, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (x509.CertificateBuilder()
                     .subject_name(_name(name)).issuer_name(_name(name))
                     .public_key(self.key.public_key())
                     .serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(minutes=5))
                     .not_valid_after(now + datetime.timedelta(days=days))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None),
                                    critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.ca_path = os.path.join(directory, f'{name}.pem')
        _write_cert(self.cert, self.ca_path)

    def issue(self, name: str) -> CertFiles:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder()
                .subject_name(_name(name)).issuer_name(self.cert.subject)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=self.days))
                .add_extension(x509.SubjectAlternativeName([
                    x509.DNSName('localhost'),
                    x509.IPAddress(ipaddress.ip_address('127.0.0.1'))]), critical=False)
                .sign(self.key, hashes.SHA256()))
        cert_path = os.path.join(self.directory, f'{name}.pem')
        key_path = os.path.join(self.directory, f'{name}.key')
        _write_cert(cert, cert_path)
        _write_key(key, key_path)
        return CertFiles(self.ca_path, cert_path, key_path)

    def zookeeper_keystore(self, name: str = 'zookeeper') -> tuple[str, str]:
        """A server certificate for ZooKeeper: (PEM key store holding its
        key and certificate, PEM trust store of this CA), as
        ``LocalZooKeeper(tls=...)`` and ``ssl.keyStore.location`` take them."""
        files = self.issue(name)
        keystore = os.path.join(self.directory, f'{name}-keystore.pem')
        fd = os.open(keystore, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, 'w') as f, open(files.key) as k, open(files.cert) as c:
            f.write(k.read() + c.read())
        return keystore, files.ca
