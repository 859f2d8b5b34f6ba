"""SSH reachability checks the framework and drivers share."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time


class SSHCheckError(RuntimeError):
    pass


def ssh_banner(address: str, port: int = 22, timeout: float = 5.0) -> bool:
    """True if something answers ``address:port`` with an SSH banner."""
    try:
        with socket.create_connection((address, port), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(4).startswith(b'SSH-')
    except OSError:
        return False


def wait_for_ssh(address: str, port: int, timeout: float, should_stop=None) -> None:
    """Until the server sends its banner, bounded by ``timeout``."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        if ssh_banner(address, port, timeout=min(5.0, max(timeout, 0.1))):
            return
        if time.monotonic() + delay > deadline:
            raise SSHCheckError(f'no SSH banner from {address}:{port} within {timeout}s')
        if should_stop is not None and should_stop():
            raise SSHCheckError('stopped')
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


def keyscan(address: str, port: int = 22, timeout: float = 5.0) -> list[str]:
    """The host's public keys as ``"<type> <base64>"`` (ssh-keyscan)."""
    tool = shutil.which('ssh-keyscan')
    if tool is None:
        raise SSHCheckError('ssh-keyscan is not installed')
    proc = subprocess.run([tool, '-T', str(max(1, int(timeout))), '-p', str(port), address],
                          capture_output=True, text=True, timeout=timeout + 30)
    keys = []
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and not line.startswith('#'):
            keys.append(f'{parts[1]} {parts[2]}')
    if not keys:
        raise SSHCheckError(f'no host keys from {address}:{port}: {proc.stderr.strip()}')
    return sorted(set(keys))


# The host key algorithms asked for one at a time, so a host with several
# keys reports each (an SSH handshake settles on one).
SCAN_KEY_TYPES = ('ssh-ed25519', 'ecdsa-sha2-nistp256', 'ecdsa-sha2-nistp384',
                  'ecdsa-sha2-nistp521', 'rsa-sha2-512')


def paramiko_keyscan(address: str, port: int = 22, timeout: float = 5.0) -> list[str]:
    """The host's public keys as ``"<type> <base64>"``, from SSH
    handshakes made with paramiko (no ``ssh-keyscan`` needed)."""
    import paramiko

    keys = []
    for key_type in SCAN_KEY_TYPES:
        try:
            sock = socket.create_connection((address, port), timeout=timeout)
        except OSError as e:
            raise SSHCheckError(f'cannot connect to {address}:{port}: {e}') from None
        transport = paramiko.Transport(sock)
        try:
            transport.get_security_options().key_types = [key_type]
            transport.start_client(timeout=timeout)
            key = transport.get_remote_server_key()
            keys.append(f'{key.get_name()} {key.get_base64()}')
        except (paramiko.SSHException, OSError, EOFError):
            continue   # the host has no key of this type
        finally:
            transport.close()
    if not keys:
        raise SSHCheckError(f'no host keys from {address}:{port}')
    return sorted(set(keys))


def reachability_problem(inst, host_key_checking: bool) -> str | None:
    """Why ``inst`` (a ``nodepool.driver.Instance`` that is running) cannot
    be handed out yet, or None once it can: it has an address and, with
    host key checking over ssh, SSH answers and gave its host keys
    (filled into ``inst.host_keys``).  For adapters that time their own
    boot (``times_own_launch``)."""
    if not inst.interface_ip:
        return 'no address'
    if not host_key_checking or inst.connection_type != 'ssh':
        return None
    if not ssh_banner(inst.interface_ip, inst.connection_port, timeout=2.0):
        return f'SSH on {inst.interface_ip}:{inst.connection_port} does not answer'
    try:
        inst.host_keys = paramiko_keyscan(inst.interface_ip, inst.connection_port, timeout=5.0)
    except SSHCheckError as e:
        return str(e)
    return None
