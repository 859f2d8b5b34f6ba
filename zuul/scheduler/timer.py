"""Periodic pipelines: fires ``timer`` trigger events at the times the
pipelines' ``trigger: timer: - time: <cron>`` entries give (croniter; a
sixth field is seconds, a seventh a random jitter in seconds), one event
per project branch of the tenant that runs jobs in the pipeline."""

from __future__ import annotations

import logging
import random
import threading
import time

import croniter

from zuul.driver.timer import parse_timespec
from zuul.model.events import TriggerEvent

log = logging.getLogger('zuul.scheduler.timer')


class TimerService:
    def __init__(self, scheduler, layouts):
        self.scheduler = scheduler
        self.layouts = layouts
        self._specs: list = []       # (next fire time, tenant, pipeline, timespec, iter)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._running = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._running = True
        self._thread = threading.Thread(target=self._run, name='zuul-timer', daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._running = False
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)

    def reconfigure(self, tenants: dict) -> None:
        """Called after every (re)configuration with the tenant states."""
        specs = []
        now = time.time()
        for tenant_name, state in tenants.items():
            for pipeline in state.layout.pipelines.values():
                for connection, entries in pipeline.triggers.items():
                    if pipeline.connection_drivers.get(connection, connection) != 'timer':
                        continue
                    for entry in entries:
                        cron, jitter = parse_timespec(entry['time'])
                        it = croniter.croniter(cron, now)
                        specs.append([it.get_next(float), tenant_name, pipeline.name,
                                      entry['time'], it, jitter or entry.get('jitter', 0)])
        with self._lock:
            self._specs = specs
        self._wake.set()
        if specs:
            log.info('Timer triggers: %s', sorted({(s[1], s[2], s[3]) for s in specs}))

    def _run(self) -> None:
        while self._running:
            with self._lock:
                due = min((s[0] for s in self._specs), default=None)
            timeout = None if due is None else max(0.0, due - time.time())
            if self._wake.wait(timeout):
                self._wake.clear()
                continue
            now = time.time()
            with self._lock:
                fired = [s for s in self._specs if s[0] <= now]
                for s in fired:
                    s[0] = s[4].get_next(float)
            for _, tenant, pipeline, timespec, _, jitter in fired:
                self._fire(tenant, pipeline, timespec, jitter)

    def _fire(self, tenant_name: str, pipeline_name: str, timespec: str, jitter: int) -> None:
        state = self.scheduler.tenants.get(tenant_name)
        if state is None:
            return
        layout = state.layout
        events = []
        for tp in layout.tenant.projects:
            if pipeline_name not in layout.project_pipeline_names(tp.name):
                continue
            for branch in self.layouts.project_branches(tp):
                events.append(TriggerEvent(
                    type='timer', connection=tp.connection, project=tp.name, branch=branch,
                    ref=f'refs/heads/{branch}', timespec=timespec,
                    forced_pipeline=pipeline_name))
        delay = random.uniform(0, jitter) if jitter else 0
        log.info('Timer %r fires %d event(s) for %s/%s', timespec, len(events), tenant_name,
                 pipeline_name)

        def send():
            for event in events:
                self.scheduler.add_trigger_event(event)
        if delay:
            threading.Timer(delay, send).start()
        else:
            send()
