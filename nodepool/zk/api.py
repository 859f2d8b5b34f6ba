"""The one API over ZooKeeper for Nodepool records.

``NodepoolZooKeeper`` wraps a started ``KazooClient``.  It reads and
writes the typed records of ``nodepool.zk.records`` at the paths of
``nodepool.zk.paths`` and takes the locks there (kazoo's Lock recipe).
The launcher, the ``nodepool`` CLI and Zuul's node-request client all go
through it; nothing else in Nodepool touches ZooKeeper.
"""

from __future__ import annotations

import json
import logging
import time

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    LockTimeout,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.recipe.lock import Lock

from nodepool.zk import paths
from nodepool.zk.images import ImageZooKeeper
from nodepool.zk.records import LauncherRecord, Node, NodeRequest, read_many, request_sort_key

log = logging.getLogger('nodepool.zk')


class ZooKeeperError(RuntimeError):
    pass


class RecordGoneError(ZooKeeperError):
    """The znode was deleted under us (a cancelled request, a deleted node)."""


class RecordChangedError(ZooKeeperError):
    """The znode changed since it was read (a versioned write failed)."""


#: A call failed because the connection to its server went: it may or
#: may not have been applied.  The session (and our locks) live on.
CONNECTION_LOST = (ConnectionLoss, OperationTimeoutError)
#: What a loop meeting ZooKeeper trouble logs briefly and tries again
#: after: a lost connection, or a session that ended (its owner starts
#: over in a new one).
ZOOKEEPER_DOWN = (*CONNECTION_LOST, SessionExpiredError)


def retry_policy(timeout: float) -> dict:
    """How a client retries connecting (and kazoo's recipes their calls).

    kazoo's own default backs off up to an hour between rounds over the
    servers; after an ensemble lost and regained quorum that would keep
    a client away long after its session had expired.  Retry at least
    every ``timeout / 3`` seconds (at most every 5 s), so a client is
    back within its session timeout once a majority serves again.
    """
    return {'max_tries': -1, 'delay': 0.1, 'backoff': 2,
            'max_delay': max(0.5, min(timeout / 3.0, 5.0))}


def connect(hosts: str, timeout: float = 10.0, tls: dict | None = None,
            read_only: bool = False, start_timeout: float = 30.0,
            randomize_hosts: bool = True) -> KazooClient:
    """A started KazooClient.  ``hosts`` lists every member of the
    ensemble (``h1:2181,h2:2181,h3:2181[/chroot]``); the client moves to
    another when its server goes.  ``tls``: {'cert', 'key', 'ca'} file
    paths."""
    kw = {}
    if tls:
        kw.update(use_ssl=True, certfile=tls.get('cert'), keyfile=tls.get('key'),
                  ca=tls.get('ca'))
    client = KazooClient(hosts, timeout=timeout, read_only=read_only,
                         randomize_hosts=randomize_hosts,
                         connection_retry=retry_policy(timeout),
                         command_retry=retry_policy(timeout), **kw)
    try:
        client.start(timeout=start_timeout)
    except Exception:
        client.stop()
        client.close()
        raise
    return client


def retry_call(call, *args, **kw):
    """``call(*args, **kw)``, made again after a lost connection: for
    calls safe to repeat (a read, or a write whose repeat does no harm).

    kazoo queues calls while it reconnects, so the repeat waits for a
    server that serves: with quorum lost, that pauses the caller until
    quorum returns.  An expired session is not retried (locks went with
    it), nor is a closed client."""
    while True:
        try:
            return call(*args, **kw)
        except CONNECTION_LOST:
            log.info('ZooKeeper connection lost during %s; repeating it once reconnected',
                     getattr(call, '__name__', call))
            time.sleep(0.05)


