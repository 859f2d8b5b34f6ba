"""The ZooKeeper wire records of Nodepool: node requests, nodes and
launcher registrations.

These dataclasses are the one definition of what lives under
``/nodepool``: the launcher writes them, Zuul's node-request client and
the ``nodepool`` CLI read them.  Bodies are JSON objects; every body
carries ``schema_version`` so a reader meeting a newer schema fails
loudly instead of misreading it.  Unknown keys from an older or newer
writer are kept in ``extra`` and written back unchanged.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from kazoo.exceptions import NoNodeError

SCHEMA_VERSION = 1

# Request states (seed 000).
REQUESTED = 'requested'
PENDING = 'pending'
FULFILLED = 'fulfilled'
FAILED = 'failed'
REQUEST_STATES = (REQUESTED, PENDING, FULFILLED, FAILED)

# Node states (seed 000).
BUILDING = 'building'
TESTING = 'testing'
READY = 'ready'
IN_USE = 'in-use'
USED = 'used'
HOLD = 'hold'
DELETING = 'deleting'
NODE_STATES = (BUILDING, TESTING, READY, IN_USE, USED, HOLD, DELETING)

# The requestor name of requests the launcher makes itself to keep
# ``min-ready`` nodes of a label around (as released Nodepool names it).
MIN_READY_REQUESTOR = 'NodePool:min-ready'


def read_many(client, entries) -> list:
    """Records read in one batch of asynchronous reads.  ``entries`` are
    ``(path, make)`` with ``make(raw, stat)`` building the record; gone or
    empty znodes are skipped, unreadable ones logged and skipped."""
    pending = [(path, make, client.get_async(path)) for path, make in entries]
    records = []
    for path, make, result in pending:
        try:
            raw, stat = result.get()
        except NoNodeError:
            continue
        if not raw:
            continue
        try:
            records.append(make(raw, stat))
        except ValueError:
            logging.getLogger('nodepool.zk').exception('Unreadable record at %s', path)
    return records


class WireVersionError(ValueError):
    """A record was written by a newer, incompatible schema."""


def _check_version(kind: str, data: dict) -> None:
    version = data.get('schema_version', 1)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise WireVersionError(
            f'{kind} record has schema_version {version!r}; this Nodepool '
            f'understands up to {SCHEMA_VERSION}')


class _Record:
    """Shared JSON (de)serialisation; subclasses are dataclasses.

    Attributes named in ``_local`` live only in this process (ids come
    from the znode name, locks and stats from the client) and are never
    serialised.
    """

    _local: ClassVar[tuple[str, ...]] = ('id', 'stat', 'extra', 'lock')
    _kind: ClassVar[str] = 'record'

    def to_dict(self) -> dict:
        d = dict(getattr(self, 'extra', None) or {})
        for f in fields(self):
            if f.name in self._local:
                continue
            value = getattr(self, f.name)
            d[f.name] = list(value) if isinstance(value, tuple) else value
        d['schema_version'] = SCHEMA_VERSION
        return d

    @classmethod
    def from_dict(cls, data: dict, **local: Any):
        if not isinstance(data, dict):
            raise ValueError(f'{cls._kind} record is not a JSON object')
        _check_version(cls._kind, data)
        known = {f.name for f in fields(cls)} - set(cls._local)
        kwargs = {k: v for k, v in data.items() if k in known}
        extra = {k: v for k, v in data.items()
                 if k not in known and k != 'schema_version'}
        obj = cls(**kwargs, **local)
        obj.extra = extra
        return obj

    def serialize(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True).encode('utf8')

    @classmethod
    def deserialize(cls, raw: bytes, **local: Any):
        return cls.from_dict(json.loads(raw.decode('utf8')), **local)


@dataclass
class NodeRequest(_Record):
    """``/nodepool/requests/<priority>-<sequence>``.

    ``id`` is the znode name (``"100-0000000042"``); the priority is its
    first part.  Zuul creates it ``requested``; a launcher that accepts
    it sets ``pending``, then ``fulfilled`` with ``nodes`` (node ids in
    the order of ``node_types``) or ``failed``.  Launchers that cannot
    serve it add their launcher id to ``declined_by``.
    """

    _kind: ClassVar[str] = 'node request'

    node_types: list[str] = field(default_factory=list)
    requestor: str = ''
    requestor_data: dict = field(default_factory=dict)
    created_time: float = 0.0
    state: str = REQUESTED
    state_time: float = 0.0
    nodes: list[str] = field(default_factory=list)
    declined_by: list[str] = field(default_factory=list)
    event_id: str | None = None
    # zuul-launcher only (seed 001; Nodepool leaves them empty):
    #: Per-node declines: node index (as a string, JSON keys being
    #: strings) -> canonical names of the providers that failed to
    #: launch that node.
    node_declines: dict = field(default_factory=dict)
    #: Per-node temporary failures (same shape as ``node_declines``):
    #: providers that could not launch that node for now (quota, a boot
    #: timeout, a transient API error).  Cleared for a node once every
    #: capable provider is in it, so the node is tried again.
    node_temp_failures: dict = field(default_factory=dict)
    #: Node index -> when (epoch seconds) its temporary failures were
    #: last cleared (they are not cleared again sooner than the
    #: launcher's retry delay, so a provider outage is not a busy loop).
    node_temp_cleared: dict = field(default_factory=dict)
    #: Launch every node from this image upload (image validation):
    #: ``{'image', 'build', 'upload', 'external_id'}``.
    image_upload: dict | None = None
    #: The Zuul tenant the nodes are for (released Nodepool's field;
    #: ``tenant-resource-limits`` apply to it).  Requestors that only put
    #: ``tenant`` in ``requestor_data`` are counted by that.
    tenant_name: str | None = None
    #: Why the last launch for this request failed, as the provider said
    #: (set when a launcher gives the request up after its
    #: ``launch-retries``); None while nothing failed.
    failure_reason: str | None = None
    # Process-local (not serialised).
    id: str | None = None
    stat: Any = None
    extra: dict = field(default_factory=dict)
    lock: Any = None

    @property
    def priority(self) -> str:
        return self.id.split('-', 1)[0] if self.id else ''

    @property
    def sort_key(self) -> tuple[int, int]:
        """Lower priority number first, then first come first served."""
        return request_sort_key(self.id)

    def set_state(self, state: str, now: float | None = None) -> None:
        if state not in REQUEST_STATES:
            raise ValueError(f'unknown request state {state!r}')
        self.state = state
        self.state_time = now if now is not None else time.time()

    @property
    def done(self) -> bool:
        return self.state in (FULFILLED, FAILED)

    @property
    def tenant(self) -> str | None:
        """``tenant_name``, else the ``tenant`` of ``requestor_data``."""
        return self.tenant_name or (self.requestor_data or {}).get('tenant')


def request_sort_key(request_id: str) -> tuple[int, int]:
    priority, _, seq = request_id.partition('-')
    try:
        return int(priority), int(seq)
    except ValueError:
        return (1 << 30), 0


@dataclass
class Node(_Record):
    """``/nodepool/nodes/<id>``: one node and how to reach it.

    ``type`` is the label the node serves.  ``allocated_to`` is the id of
    the request it is destined for.  The connection fields
    (``interface_ip``, ``connection_port``, ``connection_type``,
    ``username``, ``host_keys``) are what a requestor needs to log in:
    ``host_keys`` are ``"<type> <base64>"`` strings for known_hosts.
    """

    _kind: ClassVar[str] = 'node'

    type: str = ''
    provider: str = ''
    pool: str = ''
    region: str | None = None
    az: str | None = None
    cloud: str | None = None
    host_id: str | None = None
    hostname: str | None = None
    public_ipv4: str | None = None
    private_ipv4: str | None = None
    public_ipv6: str | None = None
    interface_ip: str | None = None
    connection_type: str = 'ssh'
    connection_port: int = 22
    username: str | None = None
    host_keys: list[str] = field(default_factory=list)
    python_path: str = 'auto'
    shell_type: str | None = None
    allocated_to: str | None = None
    state: str = BUILDING
    state_time: float = 0.0
    created_time: float = 0.0
    updated_time: float = 0.0
    image_id: str | None = None
    launcher: str | None = None
    external_id: str | None = None
    slot: int | None = None
    hold_job: str | None = None
    # Seconds a ``hold`` node is kept (from its state_time); None or 0:
    # until deleted by hand or the launcher's ``max-hold-age``.
    hold_expiration: int | None = None
    comment: str | None = None
    attributes: dict = field(default_factory=dict)
    #: The tenant of the request the node was launched or taken for
    #: (None while unallocated), and what it takes (``instances``,
    #: ``cores``, ``ram``): per-tenant usage is added up from these
    #: records across every provider.
    tenant_name: str | None = None
    resources: dict = field(default_factory=dict)
    # zuul-launcher only (seed 001: the launch state machine lives in
    # ZooKeeper so any launcher can resume it; Nodepool leaves them
    # empty):
    #: Which node of its request (index into ``node_types``).
    request_index: int | None = None
    #: Launch attempts made so far in this provider.
    launch_attempts: int = 0
    #: Launch step: queued|start|booting|checking|ready|failed.
    launch_state: str | None = None
    #: Wall-clock deadline (epoch seconds) of the current attempt.
    launch_deadline: float | None = None
    #: Every label a reusable (static) node can serve.
    labels: list[str] = field(default_factory=list)
    #: The event id of the request it was allocated to (for log lines).
    event_id: str | None = None
    #: How the last launch attempt failed: ``temporary`` (quota, boot
    #: timeout, transient API error), ``permanent`` or None.
    launch_failure: str | None = None
    #: For nodes that are not hosts (``connection_type`` namespace,
    #: project, kubectl): where they are (``kind``, ``namespace``,
    #: ``pod``, ``host`` (the API server), ``skiptls``, ``ca_crt``,
    #: ``user``).  Never a credential: see ``NodepoolZooKeeper.store_node_secret``.
    resource: dict | None = None
    # Process-local (not serialised).
    id: str | None = None
    stat: Any = None
    extra: dict = field(default_factory=dict)
    lock: Any = None

    def set_state(self, state: str, now: float | None = None) -> None:
        if state not in NODE_STATES:
            raise ValueError(f'unknown node state {state!r}')
        self.state = state
        self.state_time = now if now is not None else time.time()

    @property
    def address(self) -> str | None:
        """Where a requestor connects."""
        return self.interface_ip or self.public_ipv4 or self.public_ipv6 or \
            self.private_ipv4


def apply_instance(node: Node, inst) -> None:
    """Copy what a provider reports about an instance
    (``nodepool.driver.Instance``) onto its node record: addresses,
    location, connection details and host keys.  Both launchers
    (nodepool-launcher and zuul-launcher) use it."""
    for attr in ('interface_ip', 'public_ipv4', 'private_ipv4', 'public_ipv6', 'hostname',
                 'region', 'az', 'cloud', 'host_id', 'connection_type'):
        value = getattr(inst, attr)
        if value is not None:
            setattr(node, attr, value)
    node.connection_port = inst.connection_port or node.connection_port
    node.host_keys = list(inst.host_keys or node.host_keys)
    node.username = node.username or inst.username
    if getattr(inst, 'python_path', None) and node.python_path in (None, 'auto'):
        node.python_path = inst.python_path
    if getattr(inst, 'shell_type', None) and not node.shell_type:
        node.shell_type = inst.shell_type
    if getattr(inst, 'resource', None):
        node.resource = dict(inst.resource)
    node.interface_ip = node.interface_ip or inst.public_ipv4 or inst.public_ipv6 or \
        inst.private_ipv4


@dataclass
class LauncherRecord(_Record):
    """``/nodepool/launchers/<hostname>-<pid>-<tid>`` (ephemeral): one
    provider pool worker that takes part in ``declined_by`` accounting."""

    _kind: ClassVar[str] = 'launcher'

    hostname: str = ''
    pid: int = 0
    provider: str = ''
    pool: str = ''
    supported_labels: list[str] = field(default_factory=list)
    # The pool's ``priority`` (lower is preferred) and whether it is paused:
    # a pool yields requests to a preferred pool that is not paused.
    priority: int = 100
    paused: bool = False
    # zuul-launcher only: the providers (canonical names) it serves, and
    # those whose loop lock it holds now (to even out the work).
    providers: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    id: str | None = None
    stat: Any = None
    extra: dict = field(default_factory=dict)
    lock: Any = None


@dataclass
class ProviderState(_Record):
    """``/zuul/launcher/provider-state/<quoted canonical name>``: what the
    holder of a provider's loop lock last said about the provider
    (zuul-launcher only).  ``paused``: the provider takes no new launches
    now (``reason``: ``quota`` while queued nodes wait for room in it,
    ``quota-error`` after the provider itself refused a launch for lack
    of room)."""

    _kind: ClassVar[str] = 'provider state'

    provider: str = ''
    paused: bool = False
    reason: str | None = None
    launcher: str | None = None
    since: float = 0.0
    id: str | None = None
    stat: Any = None
    extra: dict = field(default_factory=dict)
    lock: Any = None
