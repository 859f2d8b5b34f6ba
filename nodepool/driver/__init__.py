"""Provider drivers: the small interface the launcher framework drives,
and the registry that names them.

A driver has two facets:

- ``Driver``: the provider's configuration (its voluptuous schema and
  the typed ``ProviderConfig`` built from it) and a factory for
  adapters.
- ``ProviderAdapter``: talks to the provider and nothing else.  The
  framework (``nodepool.launcher``) owns ZooKeeper, locks, retries,
  quota and the node state machine; an adapter never sees a node record.

Drivers are registered explicitly in a ``DriverRegistry``; tests build
their own registry to add fault-injecting drivers.
"""

from __future__ import annotations

import logging
import math
import re
import time
from dataclasses import dataclass, field
from typing import ClassVar

import voluptuous as v

from nodepool.driver.settings import PoolConfig, ProviderConfig

# -- what adapters exchange with the framework --------------------------------


def instance_prefix(provider_name: str) -> str:
    """The start of every instance name of a provider."""
    return re.sub(r'[^A-Za-z0-9_.-]', '_', provider_name) + '-'


def instance_name(provider_name: str, node_id: str) -> str:
    return instance_prefix(provider_name) + node_id


def resource_name(*parts: str, limit: int = 63) -> str:
    """A DNS-1123 label made of ``parts`` (lower case, ``-`` for anything
    else), at most ``limit`` long: what clouds and clusters accept as a
    resource name or label value."""
    text = '-'.join(parts).lower()
    text = re.sub(r'[^a-z0-9-]+', '-', text).strip('-')
    if len(text) > limit:
        # Keep the end: it holds the node id, which makes it unique.
        text = text[-limit:].strip('-')
    return text or 'node'


class ProviderError(RuntimeError):
    """The provider refused or failed an operation."""


class LaunchError(ProviderError):
    """An instance failed to come up; the framework replaces the node."""


class QuotaError(ProviderError):
    """The provider has no room for the instance now (its quota or its
    capacity is exhausted).  Unlike ``LaunchError`` this is temporary:
    zuul-launcher pauses the provider and tries the node elsewhere or
    later, instead of declining it for good."""


@dataclass
class InstanceSpec:
    """What to create: one instance for one node.

    ``name`` is unique per provider and ends with the node id, so
    ``list`` can report which node an instance belongs to.
    """

    name: str
    node_id: str
    provider: str
    pool: str
    label: str
    label_settings: dict = field(default_factory=dict)
    username: str | None = None
    metadata: dict = field(default_factory=dict)
    #: For labels with ``diskimage:``: the upload the launcher chose (the
    #: highest-numbered ready upload of that image to this provider).
    #: None for labels that don't use a built image.
    image: ImageRef | None = None
    #: The availability zone to create it in (every node of one request
    #: gets the same, see ``ProviderAdapter.choose_az``); None: the
    #: provider's choice.
    az: str | None = None
    #: How a consumer connects to the node, as the built image says
    #: (top-level diskimage ``connection-type``/``connection-port``);
    #: None for labels that don't boot a built image.  An adapter
    #: reports them on the instance unless its own settings say otherwise.
    connection_type: str | None = None
    connection_port: int | None = None
    #: The request that prompted this launch (released Nodepool's fields:
    #: ``id``, ``labels``, ``requestor``, ``requestor_data``,
    #: ``relative_priority``, ``event_id``, ``created_time``,
    #: ``tenant_name``); None when no request did.  The node may end up
    #: serving another request: this is not updated then.
    request: dict | None = None


@dataclass
class ImageRef:
    """A built image's upload to one provider, as a launch uses it.

    ``image_id`` is what a node records as its ``image_id``:
    ``<image>-<build id>-<upload id>``.
    """

    image_name: str
    build_id: str
    upload_id: str
    external_id: str
    image_id: str = ''


@dataclass
class UploadSpec:
    """What the builder asks a provider to upload.

    ``files`` maps each format the build produced to its file
    (``<images-dir>/<image>-<build id>.<format>``); the adapter picks a
    format it accepts (see ``ProviderAdapter.image_formats``).
    ``upload_name`` is the name to give it in the provider
    (``<image>-<build id as zero-padded number>``), ``meta`` the
    provider-diskimage's ``meta`` plus nodepool's own keys
    (``nodepool_build_id``, ``nodepool_upload_id``, ``nodepool_provider_name``).
    """

    image_name: str
    build_id: str
    upload_id: str
    upload_name: str
    files: dict[str, str]
    meta: dict = field(default_factory=dict)


