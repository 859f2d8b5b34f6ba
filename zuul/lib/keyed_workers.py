"""Slow work per key, off the caller's thread, results handed on in order.

A connection whose events need calls to a remote API (GitHub: the pull
request, its reviews, statuses...) does them here rather than on the
scheduler's loop: each key (a GitHub App installation; one key for a
connection without one) gets its own ``threads`` workers, so a key that
waits (a rate limit, a slow server) holds up only its own work. Within a
key, results are delivered in submission order, whatever order the
workers finish in; ``deliver`` runs on the key's forwarder thread.
"""

from __future__ import annotations

import collections
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor

log = logging.getLogger('zuul.lib.keyed_workers')


class _Lane:
    def __init__(self, key, threads: int, name: str):
        self.key = key
        self.pool = ThreadPoolExecutor(max_workers=max(1, threads),
                                       thread_name_prefix=f'{name}-{key}')
        self.pending: collections.deque[tuple[Future, object]] = collections.deque()
        self.cond = threading.Condition()
        self.forwarder: threading.Thread | None = None


class KeyedWorkers:
    def __init__(self, deliver, threads: int = 1, name: str = 'workers'):
        self.deliver = deliver
        self.threads = max(1, int(threads))
        self.name = name
        self._lanes: dict[object, _Lane] = {}
        self._lock = threading.Lock()
        self._stopped = False

    def submit(self, key, fn, *args, tag=None) -> Future:
        """Run ``fn(*args)`` on ``key``'s workers; ``deliver(result, tag)``
        follows in submission order (``result`` is None if it raised).
        Once stopped nothing more runs (no new worker is started: a
        report handed on late, e.g. by the report gate, must not keep a
        stopping process alive)."""
        if self._stopped:
            future: Future = Future()
            future.set_exception(RuntimeError(f'{self.name}: stopped'))
            return future
        lane = self._lane(key)
        future = lane.pool.submit(fn, *args)
        with lane.cond:
            lane.pending.append((future, tag))
            lane.cond.notify_all()
        return future

    def busy(self) -> int:
        """Work submitted and not yet delivered."""
        with self._lock:
            lanes = list(self._lanes.values())
        return sum(len(lane.pending) for lane in lanes)

    def keys(self) -> list:
        with self._lock:
            return list(self._lanes)

    def stop(self, timeout: float = 5.0) -> None:
        self._stopped = True
        with self._lock:
            lanes = list(self._lanes.values())
        for lane in lanes:
            with lane.cond:
                lane.cond.notify_all()
            lane.pool.shutdown(wait=False, cancel_futures=True)
        for lane in lanes:
            if lane.forwarder is not None:
                lane.forwarder.join(timeout)

    def _lane(self, key) -> _Lane:
        with self._lock:
            lane = self._lanes.get(key)
            if lane is None:
                lane = self._lanes[key] = _Lane(key, self.threads, self.name)
                lane.forwarder = threading.Thread(target=self._forward, args=(lane,),
                                                  daemon=True,
                                                  name=f'{self.name}-{key}-forwarder')
                lane.forwarder.start()
            return lane

    def _forward(self, lane: _Lane) -> None:
        while True:
            with lane.cond:
                while not lane.pending and not self._stopped:
                    lane.cond.wait()
                if self._stopped:
                    return
                future, tag = lane.pending[0]
            try:
                result = future.result()
            except Exception:
                log.exception('%s: work for %s failed', self.name, lane.key)
                result = None
            if self._stopped:
                return
            try:
                self.deliver(result, tag)
            except Exception:
                log.exception('%s: delivering a result for %s failed', self.name, lane.key)
            with lane.cond:
                lane.pending.popleft()
                lane.cond.notify_all()
