"""The launcher's own knobs (not in nodepool.yaml: the released format has
no place for them).  Tests shorten the intervals."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field


@dataclass
class LauncherSettings:
    hostname: str = field(default_factory=socket.gethostname)
    #: Seconds between cleanup passes (also run when a node becomes used).
    cleanup_interval: float = 60.0
    #: A ready node allocated to a request that no longer exists is
    #: returned to the pool after this long (seed 000: "e.g. 300 s").
    allocation_timeout: float = 300.0
    #: An unlocked building/testing node of a registered launcher is left
    #: alone this long (its launcher may be between creating and locking).
    building_grace: float = 60.0
    #: Seconds a pool worker sleeps when nothing wakes it.
    poll_interval: float = 5.0
    #: Seconds between min-ready checks (also run on node changes).
    min_ready_interval: float = 10.0
    #: Priority of the requests the launcher makes for min-ready.
    min_ready_priority: int = 400
    #: Seconds between polls of a booting instance (the first is quicker).
    boot_poll_interval: float = 1.0
