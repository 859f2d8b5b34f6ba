"""Record caches a loop can read as if it had just read ZooKeeper.

A ``FencedCache`` is nodepool's watch-driven ``RecordCache`` that also
counts the reads its watches started and has not applied yet.
``fence(client, caches)`` then makes the caches at least as fresh as a
read made now:

1. one round trip (``sync``): ZooKeeper delivers a watch event before
   the reply to any later request of the same session, so once it
   returns, every change committed before it has had its watch event
   queued on kazoo's watch thread;
2. a marker queued behind those events on the same thread: when it
   runs, the caches have issued the read of every changed record (or
   applied the deletion), and the marker notes the newest read issued;
3. wait until every read up to that one is applied.

A pass that starts with a fence after taking its loop's lock therefore
sees every write the previous holder made before it let the lock go,
and its own earlier writes, at the cost of one round trip plus reading
what changed (instead of every record).  If the fence cannot be made
(a cache still resyncing after the session was lost, or a timeout) the
caller reads ZooKeeper directly.
"""

from __future__ import annotations

import logging
import threading
import time

from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import Callback, EventType

from nodepool.zk.cache import RecordCache

log = logging.getLogger('zuul.launcher.cache')


class FencedCache(RecordCache):

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self._ops = threading.Condition()
        self._op_seq = 0
        #: Reads in flight by the number of the watch event that started
        #: them (a new child's read counts as its children read's).
        self._pending: dict[int, int] = {}

    # -- counting the reads watches start ----------------------------------------

    def _begin(self, op: int | None = None) -> int:
        with self._ops:
            if op is None:
                self._op_seq += 1
                op = self._op_seq
            self._pending[op] = self._pending.get(op, 0) + 1
            return op

    def _end(self, op: int) -> None:
        with self._ops:
            left = self._pending.get(op, 1) - 1
            if left > 0:
                self._pending[op] = left
            else:
                self._pending.pop(op, None)
            self._ops.notify_all()

    def _children_watch(self, event) -> None:
        if self._stopped or event.type == EventType.NONE:
            return
        op = self._begin()
        try:
            result = self.client.get_children_async(self.root, watch=self._children_watch)
        except Exception:
            self._end(op)
            raise
        result.rawlink(lambda r, op=op: self._children_done(op, r))

    def _children_done(self, op: int, result) -> None:
        try:
            try:
                children = result.get()
            except NoNodeError:
                children = []
            except Exception:
                log.exception('Reading children of %s failed', self.root)
                return
            for name in self._apply_children(children):
                self._fetch(name, op)
        finally:
            self._end(op)

    def _fetch(self, name: str, op: int | None = None) -> None:
        op = self._begin(op)
        try:
            result = self.client.get_async(f'{self.root}/{name}', watch=self._data_watch)
        except Exception:
            self._end(op)
            raise
        result.rawlink(lambda r, op=op, name=name: self._fetch_done(op, name, r))

    def _fetch_done(self, op: int, name: str, result) -> None:
        try:
            self._fetched(name, result)
        finally:
            self._end(op)

    # -- fencing -------------------------------------------------------------------

    def watermark(self) -> int:
        with self._ops:
            return self._op_seq

    def wait_applied(self, mark: int, deadline: float) -> bool:
        """Until every read started up to ``mark`` is applied."""
        with self._ops:
            while any(op <= mark for op in self._pending):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._ops.wait(left)
        return True


def fence(client, caches: list[FencedCache | None], timeout: float = 10.0,
          round_trip_done: bool = False) -> bool:
    """Make ``caches`` (all over ``client``) reflect every change
    committed before this call; False if that cannot be done now.

    ``round_trip_done``: the caller has just had the answer to a request
    of its own over ``client`` (a loop that has just checked its lock),
    which gives step 1's guarantee as of that request: the ``sync`` is
    left out."""
    if not caches or any(c is None or not c.synced.is_set() or c._stopped for c in caches):
        return False
    deadline = time.monotonic() + timeout
    if not round_trip_done:
        try:
            client.sync(caches[0].root)
        except KazooException as e:
            log.debug('Fence: sync failed: %s', e)
            return False
    marks: dict[int, int] = {}
    done = threading.Event()

    def mark():
        for i, cache in enumerate(caches):
            marks[i] = cache.watermark()
        done.set()
    client.handler.dispatch_callback(Callback('watch', mark, ()))
    if not done.wait(max(0.0, deadline - time.monotonic())):
        return False
    return all(cache.wait_applied(marks[i], deadline) for i, cache in enumerate(caches)) \
        and all(c.synced.is_set() for c in caches)
