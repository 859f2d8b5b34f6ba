"""Real hosts on this machine: a network namespace with its own address
and its own sshd, per node.

All hosts hang off one Linux bridge in the root namespace, so the
executor (in the root namespace) reaches every node, and nodes reach each
other, as multi-node jobs need. Addresses come from a private /16 that
only exists on this machine; allocation is shared between processes
through a lock file.

No ZooKeeper and no pytest here: the nodepool ``netns`` provider and the
test harness both use this module.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field

DEFAULT_SUBNET = '10.231.0.0/16'
DEFAULT_BRIDGE = 'npbr0'
DEFAULT_BASE_DIR = '/var/tmp/gatekeep-netns'

_BRIDGE_LOCK = threading.Lock()


class NetnsError(RuntimeError):
    """A command needed to build or remove a host failed."""


@dataclass
class NetnsHost:
    name: str
    address: str
    port: int
    username: str
    host_keys: list[str]
    state_dir: str
    sshd_pid: int | None = None
    namespace: str = ''
    veth: str = ''
    extra: dict = field(default_factory=dict)


def bridge_mac(bridge: str) -> str:
    """A fixed, locally administered unicast MAC address for ``bridge``."""
    import hashlib
    digest = hashlib.sha256(bridge.encode()).digest()
    return ':'.join(f'{b:02x}' for b in (0x02, *digest[:5]))


def _run(*args, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, capture_output=True, text=True)
    if check and proc.returncode:
        raise NetnsError(f'{" ".join(args)} failed ({proc.returncode}): '
                         f'{proc.stderr.strip()}')
    return proc


def available() -> str | None:
    """None if netns hosts can be made here, else why not."""
    if os.geteuid() != 0:
        return 'network namespaces need root'
    for tool in ('ip', 'ssh-keygen'):
        if shutil.which(tool) is None:
            return f'{tool} is not installed'
    if not os.path.exists('/usr/sbin/sshd'):
        return 'sshd is not installed (Debian package openssh-server)'
    return None


class _Allocator:
    """Index allocation in a JSON file under a lock (several processes)."""

    def __init__(self, base_dir: str):
        os.makedirs(base_dir, exist_ok=True)
        self.path = os.path.join(base_dir, 'allocations.json')
        self.lock_path = self.path + '.lock'

    def _locked(self, fn):
        with open(self.lock_path, 'a+') as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                data = {}
                if os.path.exists(self.path):
                    with open(self.path) as f:
                        data = json.load(f)
                result = fn(data)
                with open(self.path + '.tmp', 'w') as f:
                    json.dump(data, f)
                os.replace(self.path + '.tmp', self.path)
                return result
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def allocate(self, name: str, size: int, index: int | None = None) -> int:
        """A free index for ``name`` (``index`` itself, if given and free)."""
        def take(data):
            used = set(data.values())
            if index is not None:
                if index in used or not 2 <= index < size - 1:
                    raise NetnsError(f'address index {index} is taken or out of range')
                data[name] = index
                return index
            for candidate in range(2, size - 1):
                if candidate not in used:
                    data[name] = candidate
                    return candidate
            raise NetnsError('no free addresses left in the netns subnet')
        return self._locked(take)

    def release(self, name: str) -> None:
        self._locked(lambda data: data.pop(name, None))

    def names(self) -> list[str]:
        return self._locked(lambda data: sorted(data))


class NetnsHostManager:
    """Creates and deletes hosts; one per process is enough."""

    def __init__(self, base_dir: str = DEFAULT_BASE_DIR, subnet: str = DEFAULT_SUBNET,
                 bridge: str = DEFAULT_BRIDGE, username: str = 'root'):
        self.base_dir = base_dir
        self.network = ipaddress.ip_network(subnet)
        self.bridge = bridge
        self.username = username
        self.allocator = _Allocator(base_dir)
        self._procs: dict[str, subprocess.Popen] = {}

    @property
    def gateway(self) -> str:
        return str(self.network.network_address + 1)

    def ensure_bridge(self) -> None:
        # Hosts are created from several threads at once (one per node
        # launch): the first makes the bridge, the others wait for it.
        with _BRIDGE_LOCK:
            if _run('ip', 'link', 'show', self.bridge, check=False).returncode == 0:
                return
            _run('ip', 'link', 'add', self.bridge, 'type', 'bridge')
            # A bridge takes the lowest MAC address of its ports unless it
            # has its own: then, when the node whose port lent it goes, the
            # other nodes' ARP entry for the gateway (the executor's side of
            # every SSH and console connection) points nowhere, and their
            # traffic stalls for half a minute or more until it is renewed.
            _run('ip', 'link', 'set', self.bridge, 'address', bridge_mac(self.bridge))
            _run('ip', 'addr', 'add', f'{self.gateway}/{self.network.prefixlen}', 'dev',
                 self.bridge)
            _run('ip', 'link', 'set', self.bridge, 'up')

    def create(self, name: str, authorized_keys: list[str], timeout: float = 30.0,
               rootfs: str | None = None, address: str | None = None) -> NetnsHost:
        """A running host named ``name`` that accepts ``authorized_keys``
        (at ``address`` of the subnet, if given: a cloud stand-in's
        instance keeps the address its cloud gave it)."""
        self.ensure_bridge()
        wanted = None if address is None else \
            int(ipaddress.ip_address(address)) - int(self.network.network_address)
        index = self.allocator.allocate(name, self.network.num_addresses, wanted)
        address = str(self.network.network_address + index)
        # The root-namespace end of the veth pair is named after the bridge
        # too: managers with their own allocators (one per test process,
        # one per launcher) hand out the same indexes.
        ns, veth = f'np-{name}', f'{self.bridge[:8]}v{index}'
        state = os.path.join(self.base_dir, name)
        host = NetnsHost(name, address, 22, self.username, [], state, namespace=ns,
                         veth=veth)
        try:
            self._make_namespace(host)
            # The address may have been an earlier node's: forget where it
            # was, or packets go to that node's port until the entry ages.
            _run('ip', 'neigh', 'flush', 'to', address, 'dev', self.bridge, check=False)
            self._start_sshd(host, authorized_keys, rootfs)
            wait_for_ssh(address, 22, timeout, alive=lambda: self._alive(host))
        except Exception:
            self.delete(host)
            raise
        return host

    def _make_namespace(self, host: NetnsHost) -> None:
        ns, veth = host.namespace, host.veth
        _run('ip', 'netns', 'add', ns)
        _run('ip', 'link', 'add', veth, 'type', 'veth', 'peer', 'name', veth + 'n')
        _run('ip', 'link', 'set', veth, 'master', self.bridge)
        _run('ip', 'link', 'set', veth, 'up')
        _run('ip', 'link', 'set', veth + 'n', 'netns', ns)
        _run('ip', '-n', ns, 'link', 'set', veth + 'n', 'name', 'eth0')
        _run('ip', '-n', ns, 'addr', 'add', f'{host.address}/{self.network.prefixlen}',
             'dev', 'eth0')
        _run('ip', '-n', ns, 'link', 'set', 'eth0', 'up')
        _run('ip', '-n', ns, 'link', 'set', 'lo', 'up')
        _run('ip', '-n', ns, 'route', 'add', 'default', 'via', self.gateway)

    def _start_sshd(self, host: NetnsHost, authorized_keys: list[str],
                    rootfs: str | None) -> None:
        d = host.state_dir
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d, mode=0o700)
        # Without a root filesystem sshd runs on this machine's and its
        # files live in the state dir; with one they live in the node's
        # private layer over it (``conf``, seen inside as /etc/nodepool-node).
        conf = os.path.join(d, 'upper', NODE_CONF.lstrip('/')) if rootfs else d
        seen = NODE_CONF if rootfs else d
        os.makedirs(conf, mode=0o700, exist_ok=True)
        if not rootfs:
            os.makedirs(f'{conf}/home', mode=0o700)
        _run('ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', f'{conf}/host_key')
        with open(f'{conf}/authorized_keys', 'w') as f:
            f.write(''.join(k.strip() + '\n' for k in authorized_keys))
        with open(f'{conf}/sshd_config', 'w') as f:
            f.write(sshd_config(host.address, seen, own_root=bool(rootfs)))
        os.makedirs('/run/sshd', exist_ok=True)
        sshd = ['/usr/sbin/sshd', '-D', '-f', f'{seen}/sshd_config', '-E', f'{seen}/sshd.log']
        if rootfs:
            with open(os.path.join(d, 'rootfs'), 'w') as f:
                f.write(os.path.abspath(rootfs))
            command = ['sh', '-c', _chroot_script(os.path.abspath(rootfs), d), 'sh', *sshd]
        else:
            command = sshd
        # In the foreground (-D) so its pid is ours to reap; `ip netns exec`,
        # the script and chroot exec, so the child is sshd itself.
        with open(os.path.join(d, 'start.log'), 'w') as err:
            proc = subprocess.Popen(['ip', 'netns', 'exec', host.namespace, *command],
                                    start_new_session=True, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=err)
        self._procs[host.name] = proc
        host.sshd_pid = proc.pid
        with open(f'{conf}/host_key.pub') as f:
            host.host_keys = [' '.join(f.read().split()[:2])]

    def _alive(self, host: NetnsHost) -> str | None:
        """None while the host's sshd runs, else why it stopped."""
        proc = self._procs.get(host.name)
        if proc is None or proc.poll() is None:
            return None
        why = []
        for log_name in ('start.log', 'sshd.log', f'upper{NODE_CONF}/sshd.log'):
            try:
                with open(os.path.join(host.state_dir, log_name)) as f:
                    why += [line.strip() for line in f if line.strip()]
            except OSError:
                continue
        return f'sshd exited ({proc.returncode}): {"; ".join(why[-5:]) or "no output"}'

    def delete(self, host: NetnsHost | str) -> None:
        """Remove a host; safe to call twice or on a half-built host."""
        name = host if isinstance(host, str) else host.name
        ns = f'np-{name}'
        pids = _run('ip', 'netns', 'pids', ns, check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        state = os.path.join(self.base_dir, name)
        proc = self._procs.pop(name, None)
        if proc is not None:
            proc.kill()
            proc.wait()
        if not isinstance(host, str) and host.veth:
            _run('ip', 'link', 'del', host.veth, check=False)
        _run('ip', 'netns', 'del', ns, check=False)
        shutil.rmtree(state, ignore_errors=True)
        self.allocator.release(name)

    def list(self, prefix: str = '') -> list[str]:
        """Names of existing hosts (namespaces np-<name>) with the prefix."""
        out = _run('ip', 'netns', 'list', check=False).stdout
        names = [line.split()[0][3:] for line in out.splitlines()
                 if line.startswith('np-')]
        return sorted(n for n in names if n.startswith(prefix))

    def cleanup_all(self, prefix: str = '') -> int:
        names = self.list(prefix)
        for name in names:
            self.delete(name)
        return len(names)


# Where a node booted from a root filesystem finds its sshd files.
NODE_CONF = '/etc/nodepool-node'


def sshd_config(address: str, conf_dir: str, own_root: bool) -> str:
    """The node's sshd_config; its files are in ``conf_dir`` (as sshd
    sees it).  A node with a root filesystem of its own (``own_root``)
    also reads its user's ``~/.ssh/authorized_keys``, as a cloud image's
    sshd does (zuul-jobs' add-build-sshkey adds the build's key there);
    without one that file would be this machine's user's, so only the
    node's own file is read.  For the same reason such a node's sessions
    get a HOME of their own (``conf_dir``/home): the login shell must not
    run this machine's user's dotfiles (a version manager's rehash there
    can hold every login for a minute), and what a job leaves under ``~``
    stays with the node."""
    keys = f'{conf_dir}/authorized_keys' + (' .ssh/authorized_keys' if own_root else '')
    home = '' if own_root else f'SetEnv HOME={conf_dir}/home\n'
    return (f'Port 22\nListenAddress {address}\nHostKey {conf_dir}/host_key\n{home}'
            f'AuthorizedKeysFile {keys}\nPasswordAuthentication no\n'
            'KbdInteractiveAuthentication no\n'
            f'PidFile {conf_dir}/sshd.pid\nStrictModes no\nUsePAM no\n'
            'PermitRootLogin prohibit-password\nUseDNS no\n'
            'MaxSessions 64\nMaxStartups 64\nAcceptEnv LANG LC_*\n'
            'Subsystem sftp internal-sftp\n')


def _chroot_script(rootfs: str, state_dir: str) -> str:
    """Shell run inside the node's namespace: the node's root is an
    overlay of ``rootfs`` (read-only, shared by every node booted from
    it) and the node's own layer in its state dir, with /dev and /proc;
    then sshd (the script's arguments) runs chrooted there.  `ip netns
    exec` gave the script a mount namespace of its own, so these mounts
    vanish with the node's last process."""
    root = f'{state_dir}/root'
    return (
        'set -e\n'
        f'mkdir -p {state_dir}/upper{NODE_CONF} {state_dir}/work {root}\n'
        f'mount -t overlay overlay -o lowerdir={rootfs},upperdir={state_dir}/upper,'
        f'workdir={state_dir}/work {root}\n'
        f'mkdir -p {root}/dev {root}/proc {root}/run/sshd {root}/tmp\n'
        f'mount --rbind /dev {root}/dev\n'
        f'mount -t proc proc {root}/proc\n'
        f'exec chroot {root} "$@"\n')


def image_users(base_dir: str) -> dict[str, str]:
    """Hosts under ``base_dir`` booted from a root filesystem: name -> rootfs."""
    users = {}
    try:
        names = os.listdir(base_dir)
    except OSError:
        return users
    for name in names:
        try:
            with open(os.path.join(base_dir, name, 'rootfs')) as f:
                users[name] = f.read().strip()
        except OSError:
            continue
    return users


def wait_for_ssh(address: str, port: int, timeout: float, alive=None) -> None:
    """Until the server sends its SSH banner (bounded); ``alive()``
    returning a reason ends the wait early."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    last = None
    while time.monotonic() < deadline:
        gone = alive() if alive is not None else None
        if gone:
            raise NetnsError(f'sshd on {address}:{port} did not start: {gone}')
        try:
            with socket.create_connection((address, port), timeout=2) as s:
                if s.recv(4).startswith(b'SSH-'):
                    return
        except OSError as e:
            last = e
        time.sleep(delay)
        delay = min(delay * 2, 0.25)
    raise NetnsError(f'sshd on {address}:{port} did not answer within {timeout}s: {last}')


def scan_host_keys(address: str, port: int = 22, timeout: int = 10) -> list[str]:
    """``ssh-keyscan`` the host: ["<type> <base64>", ...]."""
    proc = _run('ssh-keyscan', '-T', str(timeout), '-p', str(port), address, check=False)
    keys = []
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and not line.startswith('#'):
            keys.append(f'{parts[1]} {parts[2]}')
    return keys
