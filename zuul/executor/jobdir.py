"""The directory a build runs in.

Layout (``<root>/<build uuid>/``)::

    work/                 the job's own tree (readable and writable by untrusted
      src/...                    playbooks): every required project, speculative state
                                 (laid out as the job's workspace-scheme says)
      logs/                      job-output.txt, job-output.json, job logs
      results.json               what zuul_return wrote
    ansible/              written by the executor only (read-only in the sandbox)
      inventory.yaml, known_hosts, ansible-trusted.cfg, ansible-untrusted.cfg
      fact-cache/                                  facts of trusted runs (hidden)
      no-plugins/                                  empty: every plugin path not ours
      passwd, group                                the sandbox's /etc/passwd, group
      trusted/project_<n>/<hostname>/<project>     config-project checkouts
      untrusted/project_<n>/<hostname>/<project>   untrusted checkouts
      <phase>_<n>/      playbook n's ansible.log, role links and its own HOME
    untrusted/            untrusted runs' state: fact cache, SSH control sockets
    home/                 mount point of untrusted runs' fresh HOME (a tmpfs)
    secrets/              mount point of a sandboxed run's secrets (a tmpfs)
    cp/                   trusted runs' SSH control sockets (hidden from the sandbox)
    agent/sock            the build's own ssh-agent (zuul.executor.sshagent)

Nothing an untrusted playbook can write is ever read as code or
configuration by a later trusted playbook: trusted runs get a HOME under
``ansible/`` that no sandbox can write, their own fact cache and control
sockets, and plugin paths pinned to the executor's own directories.
Secrets never touch this tree (they are handed to ansible-playbook in an
anonymous in-memory file).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field


@dataclass
class PreparedPlaybook:
    """A playbook ready to run: its file, roles path, secrets file."""

    phase: str
    index: int
    path: str
    trusted: bool
    roles_path: list[str] = field(default_factory=list)
    project_root: str = ''
    label: str = ''
    secrets: dict = field(default_factory=dict)
    # A post-run entry's ``cleanup``: it runs also when the build is aborted.
    cleanup: bool = False
    # The entry's ``semaphores``: held only while it runs.
    semaphores: list = field(default_factory=list)


class JobDir:
    """Paths of one build's job dir; ``create()`` makes the tree."""

    def __init__(self, root: str, uuid: str):
        self.root = os.path.join(root, uuid)
        self.work_root = os.path.join(self.root, 'work')
        self.src_root = os.path.join(self.work_root, 'src')
        self.log_root = os.path.join(self.work_root, 'logs')
        self.result_data_file = os.path.join(self.work_root, 'results.json')
        self.ansible_root = os.path.join(self.root, 'ansible')
        self.inventory_file = os.path.join(self.ansible_root, 'inventory.yaml')
        self.known_hosts = os.path.join(self.ansible_root, 'known_hosts')
        self.fact_cache = os.path.join(self.ansible_root, 'fact-cache')
        self.untrusted_state = os.path.join(self.root, 'untrusted')
        self.untrusted_fact_cache = os.path.join(self.untrusted_state, 'fact-cache')
        self.no_plugins = os.path.join(self.ansible_root, 'no-plugins')
        self.trusted_root = os.path.join(self.ansible_root, 'trusted')
        self.untrusted_root = os.path.join(self.ansible_root, 'untrusted')
        self.home = os.path.join(self.root, 'home')
        self.control_path_dir = os.path.join(self.root, 'cp')
        self.untrusted_control_path_dir = os.path.join(self.root, 'cu')
        # Mount point of a sandboxed run's secrets tmpfs (empty on disk).
        self.secrets_dir = os.path.join(self.root, 'secrets')
        self.agent_dir = os.path.join(self.root, 'agent')
        self.agent_socket = os.path.join(self.agent_dir, 'sock')
        self.job_output_txt = os.path.join(self.log_root, 'job-output.txt')
        self.job_output_json = os.path.join(self.log_root, 'job-output.json')
        self._project_counter = 0

    def create(self) -> JobDir:
        for path in (self.src_root, self.log_root, self.fact_cache, self.untrusted_fact_cache,
                     self.trusted_root, self.untrusted_root, self.no_plugins, self.home,
                     self.control_path_dir, self.untrusted_control_path_dir,
                     self.secrets_dir, self.agent_dir):
            os.makedirs(path, exist_ok=True)
        for path in (self.control_path_dir, self.untrusted_control_path_dir, self.agent_dir):
            os.chmod(path, 0o700)
        return self

    def control_dir(self, trusted: bool) -> str:
        return self.control_path_dir if trusted else self.untrusted_control_path_dir

    def playbook_home(self, phase: str, index: int) -> str:
        """A fresh HOME for trusted playbook ``index`` of ``phase``, under
        ``ansible/`` where no untrusted playbook can write."""
        home = os.path.join(self.playbook_dir(phase, index), 'home')
        shutil.rmtree(home, ignore_errors=True)
        os.makedirs(os.path.join(home, 'tmp'))
        # The nodes' host keys where a plain ``ssh`` looks (as in released
        # Zuul, whose HOME holds them): Ansible's own connection is told
        # the file, but ``synchronize`` runs rsync over ssh without it.
        if os.path.isfile(self.known_hosts):
            os.makedirs(os.path.join(home, '.ssh'), mode=0o700)
            shutil.copyfile(self.known_hosts, os.path.join(home, '.ssh', 'known_hosts'))
        return home

    def config_file(self, trusted: bool) -> str:
        name = 'ansible-trusted.cfg' if trusted else 'ansible-untrusted.cfg'
        return os.path.join(self.ansible_root, name)

    def new_checkout_root(self, trusted: bool) -> str:
        """A fresh ``ansible/{trusted,untrusted}/project_<n>`` directory."""
        base = self.trusted_root if trusted else self.untrusted_root
        path = os.path.join(base, f'project_{self._project_counter}')
        self._project_counter += 1
        os.makedirs(path)
        return path

    def playbook_dir(self, phase: str, index: int) -> str:
        path = os.path.join(self.ansible_root, f'{phase}_{index}')
        os.makedirs(path, exist_ok=True)
        return path

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
