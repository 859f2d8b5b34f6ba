"""ansible.cfg and environment for a build's playbook runs.

One SSH control master per node is shared by all playbooks of a build
(``control_path_dir`` in the job dir, ``ControlPersist``), and pipelining
is on: measured here, 10 tasks over plain SSH took 28.5 s and 3.8 s with
both.  Facts are cached in the job dir so they are gathered once per
build and host, not once per playbook.
"""

from __future__ import annotations

import os

from zuul.executor.jobdir import JobDir

PLUGIN_ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           'ansible')
CODE_ROOT = os.path.dirname(os.path.dirname(PLUGIN_ROOT))

CONTROL_PERSIST = 120


# Every plugin search path Ansible has; all but ours point at an empty
# executor-owned dir, so no plugin comes from HOME, /usr/share/ansible or
# anywhere a playbook could have written to.
PLUGIN_PATH_KEYS = (
    'become_plugins', 'cache_plugins', 'cliconf_plugins', 'connection_plugins',
    'doc_fragment_plugins', 'filter_plugins', 'httpapi_plugins', 'inventory_plugins',
    'lookup_plugins', 'module_utils', 'netconf_plugins', 'strategy_plugins',
    'terminal_plugins', 'test_plugins', 'vars_plugins',
)


def ssh_args(jobdir: JobDir) -> str:
    return ' '.join([
        '-o ControlMaster=auto',
        f'-o ControlPersist={CONTROL_PERSIST}s',
        f'-o UserKnownHostsFile={jobdir.known_hosts}',
        '-o GlobalKnownHostsFile=/dev/null',
        '-o StrictHostKeyChecking=yes',
        '-o ServerAliveInterval=30',
        '-o PasswordAuthentication=no',
    ])


def render_config(jobdir: JobDir, trusted: bool) -> str:
    """The ansible.cfg text.  Trusted and untrusted runs have their own
    fact caches (facts cached by an untrusted run become variables,
    ``ansible_*``, and must never reach a trusted run) and their own SSH
    control sockets; both have every plugin path pinned."""
    fact_cache = jobdir.fact_cache if trusted else jobdir.untrusted_fact_cache
    pinned = [f'{key} = {jobdir.no_plugins}' for key in PLUGIN_PATH_KEYS
              if key != 'connection_plugins']
    return '\n'.join([
        '[defaults]',
        f'inventory = {jobdir.inventory_file}',
        'forks = 10',
        'stdout_callback = zuul_stream',
        f'callback_plugins = {os.path.join(PLUGIN_ROOT, "callback")}',
        f'action_plugins = {os.path.join(PLUGIN_ROOT, "action")}',
        f'library = {os.path.join(PLUGIN_ROOT, "library")}',
        # Ours only: the kubectl connection of pod nodes (zuul.executor.kube).
        f'connection_plugins = {os.path.join(PLUGIN_ROOT, "connection")}',
        *pinned,
        # No collection from a user's or the system's directories; those
        # installed with the Ansible that runs (zuul-manage-ansible's
        # community package: ansible.posix, community.general ...) are
        # found on its own sys.path, as released Zuul's jobs find them.
        f'collections_path = {jobdir.no_plugins}',
        'collections_scan_sys_path = True',
        'retry_files_enabled = False',
        'gathering = smart',
        'fact_caching = jsonfile',
        f'fact_caching_connection = {fact_cache}',
        'host_key_checking = True',
        'interpreter_python = auto_silent',
        'deprecation_warnings = False',
        'timeout = 30',
        '',
        '[ssh_connection]',
        f'ssh_args = {ssh_args(jobdir)}',
        f'control_path_dir = {jobdir.control_dir(trusted)}',
        'pipelining = True',
        '',
    ])


def write_configs(jobdir: JobDir) -> None:
    for trusted in (True, False):
        with open(jobdir.config_file(trusted), 'w') as f:
            f.write(render_config(jobdir, trusted))


def playbook_env(jobdir: JobDir, *, trusted: bool, phase: str, label: str,
                 roles_path: list[str], ssh_auth_sock: str | None,
                 home: str, split_streams: bool = False, ro_paths=(), rw_paths=()) -> dict:
    """Environment of one ansible-playbook run; ``home`` is the run's own
    HOME (fresh for each playbook); ``split_streams`` is the job's
    ``ansible-split-streams`` (zuul.ansible.streams).  ``ro_paths`` and
    ``rw_paths`` (``[executor] untrusted_*_paths``) are where an untrusted
    run may also read, and write, on the executor."""
    # Inside the sandbox HOME is an empty tmpfs and /tmp is private.
    tmp = os.path.join(home, 'tmp') if trusted else '/tmp'
    env = {
        'PATH': os.environ.get('PATH', '/usr/bin:/bin'),
        'LANG': 'C.UTF-8',
        'HOME': home,
        'TMPDIR': tmp,
        'ANSIBLE_LOCAL_TEMP': os.path.join(home, '.ansible', 'tmp'),
        'ANSIBLE_CONFIG': jobdir.config_file(trusted),
        'ANSIBLE_ROLES_PATH': ':'.join(roles_path),
        'ZUUL_JOB_OUTPUT_TXT': jobdir.job_output_txt,
        'ZUUL_JOB_OUTPUT_JSON': jobdir.job_output_json,
        'ZUUL_RESULT_FILE': jobdir.result_data_file,
        'ZUUL_JOBDIR': jobdir.root,
        # the nodes whose console logs are streamed (zuul.ansible.nodeconsole)
        'ZUUL_INVENTORY_FILE': jobdir.inventory_file,
        'ZUUL_WORK_ROOT': jobdir.work_root,
        'ZUUL_PHASE': phase,
        'ZUUL_PLAYBOOK': label,
        'ZUUL_TRUSTED': '1' if trusted else '0',
        'ZUUL_UNTRUSTED': '0' if trusted else '1',
        'ZUUL_ANSIBLE_SPLIT_STREAMS': '1' if split_streams else '0',
        'PYTHONPATH': CODE_ROOT,
        # Python started by a playbook on the executor never imports from
        # its working directory or script's directory first.
        'PYTHONSAFEPATH': '1',
    }
    if not trusted:
        # Where untrusted code may read files on the executor from (file
        # lookups, copy/template sources): its work dir and its checkouts.
        env['ZUUL_READ_ROOTS'] = ':'.join([jobdir.work_root, jobdir.untrusted_root,
                                           *ro_paths, *rw_paths])
        env['ZUUL_WRITE_ROOTS'] = ':'.join(rw_paths)
    if ssh_auth_sock:
        env['SSH_AUTH_SOCK'] = ssh_auth_sock
    kubeconfig = os.path.join(jobdir.work_root, '.kube', 'config')
    if os.path.isfile(kubeconfig):
        # The build's Kubernetes nodes (zuul.executor.kube), for the job's
        # own kubectl or client library.
        env['KUBECONFIG'] = kubeconfig
    return env
