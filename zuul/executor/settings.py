"""The executor's typed settings, built once from zuul.conf ``[executor]``."""

from __future__ import annotations

import os
import shutil
import socket
import sys
from dataclasses import dataclass, field


def _default_ansible_playbook() -> str:
    beside = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')
    if os.path.exists(beside):
        return beside
    return shutil.which('ansible-playbook') or 'ansible-playbook'


@dataclass
class ExecutorSettings:
    """Everything the executor needs to know about its host.

    ``job_dir`` holds build dirs; ``state_dir`` is hidden from untrusted
    playbooks (keys live there); ``private_key_file`` is the key added to
    the executor's ssh-agent for reaching nodes.  ``max_builds`` is the
    hard job limit; the governor also stops accepting work while the load
    average exceeds ``load_multiplier`` x CPUs or available memory drops
    under ``min_avail_mem`` percent.

    ``log_root``, when set, keeps every finished build's ``work/logs`` as
    ``<log_root>/<uuid>/`` (at most ``max_log_bytes`` each); ``log_url``
    (``{build}``/``{uuid}`` replaced) is then the build's log URL, and
    build log dirs older than ``log_retention_days`` (0: never) are removed.

    ``default_username`` is the user for nodes whose record names none;
    ``site_variables`` (read from the YAML file ``[executor] variables``)
    are given to every job with the highest precedence.

    ``disk_limit_per_job`` (MB; 0 or less: no limit) stops a build whose
    job dir grows past it (checked every ``disk_check_interval`` seconds
    and before each playbook).  ``max_starting_builds`` (None: derived
    from ``load_multiplier``) caps the builds still preparing before the
    executor stops taking new ones.  ``untrusted_ro_paths`` /
    ``untrusted_rw_paths`` are bound into the sandbox of untrusted
    playbooks, ``trusted_ro_paths`` / ``trusted_rw_paths`` into that of
    trusted ones.

    ``ansible_root`` (None: ``<state_dir>/ansible-bin``) is where
    ``zuul-manage-ansible`` installed the other Ansible versions
    (zuul.executor.ansible_versions).
    """

    hostname: str = field(default_factory=socket.getfqdn)
    job_dir: str = '/var/lib/zuul/builds'
    state_dir: str = '/var/lib/zuul'
    private_key_file: str | None = None
    ansible_playbook: str = field(default_factory=_default_ansible_playbook)
    keep_jobdir: bool = False
    max_builds: int = 10
    load_multiplier: float = 2.5
    min_avail_mem: float = 5.0
    log_stream_host: str = '0.0.0.0'
    log_stream_port: int = 7900
    log_stream_public_host: str | None = None
    cleanup_timeout: int = 300
    default_post_timeout: int = 1800
    sandbox_untrusted: bool = True
    hidden_paths: list[str] = field(default_factory=list)
    log_root: str | None = None
    log_url: str | None = None
    max_log_bytes: int = 1 << 30
    log_retention_days: float = 0
    default_username: str = 'zuul'
    site_variables: dict = field(default_factory=dict)
    disk_limit_per_job: int = 250
    disk_check_interval: float = 10.0
    max_starting_builds: int | None = None
    trusted_ro_paths: list[str] = field(default_factory=list)
    trusted_rw_paths: list[str] = field(default_factory=list)
    untrusted_ro_paths: list[str] = field(default_factory=list)
    untrusted_rw_paths: list[str] = field(default_factory=list)
    ansible_root: str | None = None
    # Executor zone: only builds whose nodes have this ``executor-zone``
    # (and, with allow_unzoned, those whose nodes have none).
    zone: str | None = None
    allow_unzoned: bool = False

    @classmethod
    def from_config(cls, config) -> ExecutorSettings:
        """From a ConfigParser with an ``[executor]`` section."""
        sec = config['executor'] if config.has_section('executor') else {}
        kw = {}
        for key in ('hostname', 'job_dir', 'state_dir', 'private_key_file',
                    'ansible_playbook', 'log_stream_host', 'log_stream_public_host',
                    'log_url', 'default_username'):
            if key in sec:
                kw[key] = sec[key]
        for key in ('log_root', 'ansible_root'):
            if sec.get(key):
                kw[key] = os.path.abspath(os.path.expanduser(sec[key]))
        for key in ('max_builds', 'log_stream_port', 'cleanup_timeout',
                    'default_post_timeout', 'max_log_bytes', 'disk_limit_per_job',
                    'max_starting_builds'):
            if key in sec:
                kw[key] = _int(key, sec[key])
        if kw.get('max_starting_builds', 1) < 1:
            raise ValueError('[executor] max_starting_builds must be at least 1')
        for key in BIND_PATH_KEYS:
            if sec.get(key):
                kw[key] = bind_paths(key, sec[key])
        for key in ('load_multiplier', 'min_avail_mem', 'log_retention_days'):
            if key in sec:
                kw[key] = float(sec[key])
        if 'finger_port' in sec and 'log_stream_port' not in sec:
            kw['log_stream_port'] = int(sec['finger_port'])
        if 'keep_jobdir' in sec:
            kw['keep_jobdir'] = str(sec['keep_jobdir']).lower() in ('1', 'true', 'yes')
        if 'hidden_paths' in sec:
            kw['hidden_paths'] = [p for p in str(sec['hidden_paths']).split(',') if p]
        if sec.get('zone'):
            from zuul.executor.protocol import valid_zone
            if not valid_zone(sec['zone']):
                raise ValueError(f"[executor] zone: {sec['zone']!r} is not a valid zone name "
                                 '(letters, digits, ".", "_" and "-", at most 64)')
            kw['zone'] = sec['zone']
        if 'allow_unzoned' in sec:
            kw['allow_unzoned'] = str(sec['allow_unzoned']).lower() in ('1', 'true', 'yes')
        if sec.get('variables'):
            kw['site_variables'] = load_site_variables(sec['variables'])
        return cls(**kw)


BIND_PATH_KEYS = ('trusted_ro_paths', 'trusted_rw_paths', 'untrusted_ro_paths',
                  'untrusted_rw_paths')


def _int(key: str, value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f'[executor] {key}: {value!r} is not an integer') from None


def bind_paths(key: str, value: str) -> list[str]:
    """A ``:``-separated ``*_ro_paths``/``*_rw_paths`` value: absolute
    paths that exist.  ValueError naming the key otherwise."""
    paths = [os.path.expanduser(p.strip()) for p in str(value).split(':') if p.strip()]
    for path in paths:
        if not os.path.isabs(path):
            raise ValueError(f'[executor] {key}: {path!r} is not an absolute path')
        if not os.path.exists(path):
            raise ValueError(f'[executor] {key}: {path} does not exist')
    return paths


def load_site_variables(path: str) -> dict:
    """The ``[executor] variables`` file: a mapping of variables for every
    job.  ValueError (naming the file) if it cannot be used."""
    from zuul.lib import yamlutil
    from zuul.lib.ansiblevars import connection_variables
    path = os.path.expanduser(path)
    try:
        data = yamlutil.load_file(path)
    except (OSError, yamlutil.YAMLSyntaxError) as exc:
        raise ValueError(f'[executor] variables: cannot load {path}: {exc}') from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f'[executor] variables: {path} does not hold a mapping of variables')
    refused = connection_variables(data) + sorted(
        k for k in data if k in ('zuul', 'nodepool', 'unsafe_vars', 'zuul_return'))
    if refused:
        raise ValueError(f'[executor] variables: {path} may not set {", ".join(refused)}')
    return yamlutil.to_wire(dict(data))
