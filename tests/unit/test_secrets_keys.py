"""Secret keys: chunked RSA-OAEP round trip, per-project isolation,
persistence and permissions."""

import os
import stat
import threading

import pytest

from zuul.lib import encryption
from zuul.lib.keystore import KeyStore
from zuul.lib.yamlutil import load

# 2048-bit keys keep the tests fast; production uses 4096.
BITS = 2048


@pytest.fixture
def store(tmp_path):
    return KeyStore(str(tmp_path / 'state'), key_bits=BITS)


def test_long_value_round_trips_in_chunks(store):
    value = 'x' * 1000 + '\u00e9'
    public = store.get_project_key('gerrit', 'org/a').public_key()
    chunks = encryption.encrypt_chunks(value.encode(), public)
    assert len(chunks) == 5   # 214 bytes per OAEP(SHA-1) block with 2048 bits
    assert store.decrypt('gerrit', 'org/a', chunks) == value


def test_yaml_encrypted_tag_decrypts(store):
    public = store.get_project_key('gerrit', 'org/a').public_key()
    chunks = encryption.encrypt_chunks(b'hunter2', public)
    doc = load('- secret:\n    name: s\n    data:\n      password: !encrypted/pkcs1-oaep\n'
               + ''.join(f'        - {c}\n' for c in chunks), 'zuul.yaml')
    enc = doc[0]['secret']['data']['password']
    assert store.decrypt('gerrit', 'org/a', enc.ciphertext) == 'hunter2'


def test_other_projects_key_cannot_decrypt(store):
    public = store.get_project_key('gerrit', 'org/a').public_key()
    chunks = encryption.encrypt_chunks(b'secret', public)
    with pytest.raises(encryption.DecryptionError, match="this project's public key"):
        store.decrypt('gerrit', 'org/b', chunks)
    with pytest.raises(encryption.DecryptionError, match='base64'):
        store.decrypt('gerrit', 'org/a', ['not base64!!'])


def test_key_persisted_with_private_permissions(tmp_path):
    first = KeyStore(str(tmp_path / 's'), key_bits=BITS)
    pem = first.get_public_key_pem('gerrit', 'org/a')
    path = first.path('gerrit', 'org/a')
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    again = KeyStore(str(tmp_path / 's'), key_bits=BITS)
    assert again.get_public_key_pem('gerrit', 'org/a') == pem


def test_password_protected_keys(tmp_path):
    store = KeyStore(str(tmp_path / 's'), password='pw', key_bits=BITS)
    pem = store.get_public_key_pem('gerrit', 'org/a')
    with open(store.path('gerrit', 'org/a'), 'rb') as f:
        assert b'ENCRYPTED' in f.read()
    assert KeyStore(str(tmp_path / 's'), password='pw', key_bits=BITS).get_public_key_pem(
        'gerrit', 'org/a') == pem
    with pytest.raises((TypeError, ValueError)):
        KeyStore(str(tmp_path / 's'), password='wrong', key_bits=BITS).get_project_key(
            'gerrit', 'org/a')


def test_concurrent_first_use_makes_one_key(store):
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        store.get_public_key_pem('gerrit', 'org/c'))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1


def test_project_names_cannot_escape(store):
    with pytest.raises(ValueError):
        store.path('gerrit', '../../etc/passwd')
