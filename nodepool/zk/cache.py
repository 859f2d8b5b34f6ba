"""An in-memory mirror of one flat record directory (requests or nodes),
kept current by ZooKeeper watches.

The launcher decides *what to try* from the cache (which requests are
waiting, which nodes look ready or unlocked); it always locks and
re-reads from ZooKeeper before changing anything, so a stale entry costs
a wasted lock attempt, never a wrong write.

After a session expiry the watches are gone: the cache resyncs
everything once the new session is connected.
"""

from __future__ import annotations

import logging
import threading

from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import EventType, KazooState

from nodepool.zk.api import ZOOKEEPER_DOWN

log = logging.getLogger('nodepool.zk.cache')


class RecordCache:
    """Records of ``record_cls`` under ``root``, by znode name.

    ``on_change(name, record_or_None)`` is called (from a kazoo thread)
    after each change is applied; keep it cheap (set an event).
    """

    def __init__(self, client, root: str, record_cls, on_change=None):
        self.client = client
        self.root = root
        self.record_cls = record_cls
        self.on_change = on_change
        self._lock = threading.Lock()
        self._records: dict[str, object] = {}
        self._children: set[str] = set()
        self._stopped = False
        self._needs_resync = False
        self.synced = threading.Event()

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        self.client.ensure_path(self.root)
        self.client.add_listener(self._session_listener)
        self._resync()

    def stop(self) -> None:
        self._stopped = True
        self.client.remove_listener(self._session_listener)

    # -- reading --------------------------------------------------------------

    def get(self, name: str):
        with self._lock:
            return self._records.get(name)

    def values(self) -> list:
        with self._lock:
            return list(self._records.values())

    def names(self) -> list[str]:
        with self._lock:
            return list(self._records)

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    # -- watches --------------------------------------------------------------

    def _session_listener(self, state) -> None:
        if state == KazooState.LOST:
            self._needs_resync = True
            self.synced.clear()
        elif state == KazooState.CONNECTED and not self._stopped:
            # No ZooKeeper calls in a state listener: resync elsewhere.
            # After a mere disconnect kazoo re-arms our watches; after an
            # expiry they are gone.  Resync both times: it is cheap.  Reads
            # that failed while disconnected are only repaired by it, so
            # the cache is not "synced" until it has run.
            self.synced.clear()
            threading.Thread(target=self._resync_quietly, daemon=True,
                             name=f'cache-resync{self.root}').start()

    def _resync_quietly(self) -> None:
        try:
            self._resync()
        except ZOOKEEPER_DOWN as e:
            # Connected again later: another resync.
            log.info('Resync of %s interrupted: %s', self.root, e.__class__.__name__)
        except Exception:
            log.exception('Resync of %s failed', self.root)

    def wait_synced(self, timeout: float) -> bool:
        """Wait until the cache mirrors ZooKeeper again after a
        reconnect; False if it still does not after ``timeout``."""
        return self.synced.wait(timeout)

    def _resync(self) -> None:
        if self._stopped:
            return
        children = self.client.get_children(self.root, watch=self._children_watch)
        self._apply_children(children)
        pending = [(name, self.client.get_async(f'{self.root}/{name}',
                                                watch=self._data_watch))
                   for name in children]
        for name, result in pending:
            try:
                raw, stat = result.get()
            except NoNodeError:
                self._apply(name, None, None)
                continue
            self._apply(name, raw, stat)
        self._needs_resync = False
        self.synced.set()

    def _children_watch(self, event) -> None:
        if self._stopped or event.type == EventType.NONE:
            return
        result = self.client.get_children_async(self.root, watch=self._children_watch)
        result.rawlink(self._children_fetched)

    def _children_fetched(self, result) -> None:
        try:
            children = result.get()
        except NoNodeError:
            children = []
        except ZOOKEEPER_DOWN as e:
            # The resync after reconnecting reads it again.
            log.info('Reading children of %s failed: %s', self.root, e.__class__.__name__)
            return
        except Exception:
            log.exception('Reading children of %s failed', self.root)
            return
        new = self._apply_children(children)
        for name in new:
            self._fetch(name)

    def _data_watch(self, event) -> None:
        if self._stopped or event.type == EventType.NONE:
            return
        name = event.path.rsplit('/', 1)[1]
        if event.type == EventType.DELETED:
            self._apply(name, None, None)
            return
        self._fetch(name)

    def _fetch(self, name: str) -> None:
        # Asynchronously: a watch callback must not wait for a round trip,
        # or every change queues behind the previous one's read.
        result = self.client.get_async(f'{self.root}/{name}', watch=self._data_watch)
        result.rawlink(lambda r, name=name: self._fetched(name, r))

    def _fetched(self, name: str, result) -> None:
        try:
            raw, stat = result.get()
        except NoNodeError:
            raw, stat = None, None
        except ZOOKEEPER_DOWN as e:
            # The resync after reconnecting reads it again.
            log.info('Reading %s/%s failed: %s', self.root, name, e.__class__.__name__)
            return
        except Exception:
            log.exception('Reading %s/%s failed', self.root, name)
            return
        self._apply(name, raw, stat)

    # -- applying -------------------------------------------------------------

    def _apply_children(self, children) -> list[str]:
        removed = []
        with self._lock:
            current = set(children)
            new = [c for c in children if c not in self._children]
            for name in self._children - current:
                if self._records.pop(name, None) is not None:
                    removed.append(name)
            self._children = current
        for name in removed:
            self._notify(name, None)
        return new

    def _apply(self, name: str, raw, stat) -> None:
        record = None
        if raw:
            try:
                record = self.record_cls.deserialize(raw, id=name, stat=stat)
            except ValueError:
                log.exception('Unreadable record %s/%s', self.root, name)
        with self._lock:
            old = self._records.get(name)
            if record is None:
                if name not in self._records:
                    return
                if stat is None:
                    self._records.pop(name, None)
                else:
                    return
            else:
                if name not in self._children:
                    return  # a late read of something already deleted
                if old is not None and old.stat is not None and \
                        stat.mzxid < old.stat.mzxid:
                    return  # an older read arriving after a newer one
                self._records[name] = record
        self._notify(name, record)

    def _notify(self, name, record) -> None:
        if self.on_change is not None:
            try:
                self.on_change(name, record)
            except Exception:
                log.exception('Cache listener failed')
