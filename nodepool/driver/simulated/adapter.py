"""A simulated provider with fault injection.

By default the "cloud" lives in the launcher's memory.  With a
``state-dir`` it lives in that directory instead, one JSON file per
instance, so several launcher processes (and a test looking on) share
one cloud, as launchers share a real one: an instance outlives the
launcher that created it, and another launcher can list and delete it.
A file named ``hold-boots`` in the directory keeps every instance
booting until it is removed (``hold_boots``/``release_boots`` make and
remove it).
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import threading
import time

from nodepool.driver import Instance, InstanceSpec, LaunchError, ProviderAdapter, Quota

HOLD_FILE = 'hold-boots'


class _MemoryCloud:
    """Instances in this process."""

    def __init__(self):
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._instances: dict[str, dict] = {}
        self.boot_gate = threading.Event()
        self.boot_gate.set()

    def next_index(self) -> int:
        with self._lock:
            return next(self._ids)

    def put(self, external_id: str, record: dict) -> None:
        with self._lock:
            self._instances[external_id] = record

    def get(self, external_id: str) -> dict | None:
        with self._lock:
            return self._instances.get(external_id)

    def remove(self, external_id: str) -> None:
        with self._lock:
            self._instances.pop(external_id, None)

    def snapshot(self) -> dict[str, dict]:
        with self._lock:
            return dict(self._instances)

    def hold(self, held: bool) -> None:
        if held:
            self.boot_gate.clear()
        else:
            self.boot_gate.set()

    def held(self) -> bool:
        return not self.boot_gate.is_set()


class _DirectoryCloud:
    """Instances as files in a directory any process may share."""

    def __init__(self, path: str):
        self.path = path
        os.makedirs(path, exist_ok=True)

    def _file(self, external_id: str) -> str:
        return os.path.join(self.path, f'{external_id}.json')

    def next_index(self) -> int:
        with open(os.path.join(self.path, 'counter'), 'a+') as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            index = int(f.read().strip() or 0) + 1
            f.seek(0)
            f.truncate()
            f.write(str(index))
            return index

    def put(self, external_id: str, record: dict) -> None:
        tmp = self._file(external_id) + f'.{os.getpid()}.tmp'
        with open(tmp, 'w') as f:
            json.dump(record, f)
        os.replace(tmp, self._file(external_id))

    def get(self, external_id: str) -> dict | None:
        try:
            with open(self._file(external_id)) as f:
                return json.load(f)
        except FileNotFoundError:
            return None

    def remove(self, external_id: str) -> None:
        try:
            os.unlink(self._file(external_id))
        except FileNotFoundError:
            pass

    def snapshot(self) -> dict[str, dict]:
        out = {}
        for name in sorted(os.listdir(self.path)):
            if name.endswith('.json'):
                record = self.get(name[:-len('.json')])
                if record is not None:
                    out[name[:-len('.json')]] = record
        return out

    def hold(self, held: bool) -> None:
        path = os.path.join(self.path, HOLD_FILE)
        if held:
            open(path, 'a').close()
        elif os.path.exists(path):
            os.unlink(path)

    def held(self) -> bool:
        return os.path.exists(os.path.join(self.path, HOLD_FILE))


class SimulatedAdapter(ProviderAdapter):
    check_ssh = False

    def __init__(self, provider):
        super().__init__(provider)
        self.boot_delay = provider.settings.get('boot-delay', 0.0)
        self._quota = provider.settings.get('quota')
        state_dir = provider.settings.get('state-dir')
        self.cloud = _DirectoryCloud(state_dir) if state_dir else _MemoryCloud()
        self._lock = threading.Lock()
        # What this adapter did (for tests).
        self.created: list[str] = []
        self.deleted: list[str] = []
        self.failed_deletes: list[str] = []
        self._fail_launches = 0
        self._fail_deletes = 0

    @property
    def instances(self) -> dict[str, dict]:
        """The cloud's instances now, by external id."""
        return self.cloud.snapshot()

    # -- fault injection (tests) --------------------------------------------------

    def fail_next_launches(self, count: int) -> None:
        """The next ``count`` instances fail to boot."""
        with self._lock:
            self._fail_launches += count

    def fail_next_deletes(self, count: int) -> None:
        with self._lock:
            self._fail_deletes += count

    def hold_boots(self) -> None:
        """Instances stay booting until ``release_boots``."""
        self.cloud.hold(True)

    def release_boots(self) -> None:
        self.cloud.hold(False)

    def add_instance(self, node_id: str | None, name: str | None = None) -> str:
        """An instance the launcher did not create (a leak)."""
        index = self.cloud.next_index()
        external_id = name or f'sim-{index}'
        self.cloud.put(external_id, self._record(node_id, index, None, fail=False))
        return external_id

    def _record(self, node_id, index, username, fail) -> dict:
        now = time.time()
        return {'node_id': node_id, 'index': index, 'username': username, 'fail': fail,
                'created': now, 'ready_at': now + self.boot_delay}

    # -- the adapter interface ---------------------------------------------------

    def create(self, spec: InstanceSpec) -> str:
        with self._lock:
            fail = self._fail_launches > 0
            if fail:
                self._fail_launches -= 1
        index = self.cloud.next_index()
        external_id = f'sim-{index}'
        self.cloud.put(external_id, self._record(spec.node_id, index, spec.username, fail))
        with self._lock:
            self.created.append(external_id)
        return external_id

    def poll(self, external_id: str) -> Instance | None:
        inst = self.cloud.get(external_id)
        if inst is None:
            raise LaunchError(f'{external_id} vanished')
        if inst['fail']:
            raise LaunchError(f'{external_id} failed to boot (injected)')
        if self.cloud.held() or time.time() < inst['ready_at']:
            return None
        index = inst['index']
        address = f'192.0.2.{index % 250 + 1}'
        return Instance(external_id=external_id, node_id=inst['node_id'], ready=True,
                        interface_ip=address, public_ipv4=address,
                        private_ipv4=f'198.51.100.{index % 250 + 1}',
                        hostname=external_id, region='sim-region', az='sim-az',
                        username=inst['username'],
                        host_keys=[f'ssh-ed25519 SIMULATED{index}'])

    def delete(self, external_id: str) -> None:
        with self._lock:
            if self._fail_deletes > 0:
                self._fail_deletes -= 1
                self.failed_deletes.append(external_id)
                raise LaunchError(f'delete of {external_id} failed (injected)')
        self.cloud.remove(external_id)
        with self._lock:
            self.deleted.append(external_id)

    def list(self) -> list[Instance]:
        return [Instance(external_id=k, node_id=i['node_id'])
                for k, i in self.cloud.snapshot().items()]

    def quota(self) -> Quota:
        return Quota(instances=self._quota)
