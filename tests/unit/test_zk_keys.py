"""Project secret keys in ZooKeeper (zuul/zk/keys.py) and ``zuul-admin
export-keys``/``import-keys``/``delete-keys``, against a real ZooKeeper:
every scheduler sees the same key, creation is race-free, keys are
encrypted with ``[keystore] password``, file keys of earlier releases are
carried over, and a backup restores the exact key."""

from __future__ import annotations

import json
import os
import shlex
import socket
import stat
import threading
import time

import pytest

from tests.harness import docs
from zuul.cmd import admin
from zuul.lib import encryption
from zuul.lib.keystore import KeyStore
from zuul.zk import keys
from zuul.zk.keys import KeyPasswordError, ZooKeeperKeyStore, key_path

# 2048-bit keys keep the tests fast; production uses 4096.
BITS = 2048
PAGE = 'doc/source/operations/upgrades.rst'


def store(client, password=None, state_dir=None) -> ZooKeeperKeyStore:
    return ZooKeeperKeyStore(client, password, state_dir=state_dir, key_bits=BITS)


def encrypt_for(keystore, connection, project, text: str) -> list[str]:
    public = encryption.deserialize_public_key(
        keystore.get_public_key_pem(connection, project).encode())
    return encryption.encrypt_chunks(text.encode(), public)


def stored(client, connection, project) -> dict:
    return json.loads(client.get(key_path(connection, project))[0])


