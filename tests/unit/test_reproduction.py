"""What a build is kept with for ``zuul reproduce`` (no secret byte, the
unsafe markings kept), the scheduler keeping it in the build database,
and run.sh written from hostile stored data."""

from __future__ import annotations

import json
import os
import subprocess
from types import SimpleNamespace

import pytest

from zuul.client.commands import CLIError
from zuul.client.reproduce import check_paths, render_script
from zuul.driver.sql.history import BuildHistory
from zuul.executor.protocol import (
    ExecuteRequest,
    JobSpec,
    NodeSpec,
    PlaybookSpec,
    SshKeySpec,
    ZuulContext,
)
from zuul.executor.reproduction import public_request, request_from_public
from zuul.scheduler.builds import ExecutorAdapter

SECRET = 'the-SECRET-plaintext-0xdeadbeef'
KEY = '-----BEGIN OPENSSH PRIVATE KEY-----\nproject-key-bytes\n'
TOKEN = 'kube-token-shhh'


def _request() -> ExecuteRequest:
    pb = PlaybookSpec('gerrit', 'org/config', 'master', 'playbooks/upload.yaml', trusted=True,
                      secrets={'creds': {'password': SECRET}})
    return ExecuteRequest(
        uuid='ab' * 16,
        job=JobSpec(name='j', post_run=[pb],
                    vars={'msg': {'__ansible_unsafe': '{{ lookup("pipe", "id") }}'}}),
        zuul=ZuulContext(tenant='t', pipeline='gate', buildset='cd' * 16),
        nodes=[NodeSpec(name=['n'], secret={'token': TOKEN}, resource={'pod': 'p'})],
        ssh_keys=[SshKeySpec(name='project key', private_key=KEY)])


def test_public_request_holds_no_secret_and_keeps_unsafe_markings():
    text = json.dumps(public_request(_request()))
    for plaintext in (SECRET, KEY, TOKEN, 'project-key-bytes'):
        assert plaintext not in text
    data = json.loads(text)
    assert data['request']['job']['post_run'][0]['secret_names'] == ['creds']
    assert data['request']['job']['vars']['msg'] == {
        '__ansible_unsafe': '{{ lookup("pipe", "id") }}'}
    # Back to a request: only the secrets the user supplies.
    assert request_from_public(data).job.post_run[0].secrets == {}
    mine = request_from_public(data, {'creds': {'password': 'mine'}, 'other': 1})
    assert mine.job.post_run[0].secrets == {'creds': {'password': 'mine'}}
    with pytest.raises(ValueError):
        request_from_public({'format': 99, 'request': {}})


def test_the_scheduler_keeps_it_in_the_database(tmp_path):
    dburi = f'sqlite:///{tmp_path}/h.sqlite'
    history = BuildHistory(dburi)
    history.migrate()
    adapter = ExecutorAdapter(None, SimpleNamespace(history=history), {}, None)
    adapter._keep_reproduction('t', _request())
    # Another process (zuul-web, a restarted scheduler) reads it back.
    again = BuildHistory(dburi)
    assert again.get_reproduction('t', 'ab' * 16)['request']['job']['name'] == 'j'
    assert again.get_reproduction('other-tenant', 'ab' * 16) is None
    with open(tmp_path / 'h.sqlite', 'rb') as f:
        assert SECRET.encode() not in f.read()


def test_a_database_failure_never_stops_the_build():
    class Broken:
        def record_reproduction(self, *args):
            raise RuntimeError('database gone')
    adapter = ExecutorAdapter(None, SimpleNamespace(history=Broken()), {}, None)
    adapter._keep_reproduction('t', _request())     # logged, not raised


@pytest.mark.parametrize('where, value, why', [
    ('project', '../../etc', "project '../../etc'"),
    ('project', '/abs/olute', 'project'),
    ('path', '/etc/passwd', 'playbook path'),
    ('path', 'a/../../b.yaml', 'playbook path'),
    ('hostname', '..', 'canonical hostname'),
    ('node', '../n', 'node name'),
])
def test_names_that_leave_the_work_directory_are_refused(where, value, why):
    data = public_request(_request())
    request = data['request']
    if where == 'project':
        request['job']['post_run'][0]['project'] = value
    elif where == 'path':
        request['job']['post_run'][0]['path'] = value
    elif where == 'hostname':
        request['zuul']['canonical_hostnames'] = {'gerrit': value}
    else:
        request['nodes'][0]['name'] = [value]
    with pytest.raises(CLIError) as e:
        check_paths(data)
    assert why in str(e.value)


def test_run_sh_never_runs_stored_text(tmp_path):
    marker = tmp_path / 'pwned'
    hostile = f'x\ntouch {marker}\n$(touch {marker}) `touch {marker}`'
    plan = {'uuid': 'ab' * 16, 'job': hostile, 'job_output': str(tmp_path / 'out.txt'),
            'playbooks': [
                {'phase': 'run', 'index': 0, 'label': hostile, 'trusted': False,
                 'command': ['true', hostile], 'env': {'ZUUL_PLAYBOOK': hostile},
                 'cwd': str(tmp_path)},
                {'phase': 'post_run', 'index': 0, 'label': hostile, 'skipped': 'secret'}]}
    script = tmp_path / 'run.sh'
    script.write_text(render_script(plan, {'build': {'result': hostile}}))
    os.chmod(script, 0o755)
    proc = subprocess.run([str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert '== Reproduction result: SUCCESS' in proc.stdout
    assert not marker.exists()


def test_a_half_written_or_linked_work_directory_is_refused(tmp_path):
    """A run killed half-way leaves its directory: the next one refuses
    to mix into it rather than reuse what it cannot vouch for."""
    from zuul.client.reproduce import make_workdir, parse_host
    left = tmp_path / 'killed'
    left.mkdir()
    (left / 'git').mkdir()
    with pytest.raises(CLIError, match='exists and is not an empty directory'):
        make_workdir(str(left))
    (tmp_path / 'elsewhere').mkdir()
    os.symlink(tmp_path / 'elsewhere', tmp_path / 'link')
    with pytest.raises(CLIError):
        make_workdir(str(tmp_path / 'link'))
    assert make_workdir(str(tmp_path / 'fresh')) == str(tmp_path / 'fresh')
    assert parse_host('root@10.0.0.5:2222') == {'address': '10.0.0.5', 'port': 2222,
                                                'username': 'root'}
    assert parse_host('10.0.0.5')['username'] is None
    with pytest.raises(CLIError):
        parse_host('@10.0.0.5')


@pytest.mark.parametrize('url', ['ext::sh -c touch% /tmp/x', '-oProxyCommand=x',
                                 'relative/path', 'https://ok/x y'])
def test_git_urls_that_could_run_a_command_are_refused(url):
    data = public_request(_request())
    data['git_urls'] = {'gerrit': {'org/app': url}}
    with pytest.raises(CLIError, match='refusing the git URL'):
        check_paths(data)
    data['git_urls'] = {'gerrit': {'org/app': 'ssh://zuul@review:29418/org/app'}}
    check_paths(data)