@dataclass
class Instance:
    """An instance as the provider reports it.

    ``ready`` is True once it can be used; the address and connection
    fields are then filled in.  ``node_id`` is the id of the node it was
    created for (from ``InstanceSpec``), or None if unknown.
    """

    external_id: str
    node_id: str | None = None
    ready: bool = False
    interface_ip: str | None = None
    public_ipv4: str | None = None
    private_ipv4: str | None = None
    public_ipv6: str | None = None
    hostname: str | None = None
    connection_port: int = 22
    connection_type: str = 'ssh'
    username: str | None = None
    host_keys: list[str] = field(default_factory=list)
    region: str | None = None
    az: str | None = None
    cloud: str | None = None
    host_id: str | None = None
    #: The interpreter and shell on the instance, when the provider knows
    #: them better than the label (a metastatic slot: its backing node's);
    #: they apply where the label says ``auto`` / nothing.
    python_path: str | None = None
    shell_type: str | None = None
    #: What a user of a node that is not a host needs besides its address
    #: (a Kubernetes namespace or pod: API server, namespace, pod, CA):
    #: public, copied onto the node record (``Node.resource``).
    resource: dict | None = None
    #: Credentials of the node (a service-account token): never on the
    #: node record; the framework keeps them in ZooKeeper beside it
    #: (``store_node_secret``) for the requestor that locks the node.
    secret: dict | None = field(default=None, repr=False)


@dataclass
class Quota:
    """Resources: instances, cores and RAM (MiB).

    As a limit (``ProviderAdapter.quota``), None in a field means no
    limit the provider knows of (the pool's max-servers, max-cores and
    max-ram still apply).  As what one node takes
    (``ProviderAdapter.label_quota``), None means the field is not
    counted.
    """

    instances: int | None = None
    cores: float | None = None
    ram: float | None = None

    FIELDS: ClassVar[tuple[str, ...]] = ('instances', 'cores', 'ram')

    def plus(self, other: Quota) -> Quota:
        """Usage added up (None counts as nothing)."""
        return Quota(*((getattr(self, f) or 0) + (getattr(other, f) or 0)
                       for f in self.FIELDS))

    def minus(self, used: Quota) -> Quota:
        """What is left of this limit after ``used`` (None stays None)."""
        return Quota(*(None if getattr(self, f) is None
                       else getattr(self, f) - (getattr(used, f) or 0) for f in self.FIELDS))

    def count(self, need: Quota) -> float:
        """How many of ``need`` fit in what is left (inf: no limit
        applies; 0 or less: none)."""
        counts = [math.floor(getattr(self, f) / getattr(need, f)) for f in self.FIELDS
                  if getattr(self, f) is not None and getattr(need, f)]
        return min(counts) if counts else math.inf


@dataclass
class StaticHost:
    """A fixed host a reusing provider offers (one per slot)."""

    name: str
    slot: int
    labels: list[str]
    pool: str
    username: str | None
    connection_port: int = 22
    connection_type: str = 'ssh'
    python_path: str = 'auto'
    shell_type: str | None = None
    host_keys: list[str] = field(default_factory=list)
    host_key_checking: bool = True
    timeout: float = 5.0
    attributes: dict = field(default_factory=dict)


