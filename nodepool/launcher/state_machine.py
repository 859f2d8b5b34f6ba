"""The node state machines the framework runs, one thread per node, so a
slow boot never blocks a request loop.

Launch: building -> (create) -> (poll until ready) -> testing (SSH
banner check, if the adapter asks for it) -> ready.  Any failure:
deleting -> instance deleted -> record deleted; the request handler then
launches a replacement.

Delete: deleting -> instance deleted -> record deleted.  If the provider
refuses, the record stays ``deleting`` and unlocked, and the cleanup
loop tries again later.

The caller locks the node before starting a machine; the launch machine
keeps the lock when it succeeds (the request handler releases it at
fulfilment), the delete machine's lock goes with the record.
"""

from __future__ import annotations

import logging
import threading
import time

from nodepool.driver import (
    ImageRef,
    Instance,
    InstanceSpec,
    LaunchError,
    ProviderAdapter,
    QuotaError,
    instance_name,
)
from nodepool.driver.sshutil import SSHCheckError, wait_for_ssh
from nodepool.zk import api as zkapi
from nodepool.zk.records import DELETING, READY, TESTING, Node, NodeRequest, apply_instance

log = logging.getLogger('nodepool.launcher.node')

# Launch states (in memory: the record says building/testing/ready).
START = 'start'
CREATING = 'creating'
BOOTING = 'booting'
CHECKING = 'checking'
DONE = 'done'
FAILED = 'failed'


def request_info(request: NodeRequest) -> dict:
    """``InstanceSpec.request`` for a launch prompted by ``request``."""
    return {'id': request.id, 'labels': list(request.node_types),
            'requestor': request.requestor,
            'requestor_data': dict(request.requestor_data or {}),
            'relative_priority': (request.extra or {}).get('relative_priority', 0),
            'event_id': request.event_id, 'created_time': request.created_time,
            'tenant_name': request.tenant}


