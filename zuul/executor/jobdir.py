"""The directory a build runs in.

Layout (``<root>/<build uuid>/``)::

    work/                 the job's own tree (readable and writable by it)
      src/<hostname>/<project>   every required project, speculative state
      logs/                      job-output.txt, job-output.json, job logs
      results.json               what zuul_return wrote
    ansible/
      inventory.yaml, known_hosts, ansible-trusted.cfg, ansible-untrusted.cfg
      fact-cache/                                  facts of trusted runs
      trusted/project_<n>/<hostname>/<project>     config-project checkouts
      untrusted/project_<n>/<hostname>/<project>   untrusted checkouts
      <phase>_<n>/      ansible.log of playbook n; its secrets.yaml while it runs
    home/                 HOME, ansible's local tmp, facts of untrusted runs
    cp/                   SSH control sockets, one master per node

Trusted and untrusted checkouts are kept apart, and ``ansible/`` is
read-only inside the sandbox, so that an untrusted playbook cannot change
what a trusted playbook run later in the same build executes (its code,
inventory or cached facts).  A playbook's secrets exist on disk only while
that playbook runs.
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
        self.untrusted_fact_cache = os.path.join(self.root, 'home', 'fact-cache')
        self.trusted_root = os.path.join(self.ansible_root, 'trusted')
        self.untrusted_root = os.path.join(self.ansible_root, 'untrusted')
        self.home = os.path.join(self.root, 'home')
        self.control_path_dir = os.path.join(self.root, 'cp')
        self.job_output_txt = os.path.join(self.log_root, 'job-output.txt')
        self.job_output_json = os.path.join(self.log_root, 'job-output.json')
        self._project_counter = 0

    def create(self) -> JobDir:
        for path in (self.src_root, self.log_root, self.fact_cache, self.untrusted_fact_cache,
                     self.trusted_root, self.untrusted_root,
                     os.path.join(self.home, 'tmp'), self.control_path_dir):
            os.makedirs(path, exist_ok=True)
        os.chmod(self.control_path_dir, 0o700)
        return self

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
