"""RSA keys and PKCS#1 OAEP encryption for secrets (seed 000).

Each project has a 4096-bit RSA key pair. Values are encrypted with the
public key using OAEP (MGF1/SHA-1, as released Zuul and its ``zuul
encrypt`` use), in chunks no longer than the key allows; each chunk is
base64-encoded, and decrypting a list of chunks joins the plaintexts.
"""

from __future__ import annotations

import base64

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

KEY_BITS = 4096


class DecryptionError(ValueError):
    """A ciphertext that this key cannot decrypt (wrong project's key,
    corrupted or truncated data)."""


def generate_rsa_keypair(bits: int = KEY_BITS):
    private = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    return private, private.public_key()


def _oaep():
    return padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA1()), algorithm=hashes.SHA1(),
                        label=None)


def max_chunk_size(public_key) -> int:
    """The largest plaintext one OAEP(SHA-1) block can hold."""
    return public_key.key_size // 8 - 2 * hashes.SHA1.digest_size - 2


def encrypt_pkcs1_oaep(plaintext: bytes, public_key) -> bytes:
    return public_key.encrypt(plaintext, _oaep())


def decrypt_pkcs1_oaep(ciphertext: bytes, private_key) -> bytes:
    try:
        return private_key.decrypt(ciphertext, _oaep())
    except ValueError:
        raise DecryptionError('decryption failed: the value was not encrypted with '
                              "this project's public key, or it is corrupted") from None


def encrypt_chunks(plaintext: bytes, public_key) -> list[str]:
    """Encrypt in as many OAEP blocks as needed; base64 chunks."""
    size = max_chunk_size(public_key)
    chunks = [plaintext[i:i + size] for i in range(0, len(plaintext), size)] or [b'']
    return [base64.b64encode(encrypt_pkcs1_oaep(c, public_key)).decode() for c in chunks]


def decrypt_chunks(chunks, private_key) -> bytes:
    """Decrypt a list of base64 chunks (or one) and join the plaintexts."""
    if isinstance(chunks, str):
        chunks = [chunks]
    out = []
    for chunk in chunks:
        try:
            raw = base64.b64decode(''.join(chunk.split()), validate=True)
        except (ValueError, TypeError):
            raise DecryptionError('a ciphertext chunk is not valid base64') from None
        out.append(decrypt_pkcs1_oaep(raw, private_key))
    return b''.join(out)


def serialize_private_key(private_key, password: bytes | None = None) -> bytes:
    algorithm = serialization.BestAvailableEncryption(password) if password else \
        serialization.NoEncryption()
    return private_key.private_bytes(serialization.Encoding.PEM,
                                     serialization.PrivateFormat.PKCS8, algorithm)


def serialize_public_key(public_key) -> bytes:
    return public_key.public_bytes(serialization.Encoding.PEM,
                                   serialization.PublicFormat.SubjectPublicKeyInfo)


def deserialize_private_key(data: bytes, password: bytes | None = None):
    return serialization.load_pem_private_key(data, password=password)


def deserialize_public_key(data: bytes):
    return serialization.load_pem_public_key(data)