class ProviderAdapter:
    """One provider as the framework sees it.

    Every method may be called from any launcher thread, concurrently
    (one launch or delete per thread), so implementations keep their own
    state thread-safe.  Methods raise ``ProviderError`` (or anything
    else) on failure; the framework logs, retries or replaces.
    """

    #: Nodes return to ``ready`` after use instead of being deleted, and
    #: the framework registers ``static_hosts()`` rather than launching.
    reuses_nodes = False
    #: The framework should check the node's SSH port before ``ready``.
    check_ssh = True
    #: The adapter spaces its own API calls by the provider's ``rate``
    #: (the framework then does not space the adapter's methods).
    limits_own_rate = False
    #: The adapter enforces ``launch-timeout`` and ``boot-timeout`` itself
    #: (its ``poll`` reports ready only once the node can be used); the
    #: framework then applies only ``ProviderConfig.boot_timeout`` to the
    #: whole launch.  Otherwise the framework gives the instance
    #: ``launch_timeout`` from create to ready and ``boot_timeout`` from
    #: then for the SSH check.
    times_own_launch = False

    def __init__(self, provider: ProviderConfig):
        self.provider = provider

    def start(self) -> None:
        """Called once before use (connect, create shared resources)."""

    def stop(self) -> None:
        """Called once at shutdown; instances stay."""

    def create(self, spec: InstanceSpec) -> str:
        """Start creating an instance; return its external id quickly or
        after the provider accepted it.  Called once per launch attempt."""
        raise NotImplementedError

    def poll(self, external_id: str) -> Instance | None:
        """The instance's current state: ready (with addresses), not yet
        (None or ``ready=False``), or raise ``LaunchError`` if it failed.
        Called repeatedly until ready or the boot timeout."""
        raise NotImplementedError

    def delete(self, external_id: str) -> None:
        """Delete the instance and return when it is gone (or never
        existed).  Called from a delete thread; may be retried."""
        raise NotImplementedError

    def list(self) -> list[Instance]:
        """Every instance of this provider (to find leaked ones); called
        by the cleanup loop."""
        raise NotImplementedError

    def quota(self) -> Quota:
        """The provider's own limits, less what is used by anything other
        than this provider's nodes (the framework counts those from their
        records).  Called for every decision: answer from a cache."""
        return Quota()

    def label_quota(self, pool: PoolConfig, label: str) -> Quota:
        """What one node of ``label`` in ``pool`` takes."""
        return Quota(instances=1)

    def choose_az(self, pool: PoolConfig) -> str | None:
        """An availability zone for the nodes of one request (the first
        launch of a request asks; the rest of its nodes follow), or None
        to leave it to the provider."""
        return None

    # -- images (for providers with ``diskimages:``; used by the builder) --

    def image_formats(self) -> list[str]:
        """The image formats this provider accepts, preferred first."""
        return []

    def upload_image(self, spec: UploadSpec) -> str:
        """Upload a built image; return its external id when the
        provider has it ready to boot.  Raise ``ProviderError`` on failure
        (the builder records the upload as failed and retries later)."""
        raise ProviderError(f'provider {self.provider.name!r} does not take image uploads')

    def delete_image(self, external_id: str) -> None:
        """Remove an uploaded image (return quietly if it is gone)."""
        raise ProviderError(f'provider {self.provider.name!r} does not take image uploads')

    def cleanup_leaks(self) -> None:
        """Remove what the provider leaked besides instances (floating
        IPs, ports).  Called by the cleanup loop once per full pass;
        raise ``ProviderError`` if the provider cannot be reached."""

    def static_hosts(self) -> list[StaticHost]:
        """For ``reuses_nodes`` providers: the hosts to register."""
        return []

    def set_node_broker(self, broker: NodeBroker) -> None:
        """For providers whose nodes are carved out of other nodes
        (metastatic): how to ask the launcher's own node system for a node
        of another label and give it back.  Called once, before ``start``."""

    def scan_host_keys(self, host: StaticHost) -> list[str]:
        """For ``reuses_nodes`` providers: the host's current SSH keys."""
        return []


class NodeBroker:
    """Nodes of the launcher's own node system, for an adapter
    (``ProviderAdapter.set_node_broker``): the framework submits node
    requests and holds the nodes' locks; the adapter sees handles and
    node fields only."""

    WAITING, READY, FAILED = 'waiting', 'ready', 'failed'

    def request(self, label: str, requestor_data: dict | None = None):
        """Ask for one node of ``label``; a handle."""
        raise NotImplementedError

    def state(self, handle) -> tuple[str, dict | None]:
        """(``waiting``|``ready``|``failed``, the node's record fields
        once ready, with its ``id``)."""
        raise NotImplementedError

    def release(self, handle) -> None:
        """Give the node back (it is used: its provider deletes it)."""
        raise NotImplementedError

    def held(self) -> list:
        """Handles of the nodes held now."""
        return []


