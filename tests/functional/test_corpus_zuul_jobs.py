"""The real zuul-jobs of 2019 (../shared/corpus/zuul-jobs-repo-2019),
unmodified, through our executor onto a network-namespace node: a base
job built from its own roles and the tox job's roles test a small Python
project, and the build succeeds with its logs where upload-logs put them.

Corpus tier (``GATEKEEP_CORPUS``). It also needs:

- zuul's ``zuul_console`` module (issue 28: ``start-zuul-console`` and
  ``prepare-workspace`` start it on the node, and the roles' command
  output is streamed through it); until it is on main the test is skipped
  saying so;
- Ansible 8 with its collections, as released Zuul installs it: the
  roles use ``include:`` (gone from ansible-core 2.16 on) and modules and
  filters that moved into collections (``synchronize``,
  ``authorized_key``: ansible.posix; ``archive``, ``git_config``:
  community.general; ``ipwrap``: ansible.utils, with ``netaddr``).
  ``zuul-manage-ansible`` installs it here with
  ``ANSIBLE_8_EXTRA_PACKAGES='ansible==8.* netaddr'`` (from the package
  registry, once per run);
- a node with a file system of its own holding python3, git, rsync and
  pip (a netns label with a ``rootfs``): the roles change the node user's
  ``~/.ssh`` (``add-build-sshkey`` adds a key to ``authorized_keys``,
  copies one to ``id_rsa``) and install ``tox`` (``ensure-tox``, from the
  package registry). On a netns node without a rootfs that user's files
  are the host's, so the test refuses such a node (``NODE_ROOTFS``,
  below, names the image directory to boot from when one exists), and
  the node's sshd must also read ``~/.ssh/authorized_keys`` (the netns
  driver points it at its own file only).

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
    item,
    node_spec,
    playbook,
)
from tests.harness import corpus
from zuul.executor.protocol import JobSpec, RoleSpec

pytestmark = [pytest.mark.corpus,
              pytest.mark.skipif(shutil.which('bwrap') is None, reason='needs bubblewrap')]

# A root file system for the node (tools/netns-rootfs-image.sh builds
# one; it must hold python3, git, rsync and pip for these roles).
NODE_ROOTFS = os.environ.get('GATEKEEP_ZUUL_JOBS_ROOTFS')

ZUUL_CONSOLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), 'zuul', 'ansible', 'library', 'zuul_console.py')

BASE_ROLES = ['emit-job-header', 'log-inventory', 'add-build-sshkey', 'start-zuul-console',
              'validate-host', 'prepare-workspace', 'ensure-output-dirs', 'fetch-output',
              'remove-build-sshkey', 'merge-output-to-logs', 'set-zuul-log-path-fact',
              'upload-logs']
TOX_ROLES = ['ensure-tox', 'tox', 'fetch-tox-output', 'fetch-subunit-output']
LEFT_OUT = {
    'prepare-workspace-git, mirror-workspace-git-repos':
        'alternatives to prepare-workspace (one workspace role is enough)',
    'upload-logs to a remote log server':
        'uploads go to a local log root (zuul_logserver_root on the executor)',
    "the tox job's other roles (revoke-sudo, ensure-python, bindep, test-setup)":
        'not in the list asked for; revoke-sudo would edit the host\'s sudoers '
        '(netns nodes share the host\'s files)',
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

TOX_PRE = """
- hosts: all
  roles:
    - ensure-tox
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
def ansible8_root():
    root = tempfile.mkdtemp(prefix='zj8')
    env = dict(os.environ, ANSIBLE_8_EXTRA_PACKAGES='ansible==8.* netaddr')
    proc = subprocess.run([sys.executable, '-m', 'zuul.cmd.manage_ansible', '-r', root, '8'],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        pytest.fail(f'zuul-manage-ansible could not install Ansible 8:\n{proc.stderr}')
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_zuul_jobs_base_and_tox_roles_run_unmodified(exec_env, request, capsys):  # noqa: F811
    if not os.path.exists(ZUUL_CONSOLE):
        pytest.skip('waits for issue 28: zuul_console (start-zuul-console, '
                    'prepare-workspace) is not in zuul/ansible/library yet')
    if not NODE_ROOTFS:
        pytest.skip('needs a node with a file system of its own '
                    '(GATEKEEP_ZUUL_JOBS_ROOTFS=<rootfs dir> with python3, git, rsync, pip): '
                    "the roles edit the node user's ~/.ssh and install tox, which on a "
                    "netns node without a rootfs are the host's")
    ansible8_root = request.getfixturevalue('ansible8_root')   # installed only now
    env = exec_env
    log_root = os.path.join(env.root, 'logserver')
    os.makedirs(log_root)
    env.settings.ansible_root = ansible8_root
    env.settings.trusted_rw_paths = [log_root]
    env.upstream.create('zuul/zuul-jobs', _zuul_jobs_files())
    env.upstream.create('org/config', {'playbooks/base/pre.yaml': PRE,
                                       'playbooks/base/post.yaml': POST,
                                       'playbooks/tox/pre.yaml': TOX_PRE,
                                       'playbooks/tox/run.yaml': TOX_RUN,
                                       'playbooks/tox/post.yaml': TOX_POST})
    env.upstream.create('org/pyproj', PROJECT)
    roles = [RoleSpec(connection='gerrit', project='zuul/zuul-jobs')]

    def trusted(path):
        return playbook('org/config', path, trusted=True, roles=roles)
    job = JobSpec(
        name='tox-py3', ansible_version='8', timeout=1800,
        pre_run=[trusted('playbooks/base/pre.yaml'), trusted('playbooks/tox/pre.yaml')],
        run=[trusted('playbooks/tox/run.yaml')],
        post_run=[trusted('playbooks/tox/post.yaml'), trusted('playbooks/base/post.yaml')],
        vars={'tox_envlist': 'py3', 'zuul_work_dir': '{{ zuul.project.src_dir }}',
              'zuul_logserver_root': log_root})
    manager = env.factory.manager       # the harness's netns nodes (tests/harness/nodes.py)
    node = manager.create(f't{os.getpid()}-zuul-jobs', [env.factory.keypair.public_key],
                          rootfs=NODE_ROOTFS)
    try:
        request = execute_request('a' * 32, job, [node_spec(node, 'ubuntu-bionic')],
                                  [item('org/pyproj', number=1)])
        result, build = run_build(env, request)
    finally:
        manager.delete(node)
    with capsys.disabled():
        print('\nzuul-jobs roles exercised: ' + ', '.join(BASE_ROLES + TOX_ROLES))
        for what, why in LEFT_OUT.items():
            print(f'left out: {what}: {why}')
    assert result.result == 'SUCCESS', explain(build)
    tasks = task_results(build)
    assert any(name.startswith('tox : Run tox') for name in tasks), sorted(tasks)
    # upload-logs put the build's logs under zuul_log_path in the log root
    # (a change: <change[-2:]>/<change>/<patchset>/<pipeline>/<job>/<build[:7]>)
    uploaded = os.path.join(log_root, '01', '1', '1', 'check', 'tox-py3', 'a' * 7)
    assert os.path.isfile(os.path.join(uploaded, 'job-output.txt.gz')), explain(build)
    assert os.path.isdir(os.path.join(uploaded, 'zuul-info'))
    assert os.listdir(os.path.join(uploaded, 'tox'))
