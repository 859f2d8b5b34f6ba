"""Every ``zuul.*`` variable released Zuul documents (the list in
tests/fixtures/zuul_job_variables.yaml), as a real build's playbook sees it:
real ansible-playbook over SSH to an sshd node, real git repos."""

from __future__ import annotations

import base64
import os

import yaml

from tests.functional.test_executor_builds import explain, run_build
from tests.functional.test_executor_support import (  # noqa: F401 - fixtures
    HOSTNAME,
    exec_env,
    exec_keypair,
    exec_nodes,
    execute_request,
    item,
    node_spec,
    playbook,
)
from zuul.executor.protocol import JobSpec

FIXTURE = os.path.join(os.path.dirname(__file__), '..', 'fixtures', 'zuul_job_variables.yaml')

DUMP = """
- hosts: all
  gather_facts: false
  tasks:
    - zuul_return:
        data:
          seen: "{{ zuul }}"
          decoded_message: "{{ zuul.message | b64decode }}"
"""

TYPES = {'str': str, 'int': int, 'bool': bool, 'list': list, 'dict': dict}


def documented() -> dict:
    with open(FIXTURE) as f:
        return yaml.safe_load(f)


def type_errors(section: str, spec: dict, value: dict) -> list[str]:
    """Names of ``spec`` missing from ``value`` or of another type."""
    errors = []
    for name, typ in spec.items():
        if name not in value:
            errors.append(f'{section}.{name}: missing')
            continue
        nullable = typ.endswith('?')
        want = TYPES[typ.rstrip('?')]
        got = value[name]
        if got is None and nullable:
            continue
        # bool is an int in Python: keep them apart.
        if not isinstance(got, want) or (want is int and isinstance(got, bool)):
            errors.append(f'{section}.{name}: {type(got).__name__} {got!r}, '
                          f'documented {typ}')
    return errors


def test_every_documented_zuul_variable_is_set_with_its_type(exec_env):  # noqa: F811
    env = exec_env
    env.upstream.create('org/project', {'playbooks/run.yaml': DUMP, 'a.txt': 'zero\n'})
    env.upstream.create('org/lib', {'README': 'lib\n'})
    ref1 = env.upstream.add_change('org/project', 1, {'a.txt': 'one\n'})
    node = env.factory.make()
    job = JobSpec(name='vars-job', run=[playbook('org/project', 'playbooks/run')],
                  timeout=600, attempts=2, tags=['zeta', 'alpha'],
                  required_projects=[])
    it = item('org/project', 1, ref1)
    it.change_url = 'https://review.example.org/1'
    it.message = 'change 1\n\nA body with ünïcode.\n'
    it.topic = 'vars'
    request = execute_request('c' * 32, job, [node_spec(node, 'node')], [it])
    request.zuul.event_id = 'ev-1234'
    request.zuul.child_jobs = ['child-a', 'child-b']
    request.zuul.artifacts = [{
        'project': 'org/project', 'change': '1', 'patchset': '1', 'job': 'parent',
        'name': 'docs', 'url': 'https://logs.example.org/docs/',
        'metadata': {'type': 'html'}}]

    result, build = run_build(env, request)
    assert result.result == 'SUCCESS', explain(build)
    seen = result.data['seen']
    doc = documented()

    errors = type_errors('zuul', {**doc['always'], **doc['change']}, seen)
    errors += type_errors('zuul.project', doc['project'], seen['project'])
    errors += type_errors('zuul.executor', doc['executor'], seen['executor'])
    for key in ('items', 'build_refs', 'buildset_refs'):
        assert seen[key], key
        for n, entry in enumerate(seen[key]):
            errors += type_errors(f'zuul.{key}[{n}]',
                                  {**doc['ref_item'], **doc['change_item']}, entry)
            errors += type_errors(f'zuul.{key}[{n}].project', doc['project'],
                                  entry['project'])
    assert seen['projects']
    for name, project in seen['projects'].items():
        errors += type_errors(f'zuul.projects[{name}]', doc['projects'], project)
    for n, art in enumerate(seen['artifacts']):
        errors += type_errors(f'zuul.artifacts[{n}]', doc['artifact'], art)
    ctx = seen['playbook_context']
    errors += type_errors('zuul.playbook_context', doc['playbook_context'], ctx)
    assert ctx['playbooks'], ctx
    for n, pb in enumerate(ctx['playbooks']):
        errors += type_errors(f'zuul.playbook_context.playbooks[{n}]', doc['playbook'], pb)
    assert ctx['playbook_projects'], ctx
    for path, pp in ctx['playbook_projects'].items():
        errors += type_errors(f'zuul.playbook_context.playbook_projects[{path}]',
                              doc['playbook_project'], pp)
    assert not errors, '\n'.join(errors)

    # Values, not only types.
    assert base64.b64decode(seen['message']).decode('utf8') == it.message
    assert result.data['decoded_message'] == it.message
    assert seen['change_message'] == it.message
    assert seen['items'][-1]['change_message'] == it.message
    assert (seen['change'], seen['patchset'], seen['branch']) == ('1', '1', 'master')
    assert seen['topic'] == 'vars'
    assert seen['event_id'] == 'ev-1234'
    assert seen['jobtags'] == ['alpha', 'zeta']
    assert seen['child_jobs'] == ['child-a', 'child-b']
    assert seen['artifacts'][0]['url'] == 'https://logs.example.org/docs/'
    assert (seen['attempts'], seen['max_attempts'], seen['timeout']) == (1, 2, 600)
    major, minor = seen['ansible_version'].split('.')
    assert major.isdigit() and minor.isdigit()
    canonical = f'{HOSTNAME}/org/project'
    project = seen['projects'][canonical]
    assert len(project['commit']) == 40 and project['checkout'] == 'master'
    assert ctx['playbooks'][0]['path'].endswith('playbooks/run.yaml')
    assert [pp['canonical_name'] for pp in ctx['playbook_projects'].values()] == [canonical]
