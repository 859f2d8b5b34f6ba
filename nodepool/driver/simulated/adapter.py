"""An in-memory provider with fault injection."""

from __future__ import annotations

import itertools
import threading
import time

from nodepool.driver import Instance, InstanceSpec, LaunchError, ProviderAdapter, Quota


class SimulatedAdapter(ProviderAdapter):
    check_ssh = False

    def __init__(self, provider):
        super().__init__(provider)
        self.boot_delay = provider.settings.get('boot-delay', 0.0)
        self._quota = provider.settings.get('quota')
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.instances: dict[str, dict] = {}
        self.created: list[str] = []
        self.deleted: list[str] = []
        self.failed_deletes: list[str] = []
        self._fail_launches = 0
        self._fail_deletes = 0
        self.boot_gate = threading.Event()
        self.boot_gate.set()

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
        self.boot_gate.clear()

    def release_boots(self) -> None:
        self.boot_gate.set()

    def add_instance(self, node_id: str | None, name: str | None = None) -> str:
        """An instance the launcher did not create (a leak)."""
        with self._lock:
            external_id = name or f'sim-{next(self._ids)}'
            self.instances[external_id] = {'node_id': node_id, 'created': time.monotonic(),
                                           'fail': False, 'index': next(self._ids)}
        return external_id

    # -- the adapter interface ---------------------------------------------------

    def create(self, spec: InstanceSpec) -> str:
        with self._lock:
            index = next(self._ids)
            external_id = f'sim-{index}'
            fail = self._fail_launches > 0
            if fail:
                self._fail_launches -= 1
            self.instances[external_id] = {'node_id': spec.node_id, 'spec': spec,
                                           'created': time.monotonic(), 'fail': fail,
                                           'index': index}
            self.created.append(external_id)
        return external_id

    def poll(self, external_id: str) -> Instance | None:
        with self._lock:
            inst = self.instances.get(external_id)
        if inst is None:
            raise LaunchError(f'{external_id} vanished')
        if inst['fail']:
            raise LaunchError(f'{external_id} failed to boot (injected)')
        if not self.boot_gate.is_set():
            return None
        if time.monotonic() - inst['created'] < self.boot_delay:
            return None
        index = inst['index']
        address = f'192.0.2.{index % 250 + 1}'
        spec = inst.get('spec')
        return Instance(external_id=external_id, node_id=inst['node_id'], ready=True,
                        interface_ip=address, public_ipv4=address,
                        private_ipv4=f'198.51.100.{index % 250 + 1}',
                        hostname=external_id, region='sim-region', az='sim-az',
                        username=spec.username if spec else None,
                        host_keys=[f'ssh-ed25519 SIMULATED{index}'])

    def delete(self, external_id: str) -> None:
        with self._lock:
            if self._fail_deletes > 0:
                self._fail_deletes -= 1
                self.failed_deletes.append(external_id)
                raise LaunchError(f'delete of {external_id} failed (injected)')
            self.instances.pop(external_id, None)
            self.deleted.append(external_id)

    def list(self) -> list[Instance]:
        with self._lock:
            return [Instance(external_id=k, node_id=i['node_id'])
                    for k, i in self.instances.items()]

    def quota(self) -> Quota:
        return Quota(instances=self._quota)
