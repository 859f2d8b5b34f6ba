"""Secrets keys at rest: ZooKeeper holds every project's secrets key, so
the scheduler refuses to run without ``[keystore] password``, keys stored
without one are encrypted with it at start, and the sample configuration
reaches ZooKeeper over TLS (tests/unit/test_zuul_conf.py parses it; the
quickstart's own configuration is checked in tests/functional/test_quickstart.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from zuul.configloader.zuulconf import load_zuul_conf
from zuul.lib import encryption
from zuul.scheduler.service import SchedulerService
from zuul.zk.keys import KeyStoreError, ZooKeeperKeyStore, key_path

BITS = 2048


def _conf(tmp_path, password: str | None) -> str:
    path = tmp_path / 'zuul.conf'
    text = f"""
        [zookeeper]
        hosts = 127.0.0.1:1
        [scheduler]
        tenant_config = {tmp_path}/main.yaml
        state_dir = {tmp_path}/state
        pidfile = {tmp_path}/pid
        """
    if password is not None:
        text += f'[keystore]\npassword = {password}\n'
    path.write_text(textwrap.dedent(text))
    (tmp_path / 'main.yaml').write_text('[]\n')
    return str(path)


@pytest.mark.parametrize('password', [None, ''], ids=['missing', 'empty'])
def test_scheduler_refuses_to_start_without_a_keystore_password(tmp_path, password):
    proc = subprocess.run([sys.executable, '-m', 'zuul.cmd.scheduler', '-c',
                           _conf(tmp_path, password), '-d'],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert '[keystore] password is not set' in proc.stderr
    assert 'whoever can read ZooKeeper can decrypt every secret' in proc.stderr
    # Nothing started: no pid file, no state written.
    assert not (tmp_path / 'pid').exists() and not (tmp_path / 'state').exists()


def test_scheduler_service_refuses_too(tmp_path):
    """Tests, benchmarks and the quickstart start the service directly."""
    service = SchedulerService(load_zuul_conf(_conf(tmp_path, None)))
    with pytest.raises(KeyStoreError, match=r'\[keystore\] password is not set'):
        service.start()
    assert service.gear_server is None


def test_keys_stored_without_a_password_are_encrypted_with_it(zk_client):
    plain = ZooKeeperKeyStore(zk_client, None, key_bits=BITS)
    public = encryption.deserialize_public_key(
        plain.get_public_key_pem('gerrit', 'org/app').encode())
    secret = encryption.encrypt_chunks(b'hunter2', public)
    before = json.loads(zk_client.get(key_path('gerrit', 'org/app'))[0])
    assert 'ENCRYPTED' not in before['keys'][0]['private_key']
    upgraded = ZooKeeperKeyStore(zk_client, 'new-password', key_bits=BITS)
    assert upgraded.decrypt('gerrit', 'org/app', secret) == 'hunter2'
    after = json.loads(zk_client.get(key_path('gerrit', 'org/app'))[0])
    assert 'ENCRYPTED' in after['keys'][0]['private_key']
    assert after['keys'][0]['created'] == before['keys'][0]['created']
    # The same key: what was encrypted before still decrypts, by any
    # scheduler that has the password, and not without it.
    again = ZooKeeperKeyStore(zk_client, 'new-password', key_bits=BITS)
    assert again.decrypt('gerrit', 'org/app', secret) == 'hunter2'
    with pytest.raises(KeyStoreError, match='it is encrypted, and'):
        ZooKeeperKeyStore(zk_client, None, key_bits=BITS).decrypt('gerrit', 'org/app', secret)


def test_the_upgrade_guides_settings_parse(tmp_path):
    """doc/source/operations/upgrades.rst's zuul.conf lines, as printed
    (with its certificate files present): TLS to ZooKeeper, a password."""
    from tests.harness import docs
    from zuul.lib.tlsgen import LocalCA
    (block,) = docs.code_blocks('doc/source/operations/upgrades.rst', 'ini')
    files = LocalCA(str(tmp_path / 'ssl')).issue('zk-client')
    for name, path in (('zk-client.pem', files.cert), ('zk-client.key', files.key),
                       ('zk-ca.pem', files.ca)):
        block = block.replace(f'/etc/zuul/ssl/{name}', path)
    (tmp_path / 'zuul.conf').write_text(block)
    conf = load_zuul_conf(str(tmp_path / 'zuul.conf'))
    assert conf.zookeeper.tls() == {'cert': files.cert, 'key': files.key, 'ca': files.ca}
    assert conf.zookeeper.hosts.count(':2281') == 3
    assert conf.keystore.password == 'replace-with-a-long-random-password'
