"""Choosing the ansible-playbook for a job's ``ansible-version``.

The installs here are small fake ones: a directory laid out as
zuul-manage-ansible leaves it, whose ``bin/ansible-playbook`` is a script
printing a version (tests/functional/test_ansible_versions.py installs a
real one)."""

from __future__ import annotations

import os
import stat
from types import SimpleNamespace

import pytest

from zuul.cmd import manage_ansible
from zuul.executor import ansible_versions as av


def _fake_playbook(path: str, core: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(f'#!/bin/sh\necho "ansible-playbook [core {core}.4]"\n')
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
    return path


def _fake_install(root, core: str, complete: bool = True) -> str:
    path = av.install_dir(str(root), core)
    _fake_playbook(os.path.join(path, 'bin', 'ansible-playbook'), core)
    if complete:
        with open(os.path.join(path, av.INSTALLED_MARKER), 'w') as f:
            f.write(f'{core}.4\n')
    return path


@pytest.fixture
def settings(tmp_path, monkeypatch):
    """An executor whose own Ansible is ansible-core 2.19, with an empty
    ``ansible_root`` and an empty ``<prefix>/lib/zuul/ansible``."""
    monkeypatch.setattr(av, 'default_install_root', lambda: str(tmp_path / 'prefix-root'))
    own = _fake_playbook(str(tmp_path / 'own' / 'ansible-playbook'), '2.19')
    return SimpleNamespace(ansible_playbook=own, state_dir=str(tmp_path / 'state'),
                           ansible_root=str(tmp_path / 'root'))


@pytest.mark.parametrize('version,core', [('9', '2.16'), (9, '2.16'), ('2.16', '2.16'),
                                          ('12', '2.19'), ('2.15', '2.15')])
def test_versions_are_named_by_ansible_major_or_core(version, core):
    assert av.core_version(version) == core


@pytest.mark.parametrize('version', ['2.9', '7', '2.20', 'latest', ''])
def test_unsupported_versions_are_refused(version):
    with pytest.raises(av.UnknownAnsibleVersionError, match='not a supported version'):
        av.core_version(version)


def test_no_version_or_the_executors_own_runs_the_default(settings):
    assert av.playbook_command(settings, None) == settings.ansible_playbook
    assert av.playbook_command(settings, '12') == settings.ansible_playbook
    assert av.playbook_command(settings, '2.19') == settings.ansible_playbook


def test_another_version_runs_from_ansible_root(settings):
    path = _fake_install(settings.ansible_root, '2.16')
    assert av.playbook_command(settings, '9') == os.path.join(path, 'bin', 'ansible-playbook')


def test_the_prefix_install_root_is_looked_in_first(settings):
    _fake_install(settings.ansible_root, '2.16')
    first = _fake_install(av.default_install_root(), '2.16')
    assert av.playbook_command(settings, '2.16') == os.path.join(first, 'bin',
                                                                 'ansible-playbook')


def test_ansible_root_defaults_to_the_state_dirs_ansible_bin(settings):
    settings.ansible_root = None
    path = _fake_install(os.path.join(settings.state_dir, 'ansible-bin'), '2.17')
    assert av.playbook_command(settings, '10') == os.path.join(path, 'bin', 'ansible-playbook')


def test_an_unfinished_install_is_not_used(settings):
    _fake_install(settings.ansible_root, '2.16', complete=False)
    with pytest.raises(av.UnknownAnsibleVersionError) as exc:
        av.playbook_command(settings, '9')
    message = str(exc.value)
    assert 'Ansible 9 (ansible-core 2.16) is not installed' in message
    assert 'its own is 2.19' in message and settings.ansible_root in message


def test_extra_packages_from_the_environment():
    environ = {'ANSIBLE_EXTRA_PACKAGES': 'a b', 'ANSIBLE_9_EXTRA_PACKAGES': 'c',
               'ANSIBLE_216_EXTRA_PACKAGES': 'd', 'ANSIBLE_10_EXTRA_PACKAGES': 'e'}
    assert av.extra_packages('2.16', environ) == ['a', 'b', 'c', 'd']
    assert av.extra_packages('2.15', environ) == ['a', 'b']


def test_manage_ansible_lists_supported_versions_and_installs(settings, capsys):
    _fake_install(settings.ansible_root, '2.18')
    assert manage_ansible.main(['-l', '-r', settings.ansible_root]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == '8 (ansible-core 2.15): not installed'
    assert lines[3] == (f'11 (ansible-core 2.18): installed in '
                        f'{av.install_dir(settings.ansible_root, "2.18")}')
    # Installed already: nothing is done without -u.
    assert manage_ansible.main(['-r', settings.ansible_root, '11']) == 0
    assert 'ansible-core 2.18: already installed' in capsys.readouterr().out


def test_manage_ansible_refuses_an_unsupported_version(settings, capsys):
    assert manage_ansible.main(['-r', settings.ansible_root, '2.9']) == 1
    assert 'error: Ansible 2.9 is not a supported version' in capsys.readouterr().err
    assert not os.path.exists(settings.ansible_root)
