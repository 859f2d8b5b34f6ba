"""The launch state machine of one node, kept on its record.

Seed 001: "Any state machine information currently stored in memory in
nodepool-launcher will need to move to ZooKeeper so that other launchers
can resume state machine processing."  So every step is short (the
adapter's ``create`` returns an external id, ``poll`` does not wait) and
the record is written after each one:

    queued --(room in quota)--> start --create--> booting --poll ready-->
        [checking --SSH banner-->] ready (state ``ready``)

``launch_attempts`` counts creates; ``launch_deadline`` bounds the
current attempt (the provider's boot timeout).  A failure deletes the
instance and starts again, up to the provider's ``launch-attempts``;
then the provider gives the node up, recording on the request (written
before the node record is deleted) how it failed, so the global loop
assigns it elsewhere:

- permanent (``node_declines``): the adapter raised ``LaunchError``
  (bad image or flavor, an instance that failed to boot, an image with
  no upload), or the provider cannot be served at all;
- temporary (``node_temp_failures``): the adapter raised ``QuotaError``
  (then at once, without further attempts, and the provider pauses,
  see ``zuul.launcher.provider_loop``), the boot timeout passed, or any
  other error (``ProviderError`` that is not a ``LaunchError``, network
  and API errors): the node is tried again once every provider failed
  it temporarily.

The kind of the last failure is kept on the record (``launch_failure``)
so a launcher resuming a ``failed`` node knows it.
"""

from __future__ import annotations

import logging
import time

from nodepool.driver import (
    ImageRef,
    InstanceSpec,
    LaunchError,
    ProviderError,
    QuotaError,
    instance_name,
)
from nodepool.driver.sshutil import ssh_banner
from nodepool.zk.api import RecordChangedError
from nodepool.zk.records import READY, Node, apply_instance
from zuul.launcher.quota import QUEUED

log = logging.getLogger('zuul.launcher.node')

START = 'start'
BOOTING = 'booting'
CHECKING = 'checking'
LAUNCHED = 'ready'
FAILING = 'failed'
MAX_STEPS = 6

# How a launch failed (``Node.launch_failure``).
TEMPORARY = 'temporary'
PERMANENT = 'permanent'
QUOTA = 'quota'


class BootTimeoutError(ProviderError):
    """An instance was not ready within the provider's boot timeout
    (a temporary failure: the provider may be slow, not broken)."""


def failure_kind(error: BaseException) -> str:
    """``quota``, ``permanent`` or ``temporary`` (see the module docstring)."""
    if isinstance(error, QuotaError):
        return QUOTA
    if isinstance(error, LaunchError):
        return PERMANENT
    return TEMPORARY


def node_tag(node: Node) -> str:
    """How log lines name a node (with its request's event id)."""
    return f'[e: {node.event_id}] node {node.id} ({node.type}, request {node.allocated_to})'


