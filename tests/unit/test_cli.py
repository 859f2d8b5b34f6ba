"""The zuul CLI against the fake scheduler over a real Gearman server."""

import io
import subprocess
import sys

import pytest

from tests.fakes.scheduler_rpc import RUNNING_UUID, project_key
from zuul.cmd import client
from zuul.lib import encryption, yamlutil
from zuul.lib import rpc_protocol as p


@pytest.fixture
def run(gearman_server, fake_scheduler, capsys):
    """run(*argv) -> (exit code, stdout, stderr) with --gearman-server set."""
    def _run(*argv, stdin=b''):
        sys_stdin = sys.stdin
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin))
        try:
            code = client.main(['--gearman-server', f'127.0.0.1:{gearman_server.port}',
                                *argv])
        except SystemExit as e:  # argparse rejections
            code = e.code
        finally:
            sys.stdin = sys_stdin
        out, err = capsys.readouterr()
        return code, out, err
    return _run


def test_enqueue(run, fake_scheduler):
    code, out, err = run('enqueue', '--tenant', 'tenant-one', '--pipeline', 'gate',
                         '--project', 'org/project', '--change', '1,2')
    assert (code, err) == (0, '')
    assert out == 'Enqueued 1,2 of org/project into gate\n'
    function, request = fake_scheduler.calls[-1]
    assert function == p.ENQUEUE
    assert (request.tenant, request.pipeline, request.project, request.change) == (
        'tenant-one', 'gate', 'org/project', '1,2')


@pytest.mark.parametrize('args, message', [
    (('--tenant', 'nope', '--pipeline', 'gate', '--project', 'org/project', '--change', '1,1'),
     'Unknown tenant nope'),
    (('--tenant', 'tenant-one', '--pipeline', 'deploy', '--project', 'org/project',
      '--change', '1,1'), 'Unknown pipeline deploy in tenant tenant-one'),
    (('--tenant', 'tenant-one', '--pipeline', 'gate', '--project', 'org/project2',
      '--change', '1,1'), 'Unknown project org/project2 in tenant tenant-one'),
    (('--tenant', 'tenant-one', '--pipeline', 'gate', '--project', 'org/project',
      '--change', '99,1'), 'Change 99,1 not found in project org/project'),
    (('--tenant', 'tenant-one', '--pipeline', 'gate', '--project', 'org/project',
      '--change', '1,3'), 'Change 1,3 not found in project org/project'),
])
def test_enqueue_unknown_names(run, args, message):
    code, out, err = run('enqueue', *args)
    assert (code, out) == (1, '')
    assert err == f'zuul: error: {message}\n'


@pytest.mark.parametrize('change', ['1', '1,x', 'abc', '1,2,3', ''])
def test_malformed_change_is_rejected_before_any_rpc(run, fake_scheduler, change):
    code, _, err = run('enqueue', '--tenant', 'tenant-one', '--pipeline', 'gate',
                       '--project', 'org/project', '--change', change)
    assert code == 2 and f'malformed change "{change}"' in err
    assert fake_scheduler.calls == []


def test_enqueue_ref(run, fake_scheduler):
    code, out, _ = run('enqueue-ref', '--tenant', 'tenant-one', '--pipeline', 'post',
                       '--project', 'org/project', '--ref', 'refs/heads/master',
                       '--newrev', 'a' * 40)
    assert code == 0 and out == 'Enqueued refs/heads/master of org/project into post\n'
    assert fake_scheduler.calls[-1][1].newrev == 'a' * 40
    code, _, err = run('enqueue-ref', '--tenant', 'tenant-one', '--pipeline', 'post',
                       '--project', 'org/project', '--ref', 'master')
    assert code == 2 and 'malformed ref "master"' in err
    code, _, err = run('enqueue-ref', '--tenant', 'tenant-one', '--pipeline', 'post',
                       '--project', 'org/project', '--ref', 'refs/heads/x', '--oldrev', 'abc')
    assert code == 2 and 'malformed revision "abc"' in err