class Driver:
    """The configuration facet of a driver and its adapter factory."""

    name = ''

    def provider_schema(self) -> v.Schema:
        raise NotImplementedError

    def load_provider(self, raw: dict) -> ProviderConfig:
        """Build the typed config from validated ``raw``; may raise
        ``voluptuous.Invalid`` with a path for semantic problems."""
        raise NotImplementedError

    def get_adapter(self, provider: ProviderConfig) -> ProviderAdapter:
        raise NotImplementedError


def unique_pools(raw: dict) -> None:
    """Raise Invalid if two pools of a provider share a name."""
    seen = set()
    for i, pool in enumerate(raw.get('pools') or []):
        if pool['name'] in seen:
            raise v.Invalid(f'pool {pool["name"]!r} is defined twice',
                            path=['pools', i, 'name'])
        seen.add(pool['name'])


# -- registry -----------------------------------------------------------------

# Drivers released Nodepool has that this one does not (yet), with why.
UNSUPPORTED = {
    'fake': "the 'fake' driver is released Nodepool's simulated OpenStack and is "
            'not provided here (use the simulated driver for tests)',
    'ibmvpc': 'the ibmvpc driver is not supported by this Nodepool',
}


class DriverRegistry:
    """Driver name -> Driver."""

    def __init__(self, drivers: list[Driver] | None = None):
        self._drivers: dict[str, Driver] = {}
        for driver in drivers or []:
            self.register(driver)

    def register(self, driver: Driver) -> None:
        self._drivers[driver.name] = driver

    def names(self) -> list[str]:
        return sorted(self._drivers)

    def unsupported_reason(self, name: str) -> str | None:
        """None if the driver can be used, else a sentence saying why not."""
        if name in self._drivers:
            return None
        if name in UNSUPPORTED:
            return f'driver {name!r} is not supported: {UNSUPPORTED[name]}'
        return (f'unknown driver {name!r} (available: '
                f'{", ".join(self.names())})')

    def get(self, name: str) -> Driver:
        if name not in self._drivers:
            raise KeyError(self.unsupported_reason(name))
        return self._drivers[name]


def default_registry() -> DriverRegistry:
    """The drivers this Nodepool ships."""
    from nodepool.driver.aws.driver import AwsDriver
    from nodepool.driver.azure.driver import AzureDriver
    from nodepool.driver.gce.driver import GceDriver
    from nodepool.driver.kubernetes.driver import (
        KubernetesDriver,
        OpenShiftDriver,
        OpenShiftPodsDriver,
    )
    from nodepool.driver.metastatic.driver import MetastaticDriver
    from nodepool.driver.netns.driver import NetnsDriver
    from nodepool.driver.openstack.driver import OpenStackDriver
    from nodepool.driver.simulated.driver import SimulatedDriver
    from nodepool.driver.static.driver import StaticDriver
    return DriverRegistry([StaticDriver(), NetnsDriver(), SimulatedDriver(), OpenStackDriver(),
                           KubernetesDriver(), OpenShiftDriver(), OpenShiftPodsDriver(),
                           AwsDriver(), MetastaticDriver(), GceDriver(), AzureDriver()])


class CachedQuota:
    """For an adapter that reads its limits from the provider: ``quota()``
    calls ``_fetch_quota()`` at most once per ``quota_cache_seconds``; a
    failed read (``ProviderError``) keeps the last answer (or no limit).
    The adapter has ``self._lock``."""

    quota_cache_seconds = 60.0
    _quota: tuple[float, Quota] | None = None

    def _fetch_quota(self) -> Quota:
        raise NotImplementedError

    def invalidate_quota(self) -> None:
        with self._lock:
            self._quota = None

    def quota(self) -> Quota:
        with self._lock:
            cached = self._quota
        if cached is not None and time.monotonic() - cached[0] < self.quota_cache_seconds:
            return cached[1]
        try:
            quota = self._fetch_quota()
        except ProviderError as e:
            logging.getLogger('nodepool.driver').warning(
                'Provider %s: reading the quota failed: %s', self.provider.name, e)
            return cached[1] if cached is not None else Quota()
        with self._lock:
            self._quota = (time.monotonic(), quota)
        return quota