class NodeLaunchStateMachine:
    """Brings one locked ``building`` node to ``ready`` (or removes it)."""

    def __init__(self, zk: zkapi.NodepoolZooKeeper, adapter: ProviderAdapter, node: Node,
                 spec_settings: dict, boot_timeout: float, poll_interval: float = 1.0,
                 on_done=None, semaphore: threading.Semaphore | None = None,
                 image: ImageRef | None = None, launch_timeout: float | None = None,
                 request: dict | None = None):
        self.zk = zk
        #: What the adapter is told of the request (``InstanceSpec.request``).
        self.request = request
        self.image = image
        #: Seconds from issuing the create until the instance is ready
        #: (the provider's ``launch-timeout``); ``boot_timeout`` then
        #: bounds the SSH check.  None: one deadline, ``boot_timeout``,
        #: for the whole launch (an adapter that times both itself).
        self.launch_timeout = launch_timeout
        self.adapter = adapter
        self.node = node
        self.spec_settings = spec_settings
        self.boot_timeout = boot_timeout
        self.poll_interval = poll_interval
        self.on_done = on_done
        self.semaphore = semaphore
        self.state = START
        self.error: str | None = None
        self.exception: Exception | None = None
        #: The provider refused for want of room (``QuotaError``): not a
        #: failure of the launch, the pool pauses instead.
        self.quota_error = False
        self.abandoned = False
        self.thread: threading.Thread | None = None
        # time.monotonic() at the start and the end of the launch (metrics)
        self.started_at: float | None = None
        self.ended_at: float | None = None

    @property
    def finished(self) -> bool:
        return self.state in (DONE, FAILED)

    @property
    def succeeded(self) -> bool:
        return self.state == DONE

    def start(self) -> None:
        self.thread = threading.Thread(target=self.run, daemon=True,
                                       name=f'launch-{self.node.id}')
        self.thread.start()

    def run(self) -> None:
        if self.semaphore is not None:
            self.semaphore.acquire()
        self.started_at = time.monotonic()
        try:
            self._launch()
            self.state = DONE
            log.info('Node %s ready (%s at %s)', self.node.id, self.node.type,
                     self.node.interface_ip)
        except Exception as e:
            self.error = str(e) or e.__class__.__name__
            self.exception = e
            self.quota_error = isinstance(e, QuotaError)
            log.warning('Node %s failed to launch: %s', self.node.id, self.error)
            self._remove()
            self.state = FAILED
        finally:
            self.ended_at = time.monotonic()
            if self.semaphore is not None:
                self.semaphore.release()
            if self.on_done is not None:
                try:
                    self.on_done(self)
                except Exception:
                    log.exception('Launch callback failed for node %s', self.node.id)

    def _check_abandoned(self) -> None:
        if self.abandoned:
            raise LaunchError('abandoned (the launcher lost its ZooKeeper session)')

    def _launch(self) -> None:
        node = self.node
        spec = InstanceSpec(name=instance_name(node.provider, node.id), node_id=node.id,
                            provider=node.provider, pool=node.pool, label=node.type,
                            label_settings=dict(self.spec_settings),
                            username=node.username, metadata={'nodepool_node_id': node.id},
                            image=self.image, az=node.az,
                            connection_type=node.connection_type if self.image else None,
                            connection_port=node.connection_port if self.image else None,
                            request=self.request)
        self.state = CREATING
        started = time.monotonic()
        limit = self.launch_timeout if self.launch_timeout is not None else self.boot_timeout
        node.external_id = self.adapter.create(spec)
        self._check_abandoned()
        self.zk.store_node(node)
        self.state = BOOTING
        inst = self._wait_ready(started + limit, limit)
        apply_instance(node, inst)
        if inst.secret:
            self._check_abandoned()
            self.zk.store_node_secret(node.id, inst.secret)
        # The SSH check has boot-timeout from now (with a launch-timeout)
        # or what is left of the one deadline.
        deadline = time.monotonic() + self.boot_timeout if self.launch_timeout is not None \
            else started + self.boot_timeout
        if self.adapter.check_ssh and node.connection_type == 'ssh':
            self.state = CHECKING
            node.set_state(TESTING)
            self._check_abandoned()
            self.zk.store_node(node)
            left = max(deadline - time.monotonic(), 0.1)
            try:
                wait_for_ssh(node.address, node.connection_port, left,
                             should_stop=lambda: self.abandoned)
            except SSHCheckError as e:
                raise LaunchError(str(e)) from None
        node.set_state(READY)
        self._check_abandoned()
        self.zk.store_node(node)

    def _wait_ready(self, deadline: float, limit: float) -> Instance:
        delay = min(0.01, self.poll_interval)
        what = 'launch-timeout' if self.launch_timeout is not None else 'boot-timeout'
        while True:
            if time.monotonic() > deadline:
                # Checked before polling too: a create that itself took
                # longer than the limit fails the attempt.
                raise LaunchError(f'not ready within {what} {limit:g}s')
            inst = self.adapter.poll(self.node.external_id)
            if inst is not None and inst.ready:
                return inst
            self._check_abandoned()
            if time.monotonic() + delay > deadline:
                raise LaunchError(f'not ready within {what} {limit:g}s')
            time.sleep(delay)
            delay = min(delay * 2, self.poll_interval)

    def _remove(self) -> None:
        try:
            remove_node(self.zk, self.adapter, self.node)
        except Exception:
            log.exception('Node %s: removing the failed node failed', self.node.id)


def remove_node(zk: zkapi.NodepoolZooKeeper, adapter: ProviderAdapter, node: Node) -> bool:
    """Mark deleting, delete the instance, delete the record.  On a provider
    error the record stays ``deleting`` (and is unlocked) for a retry."""
    node.set_state(DELETING)
    try:
        zk.store_node(node)
    except zkapi.RecordGoneError:
        pass
    if node.external_id and not adapter.reuses_nodes:
        try:
            adapter.delete(node.external_id)
        except Exception as e:
            log.warning('Node %s: deleting instance %s failed: %s', node.id,
                        node.external_id, e)
            zk.unlock_node(node)
            return False
    zk.delete_node(node)
    log.info('Node %s deleted', node.id)
    return True


class NodeDeleteStateMachine:
    """Deletes one locked node in its own thread."""

    def __init__(self, zk: zkapi.NodepoolZooKeeper, adapter: ProviderAdapter, node: Node,
                 on_done=None):
        self.zk = zk
        self.adapter = adapter
        self.node = node
        self.on_done = on_done
        self.deleted = False
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self.run, daemon=True,
                                       name=f'delete-{self.node.id}')
        self.thread.start()

    def run(self) -> None:
        try:
            self.deleted = remove_node(self.zk, self.adapter, self.node)
        except Exception:
            log.exception('Node %s: delete failed', self.node.id)
            self.zk.unlock_node(self.node)
        finally:
            if self.on_done is not None:
                self.on_done(self)