def test_dequeue(run, fake_scheduler):
    code, out, _ = run('dequeue', '--tenant', 'tenant-one', '--pipeline', 'gate',
                       '--project', 'org/project', '--change', '2,1')
    assert code == 0 and out == 'Dequeued 2,1 from gate\n'
    code, _, err = run('dequeue', '--tenant', 'tenant-one', '--pipeline', 'check',
                       '--project', 'org/project', '--change', '2,1')
    assert code == 1 and err == 'zuul: error: Change 2,1 not found in pipeline check\n'
    code, _, err = run('dequeue', '--tenant', 'tenant-one', '--pipeline', 'gate',
                       '--project', 'org/project')
    assert code == 2 and 'one of the arguments --change --ref is required' in err


def test_promote(run, fake_scheduler):
    code, out, _ = run('promote', '--tenant', 'tenant-one', '--pipeline', 'gate',
                       '--changes', '4,1', '2,1')
    assert code == 0 and out == 'Promoted 4,1 2,1 in gate\n'
    assert fake_scheduler.calls[-1][1].changes == ['4,1', '2,1']
    code, _, err = run('promote', '--tenant', 'tenant-one', '--pipeline', 'gate',
                       '--changes', '3,1')
    assert code == 1 and err == 'zuul: error: Change 3,1 not found in pipeline gate\n'


def test_autohold_and_list(run, fake_scheduler):
    code, out, _ = run('autohold', '--tenant', 'tenant-one', '--project', 'org/project',
                       '--job', 'project-test1', '--change', '1,2', '--reason', 'debug it',
                       '--count', '2', '--node-hold-expiration', '3600')
    assert code == 0
    assert out.startswith('Autohold request 0000000001: nodes of the next 2 failing build(s) '
                          'of project-test1 on org/project (refs/changes/01/1/.*)')
    request = fake_scheduler.calls[-1][1]
    assert (request.count, request.node_hold_expiration, request.reason) == (2, 3600, 'debug it')
    code, out, _ = run('autohold-list', '--tenant', 'tenant-one')
    lines = out.splitlines()
    assert lines[0].split() == ['ID', 'Project', 'Job', 'Ref', 'filter', 'Count', 'Reason']
    assert lines[1].split() == ['0000000001', 'org/project', 'project-test1',
                                'refs/changes/01/1/.*', '0/2', 'debug', 'it']
    code, out, _ = run('autohold-list', '--tenant', 'tenant-two')
    assert code == 0 and len(out.splitlines()) == 1  # header only: tenants do not mix


@pytest.mark.parametrize('extra, message', [
    (('--job', 'nope'), 'zuul: error: Unknown job nope in tenant tenant-one'),
    (('--job', 'project-test1', '--count', '0'), 'zuul: error: --count must be at least 1'),
    (('--job', 'project-test1', '--ref', '(unclosed'), 'not a valid regular expression'),
])
def test_autohold_rejections(run, extra, message):
    code, _, err = run('autohold', '--tenant', 'tenant-one', '--project', 'org/project',
                       '--reason', 'r', *extra)
    assert code == 1 and message in err


def test_show_queues_and_running_jobs(run):
    code, out, _ = run('show', '--tenant', 'tenant-one', '--pipeline', 'gate')
    rows = [line.split() for line in out.splitlines()]
    assert code == 0 and rows[0][:5] == ['Pipeline', 'Queue', 'Pos', 'Change', 'Project']
    assert [(r[2], r[3], r[4]) for r in rows[1:]] == [
        ('1', '1,2', 'org/project'), ('2', '2,1', 'org/project'), ('3', '4,1', 'org/project1')]
    assert [r[-1] for r in rows[1:]] == ['1/2', '1/2', '1/2']
    code, out, _ = run('show', 'running-jobs', '--tenant', 'tenant-one')
    rows = [line.split() for line in out.splitlines()]
    assert code == 0 and [(r[0], r[1], r[3], r[4]) for r in rows[1:]] == [
        ('gate', '1,2', 'project-test1', RUNNING_UUID)]
    code, _, err = run('show', '--tenant', 'tenant-one', '--pipeline', 'deploy')
    assert code == 1 and err == 'zuul: error: Unknown pipeline deploy in tenant tenant-one\n'
    code, _, err = run('show', '--tenant', 'nope')
    assert code == 1 and err == 'zuul: error: Unknown tenant nope\n'