def create_once(client: KazooClient, root: str, prefix: str, data: bytes,
                ephemeral: bool = False) -> str:
    """Create the sequential znode ``root/prefix<seq>`` holding ``data``
    exactly once, and return its path.

    If the connection goes before the answer comes, the server may have
    created it anyway: look for it (a znode under ``root`` holding
    exactly ``data``; for an ephemeral one, of this session) before
    creating it again.  ``data`` must be unique (a creation time or an
    id in it will do)."""
    while True:
        try:
            return client.create(f'{root}/{prefix}', data, ephemeral=ephemeral,
                                 sequence=True, makepath=True)
        except CONNECTION_LOST:
            path = retry_call(_find_created, client, root, prefix, data, ephemeral)
            if path is not None:
                return path
            log.info('Connection lost while creating a znode in %s; creating it again', root)


def _find_created(client, root: str, prefix: str, data: bytes, ephemeral: bool) -> str | None:
    for name in sorted(retry_call(client.get_children, root), reverse=True):
        if not name.startswith(prefix):
            continue
        try:
            raw, stat = retry_call(client.get, f'{root}/{name}')
        except NoNodeError:
            continue
        if raw != data:
            continue
        if ephemeral:
            session = client.client_id      # None: disconnected again
            if session is None:
                raise ConnectionLoss()
            if stat.ephemeralOwner != session[0]:
                continue
        return f'{root}/{name}'
    return None


def hosts_string(servers: list[dict] | list, chroot: str | None = None) -> str:
    """``host:port,host:port/chroot`` from nodepool.yaml zookeeper-servers."""
    parts = []
    for s in servers:
        host = s['host'] if isinstance(s, dict) else s.host
        port = (s.get('port') if isinstance(s, dict) else s.port) or 2181
        parts.append(f'{host}:{port}')
        c = s.get('chroot') if isinstance(s, dict) else getattr(s, 'chroot', None)
        chroot = chroot or c
    hosts = ','.join(parts)
    if chroot:
        hosts += '/' + chroot.strip('/')
    return hosts


