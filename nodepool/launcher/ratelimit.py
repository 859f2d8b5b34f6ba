"""A provider's ``rate``: the least time between two of its API calls.

Released Nodepool spaces every call a launcher makes to one provider at
least ``rate`` seconds apart.  The framework does it here, for every
adapter, so drivers never think about it: ``RateLimitedAdapter`` stands
in front of an adapter and makes ``create``, ``poll``, ``delete`` and
``list`` (the calls that reach the provider's API) wait their turn.
``quota``, ``static_hosts`` and ``scan_host_keys`` pass straight through:
adapters answer ``quota`` from what they already know, and static hosts
have no API.
"""

from __future__ import annotations

import threading
import time


class RateLimiter:
    """Hands out call slots at least ``rate`` seconds apart, first come
    first served, to any number of threads.

    A caller reserves the next free slot under a lock and sleeps until it
    outside the lock, so waiting callers never hold each other up more
    than the rate requires.
    """

    def __init__(self, rate: float, clock=time.monotonic, sleep=time.sleep):
        self.rate = rate
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._next = None

    def wait(self) -> float:
        """Block until this caller may call; returns the seconds waited."""
        with self._lock:
            now = self._clock()
            slot = now if self._next is None else max(now, self._next)
            self._next = slot + self.rate
        delay = slot - now
        if delay > 0:
            self._sleep(delay)
        return delay


class RateLimitedAdapter:
    """An adapter whose API calls go through a ``RateLimiter``; every
    other attribute is the wrapped adapter's (so tests and the framework
    can still reach driver-specific parts)."""

    def __init__(self, adapter, rate: float, limiter: RateLimiter | None = None):
        self.adapter = adapter
        self.limiter = limiter or RateLimiter(rate)

    def create(self, spec):
        self.limiter.wait()
        return self.adapter.create(spec)

    def poll(self, external_id):
        self.limiter.wait()
        return self.adapter.poll(external_id)

    def delete(self, external_id):
        self.limiter.wait()
        return self.adapter.delete(external_id)

    def list(self):
        self.limiter.wait()
        return self.adapter.list()

    def __getattr__(self, name):
        return getattr(self.adapter, name)


def rate_limited(adapter, rate: float):
    """``adapter`` itself when ``rate`` is 0 (no limit) or the adapter
    spaces its own API calls (``limits_own_rate``: one adapter method may
    make several), else wrapped."""
    if not rate or rate <= 0 or getattr(adapter, 'limits_own_rate', False):
        return adapter
    return RateLimitedAdapter(adapter, rate)
