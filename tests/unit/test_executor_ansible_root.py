"""``[executor] ansible_root``: read from zuul.conf (``~`` expanded, made
absolute) and where the executor looks for other Ansible versions."""

from __future__ import annotations

import configparser
import os

from zuul.executor import ansible_versions as av
from zuul.executor.settings import ExecutorSettings


def _settings(text: str) -> ExecutorSettings:
    config = configparser.ConfigParser()
    config.read_string(text)
    return ExecutorSettings.from_config(config)


def test_ansible_root_is_read_expanded_and_absolute(monkeypatch, tmp_path):
    monkeypatch.setenv('HOME', str(tmp_path))
    settings = _settings('[executor]\nstate_dir = /srv/state\nansible_root = ~/ansible\n')
    assert settings.ansible_root == str(tmp_path / 'ansible')
    assert av.install_roots(settings) == [av.default_install_root(), str(tmp_path / 'ansible')]
    monkeypatch.chdir(tmp_path)
    assert _settings('[executor]\nansible_root = rel/dir\n').ansible_root == \
        os.path.join(str(tmp_path), 'rel', 'dir')


def test_without_ansible_root_the_state_dirs_ansible_bin_is_used():
    settings = _settings('[executor]\nstate_dir = /srv/state\n')
    assert settings.ansible_root is None
    assert av.install_roots(settings)[-1] == '/srv/state/ansible-bin'