class NodepoolZooKeeper:
    """Typed access to requests, nodes, launchers and their locks."""

    def __init__(self, client: KazooClient, owns_client: bool = False,
                 tree: paths.ZKPaths = paths.NODEPOOL):
        self.client = client
        self._owns_client = owns_client
        self._images: ImageZooKeeper | None = None
        #: Which node system's records: Nodepool's (``/nodepool``) or
        #: zuul-launcher's (``/zuul/node-requests``, ``/zuul/nodes``).
        self.tree = tree
        for path in (tree.request_root, tree.request_lock_root, tree.node_root,
                     tree.launcher_root):
            client.ensure_path(path)

    @classmethod
    def from_hosts(cls, hosts: str, timeout: float = 10.0, tls: dict | None = None,
                   tree: paths.ZKPaths = paths.NODEPOOL):
        return cls(connect(hosts, timeout=timeout, tls=tls), owns_client=True, tree=tree)

    def sibling(self, tree: paths.ZKPaths) -> NodepoolZooKeeper:
        """The same client (and session) over another node system's tree."""
        return NodepoolZooKeeper(self.client, owns_client=False, tree=tree)

    def close(self) -> None:
        if self._owns_client:
            try:
                self.client.stop()
            finally:
                self.client.close()

    @property
    def images(self) -> ImageZooKeeper:
        """Image builds and uploads (``nodepool.zk.images``)."""
        if self._images is None:
            self._images = ImageZooKeeper(self.client)
        return self._images

    @property
    def session_id(self) -> int | None:
        """The session's id; None while disconnected (the session may
        well live on: kazoo tells only once it is connected again)."""
        cid = self.client.client_id
        return cid[0] if cid else None

    # -- requests -----------------------------------------------------------

    def submit_request(self, request: NodeRequest, priority: str | int = '100',
                       ephemeral: bool = True) -> str:
        """Create the request znode; sets and returns ``request.id``.

        Requests are ephemeral by default (seed 000): when the requestor's
        session ends, its requests end with it.
        """
        now = time.time()
        request.created_time = request.created_time or now
        request.state_time = now
        path = self._create_sequential(self.tree.request_root, f'{int(priority):03d}-',
                                       request.serialize(), ephemeral)
        request.id = path.rsplit('/', 1)[1]
        return request.id

    def _create_sequential(self, root: str, prefix: str, data: bytes,
                           ephemeral: bool = False) -> str:
        return create_once(self.client, root, prefix, data, ephemeral)

    def get_request(self, request_id: str, watch=None) -> NodeRequest | None:
        try:
            raw, stat = self._retry(self.client.get, self.tree.request_path(request_id),
                                    watch=watch)
        except NoNodeError:
            return None
        if not raw:
            return None
        return NodeRequest.deserialize(raw, id=request_id, stat=stat)

    def get_request_ids(self) -> list[str]:
        try:
            ids = self._retry(self.client.get_children, self.tree.request_root)
        except NoNodeError:
            return []
        return sorted(ids, key=request_sort_key)

    def get_requests(self) -> list[NodeRequest]:
        """All requests in processing order (one batch of reads)."""
        return [r for r in self._get_many(self.get_request_ids(), self.tree.request_path,
                                          NodeRequest) if r is not None]

    def store_request(self, request: NodeRequest, expected_version: int = -1) -> None:
        """Write ``request`` back; RecordGoneError if it was deleted,
        RecordChangedError if ``expected_version`` is given and stale."""
        path, data = self.tree.request_path(request.id), request.serialize()
        lost = False
        while True:
            try:
                stat = self.client.set(path, data, version=expected_version)
                break
            except CONNECTION_LOST:
                lost = True
            except NoNodeError:
                raise RecordGoneError(f'request {request.id} no longer exists') from None
            except BadVersionError:
                # After a lost connection: was it our own write that
                # moved the version on?
                stat = self._written(path, data) if lost else None
                if stat is None:
                    raise RecordChangedError(
                        f'request {request.id} changed meanwhile') from None
                break
        request.stat = stat

    def _written(self, path: str, data: bytes):
        """The stat of ``path`` if it holds exactly ``data``."""
        try:
            raw, stat = self._retry(self.client.get, path)
        except NoNodeError:
            return None
        return stat if raw == data else None

    def fulfil_request(self, request: NodeRequest, nodes: list[Node]) -> None:
        """Write the (fulfilled) request and release the locks of its
        nodes and of the request, in one transaction; RecordGoneError
        (and nothing changed) if the request was deleted."""
        tx = self.client.transaction()
        tx.set_data(self.tree.request_path(request.id), request.serialize())
        held = [r.lock for r in [*nodes, request]
                if getattr(r, 'lock', None) is not None and r.lock.is_acquired]
        for lock in held:
            tx.delete(f'{lock.path}/{lock.node}')
        try:
            results = tx.commit()
        except CONNECTION_LOST:
            results = self._fulfil_outcome(tx, request, held)
        failures = [r for r in results if isinstance(r, Exception)]
        if failures:
            if self.exists(self.tree.request_path(request.id)) is None:
                raise RecordGoneError(f'request {request.id} no longer exists')
            raise ZooKeeperError(f'fulfilling request {request.id} failed: {failures}')
        for lock in held:
            lock.is_acquired = False
            lock.node = None
        for record in (*nodes, request):
            record.lock = None

    def _fulfil_outcome(self, tx, request: NodeRequest, held: list) -> list:
        """The answer of a fulfilment transaction lost with the connection:
        it was applied if (and only if) our request lock is gone, since
        nobody else deletes a lock we hold; if not, commit it again."""
        while True:
            if not held:
                return [None]
            mine = held[-1]
            if self._retry(self.client.exists, f'{mine.path}/{mine.node}') is None:
                log.info('Request %s: the fulfilment went through before the '
                         'connection was lost', request.id)
                return [None]
            again = self.client.transaction()
            for op in tx.operations:
                again.operations.append(op)
            try:
                return again.commit()
            except CONNECTION_LOST:
                continue

    def delete_request(self, request: NodeRequest | str) -> None:
        request_id = request if isinstance(request, str) else request.id
        try:
            self._retry(self.client.delete, self.tree.request_path(request_id))
        except NoNodeError:
            pass
        self.delete_request_lock_dir(request_id)

    def delete_request_lock_dir(self, request_id: str) -> bool:
        """Remove the (unused) lock directory of a finished request."""
        try:
            self._retry(self.client.delete, self.tree.request_lock_path(request_id))
        except (NoNodeError, NotEmptyError):
            return False
        return True

    def get_request_lock_ids(self) -> list[str]:
        try:
            return self._retry(self.client.get_children, self.tree.request_lock_root)
        except NoNodeError:
            return []

    def lock_request(self, request: NodeRequest, blocking: bool = True,
                     timeout: float | None = None, identifier: str = '') -> bool:
        """Take ``/nodepool/requests-lock/<id>``; the lock object is kept
        on the request (``request.lock``)."""
        path = self.tree.request_lock_path(request.id)
        lock = self._lock_new_dir(path, identifier)
        if lock is None:
            lock = Lock(self.client, path, identifier)
            lock.assured_path = True   # _lock_new_dir found it
            if not self._acquire(lock, blocking, timeout):
                return False
        request.lock = lock
        return True

    def unlock_request(self, request: NodeRequest) -> None:
        self._release(getattr(request, 'lock', None))
        request.lock = None

    def is_request_locked(self, request_id: str) -> bool:
        return self._has_contenders(self.tree.request_lock_path(request_id))

    # -- launchers ----------------------------------------------------------

    def register_launcher(self, launcher: LauncherRecord) -> None:
        path = self.tree.launcher_path(launcher.id)
        try:
            self._retry(self.client.create, path, launcher.serialize(), ephemeral=True,
                        makepath=True)
        except NodeExistsError:
            # Ours from this session (a re-registration, or a create
            # answered after the connection went): refresh it.
            self._retry(self.client.set, path, launcher.serialize())

    def unregister_launcher(self, launcher_id: str) -> None:
        try:
            self._retry(self.client.delete, self.tree.launcher_path(launcher_id))
        except NoNodeError:
            pass

    def get_launcher_ids(self) -> list[str]:
        try:
            return sorted(self._retry(self.client.get_children, self.tree.launcher_root))
        except NoNodeError:
            return []

    def get_launchers(self) -> list[LauncherRecord]:
        return [r for r in self._get_many(self.get_launcher_ids(), self.tree.launcher_path,
                                          LauncherRecord) if r is not None]

    # -- nodes --------------------------------------------------------------

    def create_locked_node(self, node: Node, identifier: str = '') -> str:
        """Create a node record and take its lock at once (nobody can have
        locked a node that did not exist)."""
        node.id = None
        now = time.time()
        node.created_time = node.created_time or now
        node.state_time = node.state_time or now
        node.updated_time = now
        path = self._create_sequential(self.tree.node_root, '', node.serialize())
        node.id = path.rsplit('/', 1)[1]
        lock = self._lock_new_dir(self.tree.node_lock_path(node.id), identifier)
        if lock is None:
            raise ZooKeeperError(f'node {node.id} was locked before its creator could')
        node.lock = lock
        return node.id

    def store_node(self, node: Node) -> str:
        """Create (no ``id`` yet: a sequential 10-digit id) or update."""
        now = time.time()
        node.updated_time = now
        if node.id is None:
            node.created_time = node.created_time or now
            node.state_time = node.state_time or now
            path = self._create_sequential(self.tree.node_root, '', node.serialize())
            node.id = path.rsplit('/', 1)[1]
            # The lock directory exists from the start: lockers never
            # create it, so locking a deleted node cannot resurrect it.
            try:
                self._retry(self.client.create, self.tree.node_lock_path(node.id))
            except NodeExistsError:
                pass
            return node.id
        try:
            node.stat = self._retry(self.client.set, self.tree.node_path(node.id),
                                    node.serialize())
        except NoNodeError:
            raise RecordGoneError(f'node {node.id} no longer exists') from None
        return node.id

    def get_node(self, node_id: str, watch=None) -> Node | None:
        try:
            raw, stat = self._retry(self.client.get, self.tree.node_path(node_id),
                                    watch=watch)
        except NoNodeError:
            return None
        if not raw:
            return None
        return Node.deserialize(raw, id=node_id, stat=stat)

    # A node's credentials (``Instance.secret``: a service-account token)
    # live in a child of its record, never in the record itself: node
    # caches, ``nodepool list``, zuul-web and logs read records, and only
    # the requestor that locked the node reads this (zuul.scheduler.nodes).
    SECRET_CHILD = 'secret'

    def store_node_secret(self, node_id: str, secret: dict) -> None:
        path = f'{self.tree.node_path(node_id)}/{self.SECRET_CHILD}'
        data = json.dumps(secret, sort_keys=True).encode('utf8')
        try:
            self._retry(self.client.create, path, data)
        except NodeExistsError:
            self._retry(self.client.set, path, data)

    def get_node_secret(self, node_id: str) -> dict | None:
        try:
            raw, _ = self._retry(self.client.get,
                                 f'{self.tree.node_path(node_id)}/{self.SECRET_CHILD}')
        except NoNodeError:
            return None
        try:
            data = json.loads(raw.decode('utf8')) if raw else None
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    def get_node_ids(self) -> list[str]:
        try:
            return sorted(self._retry(self.client.get_children, self.tree.node_root))
        except NoNodeError:
            return []

    def get_nodes(self) -> list[Node]:
        return [n for n in self._get_many(self.get_node_ids(), self.tree.node_path, Node)
                if n is not None]

    def lock_node(self, node: Node, blocking: bool = True, timeout: float | None = None,
                  identifier: str = '') -> bool:
        """Take ``/nodepool/nodes/<id>/lock``; False if the node is locked
        by someone else (non-blocking) or no longer exists."""
        for attempt in range(2):
            lock = Lock(self.client, self.tree.node_lock_path(node.id), identifier)
            lock.assured_path = True  # see store_node
            try:
                if not lock.acquire(blocking=blocking, timeout=timeout):
                    return False
            except LockTimeout:
                return False
            except NoNodeError:
                if attempt or not self._repair_lock_dir(node.id):
                    return False
                continue
            node.lock = lock
            return True
        return False

    def _repair_lock_dir(self, node_id: str) -> bool:
        """A node whose creator died between creating it and its lock
        directory: add the directory, atomically with a check that the
        node still exists (never resurrecting a deleted one)."""
        lock_path = self.tree.node_lock_path(node_id)
        if self.client.exists(lock_path) is not None:
            return False   # it exists: the lock was simply taken
        stat = self.client.exists(self.tree.node_path(node_id))
        if stat is None:
            return False
        tx = self.client.transaction()
        tx.check(self.tree.node_path(node_id), stat.version)
        tx.create(lock_path)
        results = tx.commit()
        return not any(isinstance(r, Exception) for r in results)

    def unlock_node(self, node: Node) -> None:
        self._release(getattr(node, 'lock', None))
        node.lock = None

    def is_node_locked(self, node_id: str, watch=None) -> bool:
        """Whether anyone holds (or waits for) the node's lock; ``watch``
        fires once when the lock's contenders change."""
        return self._has_contenders(self.tree.node_lock_path(node_id), watch)

    def delete_node(self, node: Node | str) -> None:
        """Remove the record and its lock directory (the caller holds the
        lock, which goes with it)."""
        node_id = node if isinstance(node, str) else node.id
        for attempt in range(10):
            if self._delete_node_tree(node_id):
                break
            if attempt == 9:
                raise ZooKeeperError(f'node {node_id} could not be deleted: its lock '
                                     'keeps gaining contenders')
        if not isinstance(node, str):
            lock = getattr(node, 'lock', None)
            if lock is not None:
                lock.is_acquired = False
                node.lock = None

    def _delete_node_tree(self, node_id: str) -> bool:
        """Delete ``<node>/lock/*``, ``<node>/lock`` and ``<node>`` in one
        transaction; False if a lock contender appeared meanwhile."""
        node_path, lock_path = self.tree.node_path(node_id), self.tree.node_lock_path(node_id)
        try:
            contenders = self._retry(self.client.get_children, lock_path)
        except NoNodeError:
            contenders = None
        secret_path = f'{node_path}/{self.SECRET_CHILD}'
        has_secret = self._retry(self.client.exists, secret_path) is not None
        tx = self.client.transaction()
        for child in contenders or []:
            tx.delete(f'{lock_path}/{child}')
        if contenders is not None:
            tx.delete(lock_path)
        if has_secret:
            tx.delete(secret_path)
        tx.delete(node_path)
        try:
            results = tx.commit()
        except CONNECTION_LOST:
            # Applied or not, the loop in delete_node looks again.
            return self._retry(self.client.exists, node_path) is None
        failures = [r for r in results if isinstance(r, Exception)]
        if not failures:
            return True
        if self._retry(self.client.exists, node_path) is None:
            return True
        if any(isinstance(r, (NotEmptyError, NoNodeError)) for r in failures):
            return False
        raise failures[0]

    # -- helpers ------------------------------------------------------------

    def _lock_new_dir(self, path: str, identifier: str) -> Lock | None:
        """Create the lock directory ``path`` and our contender in it in
        one transaction: if that works we hold the lock (one round trip
        instead of three).  None if the directory already existed."""
        lock = Lock(self.client, path, identifier)
        tx = self.client.transaction()
        tx.create(path)
        tx.create(lock.create_path, lock.data, ephemeral=True, sequence=True)
        try:
            results = tx.commit()
        except CONNECTION_LOST:
            return self._new_dir_lock_outcome(lock, path, identifier)
        if any(isinstance(r, Exception) for r in results):
            if isinstance(results[0], NoNodeError):
                raise NoNodeError(path)
            return None
        lock.node = results[1][len(path) + 1:]
        lock.is_acquired = True
        lock.assured_path = True
        return lock

    def _new_dir_lock_outcome(self, lock: Lock, path: str, identifier: str) -> Lock | None:
        """The answer of ``_lock_new_dir``'s transaction was lost with the
        connection.  If it went through, our contender (named with the
        lock's unique prefix) is there and holds the lock: keep it, or
        nobody could ever take this lock while our session lives."""
        try:
            children = self._retry(self.client.get_children, path)
        except NoNodeError:
            return self._lock_new_dir(path, identifier)   # not applied: again
        ours = [c for c in children if c.startswith(lock.prefix)]
        if not ours:
            return None
        lock.node = ours[0]
        lock.is_acquired = True
        lock.assured_path = True
        return lock

    def _acquire(self, lock: Lock, blocking: bool, timeout: float | None) -> bool:
        try:
            return lock.acquire(blocking=blocking, timeout=timeout)
        except NoNodeError:
            return False
        except LockTimeout:
            return False

    def _release(self, lock: Lock | None) -> None:
        if lock is None or not lock.is_acquired:
            return
        try:
            lock.release()
        except NoNodeError:
            pass
        except KazooException:
            log.exception('Could not release lock %s', lock.path)

    def _has_contenders(self, path: str, watch=None) -> bool:
        try:
            return bool(self._retry(self.client.get_children, path, watch=watch))
        except NoNodeError:
            return False

    def _get_many(self, ids, path_of, cls):
        return self._retry(read_many, self.client, [
            (path_of(i), lambda raw, stat, i=i: cls.deserialize(raw, id=i, stat=stat))
            for i in ids])

    def exists(self, path: str):
        """``client.exists``, repeated after a lost connection."""
        return self._retry(self.client.exists, path)

    def _retry(self, call, *args, **kw):
        return retry_call(call, *args, **kw)
