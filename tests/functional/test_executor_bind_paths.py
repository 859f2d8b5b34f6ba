"""``[executor] untrusted_ro_paths`` / ``untrusted_rw_paths``: real builds
whose untrusted playbooks (bubblewrap, ansible-playbook, an sshd node)
read from and fetch into host directories the administrator named, and
nothing more; and the settings' checks of the values."""

from __future__ import annotations

import configparser
import dataclasses
import os
import shutil

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
from zuul.executor.protocol import JobSpec
from zuul.executor.settings import ExecutorSettings

pytestmark = pytest.mark.skipif(shutil.which('bwrap') is None, reason='needs bubblewrap')

USE_PATHS = """
- hosts: controller
  gather_facts: false
  tasks:
    - name: read the read-only dir
      set_fact:
        ro_text: "{{ lookup('file', ro_dir + '/data.txt') }}"
      ignore_errors: true
    - name: a file on the node
      copy:
        content: fetched
        dest: /tmp/{{ zuul.build }}-node.txt
    - name: fetch into the read-write dir
      fetch:
        src: /tmp/{{ zuul.build }}-node.txt
        dest: "{{ rw_dir }}/fetched.txt"
        flat: true
      ignore_errors: true
    - name: fetch into the read-only dir
      fetch:
        src: /tmp/{{ zuul.build }}-node.txt
        dest: "{{ ro_dir }}/fetched.txt"
        flat: true
      ignore_errors: true
    - zuul_return:
        data:
          ro_text: "{{ ro_text | default('unreadable') }}"
"""


def _dirs(root: str) -> tuple[str, str]:
    ro_dir, rw_dir = os.path.join(root, 'site-ro'), os.path.join(root, 'site-rw')
    os.makedirs(ro_dir)
    os.makedirs(rw_dir)
    with open(os.path.join(ro_dir, 'data.txt'), 'w') as f:
        f.write('site data')
    return ro_dir, rw_dir


def _run(env, ro_dir: str, rw_dir: str):
    env.upstream.create('org/project', {'playbooks/paths.yaml': USE_PATHS})
    job = JobSpec(name='paths', vars={'ro_dir': ro_dir, 'rw_dir': rw_dir},
                  run=[playbook('org/project', 'playbooks/paths.yaml')])
    request = execute_request('3' * 32, job, [node_spec(env.factory.make(), 'controller')],
                              [item('org/project')])
    return run_build(env, request)


def test_untrusted_playbooks_use_the_paths_they_are_given(exec_env):  # noqa: F811
    ro_dir, rw_dir = _dirs(exec_env.root)
    exec_env.settings = dataclasses.replace(exec_env.settings, untrusted_ro_paths=[ro_dir],
                                            untrusted_rw_paths=[rw_dir])
    result, build = _run(exec_env, ro_dir, rw_dir)
    assert result.result == 'SUCCESS', explain(build)
    assert result.data['ro_text'] == 'site data'
    with open(os.path.join(rw_dir, 'fetched.txt')) as f:
        assert f.read() == 'fetched'
    # Read-only stays read-only.
    assert task_results(build)['fetch into the read-only dir']['controller']['status'] \
        == 'FAILED (ignored)'
    assert os.listdir(ro_dir) == ['data.txt']


def test_without_the_keys_untrusted_playbooks_see_neither(exec_env):  # noqa: F811
    ro_dir, rw_dir = _dirs(exec_env.root)
    result, build = _run(exec_env, ro_dir, rw_dir)
    assert result.result == 'SUCCESS', explain(build)
    assert result.data['ro_text'] == 'unreadable'
    tasks = task_results(build)
    for name in ('read the read-only dir', 'fetch into the read-write dir'):
        assert tasks[name]['controller']['status'] == 'FAILED (ignored)', name
    assert os.listdir(rw_dir) == [] and os.listdir(ro_dir) == ['data.txt']


def _config(**keys) -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read_dict({'executor': keys})
    return config


def test_bind_path_settings_parsed_and_checked(tmp_path):
    a, b = tmp_path / 'a', tmp_path / 'b'
    a.mkdir()
    b.mkdir()
    settings = ExecutorSettings.from_config(_config(
        untrusted_ro_paths=f'{a}:{b}', untrusted_rw_paths=str(b),
        trusted_ro_paths=str(a), trusted_rw_paths=str(b)))
    assert settings.untrusted_ro_paths == [str(a), str(b)]
    assert settings.untrusted_rw_paths == [str(b)]
    assert (settings.trusted_ro_paths, settings.trusted_rw_paths) == ([str(a)], [str(b)])
    with pytest.raises(ValueError, match=r'untrusted_ro_paths: .*relative.* is not an absolute'):
        ExecutorSettings.from_config(_config(untrusted_ro_paths='relative/dir'))
    with pytest.raises(ValueError, match=r'trusted_rw_paths: /nonexistent-zuul does not exist'):
        ExecutorSettings.from_config(_config(trusted_rw_paths='/nonexistent-zuul'))


def test_zuul_executor_names_a_bad_value_and_does_not_start(tmp_path, capsys):
    from zuul.cmd.executor import main
    conf = tmp_path / 'zuul.conf'
    conf.write_text('[executor]\nuntrusted_rw_paths=/nonexistent-zuul\n')
    with pytest.raises(SystemExit) as exc:
        main(['-c', str(conf), '-d'])
    assert exc.value.code == 2
    assert 'untrusted_rw_paths: /nonexistent-zuul does not exist' in capsys.readouterr().err
