"""Nodepool's ZooKeeper schema and API: the one definition Zuul imports.

- ``records``: NodeRequest, Node, LauncherRecord and the state names.
- ``paths``: where they live.
- ``api``: NodepoolZooKeeper, typed reads/writes and locks.
- ``requestor``: NodeRequestClient, the requestor side of the protocol.
- ``cache``: RecordCache, a watched mirror of a record directory.
- ``images``: image builds and uploads (seed 002): ImageBuild, ImageUpload,
  ImageZooKeeper (``NodepoolZooKeeper.images``) and ImageCache.
"""

from nodepool.zk.api import NodepoolZooKeeper, RecordGoneError, connect, hosts_string
from nodepool.zk.records import (
    BUILDING,
    DELETING,
    FAILED,
    FULFILLED,
    HOLD,
    IN_USE,
    MIN_READY_REQUESTOR,
    PENDING,
    READY,
    REQUESTED,
    SCHEMA_VERSION,
    TESTING,
    USED,
    LauncherRecord,
    Node,
    NodeRequest,
    WireVersionError,
)

__all__ = [
    'BUILDING', 'DELETING', 'FAILED', 'FULFILLED', 'HOLD', 'IN_USE', 'MIN_READY_REQUESTOR',
    'PENDING', 'READY', 'REQUESTED', 'SCHEMA_VERSION', 'TESTING', 'USED',
    'LauncherRecord', 'Node', 'NodeRequest', 'NodepoolZooKeeper', 'RecordGoneError',
    'WireVersionError', 'connect', 'hosts_string',
]
