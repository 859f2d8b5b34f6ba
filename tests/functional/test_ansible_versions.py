"""Several Ansible versions side by side, for real.

``zuul-manage-ansible`` installs ansible-core 2.18 (Ansible 11) from the
package registry into a root given with ``-r`` (about 15 s here); the
executor, with ``ansible_root`` pointing there, runs a job asking for
``ansible-version: 11`` with that install and a job asking for nothing
with its own (2.19), over SSH to an sshd node. An untrusted playbook runs
in the executor's bubblewrap sandbox, which binds the install read-only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid

import pytest

from tests.functional.test_executor_builds import PLAYS_HEADER, explain
from tests.functional.test_executor_support import (  # noqa: F401 - fixtures
    exec_env,
    exec_keypair,
    exec_nodes,
    execute_request,
    item,
    node_spec,
    playbook,
)
from zuul.executor import ansible_versions as av
from zuul.executor.build import BuildExecution
from zuul.executor.protocol import JobSpec
from zuul.executor.server import default_sandbox
from zuul.executor.sshagent import SshAgent
from zuul.executor.vars import installed_ansible_version

pytestmark = pytest.mark.skipif(shutil.which('bwrap') is None, reason='needs bubblewrap')

OTHER = '2.18'



def _report(who: str) -> str:
    """A playbook returning, under ``who``, the Ansible version it runs
    with and the one ``zuul.ansible_version`` says."""
    return PLAYS_HEADER + (
        '    - zuul_return:\n'
        '        data:\n'
        f'          {who}:\n'
        '            zuul: "{{ zuul.ansible_version }}"\n'
        '            running: "{{ ansible_version.major }}.{{ ansible_version.minor }}"\n')


def manage_ansible(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-m', 'zuul.cmd.manage_ansible', *args],
                          capture_output=True, text=True)


@pytest.fixture(scope='module')
def ansible_root():
    root = tempfile.mkdtemp(prefix='zansible')
    proc = manage_ansible('-r', root, '11')
    assert proc.returncode == 0, proc.stderr + proc.stdout
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_manage_ansible_installs_a_working_version(ansible_root):
    path = av.install_dir(ansible_root, OTHER)
    out = subprocess.run([os.path.join(path, 'bin', 'ansible-playbook'), '--version'],
                         capture_output=True, text=True).stdout
    assert f'[core {OTHER}.' in out
    listed = manage_ansible('-l', '-r', ansible_root).stdout.splitlines()
    assert f'11 (ansible-core {OTHER}): installed in {path}' in listed
    assert '9 (ansible-core 2.16): not installed' in listed
    again = manage_ansible('-r', ansible_root, '11')
    assert again.returncode == 0 and 'already installed' in again.stdout
    # -u upgrades in place (already the newest: pip keeps it) and re-checks.
    upgraded = manage_ansible('-u', '-r', ansible_root, '2.18')
    assert upgraded.returncode == 0, upgraded.stderr
    assert f'ansible-core {OTHER}: {OTHER}.' in upgraded.stdout


def test_a_failed_install_leaves_nothing_behind(tmp_path):
    root = str(tmp_path / 'root')
    proc = subprocess.run([sys.executable, '-m', 'zuul.cmd.manage_ansible', '-r', root,
                           '2.17'], capture_output=True, text=True,
                          env=dict(os.environ, ANSIBLE_EXTRA_PACKAGES='not==a==requirement'))
    assert proc.returncode == 1
    assert 'zuul-manage-ansible: error:' in proc.stderr and 'pip install' in proc.stderr
    assert not os.path.exists(av.install_dir(root, '2.17'))


def _run(env, job: JobSpec, sandbox=None):
    env.settings.keep_jobdir = True
    env.upstream.create('org/config', {'playbooks/report.yaml': _report('trusted')})
    env.upstream.create('org/project', {'playbooks/report.yaml': _report('untrusted')})
    node = env.factory.make()
    request = execute_request(uuid.uuid4().hex, job, [node_spec(node, 'controller')],
                              [item('org/project')])
    agent = SshAgent(os.path.join(env.root, 'agent.sock')).start(env.settings.private_key_file)
    try:
        build = BuildExecution(request, env.settings, env.merger,
                               sandbox=sandbox or default_sandbox(env.settings),
                               ssh_auth_sock=agent.socket_path)
        return build.run(), build
    finally:
        agent.stop()


def _report_job(version: str | None) -> JobSpec:
    return JobSpec(name='versions', ansible_version=version,
                   pre_run=[playbook('org/config', 'playbooks/report.yaml', trusted=True)],
                   run=[playbook('org/project', 'playbooks/report.yaml')])


@pytest.fixture
def reporting(exec_env, ansible_root):  # noqa: F811
    exec_env.settings.ansible_root = ansible_root
    return exec_env


@pytest.mark.parametrize('in_state_dir', [False, True])
def test_a_job_runs_with_the_ansible_version_it_asks_for(reporting, ansible_root,
                                                         in_state_dir):
    """The executor's own sandbox binds the install read-only for the
    untrusted playbook: outside any bound path (under the sandbox's
    private /tmp), or inside the state dir (hidden by a tmpfs)."""
    if in_state_dir:
        reporting.settings.state_dir = ansible_root
    sandbox = default_sandbox(reporting.settings)
    assert (ansible_root in sandbox.hidden_paths) == in_state_dir
    result, build = _run(reporting, _report_job('11'), sandbox)
    assert result.result == 'SUCCESS', explain(build)
    for who in ('trusted', 'untrusted'):
        assert result.data[who] == {'zuul': OTHER, 'running': OTHER}, explain(build)
    # zuul_stream records task results under 2.18 too (no result.host there).
    with open(build.jobdir.job_output_txt) as f:
        assert f.read().count('| controller | ok: Runtime:') == 2, explain(build)


def test_a_job_asking_for_nothing_runs_the_executors_own(reporting):
    own = installed_ansible_version(reporting.settings.ansible_playbook)
    assert own != OTHER
    result, build = _run(reporting, _report_job(None))
    assert result.result == 'SUCCESS', explain(build)
    for who in ('trusted', 'untrusted'):
        assert result.data[who] == {'zuul': own, 'running': own}, explain(build)


@pytest.mark.parametrize('version,message', [
    ('9', 'Ansible 9 (ansible-core 2.16) is not installed on this executor'),
    ('2.9', 'Ansible 2.9 is not a supported version'),
])
def test_a_version_not_available_is_an_error(reporting, version, message):
    result, build = _run(reporting, _report_job(version))
    assert result.result == 'ERROR'
    assert message in (result.error_detail or ''), result
