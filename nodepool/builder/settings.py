"""The builder's own knobs (not in nodepool.yaml: the released format has
no place for them).  Tests shorten the intervals."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field


@dataclass
class BuilderSettings:
    hostname: str = field(default_factory=socket.gethostname)
    #: Threads that build images (``--build-workers``); each image is
    #: built by one of them at a time (the build lock).
    build_workers: int = 1
    #: Threads that upload builds to providers (``--upload-workers``).
    upload_workers: int = 4
    #: Seconds between checks when nothing wakes the workers (ZooKeeper
    #: changes under /nodepool/image wake them at once).
    build_interval: float = 10.0
    upload_interval: float = 10.0
    cleanup_interval: float = 60.0
    #: A failed build (upload) is tried again this long after it failed.
    build_retry_delay: float = 60.0
    upload_retry_delay: float = 60.0
    #: The newest this many ready builds of an image are kept.
    keep_builds: int = 2
    #: Rebuilds happen up to this fraction of rebuild-age early (at most
    #: ``max_jitter`` seconds), so builders don't all start at once.
    rebuild_jitter: float = 0.05
    max_jitter: float = 3600.0
    #: Seconds a build command gets to exit after SIGTERM before SIGKILL.
    kill_grace: float = 10.0
