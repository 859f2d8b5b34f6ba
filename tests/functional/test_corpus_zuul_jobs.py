"""The real zuul-jobs of 2019 (../shared/corpus/zuul-jobs-repo-2019),
unmodified, through our executor onto a network-namespace node: a base
job built from its own roles and the tox job's roles test a small Python
project, and the build succeeds with its logs where upload-logs put them.

Corpus tier (``GATEKEEP_CORPUS``). As a site runs them, it needs:

- zuul's own modules: ``zuul_console`` (``start-zuul-console`` and
  ``prepare-workspace`` start it on the node; the ``command`` output of
  the roles is streamed through it) and ``zuul_return``; the roles bring
  the others they use in their own ``library/`` (``zuul_debug_info``,
  ``sshagent_remove_keys``, ``tox_install_sibling_packages``);
- Ansible 8 with its collections, as released Zuul installs it: the
  roles use ``include:`` (gone from ansible-core 2.16 on) and modules and
  filters that moved into collections (``synchronize``,
  ``authorized_key``: ansible.posix; ``archive``: community.general).
  ``zuul-manage-ansible 8`` installs it, with
  ``ANSIBLE_8_EXTRA_PACKAGES='ansible==8.* netaddr'``, from the package
  registry into its default root (``<venv>/lib/zuul/ansible``, where the
  executor looks first): once, then reused by later runs;
- a node with a root filesystem of its own holding python3, pip, git,
  rsync, bash and tox (a netns node booted from a ``rootfs``): the roles
  change the node user's ``~/.ssh`` (``add-build-sshkey`` adds a key to
  ``authorized_keys``, which the node's sshd reads, and copies one to
  ``id_rsa``). On a netns node without a rootfs those files are this
  machine's, so the test never uses such a node.
  ``tools/netns-rootfs-image.sh`` builds the image (``IMAGE_HOST_USR=1``:
  this machine's /usr hard-linked, ``IMAGE_PIP_PACKAGES='tox<4'``: the
  tox of 2019's roles, so ``ensure-tox`` finds it as on a CI image: the
  nodes' network reaches the executor only, not the package registry),
  once per run; ``GATEKEEP_ZUUL_JOBS_ROOTFS`` names a ready one instead.

Every playbook is trusted (a config project's), as a site's base job is;
roles left out, and why, are printed with the roles that ran.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from tests.functional.test_executor_builds import explain, run_build, task_results
from tests.functional.test_executor_support import (  # noqa: F401 - fixtures
    exec_env,
    exec_keypair,
    exec_nodes,
    execute_request,
    git,
    item,
    node_spec,
    playbook,
)
from tests.harness import corpus
from zuul.executor.protocol import JobSpec, RoleSpec

pytestmark = [pytest.mark.corpus,
              pytest.mark.skipif(shutil.which('bwrap') is None, reason='needs bubblewrap')]

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROOTFS_IMAGE = os.path.join(TOP, 'tools', 'netns-rootfs-image.sh')

BASE_ROLES = ['emit-job-header', 'set-zuul-log-path-fact', 'log-inventory', 'add-build-sshkey',
              'start-zuul-console', 'validate-host', 'prepare-workspace', 'ensure-output-dirs',
              'fetch-output', 'remove-build-sshkey', 'merge-output-to-logs', 'upload-logs']
TOX_ROLES = ['ensure-tox', 'ensure-python', 'bindep', 'test-setup', 'tox', 'fetch-tox-output',
             'fetch-subunit-output']
LEFT_OUT = {
    'prepare-workspace-git, mirror-workspace-git-repos':
        'prepare-workspace (synchronize) sets up the workspace instead. Tried: '
        "mirror-workspace-git-repos of 2019 gives git_config `name: 'receive.denyCurrentBranch "
        "ignore'` (a key and a value in one string), which Ansible 8's community.general "
        "git_config refuses ('error: invalid key'), as it would under released Zuul with "
        'Ansible 8: the Ansible of 2019 (2.5-2.8) accepted it, and no executor here or in '
        'released Zuul today runs that Ansible',
    'revoke-sudo (the tox job\'s run.yaml)':
        'a netns node\'s user is root, whose `sudo -n true` always succeeds, so the '
        'role\'s own proof that sudo is revoked fails; the job\'s run playbook here is '
        'run.yaml without it',
    'upload-logs-swift':
        'needs an OpenStack Swift endpoint and credentials (no cloud here); '
        'upload-logs writes to a local log root (zuul_logserver_root) instead',
    'upload-afs, release-afs-volume, create-afs-token, destroy-afs-token':
        'need an AFS cell and Kerberos (kinit/aklog, OpenAFS kernel module)',
    'build-docker-image, upload-docker-image, install-docker and the registry roles':
        'need a docker daemon on the node (not in a network-namespace node)',
}

PRE = """
- hosts: localhost
  roles:
    - emit-job-header
    - log-inventory
