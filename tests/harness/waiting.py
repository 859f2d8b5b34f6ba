"""Event-driven waiting for tests: explicit signals, never fixed sleeps."""

from __future__ import annotations

import threading
import time


class Signal(threading.Event):
    """A threading.Event whose wait() returns the flag, for readability."""


def wait_for(predicate, timeout: float = 30.0, condition: threading.Condition | None = None,
             what: str = 'condition'):
    """Wait until ``predicate()`` is true.

    With a ``condition`` the caller's component notifies it when its state
    changes, and we re-check only then. Without one, the predicate is
    re-checked on a backoff (for state only observable from outside, such
    as a process's port); it is bounded by ``timeout`` either way.
    """
    deadline = time.monotonic() + timeout
    if condition is not None:
        with condition:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f'timed out waiting for {what}')
                condition.wait(left)
        return True
    delay = 0.005
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f'timed out waiting for {what}')
        time.sleep(delay)
        delay = min(delay * 2, 0.2)
    return True
