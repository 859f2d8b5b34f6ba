"""``zuul reproduce`` against a real zuul-web (real scheduler over real
Gearman enforcing access rules, tests/unit/web_auth_support.py), a real
build database and real git repositories: what a build is kept with
(secrets left out), tenant access, refusals (commit or repository gone,
hostile names, symlinks), and a prepared work directory run by its own
run.sh with real ansible-playbook."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
import uuid as uuidlib
from types import SimpleNamespace

import pytest

from tests.harness.docs import code_blocks
from tests.unit.web_auth_support import authenticators, start, token
from zuul.driver.sql.history import BuildHistory
from zuul.executor.protocol import (
    ExecuteRequest,
    ItemSpec,
    JobSpec,
    PlaybookSpec,
    RequiredProject,
    ZuulContext,
)
from zuul.scheduler.builds import ExecutorAdapter
from zuul.web.server import ZuulWeb

DOC = 'doc/source/user/reproduce.rst'
DOC_UUID = '4a7c1d2e9b8f4c3a9e6d5b4a3c2d1e0f'
PLAINTEXT = 'pl41ntext-S3CRET-never-handed-out'
USER_VALUE = 'my-own-token-4711'
HOST = 'review.example.org'

PRE = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Use the credentials
      command: echo "token is {{ site_creds.token | default('absent') }}"
"""

RUN = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Show the job variable
      command: echo "flavour {{ flavour }} in {{ zuul.project.name }}"
    - name: Look at the tree
      stat:
        path: "{{ zuul.executor.src_root }}/{{ zuul.project.canonical_name }}/app.txt"
      register: app
    - name: Fail on request
      fail:
        msg: "app.txt says {{ lookup('file', app.stat.path) }}"
      when: app.stat.exists and lookup('file', app.stat.path) == 'fail'