- hosts: all
  roles:
    - add-build-sshkey
    - start-zuul-console
    - validate-host
    - prepare-workspace
    - ensure-output-dirs
"""

# zuul-jobs' playbooks/tox/pre.yaml and playbooks/unittests/pre.yaml.
TOX_PRE = """
- hosts: all
  roles:
    - ensure-tox
    - ensure-python
- hosts: all
  tasks:
    - name: Install binary dependencies
      include_role:
        name: bindep
      vars:
        bindep_dir: "{{ zuul_work_dir }}"
      when: tox_install_bindep | default(true)
    - name: Run test-setup role
      include_role:
        name: test-setup
"""

TOX_RUN = """
- hosts: all
  roles:
    - tox
"""

TOX_POST = """
- hosts: all
  roles:
    - fetch-tox-output
    - fetch-subunit-output
"""

POST = """
- hosts: all
  roles:
    - fetch-output
    - remove-build-sshkey
- hosts: localhost
  roles:
    - merge-output-to-logs
    - upload-logs
"""

PROJECT = {
    'tox.ini': ('[tox]\nenvlist = py3\nskipsdist = True\n\n'
                '[testenv]\ncommands = python -m unittest discover -s tests -v\n'),
    'tests/__init__.py': '',
    # run by test-setup, on the node
    'tools/test-setup.sh': '#!/bin/sh\necho "test-setup ran on $(uname -n)" > test-setup.out\n',
    'tests/test_sum.py': ('import unittest\n\n\nclass TestSum(unittest.TestCase):\n'
                          '    def test_sum(self):\n'
                          '        self.assertEqual(sum([1, 2]), 3)\n'),
}


def _zuul_jobs_files() -> dict[str, str]:
    root = corpus.path('zuul-jobs-repo-2019')
    files = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, 'rb') as f:
                data = f.read()
            try:
                files[os.path.relpath(path, root)] = data.decode('utf-8')
            except UnicodeDecodeError:
                continue        # no binary file matters to the roles used here
    return files


@pytest.fixture(scope='module')
def ansible8():
    """Ansible 8 installed by zuul-manage-ansible into its default root
    (left there: a later run finds it installed and reuses it)."""
    env = dict(os.environ, ANSIBLE_8_EXTRA_PACKAGES='ansible==8.* netaddr')
    proc = subprocess.run([sys.executable, '-m', 'zuul.cmd.manage_ansible', '8'],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        pytest.fail(f'zuul-manage-ansible could not install Ansible 8:\n{proc.stderr}')
    print(proc.stdout.strip())


def _beside_usr() -> str:
    """A scratch dir on /usr's file system if there is one (the image
    hard-links /usr: seconds, not a copy of gigabytes)."""
    usr = os.stat('/usr').st_dev
    for candidate in (tempfile.gettempdir(), '/var/tmp', os.path.dirname(TOP)):
        try:
            if os.stat(candidate).st_dev == usr and os.access(candidate, os.W_OK):
                return candidate
        except OSError:
            continue
    return tempfile.gettempdir()


@pytest.fixture(scope='module')
def node_rootfs():
    """A worker image for the node (a directory), built once per run."""
    ready = os.environ.get('GATEKEEP_ZUUL_JOBS_ROOTFS')
    if ready:
        yield ready
        return
    base = tempfile.mkdtemp(prefix='zjroot', dir=_beside_usr())
    out = os.path.join(base, 'worker')
    env = dict(os.environ, IMAGE_HOST_USR='1', IMAGE_PIP_PACKAGES='tox<4')
    proc = subprocess.run(['bash', ROOTFS_IMAGE, '-t', 'dir', '-o', out],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f'{ROOTFS_IMAGE} could not build the worker image:\n{proc.stderr[-3000:]}')
    yield out
    shutil.rmtree(base, ignore_errors=True)


def _file_state(path: str):
    try:
        with open(path, 'rb') as f:
            return f.read()
    except OSError:
        return None


def _roles_that_ran(tasks: dict) -> set[str]:
    """Roles with at least one task that ran (not skipped) on some host."""
    ran = set()
    for name, hosts in tasks.items():
        if ' : ' not in name:
            continue
        if any(not (r or {}).get('skipped') for r in hosts.values()):
            ran.add(name.split(' : ', 1)[0])
    return ran


def test_zuul_jobs_base_and_tox_roles_run_unmodified(exec_env, ansible8, node_rootfs,  # noqa: F811
                                                     capsys):
    env = exec_env
    log_root = os.path.join(env.root, 'logserver')
    os.makedirs(log_root)
    env.settings.trusted_rw_paths = [log_root]
    env.upstream.create('zuul/zuul-jobs', _zuul_jobs_files())
    env.upstream.create('org/config', {'playbooks/base/pre.yaml': PRE,
                                       'playbooks/base/post.yaml': POST,
                                       'playbooks/tox/pre.yaml': TOX_PRE,
                                       'playbooks/tox/run.yaml': TOX_RUN,
                                       'playbooks/tox/post.yaml': TOX_POST})
    env.upstream.create('org/pyproj', PROJECT)
    project = env.upstream.path('org/pyproj')
    os.chmod(os.path.join(project, 'tools', 'test-setup.sh'), 0o755)
    git(project, 'commit', '-q', '-a', '-m', 'test-setup.sh is executable')
    roles = [RoleSpec(connection='gerrit', project='zuul/zuul-jobs')]

    def trusted(path):
        return playbook('org/config', path, trusted=True, roles=roles)
    job = JobSpec(
        name='tox-py3', ansible_version='8', timeout=1800,
        pre_run=[trusted('playbooks/base/pre.yaml'), trusted('playbooks/tox/pre.yaml')],
        run=[trusted('playbooks/tox/run.yaml')],
        post_run=[trusted('playbooks/tox/post.yaml'), trusted('playbooks/base/post.yaml')],
        vars={'tox_envlist': 'py3'},
        # upload-logs sets zuul_logserver_root in its vars/main.yaml, which
        # only extra vars (or role parameters) outrank: a job's extra-vars
        extra_vars={'zuul_logserver_root': log_root})
    host_keys = os.path.expanduser('~/.ssh/authorized_keys')
    host_keys_before = _file_state(host_keys)
    manager = env.factory.manager       # the harness's netns nodes (tests/harness/nodes.py)
    node = manager.create(f't{os.getpid()}-zuul-jobs', [env.factory.keypair.public_key],
                          rootfs=node_rootfs)
    node_keys = os.path.join(node.state_dir, 'upper', 'root', '.ssh', 'authorized_keys')
    try:
        request = execute_request('a' * 32, job, [node_spec(node, 'ubuntu-bionic')],
                                  [item('org/pyproj', number=12345)])
        result, build = run_build(env, request)
        node_keys_after = _file_state(node_keys)
    finally:
        manager.delete(node)
    tasks = task_results(build)
    ran = _roles_that_ran(tasks)
    with capsys.disabled():
        print('\nzuul-jobs roles exercised: ' + ', '.join(r for r in BASE_ROLES + TOX_ROLES
                                                         if r in ran))
        print('zuul-jobs roles asked for that did not run: '
              + (', '.join(r for r in BASE_ROLES + TOX_ROLES if r not in ran) or 'none'))
        for what, why in LEFT_OUT.items():
            print(f'left out: {what}: {why}')
    assert result.result == 'SUCCESS', _failures(tasks) or explain(build)
    assert set(BASE_ROLES + TOX_ROLES) <= ran, sorted(set(BASE_ROLES + TOX_ROLES) - ran)
    output = _read_text(build.jobdir.job_output_txt)
    # the tox run's output came line by line from the node (zuul_console)
    node_lines = [line for line in output.splitlines() if '| ubuntu-bionic | ' in line]
    assert any('py3: commands succeeded' in line for line in node_lines), output[-3000:]
    assert any('test_sum (test_sum.TestSum' in line for line in node_lines)
    assert not tasks['test-setup : Run tools/test-setup.sh']['ubuntu-bionic'].get('skipped')
    # add-build-sshkey changed the node's root's keys, never this machine's;
    # remove-build-sshkey took the build key out again
    assert _file_state(host_keys) == host_keys_before
    assert node_keys_after is not None and b'ssh-rsa' not in node_keys_after
    # upload-logs put the build's logs under zuul_log_path in the log root
    # (a change: <change[-2:]>/<change>/<patchset>/<pipeline>/<job>/<build[:7]>)
    uploaded = os.path.join(log_root, '45', '12345', '1', 'check', 'tox-py3', 'a' * 7)
    assert os.path.isfile(os.path.join(uploaded, 'job-output.txt.gz')), \
        (sorted(os.path.relpath(os.path.join(d, n), log_root)
                for d, _, names in os.walk(log_root) for n in names),
         {name: r for name, r in tasks.items() if name.startswith('upload-logs')})
    info = _read_text(os.path.join(uploaded, 'zuul-info', 'zuul-info.ubuntu-bionic.txt'))
    assert 'Host & kernel' in info      # validate-host's zuul_debug_info ran on the node
    assert os.path.isfile(os.path.join(uploaded, 'zuul-info', 'host-info.ubuntu-bionic.yaml'))
    assert os.path.isfile(os.path.join(uploaded, 'zuul-info', 'inventory.yaml'))
    assert any(n.startswith('py3') for n in os.listdir(os.path.join(uploaded, 'tox')))


def _failures(tasks: dict) -> str:
    """The failed tasks' messages (and their loop items')."""
    lines = []
    for name, hosts in tasks.items():
        for host, r in hosts.items():
            if not (r or {}).get('failed'):
                continue
            lines.append(f'{name} on {host}: {r.get("msg", "")} {r.get("stderr", "")}')
            for sub in r.get('results') or []:
                if isinstance(sub, dict) and sub.get('failed'):
                    lines.append(f'  item {sub.get("item")!r}: {sub.get("msg", "")} '
                                 f'{sub.get("stderr", "")}')
    return '\n'.join(lines)


def _read_text(path: str) -> str:
    with open(path, errors='replace') as f:
        return f.read()


# -- installed collections in untrusted playbooks ------------------------------
UNTRUSTED_COLLECTIONS = """
- hosts: all
  tasks:
    - name: a filter of an installed collection (ansible.utils, with netaddr)
      debug:
        msg: "{{ '2001:db8::1' | ipwrap }} {{ '192.0.2.1' | ansible.utils.ipwrap }}"
      register: wrapped
    - name: a module of an installed collection, on the node
      community.general.archive:
        path: /etc/passwd
        dest: /tmp/passwd.gz
    - assert:
        that: wrapped.msg == '[2001:db8::1] 192.0.2.1'
