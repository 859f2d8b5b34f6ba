"""What runs a pod of the Kubernetes API stand-in: a network namespace
of its own (a netns host without sshd, tests/fakes/kubernetes_api.py
``--backing netns``) or, without root, a plain directory; ``exec`` runs
the command in it (``ip netns exec``) with the pod's directory as HOME
and working directory, and streams it over the exec websocket's
channels (0 stdin, 1 stdout, 2 stderr, 3 status; v5: 255 close)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading

from nodepool.driver.netns.host import NetnsHostManager
from tests.fakes.websocket_server import OP_BINARY, OP_CLOSE, OP_TEXT, WebSocket

PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'


class PodBacking:
    """The pods' namespaces (or directories) under ``state_dir``."""

    def __init__(self, state_dir: str, mode: str = 'netns', subnet: str = '10.233.0.0/16',
                 bridge: str = 'k8sbr0'):
        self.state_dir = state_dir
        self.mode = mode
        self.manager = NetnsHostManager(base_dir=os.path.join(state_dir, 'netns'),
                                        subnet=subnet, bridge=bridge) \
            if mode == 'netns' else None
        self._lock = threading.Lock()
        self._pods: dict[str, dict] = {}

    def start(self, key: str, env: dict) -> str | None:
        """Make the pod's namespace; its IP (None in process mode)."""
        home = os.path.join(self.state_dir, 'pods', key)
        os.makedirs(home, exist_ok=True)
        address = None
        if self.manager is not None:
            self.manager.ensure_bridge()
            index = self.manager.allocator.allocate(key, self.manager.network.num_addresses)
            address = str(self.manager.network.network_address + index)
            from nodepool.driver.netns.host import NetnsHost
            host = NetnsHost(key, address, 22, 'root', [], home, namespace=f'np-{key}',
                             veth=f'{self.manager.bridge[:8]}v{index}')
            try:
                self.manager._make_namespace(host)
            except Exception:
                self.manager.delete(key)
                raise
        with self._lock:
            self._pods[key] = {'home': home, 'env': dict(env)}
        return address

    def stop(self, key: str) -> None:
        with self._lock:
            pod = self._pods.pop(key, None)
        if self.manager is not None:
            self.manager.delete(key)
        if pod is not None:
            shutil.rmtree(pod['home'], ignore_errors=True)

    def stop_all(self) -> None:
        with self._lock:
            keys = list(self._pods)
        for key in keys:
            self.stop(key)

    def command(self, key: str, argv: list[str]) -> tuple[list[str], dict, str]:
        with self._lock:
            pod = self._pods.get(key)
        if pod is None:
            raise KeyError(key)
        env = {'PATH': PATH, 'HOME': pod['home'], 'LANG': 'C.UTF-8', **pod['env']}
        if self.manager is not None:
            argv = ['ip', 'netns', 'exec', f'np-{key}', *argv]
        return argv, env, pod['home']


def run_exec(ws: WebSocket, protocol: str, argv: list[str], env: dict, cwd: str,
             want_stdin: bool) -> None:
    """One exec session: the process's streams over the websocket."""
    try:
        proc = subprocess.Popen(argv, env=env, cwd=cwd,
                                stdin=subprocess.PIPE if want_stdin else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as e:
        _status(ws, {'status': 'Failure', 'reason': 'InternalError',
                     'message': f'exec: {e}'})
        ws.close()
        return
    pumps = [threading.Thread(target=_pump, args=(proc.stdout, ws, 1), daemon=True),
             threading.Thread(target=_pump, args=(proc.stderr, ws, 2), daemon=True)]
    for t in pumps:
        t.start()
    if want_stdin:
        threading.Thread(target=_feed, args=(ws, proc, protocol), daemon=True).start()
    rc = proc.wait()
    for t in pumps:
        t.join()
    if rc == 0:
        _status(ws, {'metadata': {}, 'status': 'Success'})
    else:
        _status(ws, {'metadata': {}, 'status': 'Failure',
                     'message': f'command terminated with non-zero exit code: {rc}',
                     'reason': 'NonZeroExitCode',
                     'details': {'causes': [{'reason': 'ExitCode', 'message': str(rc)}]}})
    ws.close()


def _status(ws: WebSocket, status: dict) -> None:
    ws.send(b'\x03' + json.dumps(status).encode(), OP_BINARY)


def _pump(stream, ws: WebSocket, channel: int) -> None:
    while True:
        chunk = stream.read1(1 << 16) if hasattr(stream, 'read1') else stream.read(1 << 16)
        if not chunk:
            return
        ws.send(bytes([channel]) + chunk, OP_BINARY)


def _feed(ws: WebSocket, proc: subprocess.Popen, protocol: str) -> None:
    try:
        while True:
            opcode, data = ws.receive()
            if opcode == OP_CLOSE:
                break
            if opcode not in (OP_BINARY, OP_TEXT) or not data:
                continue
            channel, payload = data[0], data[1:]
            if channel == 255 and protocol.startswith('v5') and payload[:1] == b'\x00':
                break       # v5: the client closed stdin
            if channel == 0 and payload:
                proc.stdin.write(payload)
                proc.stdin.flush()
    except (EOFError, OSError, ValueError):
        pass
    finally:
        try:
            proc.stdin.close()
        except OSError:
            pass