"""


def _git(cwd, *args):
    return subprocess.run(['git', *args], cwd=cwd, check=True, capture_output=True,
                          text=True, env={**os.environ, 'GIT_AUTHOR_NAME': 't',
                                          'GIT_AUTHOR_EMAIL': 't@e', 'GIT_COMMITTER_NAME': 't',
                                          'GIT_COMMITTER_EMAIL': 't@e'}).stdout.strip()


def make_repo(root, name, files: dict) -> str:
    path = os.path.join(root, name)
    os.makedirs(path)
    _git(path, 'init', '-q', '-b', 'master')
    for rel, text in files.items():
        full = os.path.join(path, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        if isinstance(text, tuple):     # ('symlink', target)
            os.symlink(text[1], full)
        else:
            with open(full, 'w') as f:
                f.write(textwrap.dedent(text))
    _git(path, 'add', '-A')
    _git(path, 'commit', '-q', '-m', f'{name} files')
    return _git(path, 'rev-parse', 'HEAD')


@pytest.fixture
def env(tmp_path, gearman_server):
    system = start(tmp_path, gearman_server)
    history = BuildHistory(f'sqlite:///{tmp_path}/history.sqlite')
    history.migrate()
    web = ZuulWeb('127.0.0.1', 0, system.rpc, history, authenticators=authenticators(),
                  enforce_access=True)
    web.start()
    repos = str(tmp_path / 'repos')
    shas = {'org/config': make_repo(repos, 'org/config', {
                'playbooks/pre.yaml': PRE, 'playbooks/run.yaml': RUN,
                'playbooks/evil.yaml': ('symlink', '/etc/hostname')}),
            'org/app': make_repo(repos, 'org/app', {'app.txt': 'fail'})}
    adapter = ExecutorAdapter(None, SimpleNamespace(history=history), {'gerrit': HOST},
                              None)
    from zuul.merger.repos import RepoUrlResolver
    adapter.repo_urls = RepoUrlResolver({'gerrit': repos})
    yield SimpleNamespace(system=system, web=web, history=history, repos=repos, shas=shas,
                          adapter=adapter, base=f'http://127.0.0.1:{web.port}',
                          tmp=tmp_path)
    web.stop()
    system.stop()


def request(env, tenant='t1', playbook='playbooks/run.yaml', project='org/app',
            repo_state=None) -> ExecuteRequest:
    secret_pb = PlaybookSpec(connection='gerrit', project='org/config', branch='master',
                             path='playbooks/pre.yaml', trusted=True,
                             secrets={'site_creds': {'token': PLAINTEXT}})
    run_pb = PlaybookSpec(connection='gerrit', project='org/config', branch='master',
                          path=playbook, trusted=True)
    job = JobSpec(name='app-test', pre_run=[secret_pb], run=[run_pb],
                  vars={'flavour': 'vanilla'},
                  required_projects=[RequiredProject('gerrit', 'org/config')])
    state = repo_state or {'gerrit': {
        p: {'refs/heads/master': sha} for p, sha in env.shas.items()}}
    return ExecuteRequest(
        uuid=uuidlib.uuid4().hex, job=job,
        zuul=ZuulContext(tenant=tenant, pipeline='gate', buildset=uuidlib.uuid4().hex,
                         ref='refs/heads/master', canonical_hostnames={'gerrit': HOST}),
        items=[ItemSpec(connection='gerrit', project=project, canonical_hostname=HOST,
                        branch='master', ref='refs/heads/master')],
        repo_state=state)


def launch(env, req: ExecuteRequest, tenant='t1') -> str:
    env.adapter._keep_reproduction(tenant, req)
    return req.uuid


def reproduce(env, *args, tenant='t1', workdir=None):
    """(exit status, output, stderr) of ``zuul reproduce`` as a process."""
    argv = [sys.executable, '-m', 'zuul.cmd.client', '--zuul-url', env.base, 'reproduce',
            '--tenant', tenant, *args]
    if workdir:
        argv += ['--workdir', str(workdir)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def _all_bytes(root) -> bytes:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + dirnames:
            out.append(name.encode())
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                with open(path, 'rb') as f:
                    out.append(f.read())
    return b'\n'.join(out)


def test_api_and_work_dir_hold_no_secret_byte(env):
    uuid = launch(env, request(env))
    import urllib.request
    with urllib.request.urlopen(f'{env.base}/api/tenant/t1/build/{uuid}/reproduction') as r:
        raw = r.read()
    assert PLAINTEXT.encode() not in raw
    data = json.loads(raw)
    assert data['request']['job']['pre_run'][0]['secret_names'] == ['site_creds']
    assert data['git_urls']['gerrit']['org/app'].endswith('/org/app')
    # Keep the stored row honest as well: the database holds no secret.
    with open(env.tmp / 'history.sqlite', 'rb') as f:
        assert PLAINTEXT.encode() not in f.read()
    work = env.tmp / 'w1'
    status, out, err = reproduce(env, uuid, '--prepare-only', workdir=work)
    assert status == 0, err
    assert 'Secret site_creds of pre_run playbook org/config/playbooks/pre.yaml is left out' in out
    assert PLAINTEXT.encode() not in _all_bytes(work)
    # The script runs the same playbooks in the same order.
    script = (work / 'run.sh').read_text()
    assert script.index('PRE_RUN: trusted : org/config/playbooks/pre.yaml') < \
        script.index('RUN: trusted : org/config/playbooks/run.yaml@master')
    # ...in bubblewrap, as on the executor, unless told otherwise.
    assert script.count('/bwrap --die-with-parent') == 2 or shutil.which('bwrap') is None
    status, out, err = reproduce(env, uuid, '--prepare-only', '--no-sandbox',
                                 workdir=env.tmp / 'w1b')
    assert status == 0, err
    assert 'run without a sandbox (--no-sandbox)' in out
    assert 'bwrap' not in (env.tmp / 'w1b' / 'run.sh').read_text()


def doc_command(env, index: int, uuid: str, cwd) -> tuple[int, str, str]:
    """Run the ``$`` line of console block ``index`` of the page as
    printed, with its example URL, tenant and build uuid replaced."""
    (line,) = [x[2:] for x in code_blocks(DOC, 'console')[index].splitlines()
               if x.startswith('$ ')]
    line = line.replace('https://zuul.example.org', env.base).replace(
        '--tenant example', '--tenant t1').replace(DOC_UUID, uuid)
    argv = shlex.split(line)
    assert argv[0] == 'zuul'
    proc = subprocess.run([sys.executable, '-m', 'zuul.cmd.client', *argv[1:]], cwd=cwd,
                          capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def test_supplied_secret_and_the_run_fails_on_the_same_task(env, tmp_path):
    uuid = launch(env, request(env))
    (tmp_path / 'my-creds.yaml').write_text(f'token: {USER_VALUE}\n')
    status, out, err = doc_command(env, 2, uuid, tmp_path)     # --secret site_creds=...
    work = tmp_path / f'reproduce-{uuid}'
    assert status == 1, (out, err)   # FAILURE, as app.txt asks
    assert f'token is {USER_VALUE}' in out
    assert 'app.txt says fail' in out and 'Fail on request' in out
    assert '== Reproduction result: FAILURE' in out
    assert PLAINTEXT.encode() not in _all_bytes(work)
    # The variables keep their values and the zuul variables their layout.
    assert 'flavour vanilla in org/app' in out


def test_skip_trusted_says_what_it_skipped(env, tmp_path):
    uuid = launch(env, request(env))
    status, out, err = doc_command(env, 3, uuid, tmp_path)     # --skip-trusted
    assert status == 1, err
    assert ('Skipped trusted pre_run playbook org/config/playbooks/pre.yaml: it needs '
            'secret(s) site_creds') in out
    assert 'token is' not in out
    assert 'app.txt says fail' in out
    # A secret the build does not use is refused, not silently dropped.
    (tmp_path / 'x.yaml').write_text('a: 1\n')
    status, out, err = reproduce(env, uuid, '--secret', f'nope={tmp_path}/x.yaml',
                                 workdir=tmp_path / 'w3')
    assert status == 1 and 'the build uses no such secret' in err


def test_a_tenant_the_caller_cannot_see_is_refused(env, tmp_path):
    uuid = launch(env, request(env, tenant='t2'), tenant='t2')
    status, out, err = reproduce(env, uuid, '--prepare-only', tenant='t2',
                                 workdir=tmp_path / 'w4')
    assert status == 1 and '(401)' in err, err
    outsider = token(sub='carol', groups=['t1'])
    status, out, err = reproduce(env, uuid, '--prepare-only', '--auth-token', outsider,
                                 tenant='t2', workdir=tmp_path / 'w4')
    assert status == 1 and '(403)' in err and 'not allowed' in err
    assert not (tmp_path / 'w4').exists()
    reader = token(resources_access={'account': {'roles': 'reader'}})
    status, out, err = reproduce(env, uuid, '--prepare-only', '--auth-token', reader,
                                 tenant='t2', workdir=tmp_path / 'w4')
    assert status == 0, err
    # Another tenant's build is not found under a tenant one may read.
    status, out, err = reproduce(env, uuid, '--prepare-only', tenant='t1',
                                 workdir=tmp_path / 'w5')
    assert status == 1 and '(404)' in err


def test_a_state_that_cannot_be_rebuilt_is_refused(env, tmp_path):
    state = {'gerrit': {'org/app': {'refs/heads/master': 'f' * 40},
                        'org/config': {'refs/heads/master': env.shas['org/config']}}}
    uuid = launch(env, request(env, repo_state=state))
    status, out, err = reproduce(env, uuid, '--prepare-only', workdir=tmp_path / 'w6')
    assert status == 1
    assert f'org/app no longer has commit(s) refs/heads/master {"f" * 40}' in err
    os.rename(os.path.join(env.repos, 'org/app'), os.path.join(env.repos, 'org/gone'))
    uuid = launch(env, request(env))
    status, out, err = reproduce(env, uuid, '--prepare-only', workdir=tmp_path / 'w7')
    assert status == 1 and 'gerrit/org/app cannot be fetched' in err, err


def test_hostile_uuid_names_and_symlinks_never_write_outside(env, tmp_path):
    status, out, err = reproduce(env, '../../etc', '--prepare-only', workdir=tmp_path / 'x')
    assert status == 1 and 'is not a build uuid' in err
    # A project name and a playbook path that climb out of the work dir.
    for kwargs, why in (({'project': '../../escaped'}, "project '../../escaped'"),
                        ({'playbook': '../../../escaped.yaml'}, 'playbook path')):
        uuid = launch(env, request(env, **kwargs))
        status, out, err = reproduce(env, uuid, '--prepare-only', workdir=tmp_path / 'w8')
        assert status == 1 and why in err, err
        assert not (tmp_path / 'w8').exists()
    assert not (tmp_path / 'escaped').exists()
    # A playbook that is a symlink to a file outside its checkout.
    uuid = launch(env, request(env, playbook='playbooks/evil.yaml'))
    status, out, err = reproduce(env, uuid, '--prepare-only', workdir=tmp_path / 'w9')
    assert status == 1 and 'leaves its project' in err, err


def test_the_api_refuses_a_malformed_uuid(env):
    import urllib.error
    import urllib.request
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f'{env.base}/api/tenant/t1/build/..%2f..%2fx/reproduction')
    assert e.value.code in (400, 404)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f'{env.base}/api/tenant/t1/build/{"a" * 32}/reproduction')
    assert e.value.code == 404

