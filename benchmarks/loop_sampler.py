"""A sampling profiler of the schedulers' event-loop threads.

Every ``interval`` seconds the stacks of the loop threads are read
(``sys._current_frames``); each sample is charged to the innermost
``zuul`` function and the library it was in (gear, kazoo, sqlalchemy,
json ...), so the table says where the loop spends its wall time, and,
separately, where it was while a step had already run for more than
100 ms (what still stalls it).
"""

from __future__ import annotations

import collections
import sys
import threading
import time

STALL = 0.1


def _key(frame) -> str:
    """``zuul/scheduler/builds.py:launch -> gear`` style: the innermost
    frame of the project and, under it, the library the thread was in."""
    library = ''
    ours: list[str] = []
    while frame is not None and len(ours) < 2:
        path = frame.f_code.co_filename
        if '/zuul/' in path or '/nodepool/' in path:
            where = path[path.rfind('/zuul/') + 1:] if '/zuul/' in path else \
                path[path.rfind('/nodepool/') + 1:]
            if not ours or not ours[0].startswith(where + ':'):
                ours.append(f'{where}:{frame.f_code.co_name}')
        elif not library and not ours:
            library = _library(path)
        frame = frame.f_back
    if not ours:
        return library or '?'
    name = ' < '.join(ours)
    return f'{library} < {name}' if library else name


def _library(path: str) -> str:
    for part in ('site-packages/', 'dist-packages/', 'python3.'):
        if part in path:
            rest = path.split(part, 1)[1]
            if part == 'python3.':
                rest = rest.split('/', 1)[1] if '/' in rest else rest
            return rest.split('/', 1)[0].removesuffix('.py')
    return path.rsplit('/', 1)[-1]


class LoopSampler:
    def __init__(self, loops, interval: float = 0.005):
        self.loops = loops
        self.interval = interval
        self.samples: collections.Counter = collections.Counter()
        self.stalled: collections.Counter = collections.Counter()
        self.total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name='loop-sampler', daemon=True)

    def start(self) -> 'LoopSampler':
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            frames = sys._current_frames()
            now = time.monotonic()
            for loop in self.loops:
                started = loop.step_started
                frame = frames.get(loop._thread.ident)
                if started is None or frame is None:
                    continue
                key = _key(frame)
                self.total += 1
                self.samples[key] += 1
                if now - started > STALL:
                    self.stalled[key] += 1

    def report(self, top: int = 25, out=sys.stderr) -> None:
        for title, counter in (('busy loop samples', self.samples),
                               ('samples in steps already over 100 ms', self.stalled)):
            total = sum(counter.values()) or 1
            print(f'-- {title} ({total} x {self.interval * 1000:.0f} ms)', file=out)
            for key, n in counter.most_common(top):
                print(f'{n * 100 / total:5.1f}%  {key}', file=out)
