"""Pieces every webhook-fed connection needs, whatever the code-review
system (the GitLab driver uses them; the GitHub driver has its own
delivery loop, reading per App installation, for now):

- ``WebhookRejectedError``: a delivery zuul-web must refuse (its
  ``status``: 401 for a bad or missing secret, 400 for a payload that
  cannot be read); logged and never stored.
- ``DeliveryQueue``: deliveries stored in ZooKeeper by zuul-web
  (``/zuul/events/connection/<name>``) and handed, oldest first, to the
  scheduler's connection by one consumer thread; each is removed once
  handed over, so a restart of either side loses none. A delivery that
  cannot be turned into events is logged and dropped.
- ``ReceiverRegistry``: every zuul-web taking deliveries for a
  connection holds an ephemeral znode
  (``/zuul/webhook-receivers/<name>/<host>-<pid>``) holding the time it
  started; a connection watching it knows when deliveries could not have
  been received (no receiver), and since when.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time

from kazoo.exceptions import NodeExistsError, NoNodeError

log = logging.getLogger('zuul.driver.webhooks')

DELIVERY_ROOT = '/zuul/events/connection'
RECEIVER_ROOT = '/zuul/webhook-receivers'


class WebhookRejectedError(Exception):
    """A delivery that must not be processed; zuul-web answers
    ``status`` and logs the reason."""

    status = 401


class MalformedWebhookError(WebhookRejectedError):
    """Signed or tokened correctly, but unreadable: answered 400."""

    status = 400


class DeliveryQueue:
    """Stored deliveries of one connection (``put`` on zuul-web's side,
    ``start``/``process`` on the scheduler's).

    ``to_events(record)`` turns a stored record into a list of trigger
    events (raising ValueError for one that is malformed);
    ``after_each()`` (optional) runs after each pass over the queue, on
    the consumer thread (the connection's own periodic work).
    ``hand_over(events, done)`` (optional) takes a record's events
    instead of the scheduler's ``on_event`` (a connection reading their
    changes ahead on its workers) and calls ``done()`` once it has handed
    them all to the scheduler: only then is the record removed."""

    def __init__(self, name: str, to_events, after_each=None, wake_every: float = 5.0,
                 hand_over=None):
        self.name = name
        self.to_events = to_events
        self.after_each = after_each
        self.hand_over = hand_over
        self._in_flight: set[str] = set()
        self._in_flight_lock = threading.Lock()
        self.wake_every = wake_every
        self.queue = None
        self._on_event = None
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._wake = threading.Event()

    def attach(self, client) -> None:
        from zuul.zk.pipeline_state import TriggerEventQueue
        self.queue = TriggerEventQueue(client, f'{DELIVERY_ROOT}/{self.name}')

    @property
    def client(self):
        return self.queue.client if self.queue is not None else None

    def put(self, record: dict) -> str:
        return self.queue.put(record)

    def wake(self) -> None:
        self._wake.set()

    def start(self, on_event) -> None:
        self._on_event = on_event
        if self.queue is None:
            return
        self._stopped.clear()
        self.queue.client.ChildrenWatch(self.queue.root, lambda _: self._wake.set())
        self._thread = threading.Thread(target=self._consume, daemon=True,
                                        name=f'webhooks-{self.name}')
        self._thread.start()

    def stop(self) -> None:
        self._on_event = None
        with self._in_flight_lock:
            self._in_flight.clear()
        if self._thread is not None:
            self._stopped.set()
            self._wake.set()
            self._thread.join(10)
            self._thread = None

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def _consume(self) -> None:
        while not self._stopped.is_set():
            self._wake.clear()
            try:
                self.process()
                if self.after_each is not None:
                    self.after_each()
            except Exception:
                log.exception('%s: handling webhook deliveries failed; trying again',
                              self.name)
                self._stopped.wait(2)
                continue
            self._wake.wait(self.wake_every)

    def process(self) -> int:
        """Stored deliveries, oldest first, to the scheduler; each removed
        once handed over. Returns how many events were handed over."""
        count = 0
        for path, record in self.queue.pending():
            if self._on_event is None or self._stopped.is_set():
                break
            with self._in_flight_lock:
                if path in self._in_flight:
                    continue       # being read ahead: removed once handed over
            try:
                events = self.to_events(record)
            except ValueError as exc:
                log.error('%s: dropping malformed %s delivery %s: %s', self.name,
                          record.get('kind'), record.get('delivery'), exc)
                events = []
            count += len(events)
            if events and self.hand_over is not None:
                with self._in_flight_lock:
                    self._in_flight.add(path)
                self.hand_over(events, lambda path=path: self._handed_over(path))
                continue
            for event in events:
                self._on_event(event)
            self.queue.ack(path)
        return count

    def _handed_over(self, path: str) -> None:
        try:
            if not self._stopped.is_set():
                self.queue.ack(path)
        finally:
            with self._in_flight_lock:
                self._in_flight.discard(path)


class ReceiverRegistry:
    """The zuul-web processes taking deliveries for one connection."""

    def __init__(self, client, name: str, clock=time.time):
        self.client = client
        self.root = f'{RECEIVER_ROOT}/{name}'
        self.clock = clock
        try:
            client.ensure_path(self.root)
        except NodeExistsError:
            pass

    def register(self) -> str:
        """This process takes deliveries from now on (until its ZooKeeper
        session ends)."""
        path = f'{self.root}/{socket.gethostname()}-{os.getpid()}'
        data = json.dumps({'since': self.clock()}).encode()
        try:
            self.client.create(path, data, ephemeral=True)
        except NodeExistsError:
            self.client.set(path, data)
        return path

    def started(self) -> list[float]:
        """When each registered receiver started (empty: none listens)."""
        out = []
        try:
            children = self.client.get_children(self.root)
        except NoNodeError:
            return out
        for child in children:
            try:
                data, _ = self.client.get(f'{self.root}/{child}')
                out.append(float(json.loads(data)['since']))
            except (NoNodeError, ValueError, KeyError, TypeError):
                continue
        return out

    def watch(self, callback) -> None:
        """``callback(names)`` now and whenever receivers come or go (on
        kazoo's thread: it should only note it and wake someone)."""
        self.client.ChildrenWatch(self.root, lambda children: callback(list(children)))