"""

PLANTED_COLLECTION = """
- hosts: all
  tasks:
    - debug:
        msg: "{{ 'x' | evil.planted.mark }}"
"""

UNTRUSTED_SYNCHRONIZE = """
- hosts: all
  tasks:
    - name: pull into the build's logs
      synchronize:
        src: /etc/passwd
        dest: "{{ zuul.executor.log_root }}/"
        mode: pull
"""

PLANTED_FILTER = (
    'class FilterModule:\n'
    '    def filters(self):\n'
    '        return {"mark": self.mark}\n'
    '    def mark(self, value):\n'
    '        open(MARKER, "w").write("ran")\n'
    '        return value\n')


def test_untrusted_playbooks_use_installed_collections_never_their_own(
        exec_env, ansible8, node_rootfs):  # noqa: F811
    """As released Zuul: an untrusted playbook may use the collections
    installed with its Ansible (their filters run on the executor, their
    modules on the nodes); a collection the project brings beside its
    playbook (``playbooks/collections/ansible_collections/...``, which
    Ansible would load) is refused and never imported.  Unlike released
    Zuul, ``synchronize`` (whose module runs on the executor) is refused
    to untrusted playbooks (doc/source/compatibility.rst)."""
    env = exec_env
    marker = os.path.join(env.root, 'planted-marker')
    env.upstream.create('org/project', {'playbooks/ok.yaml': UNTRUSTED_COLLECTIONS,
                                        'playbooks/sync.yaml': UNTRUSTED_SYNCHRONIZE})
    env.upstream.create('org/evil', {
        'playbooks/planted.yaml': PLANTED_COLLECTION,
        'playbooks/collections/ansible_collections/evil/planted/plugins/filter/mark.py':
            PLANTED_FILTER.replace('MARKER', repr(marker)),
        'playbooks/collections/ansible_collections/evil/planted/galaxy.yml':
            'namespace: evil\nname: planted\nversion: 1.0.0\n'})
    manager = env.factory.manager
    node = manager.create(f't{os.getpid()}-collections', [env.factory.keypair.public_key],
                          rootfs=node_rootfs)
    results = {}
    for project, path in (('org/project', 'playbooks/ok.yaml'),
                          ('org/evil', 'playbooks/planted.yaml'),
                          ('org/project', 'playbooks/sync.yaml')):
        job = JobSpec(name='collections', ansible_version='8',
                      run=[playbook(project, path)])
        request = execute_request(f'{len(path):032x}', job,
                                  [node_spec(node, 'ubuntu-bionic')], [item(project)])
        try:
            results[path] = run_build(env, request)
        except BaseException:
            manager.delete(node)
            raise
    manager.delete(node)
    result, build = results['playbooks/ok.yaml']
    assert result.result == 'SUCCESS', (result.error_detail, explain(build))
    tasks = task_results(build)
    archived = tasks['a module of an installed collection, on the node']['ubuntu-bionic']
    assert archived['changed'], archived
    result, build = results['playbooks/planted.yaml']
    assert result.result != 'SUCCESS'
    assert 'collections found in org/evil/playbooks/planted.yaml' in result.error_detail
    assert not os.path.exists(marker), 'a collection the project brought was imported'
    # synchronize runs its module on the executor: refused for untrusted
    # playbooks here (released Zuul allows it within the work dir)
    result, build = results['playbooks/sync.yaml']
    assert result.result == 'FAILURE'
    assert 'running a module over a local connection' in _read_text(
        build.jobdir.job_output_txt)
