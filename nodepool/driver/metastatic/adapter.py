"""Metastatic nodes: slots of backing nodes of another label, which the
adapter asks the launcher's own node system for through its
``NodeBroker``.

``create`` takes a free slot of a backing node of the label's
``backing-label`` (one with fewer than ``max-parallel-jobs`` slots in
use), or asks for a new backing node; ``poll`` reports the slot ready
with the backing node's address, user, port and host keys once that
node is ready; ``delete`` frees the slot, and a backing node with no slot
in use is given back after ``grace-time`` (and not before
``min-retention-time`` since it was taken), unless a new slot takes it
first.  The backing node's record (its provider's) says where it is;
the metastatic node records say which backing node they share
(``host_id`` is the backing node's id).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from nodepool.driver import (
    Instance,
    InstanceSpec,
    LaunchError,
    NodeBroker,
    ProviderAdapter,
    ProviderError,
    Quota,
)

log = logging.getLogger('nodepool.driver.metastatic')


@dataclass(eq=False)
class _Backing:
    label: str
    handle: object
    capacity: int
    grace: float
    retention: float
    taken: float = field(default_factory=time.monotonic)
    slots: set = field(default_factory=set)
    idle_since: float | None = None
    node: dict | None = None
    failed: bool = False

    @property
    def free(self) -> int:
        return self.capacity - len(self.slots)


class MetastaticAdapter(ProviderAdapter):
    check_ssh = False

    def __init__(self, provider):
        super().__init__(provider)
        self.broker: NodeBroker | None = None
        self._lock = threading.Lock()
        self._backing: list[_Backing] = []
        self._slots: dict[str, tuple[_Backing, InstanceSpec]] = {}
        self._reaper: threading.Timer | None = None

    def set_node_broker(self, broker: NodeBroker) -> None:
        self.broker = broker

    def start(self) -> None:
        if self.broker is None:
            raise ProviderError(f'metastatic provider {self.provider.name}: the launcher '
                                'gives it no way to request backing nodes')

    def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()

    # -- slots ---------------------------------------------------------------------------

    def create(self, spec: InstanceSpec) -> str:
        settings = self.provider.pools[spec.pool].labels[spec.label].settings
        backing_label = settings['backing-label']
        external_id = f'{self.provider.name}-{spec.node_id}'
        with self._lock:
            backing = next((b for b in self._backing if b.label == backing_label and
                            not b.failed and b.free > 0), None)
            if backing is None:
                handle = self.broker.request(backing_label, {'metastatic': spec.node_id})
                backing = _Backing(backing_label, handle, settings['max-parallel-jobs'],
                                   settings['grace-time'], settings['min-retention-time'])
                self._backing.append(backing)
                log.info('Provider %s: asked for a %s backing node for node %s',
                         self.provider.name, backing_label, spec.node_id)
            backing.slots.add(external_id)
            backing.idle_since = None
            self._slots[external_id] = (backing, spec)
        return external_id

    def poll(self, external_id: str) -> Instance | None:
        with self._lock:
            entry = self._slots.get(external_id)
        if entry is None:
            raise LaunchError(f'{external_id} is not a slot of this launcher')
        backing, spec = entry
        state, node = self.broker.state(backing.handle)
        if state == NodeBroker.FAILED:
            backing.failed = True
            raise LaunchError(f'no {backing.label} backing node could be had')
        if state != NodeBroker.READY:
            return None
        backing.node = node
        return Instance(
            external_id=external_id, node_id=spec.node_id, ready=True,
            interface_ip=node.get('interface_ip'), public_ipv4=node.get('public_ipv4'),
            private_ipv4=node.get('private_ipv4'), public_ipv6=node.get('public_ipv6'),
            hostname=node.get('hostname'), connection_port=node.get('connection_port') or 22,
            connection_type=node.get('connection_type') or 'ssh',
            username=node.get('username'), host_keys=list(node.get('host_keys') or []),
            region=node.get('region'), az=node.get('az'), cloud=node.get('cloud'),
            host_id=str(node.get('id')), python_path=node.get('python_path'),
            shell_type=node.get('shell_type'))

    def delete(self, external_id: str) -> None:
        with self._lock:
            entry = self._slots.pop(external_id, None)
            if entry is None:
                return
            backing = entry[0]
            backing.slots.discard(external_id)
            if not backing.slots:
                backing.idle_since = time.monotonic()
        self._schedule_reap()

    def _schedule_reap(self) -> None:
        with self._lock:
            idle = [b for b in self._backing if not b.slots]
            if not idle:
                return
            now = time.monotonic()
            wait = min(max(b.idle_since + b.grace, b.taken + b.retention) - now
                       for b in idle if b.idle_since is not None)
            if self._reaper is not None:
                self._reaper.cancel()
            self._reaper = threading.Timer(max(wait, 0.0), self.reap)
            self._reaper.daemon = True
            self._reaper.start()

    def reap(self) -> None:
        """Give back backing nodes idle past their grace time."""
        now = time.monotonic()
        with self._lock:
            done = [b for b in self._backing if not b.slots and b.idle_since is not None and
                    now >= max(b.idle_since + b.grace, b.taken + b.retention)]
            for b in done:
                self._backing.remove(b)
        for b in done:
            log.info('Provider %s: giving back backing node %s (%s)', self.provider.name,
                     (b.node or {}).get('id'), b.label)
            self.broker.release(b.handle)
        self._schedule_reap()

    def list(self) -> list[Instance]:
        with self._lock:
            return [Instance(external_id=eid, node_id=spec.node_id)
                    for eid, (_, spec) in self._slots.items()]

    def backing_nodes(self) -> list[dict]:
        """What each backing node serves now (tests, diagnosis)."""
        with self._lock:
            return [{'label': b.label, 'node': (b.node or {}).get('id'),
                     'slots': sorted(b.slots)} for b in self._backing]

    def quota(self) -> Quota:
        return Quota()
