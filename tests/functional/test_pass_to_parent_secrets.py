"""A secret's ``pass-to-parent``, from configuration to a real build.

The tenant is loaded and the job frozen by the scheduler's own
``Layouts`` (secrets encrypted with the project's key, decrypted for the
executor payload), then the build runs for real: ansible-playbook over
SSH to an sshd node, the parent's untrusted playbook in the bubblewrap
sandbox. Each playbook reports the secrets it sees with ``zuul_return``.
"""

from __future__ import annotations

import shutil
import uuid

import pytest

from tests.functional.test_executor_builds import PLAYS_HEADER, explain, run_build
from tests.functional.test_executor_support import (  # noqa: F401 - fixtures
    exec_env,
    exec_keypair,
    exec_nodes,
    execute_request,
    item,
    node_spec,
)
from tests.security.speculative import SpeculativeTenant
from tests.unit.test_layout_loader import PIPELINES
from zuul.lib import encryption
from zuul.lib.keystore import KeyStore

pytestmark = pytest.mark.skipif(shutil.which('bwrap') is None, reason='needs bubblewrap')

UPLOAD_TOKEN = 'upload-token-1f3a'
OWN_TOKEN = 'own-token-9c2e'


def _report(who: str) -> str:
    """A playbook returning, under ``who``, the secrets it sees."""
    return PLAYS_HEADER + (
        '    - zuul_return:\n'
        '        data:\n'
        f'          {who}:\n'
        "            upload: \"{{ upload.token | default('absent') }}\"\n"
        "            own: \"{{ own.token | default('absent') }}\"\n")


PLAYBOOKS = {
    'org/project-config': {'playbooks/base-pre.yaml': _report('base_pre')},
    'org/lib': {'playbooks/publish.yaml': _report('lib_run')},
    'org/app': {'playbooks/app-post.yaml': _report('app_post')},
}

CONFIG = PIPELINES.replace('    run: playbooks/base.yaml', '    pre-run: playbooks/base-pre.yaml')

LIB_JOBS = """
- job:
    name: publish-base
    run: playbooks/publish.yaml
"""

APP_JOBS = """
- secret:
    name: upload-creds
    data:
      token: !encrypted/pkcs1-oaep
{upload}
- secret:
    name: own-creds
    data:
      token: !encrypted/pkcs1-oaep
{own}
- job:
    name: publish-app
    parent: publish-base
    post-run: playbooks/app-post.yaml
    secrets:
      - name: upload
        secret: upload-creds
        pass-to-parent: true
      - name: own
        secret: own-creds
- job:
    name: publish-unpassed
    parent: publish-base
    post-run: playbooks/app-post.yaml
    secrets:
      - name: upload
        secret: upload-creds
- project:
    gate:
      jobs: [publish-app, publish-unpassed]
"""


def _encrypted(keystore: KeyStore, value: str) -> str:
    public = keystore.get_project_key('gerrit', 'org/app').public_key()
    return ''.join(f'        - {chunk}\n'
                   for chunk in encryption.encrypt_chunks(value.encode(), public))


@pytest.fixture
def frozen_specs(tmp_path):
    """{job name: JobSpec} as the scheduler would send them for a change
    to org/app in the post-review gate pipeline."""
    keystore = KeyStore(str(tmp_path / 'state'), key_bits=2048)
    app = APP_JOBS.format(upload=_encrypted(keystore, UPLOAD_TOKEN),
                          own=_encrypted(keystore, OWN_TOKEN))
    tenant = SpeculativeTenant(tmp_path, {'org/project-config': {'zuul.yaml': CONFIG},
                                          'org/lib': {'zuul.yaml': LIB_JOBS},
                                          'org/app': {'zuul.yaml': app}})
    tenant.layouts.keystore = keystore
    queue_item = tenant.propose('org/app', 1)
    jobs, errors = tenant.freeze('gate', queue_item)
    assert errors == []
    return {job.name: tenant.layouts.job_spec_for(job, queue_item) for job in jobs}


def _run(env, job_spec) -> tuple[dict, object]:
    for project, files in PLAYBOOKS.items():
        env.upstream.create(project, {'zuul.yaml': '[]\n', **files})
    node = env.factory.make()
    request = execute_request(uuid.uuid4().hex, job_spec, [node_spec(node, 'controller')],
                              [item('org/app')])
    result, build = run_build(env, request)
    assert result.result == 'SUCCESS', explain(build)
    return result.data, build


def test_parent_playbooks_see_a_pass_to_parent_secret(exec_env, frozen_specs):  # noqa: F811
    spec = frozen_specs['publish-app']
    assert not spec.run[0].trusted and spec.pre_run[0].trusted
    data, build = _run(exec_env, spec)
    # The trusted base job's pre-run and org/lib's (sandboxed) run get the
    # passed secret only; the child's own post-run gets both.
    assert data['base_pre'] == {'upload': UPLOAD_TOKEN, 'own': 'absent'}, explain(build)
    assert data['lib_run'] == {'upload': UPLOAD_TOKEN, 'own': 'absent'}, explain(build)
    assert data['app_post'] == {'upload': UPLOAD_TOKEN, 'own': OWN_TOKEN}, explain(build)


def test_parent_playbooks_do_not_see_a_secret_not_passed(exec_env, frozen_specs):  # noqa: F811
    data, build = _run(exec_env, frozen_specs['publish-unpassed'])
    assert data['base_pre'] == {'upload': 'absent', 'own': 'absent'}, explain(build)
    assert data['lib_run'] == {'upload': 'absent', 'own': 'absent'}, explain(build)
    assert data['app_post'] == {'upload': UPLOAD_TOKEN, 'own': 'absent'}, explain(build)