class NodeLaunchSteps:
    """Steps the building nodes of one provider (``loop``)."""

    def __init__(self, loop):
        self.loop = loop
        self.zk = loop.zk
        self.served = loop.served
        self.adapter = loop.adapter

    def _tag(self, node: Node) -> str:
        return node_tag(node)

    def prepare(self, node: Node) -> None:
        """A queued node the loop found room for: it launches now (the
        record is written with the instance's external id)."""
        pool_label = self.served.pool.labels.get(node.type)
        if pool_label is not None:
            node.username = node.username or pool_label.username
            node.python_path = pool_label.python_path
            node.shell_type = pool_label.shell_type
        node.launcher = self.loop.launcher.id
        node.launch_state = START

    def has_image(self, node: Node) -> bool:
        """Whether a node that boots a Zuul image has an upload to boot."""
        pool_label = self.served.pool.labels.get(node.type)
        if pool_label is None or not pool_label.diskimage:
            return True
        return self._image(node) is not None

    def step(self, node: Node, request_ids: set[str]) -> bool:
        """Advance ``node`` as far as it goes without waiting, writing
        the record once at the end; True while it is still in flight
        (poll again soon).  Queued nodes are left to the loop (quota)."""
        dirty = False
        try:
            for _ in range(MAX_STEPS):
                state = node.launch_state or QUEUED
                gone = node.allocated_to is not None and node.allocated_to not in request_ids
                if state == QUEUED:
                    return False
                if state == START:
                    self._create(node)
                elif state == BOOTING:
                    if not self._poll(node):
                        return True
                elif state == CHECKING:
                    if not self._check(node):
                        return True
                elif state == FAILING:
                    dirty = False
                    self._fail(node, 'previous attempt failed',
                               node.launch_failure or PERMANENT)
                    return node.launch_state != FAILING
                elif state == LAUNCHED:
                    dirty = False
                    self._ready(node, gone)
                    return False
                dirty = True
            return True
        except Exception as e:
            dirty = False
            self._fail(node, str(e) or e.__class__.__name__, failure_kind(e))
            return node.launch_state == START
        finally:
            if dirty:
                self.zk.store_node(node)

    def drop(self, node: Node) -> None:
        """A queued node whose request is gone."""
        log.info('%s: request gone before launch; dropped', self._tag(node))
        self.zk.delete_node(node)
        self.loop.launcher.wake_requests()

    # -- steps -------------------------------------------------------------------------

    def _image(self, node: Node) -> ImageRef | None:
        upload = None
        if node.allocated_to:
            # image_upload never changes after submission: the cache will do.
            cache = self.loop.launcher.request_cache
            request = cache.get(node.allocated_to) if cache is not None else None
            if request is None:
                request = self.zk.get_request(node.allocated_to)
            upload = request.image_upload if request is not None else None
        if upload:
            image_id = f'{upload.get("image")}-{upload.get("build")}-{upload.get("upload")}'
            return ImageRef(image_name=str(upload.get('image')),
                            build_id=str(upload.get('build')),
                            upload_id=str(upload.get('upload')),
                            external_id=str(upload.get('external_id')), image_id=image_id)
        pool_label = self.served.pool.labels.get(node.type)
        if pool_label is not None and pool_label.diskimage:
            return self.loop.launcher.image_for(self.served.name, pool_label.diskimage)
        return None

    def _create(self, node: Node) -> None:
        pool_label = self.served.pool.labels[node.type]
        image = self._image(node)
        if pool_label.diskimage and image is None:
            raise LaunchError(f'no upload of image {pool_label.diskimage} to launch from')
        spec = InstanceSpec(name=instance_name(node.provider, node.id), node_id=node.id,
                            provider=node.provider, pool=node.pool, label=node.type,
                            label_settings=dict(pool_label.settings), username=node.username,
                            metadata={'zuul_node_id': node.id,
                                      'zuul_provider': node.provider},
                            image=image, az=node.az)
        node.launch_attempts += 1
        node.image_id = image.image_id if image else None
        node.external_id = self.adapter.create(spec)
        node.launch_state = BOOTING
        node.launch_deadline = time.time() + self.served.config.boot_timeout
        log.info('%s: instance %s created in %s (attempt %d)', self._tag(node),
                 node.external_id, node.provider, node.launch_attempts)

    def _poll(self, node: Node) -> bool:
        inst = self.adapter.poll(node.external_id)
        if inst is None or not inst.ready:
            self._check_deadline(node)
            return False
        apply_instance(node, inst)
        if inst.secret:
            self.zk.store_node_secret(node.id, inst.secret)
        if self.adapter.check_ssh and node.connection_type == 'ssh':
            node.launch_state = CHECKING
        else:
            node.launch_state = LAUNCHED
        return True

    def _check(self, node: Node) -> bool:
        if node.address and ssh_banner(node.address, node.connection_port, timeout=1.0):
            node.launch_state = LAUNCHED
            return True
        self._check_deadline(node)
        return False

    def _check_deadline(self, node: Node) -> None:
        if node.launch_deadline is not None and time.time() > node.launch_deadline:
            raise BootTimeoutError(f'not ready within {self.served.config.boot_timeout:g}s')

    def _ready(self, node: Node, gone: bool) -> None:
        node.set_state(READY)
        if gone:
            log.info('%s: request gone; the ready node joins the pool', self._tag(node))
            node.allocated_to = None
            node.request_index = None
            node.event_id = None
        self.zk.store_node(node)
        log.info('%s: ready at %s in %s', self._tag(node), node.address, node.provider)
        self.loop.launcher.wake_requests()

    # -- failure -----------------------------------------------------------------------

    def _fail(self, node: Node, reason: str, kind: str = PERMANENT) -> None:
        log.warning('%s: launch attempt %d in %s failed (%s): %s', self._tag(node),
                    node.launch_attempts, node.provider, kind, reason)
        node.launch_failure = kind
        if kind == QUOTA:
            self.loop.pause_for_quota(reason)
        if node.external_id:
            try:
                self.adapter.delete(node.external_id)
            except Exception as e:
                log.warning('%s: deleting instance %s failed: %s (retried later)',
                            self._tag(node), node.external_id, e)
                node.launch_state = FAILING
                self.zk.store_node(node)
                return
            node.external_id = None
        if kind != QUOTA and node.launch_attempts < self.served.launch_attempts and \
                node.launch_state != QUEUED:
            node.launch_state = START
            node.launch_deadline = None
            self.zk.store_node(node)
            return
        node.launch_state = None
        if node.allocated_to and node.request_index is not None:
            decline(self.zk, node, f'after {node.launch_attempts} attempts ({reason})',
                    temporary=kind != PERMANENT)
        self.zk.delete_node(node)
        self.loop.launcher.wake_requests()


def decline(zk, node: Node, why: str, temporary: bool = False) -> None:
    """Record on the node's request that its provider failed the node,
    permanently (``node_declines``) or for now (``node_temp_failures``);
    written before the node record goes, see zuul.launcher.assign."""
    for _ in range(20):
        request = zk.get_request(node.allocated_to)
        if request is None:
            return
        failures = request.node_temp_failures if temporary else request.node_declines
        declined = failures.setdefault(str(node.request_index), [])
        if node.provider in declined:
            return
        declined.append(node.provider)
        request.failure_reason = f'{node.provider}: {why}'
        try:
            zk.store_request(request, expected_version=request.stat.version)
        except RecordChangedError:
            continue
        log.warning('[e: %s] request %s: provider %s %s node %d (%s) %s',
                    request.event_id, request.id, node.provider,
                    'failed (temporarily)' if temporary else 'declined',
                    node.request_index, node.type, why)
        return
    log.error('%s: could not record the decline', node_tag(node))
