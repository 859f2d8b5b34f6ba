"""Per-project SSH keys (zuul/zk/ssh_keys.py) in a real ZooKeeper, as
released Zuul keeps its project keys: beside the secrets key, encrypted
with ``[keystore] password``, the same for every scheduler, carried by
``zuul-admin export-keys``/``import-keys``/``delete-keys``; only
post-review builds get the private half, and an executor's build agent
holds it without any file of the build holding it."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from types import SimpleNamespace

import pytest

from tests.unit.test_zk_keys import run, store, stored, write_conf
from zuul.executor.protocol import ExecuteRequest, JobSpec, SshKeySpec, ZuulContext
from zuul.executor.sshagent import SshAgent, SshAgentError, add_build_keys
from zuul.model import item as m
from zuul.model.change import Change
from zuul.scheduler.builds import project_ssh_keys
from zuul.zk.keys import KeyPasswordError, key_path
from zuul.zk.ssh_keys import ProjectSshKeys


def ssh_keys(client, password='s3cret') -> ProjectSshKeys:
    return ProjectSshKeys(store(client, password))


def test_a_key_is_made_once_and_every_scheduler_sees_it(zk_chroot):
    first = ssh_keys(zk_chroot.client())
    line = first.public_key('gerrit', 'org/app')
    assert line.startswith('ssh-rsa ') and len(line.split()) == 2
    assert ssh_keys(zk_chroot.client()).public_key('gerrit', 'org/app') == line
    assert ssh_keys(zk_chroot.client()).public_key('gerrit', 'org/lib') != line
    # kept beside the secrets key, which it does not disturb
    record = stored(zk_chroot.client(), 'gerrit', 'org/app')
    assert len(record['keys']) == 1 and len(record['ssh_keys']) == 1
    assert 'BEGIN ENCRYPTED PRIVATE KEY' in record['ssh_keys'][0]['private_key']


def test_concurrent_creation_makes_one_key(zk_chroot):
    stores = [ssh_keys(zk_chroot.client()) for _ in range(4)]
    stores[0].keystore.get_project_key('gerrit', 'org/app')   # the record exists
    found, barrier = [], threading.Barrier(len(stores))

    def make(s):
        barrier.wait()
        found.append(s.public_key('gerrit', 'org/app'))
    threads = [threading.Thread(target=make, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(found) == 4 and len(set(found)) == 1
    assert len(stored(zk_chroot.client(), 'gerrit', 'org/app')['ssh_keys']) == 1


def test_the_password_opens_it_and_a_wrong_one_says_so(zk_chroot):
    ssh_keys(zk_chroot.client(), 's3cret').public_key('gerrit', 'org/app')
    with pytest.raises(KeyPasswordError, match='key of project org/app'):
        ssh_keys(zk_chroot.client(), 'wrong').public_key('gerrit', 'org/app')


def test_the_private_key_is_what_ssh_takes(zk_chroot, tmp_path):
    keys = ssh_keys(zk_chroot.client())
    text = keys.private_key('gerrit', 'org/app')
    assert text.startswith('-----BEGIN OPENSSH PRIVATE KEY-----')
    path = tmp_path / 'k'
    path.write_text(text)
    path.chmod(0o600)
    derived = subprocess.run(['ssh-keygen', '-y', '-f', str(path)], capture_output=True,
                             text=True, check=True).stdout.split()[:2]
    assert derived == keys.public_key('gerrit', 'org/app').split()[:2]


def test_export_delete_import_carries_the_ssh_key(zk_chroot, tmp_path, capsys):
    client = zk_chroot.client()
    conf = write_conf(tmp_path, zk_chroot.hosts)
    line = ssh_keys(client).public_key('gerrit', 'org/app')
    backup = str(tmp_path / 'keys.json')
    assert run(capsys, '-c', conf, 'export-keys', backup)[0] == 0
    text = open(backup).read()
    assert '"ssh_keys"' in text and 'OPENSSH PRIVATE KEY' not in text
    assert run(capsys, '-c', conf, 'delete-keys', 'gerrit', 'org/app')[0] == 0
    assert not client.exists(key_path('gerrit', 'org/app'))
    assert run(capsys, '-c', conf, 'import-keys', backup)[0] == 0
    assert ssh_keys(zk_chroot.client()).public_key('gerrit', 'org/app') == line


def test_import_refuses_a_different_ssh_key_without_force(zk_chroot, tmp_path, capsys):
    client = zk_chroot.client()
    conf = write_conf(tmp_path, zk_chroot.hosts)
    line = ssh_keys(client).public_key('gerrit', 'org/app')
    backup = str(tmp_path / 'keys.json')
    assert run(capsys, '-c', conf, 'export-keys', backup)[0] == 0
    # the same secrets key, but a new SSH key was made meanwhile
    record = stored(client, 'gerrit', 'org/app')
    del record['ssh_keys']
    client.set(key_path('gerrit', 'org/app'), json.dumps(record).encode())
    running = ssh_keys(zk_chroot.client())
    other = running.public_key('gerrit', 'org/app')
    assert other != line
    rc, _, err = run(capsys, '-c', conf, 'import-keys', backup)
    assert rc == 1 and 'a different key is already stored for project org/app' in err
    assert run(capsys, '-c', conf, 'import-keys', '--force', backup)[0] == 0
    assert ssh_keys(zk_chroot.client()).public_key('gerrit', 'org/app') == line
    # a running scheduler follows the replaced record
    assert _eventually(lambda: running.public_key('gerrit', 'org/app') == line)


def test_an_export_without_the_ssh_key_keeps_the_stored_one(zk_chroot, tmp_path, capsys):
    client = zk_chroot.client()
    conf = write_conf(tmp_path, zk_chroot.hosts)
    store(client, 's3cret').get_project_key('gerrit', 'org/app')
    backup = str(tmp_path / 'old.json')
    assert run(capsys, '-c', conf, 'export-keys', backup)[0] == 0     # no SSH key yet
    line = ssh_keys(client).public_key('gerrit', 'org/app')
    assert run(capsys, '-c', conf, 'import-keys', backup)[0] == 0     # not a conflict
    assert ssh_keys(zk_chroot.client()).public_key('gerrit', 'org/app') == line


def _eventually(predicate, tries=200):
    import time
    for _ in range(tries):
        if predicate():
            return True
        time.sleep(0.05)
    return False


# -- who gets the private key --------------------------------------------------------

class _Keys:
    def private_key(self, connection, project):
        return f'PRIVATE {connection}/{project}'


def _item(project='org/app'):
    return m.QueueItem(change=Change('gerrit', project, 'refs/changes/01/1/1', number=1,
                                     patchset=1, branch_name='master'))


def test_only_post_review_pipelines_give_the_project_key():
    post = SimpleNamespace(name='post', post_review=True)
    check = SimpleNamespace(name='check', post_review=False)
    assert project_ssh_keys(_Keys(), check, _item()) == []
    (key,) = project_ssh_keys(_Keys(), post, _item())
    assert key.private_key == 'PRIVATE gerrit/org/app' and 'org/app' in key.name
    assert project_ssh_keys(None, post, _item()) == []


def test_the_key_never_shows_in_a_repr_of_the_request():
    request = ExecuteRequest(uuid='u', job=JobSpec(name='deploy'),
                             zuul=ZuulContext(tenant='t', pipeline='post', buildset='b'),
                             ssh_keys=[SshKeySpec('project key of org/app', 'SECRET-PEM')])
    assert 'SECRET-PEM' not in repr(request)
    assert 'SECRET-PEM' not in repr(request.ssh_keys[0])
    again = ExecuteRequest.from_json(request.to_json())
    assert again.ssh_keys[0].private_key == 'SECRET-PEM'


# -- the build's agent ----------------------------------------------------------------

def test_the_build_agent_holds_the_key_and_no_file_does(zk_chroot, tmp_path, monkeypatch):
    """Handed to ``ssh-add -`` on stdin: no file ever holds it, and the
    agent lists it as ``(stdin)`` -- what zuul-jobs' add-build-sshkey keeps
    when it removes the node key (``sshagent_remove_keys`` removes every
    key whose comment is not ``(stdin)``)."""
    keys = ssh_keys(zk_chroot.client())
    spec = SshKeySpec('project key of org/app', keys.private_key('gerrit', 'org/app'))
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, 'open', lambda path, *a, **kw: opened.append(path) or
                        real_open(path, *a, **kw))
    agent = SshAgent(str(tmp_path / 'agent.sock')).start()
    try:
        add_build_keys(agent, [spec])
        env = dict(os.environ, SSH_AUTH_SOCK=agent.socket_path)
        listed = subprocess.run(['ssh-add', '-L'], capture_output=True, text=True,
                                env=env).stdout
        assert keys.public_key('gerrit', 'org/app').split()[1] in listed
        fingerprints = subprocess.run(['ssh-add', '-l'], capture_output=True, text=True,
                                      env=env).stdout
        assert '(stdin)' in fingerprints, fingerprints
        with pytest.raises(SshAgentError) as raised:
            add_build_keys(agent, [SshKeySpec('project key of org/bad', 'not a key')])
        assert 'project key of org/bad' in str(raised.value)
        assert 'not a key' not in str(raised.value)
    finally:
        agent.stop()
    assert [p for p in opened if p != os.devnull] == []     # no file held the key