def write_conf(tmp_path, hosts, password='s3cret', timeout=10, name='zuul.conf') -> str:
    path = tmp_path / name
    lines = ['[zookeeper]', f'hosts={hosts}', f'session_timeout={timeout}',
             '[scheduler]', f'state_dir={tmp_path / "state"}']
    if password:
        lines += ['[keystore]', f'password={password}']
    path.write_text('\n'.join(lines) + '\n')
    return str(path)


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = admin.main(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


# -- the store ----------------------------------------------------------------------


def test_two_schedulers_see_the_same_key(zk_chroot):
    first, second = store(zk_chroot.client()), store(zk_chroot.client())
    chunks = encrypt_for(first, 'gerrit', 'org/app', 'hunter2')
    assert second.get_public_key_pem('gerrit', 'org/app') == \
        first.get_public_key_pem('gerrit', 'org/app')
    assert second.decrypt('gerrit', 'org/app', chunks) == 'hunter2'
    record = stored(zk_chroot.client(), 'gerrit', 'org/app')
    assert record['schema_version'] == 1
    assert (record['connection'], record['project']) == ('gerrit', 'org/app')
    (key,) = record['keys']
    assert key['version'] == 0 and time.time() - key['created'] < 60
    assert 'BEGIN PRIVATE KEY' in key['private_key']   # no password: stored plain
    # one znode per project: a name with slashes is one quoted component
    assert zk_chroot.client().get_children('/keystorage/gerrit') == ['org%2Fapp']


def test_concurrent_creation_makes_one_key(zk_chroot):
    clients = [zk_chroot.client(), zk_chroot.client()]
    stores = [store(clients[i % 2]) for i in range(6)]
    barrier = threading.Barrier(len(stores))
    results, errors = [], []

    def first_use(s):
        barrier.wait()
        try:
            results.append(s.get_public_key_pem('gerrit', 'org/race'))
        except Exception as e:   # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=first_use, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert len(results) == 6 and len(set(results)) == 1
    assert len(stored(clients[0], 'gerrit', 'org/race')['keys']) == 1


def test_password_encrypts_the_stored_key(zk_chroot):
    client = zk_chroot.client()
    protected = store(client, password='s3cret')
    chunks = encrypt_for(protected, 'gerrit', 'org/app', 'hunter2')
    pem = stored(client, 'gerrit', 'org/app')['keys'][0]['private_key']
    assert 'BEGIN ENCRYPTED PRIVATE KEY' in pem
    assert store(zk_chroot.client(), 's3cret').decrypt(
        'gerrit', 'org/app', chunks) == 'hunter2'
    with pytest.raises(KeyPasswordError, match=r'project org/app \(connection gerrit\).*'
                       r'wrong \[keystore\] password'):
        store(zk_chroot.client(), 'wrong').get_project_key('gerrit', 'org/app')
    with pytest.raises(KeyPasswordError, match='org/app.*password is not set'):
        store(zk_chroot.client()).get_project_key('gerrit', 'org/app')


def test_key_file_of_an_earlier_release_is_carried_over(zk_chroot, tmp_path):
    state = str(tmp_path / 'state')
    legacy = KeyStore(state, 's3cret', key_bits=BITS)
    chunks = encryption.encrypt_chunks(
        b'hunter2', legacy.get_project_key('gerrit', 'org/old').public_key())
    old_pem = legacy.get_public_key_pem('gerrit', 'org/old')
    client = zk_chroot.client()
    upgraded = store(client, 's3cret', state_dir=state)
    assert upgraded.get_public_key_pem('gerrit', 'org/old') == old_pem
    assert upgraded.decrypt('gerrit', 'org/old', chunks) == 'hunter2'
    # now in ZooKeeper: a scheduler on another host (no state dir) has it
    assert store(zk_chroot.client(), 's3cret').decrypt('gerrit', 'org/old', chunks) == \
        'hunter2'
    assert 'ENCRYPTED' in stored(client, 'gerrit', 'org/old')['keys'][0]['private_key']


def test_every_key_file_is_copied_at_start(zk_chroot, tmp_path):
    state = str(tmp_path / 'state')
    legacy = KeyStore(state, key_bits=BITS)
    pems = {p: legacy.get_public_key_pem('gerrit', p) for p in ('org/a', 'org/b/c')}
    legacy.get_public_key_pem('github', 'org/a')
    client = zk_chroot.client()
    assert store(client, state_dir=state).migrate_state_dir() == 3
    assert store(client, state_dir=state).migrate_state_dir() == 0   # once
    other_host = store(zk_chroot.client())
    assert {p: other_host.get_public_key_pem('gerrit', p) for p in pems} == pems


def test_a_key_file_the_password_does_not_open_names_it(zk_chroot, tmp_path):
    state = str(tmp_path / 'state')
    KeyStore(state, 'old-password', key_bits=BITS).get_project_key('gerrit', 'org/old')
    with pytest.raises(KeyPasswordError, match='org/old.*keys/gerrit/org/old.pem.*wrong'):
        store(zk_chroot.client(), 'new-password', state_dir=state).get_project_key(
            'gerrit', 'org/old')
    assert not zk_chroot.client().exists(key_path('gerrit', 'org/old'))


def test_a_running_scheduler_follows_a_replaced_key(zk_chroot, tmp_path, capsys):
    conf = write_conf(tmp_path, zk_chroot.hosts, password=None)
    running = store(zk_chroot.client())
    before = running.get_public_key_pem('gerrit', 'org/app')
    # another deployment's key for the project, imported with --force
    other = zk_chroot.client()
    other_store = store(other)
    other_store.get_project_key('gerrit', 'org/elsewhere')
    record = stored(other, 'gerrit', 'org/elsewhere')
    record['project'] = 'org/app'
    export = tmp_path / 'other.json'
    export.write_text(json.dumps({'schema_version': 1, 'keys': [record]}))
    assert run(capsys, '-c', conf, 'import-keys', '--force', str(export))[0] == 0
    wanted = other_store.get_public_key_pem('gerrit', 'org/elsewhere')
    deadline = time.monotonic() + 10
    while running.get_public_key_pem('gerrit', 'org/app') == before:
        assert time.monotonic() < deadline, 'the cached key was not dropped'
        time.sleep(0.05)
    assert running.get_public_key_pem('gerrit', 'org/app') == wanted


# -- zuul-admin export-keys / import-keys / delete-keys ---------------------------------


def test_export_delete_import_restores_the_exact_key(zk_chroot, tmp_path, capsys):
    client = zk_chroot.client()
    conf = write_conf(tmp_path, zk_chroot.hosts)
    scheduler = store(client, 's3cret')
    chunks = encrypt_for(scheduler, 'gerrit', 'org/app', 'hunter2')
    pem = scheduler.get_public_key_pem('gerrit', 'org/app')
    scheduler.get_project_key('github', 'org/other')
    before = stored(client, 'gerrit', 'org/app')
    backup = str(tmp_path / 'keys.json')

    rc, out, _ = run(capsys, '-c', conf, 'export-keys', backup)
    assert (rc, out) == (0, f'exported the keys of 2 project(s) to {backup}\n')
    assert stat.S_IMODE(os.stat(backup).st_mode) == 0o600
    text = open(backup).read()
    assert 'BEGIN ENCRYPTED PRIVATE KEY' in text and 'BEGIN PRIVATE KEY' not in text

    rc, out, _ = run(capsys, '-c', conf, 'delete-keys', 'gerrit', 'org/app')
    assert (rc, out) == (0, 'deleted the keys of project org/app (connection gerrit)\n')
    assert not client.exists(key_path('gerrit', 'org/app'))
    assert not client.exists('/keystorage/gerrit')      # the empty parent goes too

    rc, out, _ = run(capsys, '-c', conf, 'import-keys', backup)
    assert (rc, out) == (0, 'imported the keys of 1 project(s), replaced 0, '
                            '1 already present\n')
    assert stored(client, 'gerrit', 'org/app') == before
    restarted = store(zk_chroot.client(), 's3cret')
    assert restarted.get_public_key_pem('gerrit', 'org/app') == pem
    assert restarted.decrypt('gerrit', 'org/app', chunks) == 'hunter2'


def test_import_refuses_a_different_key_without_force(zk_chroot, tmp_path, capsys):
    client = zk_chroot.client()
    conf = write_conf(tmp_path, zk_chroot.hosts)
    original = store(client, 's3cret')
    chunks = encrypt_for(original, 'gerrit', 'org/app', 'hunter2')
    original.get_project_key('gerrit', 'org/lib')
    backup = str(tmp_path / 'keys.json')
    assert run(capsys, '-c', conf, 'export-keys', backup)[0] == 0
    # the key is lost and a scheduler makes a new one; org/lib is lost too
    client.delete('/keystorage', recursive=True)
    store(client, 's3cret').get_project_key('gerrit', 'org/app')
    replacement = stored(client, 'gerrit', 'org/app')

    rc, out, err = run(capsys, '-c', conf, 'import-keys', backup)
    assert rc == 1 and out == ''
    assert err == ('zuul-admin import-keys: a different key is already stored for project '
                   'org/app (connection gerrit) (nothing imported; --force replaces them)\n')
    assert stored(client, 'gerrit', 'org/app') == replacement
    assert not client.exists(key_path('gerrit', 'org/lib'))

    rc, out, _ = run(capsys, '-c', conf, 'import-keys', '--force', backup)
    assert rc == 0
    assert out == ('imported the keys of 1 project(s), replaced 1, 0 already present\n'
                   'replaced the key of project org/app (connection gerrit)\n')
    assert store(zk_chroot.client(), 's3cret').decrypt('gerrit', 'org/app', chunks) == \
        'hunter2'
    # the same keys again: nothing to do, and no --force needed
    rc, out, _ = run(capsys, '-c', conf, 'import-keys', backup)
    assert (rc, out) == (0, 'imported the keys of 0 project(s), replaced 0, '
                            '2 already present\n')


def test_import_with_another_password_is_refused(zk_chroot, tmp_path, capsys):
    store(zk_chroot.client(), 's3cret').get_project_key('gerrit', 'org/app')
    backup = str(tmp_path / 'keys.json')
    assert run(capsys, '-c', write_conf(tmp_path, zk_chroot.hosts), 'export-keys',
               backup)[0] == 0
    zk_chroot.client().delete('/keystorage', recursive=True)
    conf = write_conf(tmp_path, zk_chroot.hosts, password='other', name='other.conf')
    rc, out, err = run(capsys, '-c', conf, 'import-keys', backup)
    assert rc == 1
    assert 'project org/app (connection gerrit)' in err and 'wrong [keystore] password' in err
    assert not zk_chroot.client().exists('/keystorage')


@pytest.mark.parametrize('content, rc, message', [
    (None, 2, 'missing.json: No such file or directory'),
    ('{"keys": [', 1, 'not a key export (invalid JSON'),
    ('[]', 1, 'not a key export (no "keys" list)'),
    ('{"schema_version": 7, "keys": []}', 1, 'key export schema version 7'),
    ('{"schema_version": 1, "keys": [{"schema_version": 1, "connection": "gerrit",'
     ' "project": "org/app", "keys": []}]}', 1,
     'entry 1: project org/app (connection gerrit) has no keys'),
], ids=['missing', 'malformed-json', 'not-an-export', 'newer-schema', 'no-keys'])
def test_import_of_a_bad_file(zk_chroot, tmp_path, capsys, content, rc, message):
    path = tmp_path / 'missing.json'
    if content is not None:
        path.write_text(content)
    conf = write_conf(tmp_path, zk_chroot.hosts)
    got_rc, out, err = run(capsys, '-c', conf, 'import-keys', str(path))
    assert got_rc == rc and message in err and err.startswith('zuul-admin import-keys: ')
    assert not zk_chroot.client().exists('/keystorage')


def test_export_into_a_missing_directory(zk_chroot, tmp_path, capsys):
    conf = write_conf(tmp_path, zk_chroot.hosts)
    rc, _, err = run(capsys, '-c', conf, 'export-keys', str(tmp_path / 'no' / 'k.json'))
    assert rc == 2 and 'No such file or directory' in err


def test_delete_of_a_project_without_keys(zk_chroot, tmp_path, capsys):
    conf = write_conf(tmp_path, zk_chroot.hosts)
    rc, out, err = run(capsys, '-c', conf, 'delete-keys', 'gerrit', 'org/typo')
    assert (rc, out) == (1, '')
    assert err == ('zuul-admin delete-keys: no keys stored for project org/typo '
                   '(connection gerrit)\n')


def test_delete_warns_of_a_key_file_left_in_the_state_dir(zk_chroot, tmp_path, capsys):
    conf = write_conf(tmp_path, zk_chroot.hosts)
    state = str(tmp_path / 'state')
    KeyStore(state, 's3cret', key_bits=BITS).get_project_key('gerrit', 'org/app')
    store(zk_chroot.client(), 's3cret', state_dir=state).get_project_key('gerrit', 'org/app')
    rc, out, _ = run(capsys, '-c', conf, 'delete-keys', 'gerrit', 'org/app')
    assert rc == 0
    assert f'warning: {state}/keys/gerrit/org/app.pem' in out and 'remove it too' in out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def test_unreachable_zookeeper(tmp_path, capsys):
    hosts = f'127.0.0.1:{_free_port()}'
    conf = write_conf(tmp_path, hosts, timeout=2)
    started = time.monotonic()
    rc, out, err = run(capsys, '-c', conf, 'export-keys', str(tmp_path / 'k.json'))
    assert rc == 1 and out == ''
    assert err == (f'zuul-admin export-keys: cannot reach ZooKeeper at {hosts} ([zookeeper] '
                   f'hosts of {conf}): no answer within 2s\n')
    assert time.monotonic() - started < 20
    assert not (tmp_path / 'k.json').exists()


def test_unreadable_zuul_conf(tmp_path, capsys):
    rc, out, err = run(capsys, '-c', str(tmp_path / 'nope.conf'), 'delete-keys', 'g', 'p')
    assert (rc, out) == (2, '')
    assert err == f'zuul-admin delete-keys: {tmp_path / "nope.conf"}: no such file\n'


# -- the commands of doc/source/operations/upgrades.rst ----------------------------------


def doc_commands() -> list[str]:
    lines = []
    for block in docs.code_blocks(PAGE, 'console'):
        lines += [line[2:] for line in block.splitlines() if line.startswith('$ zuul-admin')]
    return lines


def test_the_backup_commands_of_the_upgrade_guide(zk_chroot, tmp_path, capsys, monkeypatch):
    """Run as printed (with zuul.conf at its default place): back up, lose
    ZooKeeper's keys, restore, then delete a retired project's keys."""
    commands = doc_commands()
    assert [shlex.split(c)[1] for c in commands] == ['export-keys', 'import-keys',
                                                     'delete-keys']
    monkeypatch.setattr(admin, 'DEFAULT_CONFIG', write_conf(tmp_path, zk_chroot.hosts))
    monkeypatch.chdir(tmp_path)
    client = zk_chroot.client()
    scheduler = store(client, 's3cret')
    connection, project = shlex.split(commands[2])[2:]
    chunks = encrypt_for(scheduler, 'gerrit', 'org/app', 'hunter2')
    scheduler.get_project_key(connection, project)
    export, restore, delete = (shlex.split(c)[1:] for c in commands)

    assert run(capsys, *export)[0] == 0
    assert stat.S_IMODE(os.stat(export[-1]).st_mode) == 0o600
    client.delete(keys.KEY_ROOT, recursive=True)           # ZooKeeper lost its data
    assert run(capsys, *restore)[0] == 0
    assert store(zk_chroot.client(), 's3cret').decrypt('gerrit', 'org/app', chunks) == \
        'hunter2'
    assert run(capsys, *delete)[0] == 0
    assert not client.exists(key_path(connection, project))
    assert client.exists(key_path('gerrit', 'org/app'))