def _decrypt(project, stanza):
    secret = yamlutil.load(stanza, 'secret.yaml')[0]['secret']
    (field, value), = secret['data'].items()
    # the same decryption the executor applies to a job's secrets
    return secret['name'], field, encryption.decrypt_chunks(value.ciphertext,
                                                            project_key(project))


def test_encrypt_through_zuul_web_from_stdin(run, zuul_web):
    plaintext = b'x' * 500 + b'\nend'  # longer than one RSA-OAEP chunk
    code, out, err = run('--zuul-url', zuul_web.base, 'encrypt', '--tenant', 'tenant-one',
                         '--project', 'org/project', '--secret-name', 'site_creds',
                         '--field-name', 'password', stdin=plaintext)
    assert (code, err) == (0, '')
    assert out.startswith('- secret:\n    name: site_creds\n    data:\n'
                          '      password: !encrypted/pkcs1-oaep\n        - ')
    assert out.count('        - ') == 3  # 214-byte chunks for a 2048-bit key
    assert _decrypt('org/project', out) == ('site_creds', 'password', plaintext)


def test_encrypt_from_file_to_file_with_a_local_key(run, tmp_path):
    from cryptography.hazmat.primitives import serialization
    pem = tmp_path / 'key.pub'
    pem.write_bytes(project_key('org/project1').public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    (tmp_path / 'in').write_bytes(b's3cret')
    code, _, _ = run('encrypt', '--tenant', 'tenant-one', '--project', 'org/project1',
                     '--public-key', str(pem), '--infile', str(tmp_path / 'in'),
                     '--outfile', str(tmp_path / 'out.yaml'))
    assert code == 0
    assert _decrypt('org/project1', (tmp_path / 'out.yaml').read_text())[2] == b's3cret'


def test_encrypt_errors(run, zuul_web, tmp_path):
    code, _, err = run('--zuul-url', zuul_web.base, 'encrypt', '--tenant', 'tenant-one',
                       '--project', 'org/project2', stdin=b'x')
    assert code == 1 and err == ('zuul: error: cannot get the public key of org/project2: '
                                 'Unknown project org/project2 in tenant tenant-one\n')
    code, _, err = run('encrypt', '--tenant', 'tenant-one', '--project', 'org/project',
                       stdin=b'x')
    assert code == 1 and 'no zuul-web URL' in err
    (tmp_path / 'bad.pem').write_text('not a key')
    code, _, err = run('encrypt', '--tenant', 'tenant-one', '--project', 'org/project',
                       '--public-key', str(tmp_path / 'bad.pem'), stdin=b'x')
    assert code == 1 and 'not a PEM public key' in err


def test_encrypt_finds_zuul_web_from_its_web_section(run, zuul_web, tmp_path):
    """The quickstart's zuul.conf has [web] listen_address and port, no
    root: zuul encrypt asks the zuul-web listening there."""
    conf = tmp_path / 'zuul.conf'
    conf.write_text(f'[web]\nlisten_address = 0.0.0.0\nport = {zuul_web.port}\n')
    code, out, err = run('-c', str(conf), 'encrypt', '--tenant', 'tenant-one',
                         '--project', 'org/project1', stdin=b's3cret')
    assert code == 0, err
    assert _decrypt('org/project1', out)[2] == b's3cret'


def test_gearman_server_from_zuul_conf(gearman_server, fake_scheduler, tmp_path, capsys):
    conf = tmp_path / 'zuul.conf'
    conf.write_text(f'[gearman]\nserver=127.0.0.1\nport={gearman_server.port}\n')
    assert client.main(['-c', str(conf), 'show', '--tenant', 'tenant-two']) == 0
    assert capsys.readouterr().out.startswith('Pipeline')
    assert client.main(['-c', str(tmp_path / 'missing.conf'), 'show', '--tenant', 'x']) == 1
    assert 'cannot read' in capsys.readouterr().err


def test_module_entry_point_help():
    result = subprocess.run([sys.executable, '-m', 'zuul.cmd.client', '--help'],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    for command in ('enqueue', 'enqueue-ref', 'dequeue', 'promote', 'autohold', 'encrypt',
                    'show'):
        assert command in result.stdout
