"""Which ``ansible-playbook`` runs a job: the job's ``ansible-version``
(else the tenant's ``default-ansible-version``, else zuul.conf's
``[scheduler] default_ansible_version``) picks one of the Ansible installs
on the executor; no version asked for runs the executor's default."""

from __future__ import annotations


class UnknownAnsibleVersionError(Exception):
    """The job asks for an Ansible version this executor does not have."""


def playbook_command(settings, version: str | None) -> str:
    """Path of the ``ansible-playbook`` for ``version`` (None: default)."""
    if not version:
        return settings.ansible_playbook
    from zuul.executor.vars import installed_ansible_version
    if installed_ansible_version(settings.ansible_playbook) == str(version):
        return settings.ansible_playbook
    raise UnknownAnsibleVersionError(
        f'Ansible {version} is not installed on this executor '
        f'(it has {installed_ansible_version(settings.ansible_playbook)})')
