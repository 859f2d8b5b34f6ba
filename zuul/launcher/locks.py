"""The lock of one loop (the global request loop, or one provider's),
held across passes.

A launcher that gets a loop's lock keeps it for ``hold_time`` seconds
of passes, then lets it go so the work moves between launchers; the
others do not contend on every wake-up (that would double the reads of
every pass for nothing) but watch the holder's lock node and try again
the moment it goes away: released, or its launcher's session ended
(killed, partitioned).  Before every pass the holder checks its lock
node still exists, so a launcher whose session expired never carries on
beside the one that took over.
"""

from __future__ import annotations

import logging
import time

from kazoo.exceptions import KazooException, NoNodeError
from kazoo.recipe.lock import Lock

log = logging.getLogger('zuul.launcher.locks')


def _sequence(name: str) -> int:
    try:
        return int(name.rsplit('__', 1)[-1])
    except ValueError:
        return 1 << 62


class LoopLock:
    def __init__(self, client, path: str, identifier: str, hold_time: float,
                 retry: float, wake=None):
        self.client = client
        self.path = path
        self.lock = Lock(client, path, identifier)
        self.hold_time = hold_time
        self.retry = retry
        self.wake = wake
        self.held = False
        self._since = 0.0
        self._changed = True
        self._next_try = 0.0

    def acquire(self) -> bool:
        """True if this launcher holds the lock for the next pass (found
        out with at least one ZooKeeper round trip made now, which the
        loops' cache fences rely on, see zuul.launcher.cache)."""
        now = time.monotonic()
        if self.held:
            ours = self._still_ours()
            if ours:
                return True
            if ours is None:
                return False      # not connected now: no pass, but keep the lock
            log.warning('Lock %s was lost (session ended); another launcher may hold it',
                        self.path)
            self.held = False
            self.lock.is_acquired = False
            self.lock.node = None
        if not self._changed and now < self._next_try:
            return False
        self._changed = False
        try:
            acquired = self.lock.acquire(blocking=False)
        except KazooException as e:
            log.warning('Lock %s unavailable: %s', self.path, e)
            acquired = False
        if acquired:
            self.held = True
            self._since = now
            return True
        self._next_try = now + self.retry
        self._watch_holder()
        return False

    def pass_done(self) -> None:
        """After a pass: let go if this launcher has had its turn."""
        if self.held and time.monotonic() - self._since >= self.hold_time:
            self.release()
            # Give a watcher the first chance at it.
            self._next_try = time.monotonic() + min(self.retry, 0.5)

    def back_off(self) -> None:
        """After letting the lock go for another launcher: do not take it
        back for a second (the other takes it at once, its watch on the
        holder firing), unless its holder changes."""
        self._changed = False
        self._next_try = time.monotonic() + min(self.retry, 1.0)

    def release(self) -> None:
        if not self.held:
            return
        try:
            self.lock.release()
        except KazooException as e:
            # Still ours (the node is there until our session ends): keep
            # holding it rather than wedge it behind a forgotten node.
            log.warning('Releasing lock %s failed: %s', self.path, e)
            return
        self.held = False

    def _still_ours(self) -> bool | None:
        """True/False; None if ZooKeeper cannot say right now."""
        node = self.lock.node
        if not node:
            return False
        try:
            return self.client.exists(f'{self.path}/{node}') is not None
        except KazooException:
            return None

    def _watch_holder(self) -> None:
        try:
            children = self.client.get_children(self.path)
        except NoNodeError:
            children = []
        except KazooException:
            return
        if not children:
            self._signal(None)
            return
        holder = min(children, key=_sequence)
        try:
            if self.client.exists(f'{self.path}/{holder}', watch=self._signal) is None:
                self._signal(None)
        except KazooException:
            pass

    def _signal(self, event) -> None:
        self._changed = True
        if self.wake is not None:
            self.wake()


class LockedLoop:
    """A loop whose passes run only while this launcher holds ``lock``
    (the global request loop, each provider loop): subclasses set
    ``lock`` and implement ``_pass``."""

    lock: LoopLock
    passes = 0

    def run_once(self) -> bool:
        """One pass if this launcher holds (or gets) the lock; False if
        another launcher has it."""
        if not self.lock.acquire():
            return False
        try:
            self._pass()
            self.passes += 1
        finally:
            self.lock.pass_done()
        return True

    def _pass(self) -> None:
        raise NotImplementedError

