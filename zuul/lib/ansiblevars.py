"""Which Ansible variables job configuration may set.

Two kinds of variable decide how or where Ansible executes rather than
what a job does:

* **connection variables** (``ansible_connection``, ``ansible_host``, the
  ssh/paramiko/... options, host key checking, the private key): they come
  from the node record, never from job configuration, trusted or not;
* **execution variables** (interpreters, ``become``, the shell and other
  executables run locally): a config project may set them for its nodes;
  an untrusted project, a change, a secret of an untrusted project, an
  include-vars file or data a job returns may not.  On the executor itself
  (the implicit ``localhost``) nobody may change them: the executor pins
  them while Ansible runs (zuul.ansible.restrict).

The scheduler refuses them when it loads configuration (with file and
line), the executor again before a build runs and inside Ansible whatever
the path (set_fact, add_host, include_vars, host and group vars files).
"""

from __future__ import annotations

import re

# Connection plugins whose options are variables named ansible_<plugin>_*.
_CONNECTION_PLUGINS = (
    'ssh', 'sftp', 'scp', 'paramiko', 'libssh', 'winrm', 'psrp', 'docker', 'podman',
    'kubectl', 'oc', 'lxc', 'lxd', 'chroot', 'jail', 'zone', 'buildah', 'funcd',
    'iocage', 'qubes', 'saltstack', 'netconf', 'httpapi', 'network_cli', 'persistent',
    'aws_ssm', 'local',
)

_CONNECTION_RE = re.compile(
    r'^ansible_('
    r'connection|host|port|user|password|remote_user|private_key_file|'
    r'host_key_checking|control_path|control_path_dir|'
    rf'(?:{"|".join(_CONNECTION_PLUGINS)})_.+'
    r')$')

# Interpreters (ansible_python_interpreter, ansible_interpreter_python_fallback,
# ansible_perl_interpreter, ...), privilege escalation (become and the
# legacy sudo/su spellings with their executables and flags), executables
# and shells run by Ansible, where modules and temp files are unpacked.
_EXECUTION_RE = re.compile(
    r'^ansible_('
    r'.*interpreter.*|'
    r'become.*|sudo.*|su|su_.+|doas.*|pbrun.*|pfexec.*|ksu.*|dzdo.*|runas.*|'
    r'machinectl.*|sesu.*|'
    r'(?:shell|become|sudo|su|doas|pbrun|pfexec|ksu|dzdo|runas|machinectl|sesu)_'
    r'(?:exe|executable)|'
    r'shell_type|module_compression|remote_tmp|async_dir'
    r')$')


# Facts of Ansible's ssh_pub_keys collector (``ansible_ssh_host_key_rsa_public``,
# ``..._public_keytype``): a node's own host keys, gathered on every node
# (over ssh or kubectl), named like ssh options but options of no
# connection plugin.
_HOST_KEY_FACT_RE = re.compile(r'^ansible_ssh_host_key_[a-z0-9]+_public(?:_keytype)?$')


def _is_connection(name: str) -> bool:
    return bool(_CONNECTION_RE.match(name)) and not _HOST_KEY_FACT_RE.match(name)


def connection_variables(variables) -> list[str]:
    """Names in ``variables`` that choose the connection to a node."""
    return sorted(str(k) for k in (variables or {}) if _is_connection(str(k)))


def execution_variables(variables) -> list[str]:
    """Names in ``variables`` that choose how Ansible executes."""
    return sorted(str(k) for k in (variables or {}) if _EXECUTION_RE.match(str(k)))


def is_connection_variable(name) -> bool:
    return _is_connection(str(name))


def is_execution_variable(name) -> bool:
    return bool(_EXECUTION_RE.match(str(name)))


def refused_for_untrusted(variables) -> list[str]:
    """Names an untrusted source may not set: both kinds."""
    return sorted(set(connection_variables(variables)) | set(execution_variables(variables)))
