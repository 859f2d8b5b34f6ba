"""Pipeline state and trigger events in ZooKeeper.

Pipeline state (``/zuul/tenant/<tenant>/pipeline/<pipeline>``): the
pipeline's snapshot (zuul.scheduler.state) as JSON, zlib-compressed and
cut into shards of at most ``SHARD_SIZE`` bytes (ZooKeeper's znode limit
is 1 MiB). The pipeline znode holds a small header
``{"version": 1, "generation": G, "shards": N, "digest": ...}``; shards are
children ``G-0000`` ... so a writer never overwrites what a reader might be
reading: it writes the new generation's shards, switches the header, then
deletes the old generation. A reader that finds shards missing (a writer
switched meanwhile) reads again.

Trigger events (``/zuul/events/trigger/event-<seq>``): one persistent
sequential znode per event, JSON; deleted once the event was processed
and the state it produced was saved. Events left over from a scheduler
that died are read back, in order, by the next one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import urllib.parse
import zlib

from kazoo.exceptions import NodeExistsError, NoNodeError

log = logging.getLogger('zuul.zk.pipeline_state')

STATE_ROOT = '/zuul/tenant'
EVENT_ROOT = '/zuul/events/trigger'
FORMAT_VERSION = 1
SHARD_SIZE = 900 * 1024


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe='')


def _raw(state: dict | bytes) -> bytes:
    # Key order is the snapshot's own (deterministic): no sorting. A state
    # already encoded (zuul.scheduler.state.encode_snapshot) is taken as is.
    if isinstance(state, bytes):
        return state
    return json.dumps(state, separators=(',', ':')).encode('utf8')


def _digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


class _Join:
    """``then(all ok)`` once ``count`` answers came in."""

    def __init__(self, count: int, then):
        self.left = count
        self.ok = True
        self.then = then
        self._lock = threading.Lock()

    def one(self, ok: bool) -> None:
        with self._lock:
            self.ok &= ok
            self.left -= 1
            if self.left:
                return
        try:
            self.then(self.ok)
        except Exception:
            log.exception('Error after saving the pipeline state')


class PipelineStateStore:
    def __init__(self, client):
        self.client = client
        # path -> digest of what this process last wrote (or read): an
        # unchanged pipeline costs no ZooKeeper write.
        self._written: dict[str, str] = {}
        # path -> (digest, bytes) of the last write or read: an unchanged
        # state is told by comparing bytes (no digest, no compression).
        self._last_raw: dict[str, tuple[str, bytes]] = {}
        # path -> (generation, shards) as this process last wrote it.
        self._current: dict[str, tuple[int, int]] = {}
        self.writes = 0
        # Transactions sent and not yet answered (save_many with ``then``).
        self.in_flight = 0
        self._lock = threading.Condition()
        # Paths read and found without a znode (see _prepare).
        self._absent: set[str] = set()

    def path(self, tenant: str, pipeline: str) -> str:
        return f'{STATE_ROOT}/{_quote(tenant)}/pipeline/{_quote(pipeline)}'

    def save_many(self, states, then=None) -> int:
        """``save`` each ``(tenant, pipeline, state)``, the transactions of
        the changed ones sent together (one round trip, not one each);
        returns how many were written. One whose write fails is written
        again alone, as ``save`` does.

        With ``then``: the transactions are sent and not waited for;
        ``then(ok)`` runs (on the ZooKeeper client's thread) once they all
        landed, ``ok`` False if one did not (the next save writes that
        pipeline again, reading its header first). Returns how many were
        sent. ZooKeeper applies one session's requests in order, so what
        is sent after them lands after them."""
        if then is not None:
            return self._send_many(states, then)
        sent, retry = [], []
        for args, path, raw, digest, current in self._changed(states):
            if current is None:
                retry.append(args)
                continue
            tx, generation, count = self._transaction(path, raw, digest, current)
            sent.append((path, raw, digest, generation, count, tx.commit_async(), args))
        written = 0
        for path, raw, digest, generation, count, pending, args in sent:
            try:
                results = pending.get()
            except Exception:
                # ZooKeeper away: what each write did is unknown; the
                # next save reads the headers again.
                for other in sent:
                    self._current.pop(other[0], None)
                raise
            if any(isinstance(r, Exception) for r in results):
                self._current.pop(path, None)
                retry.append(args)
                continue
            self._current[path] = (generation, count)
            self._wrote(path, digest, raw)
            self.writes += 1
            written += 1
        for args in retry:
            written += bool(self.save(*args))
        return written

    def _unchanged(self, path: str, raw: bytes) -> bool:
        last = self._last_raw.get(path)
        return last is not None and last[0] == self._written.get(path) and last[1] == raw

    def _wrote(self, path: str, digest: str, raw: bytes) -> None:
        self._written[path] = digest
        self._last_raw[path] = (digest, raw)

    def _changed(self, states):
        """``(args, path, raw, digest, current header or None)`` of each
        ``(tenant, pipeline, state)`` not the same as last written."""
        for args in states:
            raw = _raw(args[2])
            path = self.path(args[0], args[1])
            if self._unchanged(path, raw):
                continue
            digest = _digest(raw)
            if self._written.get(path) != digest:
                yield args, path, raw, digest, self._current.get(path)

    def _send_many(self, states, then) -> int:
        sent, written = [], 0
        for args, path, raw, digest, current in self._changed(states):
            if current is None:
                # Not written by this process yet (or a write failed):
                # the header is read and the state written, waited for.
                written += bool(self.save(*args))
                continue
            tx, generation, count = self._transaction(path, raw, digest, current)
            # Counted as written until it is known not to be: the next
            # transaction builds on this one (and fails if this did).
            self._current[path] = (generation, count)
            self._wrote(path, digest, raw)
            sent.append((path, digest, (generation, count), tx))
        join = _Join(len(sent), then)
        for path, digest, current, tx in sent:
            with self._lock:
                self.in_flight += 1
            tx.commit_async().rawlink(
                lambda result, path=path, digest=digest, current=current:
                self._landed(result, path, digest, current, join))
        if not sent:
            then(True)
        return written + len(sent)

    def wait_landed(self, timeout: float = 30.0) -> bool:
        """Until every transaction sent is answered (stopping)."""
        with self._lock:
            return self._lock.wait_for(lambda: self.in_flight == 0, timeout)

    def _landed(self, result, path: str, digest: str, current, join) -> None:
        try:
            ok = not any(isinstance(r, Exception) for r in result.get())
        except Exception as exc:
            log.warning('Pipeline state %s not written: %s', path, exc)
            ok = False
        with self._lock:
            self.in_flight -= 1
            self._lock.notify_all()
            if ok:
                self.writes += 1
            else:
                if self._current.get(path) == current:
                    self._current.pop(path, None)
                if self._written.get(path) == digest:
                    self._written.pop(path, None)
        join.one(ok)

    def _transaction(self, path: str, raw: bytes, digest: str, current: tuple[int, int]):
        data = zlib.compress(raw, 1)
        shards = [data[i:i + SHARD_SIZE] for i in range(0, len(data), SHARD_SIZE)] or [b'']
        generation = current[0] + 1
        header = json.dumps({'version': FORMAT_VERSION, 'generation': generation,
                             'shards': len(shards), 'digest': digest}).encode('utf8')
        tx = self.client.transaction()
        absent = path in self._absent
        if absent:
            # Its first write makes the znode (if that fails, the write is
            # made again the waited-for way, which reads what is there).
            self._absent.discard(path)
            tx.create(path, header)
        for index, shard in enumerate(shards):
            tx.create(f'{path}/{generation}-{index:04d}', shard)
        if not absent:
            tx.set_data(path, header)
        if current[0]:
            for index in range(current[1]):
                tx.delete(f'{path}/{current[0]}-{index:04d}')
        return tx, generation, len(shards)

    def save(self, tenant: str, pipeline: str, state: dict | bytes) -> bool:
        """Write ``state`` if it differs from the last write; True if written.
        One ZooKeeper transaction: the new generation's shards, the header
        switch and the old generation's removal."""
        raw = _raw(state)
        path = self.path(tenant, pipeline)
        if self._unchanged(path, raw):
            return False
        digest = _digest(raw)
        if self._written.get(path) == digest:
            return False
        for attempt in (1, 2):
            current = self._current.get(path) if attempt == 1 else None
            if current is None:
                header, generation = self._header(path)
                if header is None:
                    self.client.ensure_path(path)
                current = (generation or 0, (header or {}).get('shards') or 0)
            tx, generation, count = self._transaction(path, raw, digest, current)
            results = tx.commit()
            if not any(isinstance(r, Exception) for r in results):
                self._current[path] = (generation, count)
                self._wrote(path, digest, raw)
                self.writes += 1
                return True
            # What this process believed is stale (another writer, or a
            # write whose answer was lost): read the header and try again.
            # (A failed transaction created nothing.)
            self._current.pop(path, None)
        raise RuntimeError(f'{path}: unable to write the pipeline state')

    def _header(self, path: str):
        try:
            data, _ = self.client.get(path)
        except NoNodeError:
            return None, None
        try:
            header = json.loads(data.decode('utf8')) if data else {}
        except ValueError:
            header = {}
        return header, header.get('generation')

    def load(self, tenant: str, pipeline: str) -> dict | None:
        path = self.path(tenant, pipeline)
        for _ in range(5):
            header, generation = self._header(path)
            if not header or not generation:
                self._prepare(path, header)
                return None
            if header.get('version') != FORMAT_VERSION:
                raise ValueError(f'{path}: pipeline state format version '
                                 f'{header.get("version")} is not {FORMAT_VERSION}; '
                                 'upgrade this scheduler')
            try:
                data = b''.join(self.client.get(f'{path}/{generation}-{i:04d}')[0]
                                for i in range(header['shards']))
            except NoNodeError:
                continue    # a writer switched generations meanwhile
            raw = zlib.decompress(data)
            state = json.loads(raw.decode('utf8'))
            self._wrote(path, header.get('digest'), raw)
            self._current[path] = (generation, header['shards'])
            return state
        raise RuntimeError(f'{path}: the pipeline state kept changing while being read')

    def _prepare(self, path: str, header) -> None:
        """Nothing saved at ``path`` yet (this is a read before the
        pipeline is used): the first write of it is a transaction like the
        others, not waited for (save_many), which creates its znode (the
        parent is made now)."""
        if header is None:
            try:
                self.client.ensure_path(path.rsplit('/', 1)[0])
            except NodeExistsError:
                pass
            self._absent.add(path)
        self._current.setdefault(path, (0, 0))

    def delete(self, tenant: str, pipeline: str) -> None:
        path = self.path(tenant, pipeline)
        self._written.pop(path, None)
        self._current.pop(path, None)
        self._absent.discard(path)
        try:
            self.client.delete(path, recursive=True)
        except NoNodeError:
            pass

    def pipelines(self, tenant: str) -> list[str]:
        try:
            return [urllib.parse.unquote(p) for p in
                    self.client.get_children(f'{STATE_ROOT}/{_quote(tenant)}/pipeline')]
        except NoNodeError:
            return []


ALIVE_PATH = '/zuul/scheduler/last-saved'


def _unless_failed(pending, what: str, then=None) -> None:
    """Log (or ``then()``) when the asynchronous request ``pending``
    fails; a node already gone is no failure."""
    def done(result):
        try:
            outcome = result.get()
        except NoNodeError:
            return
        except Exception as exc:
            if then is not None:
                then()
            else:
                log.warning('Unable to write %s: %s', what, exc)
            return
        if then is not None and isinstance(outcome, list) and \
                any(isinstance(r, Exception) for r in outcome):
            then()
    pending.rawlink(done)


def mark_saved(client, when: float, connections: dict | None = None,
               recent: dict | None = None, wait: bool = True) -> None:
    """When the leading scheduler last saved its state, and per connection
    the creation time of the newest event it holds durably (processed, or
    waiting in the event queue): a successor asks each connection for what
    happened after that."""
    data = json.dumps({'time': when, 'connections': connections or {},
                       'recent': recent or {}}).encode('utf8')
    if not wait:
        # Sent, not waited for: requests of one session are applied in
        # order, so it lands after the save sent before it.
        _unless_failed(client.set_async(ALIVE_PATH, data), f'the mark {ALIVE_PATH}')
        return
    try:
        client.set(ALIVE_PATH, data)
    except NoNodeError:
        client.create(ALIVE_PATH, data, makepath=True)


def last_saved(client) -> dict | None:
    """``{'time': t, 'connections': {name: newest event time}, 'recent':
    {name: [events of that same second, as event_signature gives]}}`` or
    None."""
    try:
        data, _ = client.get(ALIVE_PATH)
        mark = json.loads(data.decode('utf8'))
        return {'time': float(mark['time']),
                'connections': {k: float(v) for k, v in
                                (mark.get('connections') or {}).items()},
                'recent': {k: list(v) for k, v in (mark.get('recent') or {}).items()}}
    except (NoNodeError, ValueError, KeyError, TypeError, AttributeError):
        return None


def event_signature(event) -> dict:
    """What a catch-up needs to recognise an event it would synthesize
    again: kind, change, patchset and the votes it carried."""
    who = (getattr(event, 'account', None) or {}).get('username')
    return {'type': event.type, 'change': getattr(event, 'change_number', None),
            'patchset': getattr(event, 'patchset', None),
            'approvals': sorted([a.get('type'), str(a.get('value')),
                                 a.get('username') or who]
                                for a in getattr(event, 'approvals', None) or ())}


class TriggerEventQueue:
    """Trigger events, durable until processed (``root``: another queue of
    the same kind, e.g. a connection's webhook deliveries)."""

    def __init__(self, client, root: str = EVENT_ROOT):
        self.client = client
        self.root = root
        try:
            self.client.ensure_path(root)
        except NodeExistsError:
            pass

    def put(self, event: dict) -> str:
        """Store ``event`` (its ``event_id`` makes it unique): exactly
        once, even if the connection goes before the answer comes."""
        from nodepool.zk.api import create_once
        data = json.dumps(event, default=str).encode('utf8')
        return create_once(self.client, self.root, 'event-', data)

    def pending(self) -> list[tuple[str, dict]]:
        """Every stored event, oldest first, as (path, event)."""
        try:
            children = sorted(self.client.get_children(self.root))
        except NoNodeError:
            return []
        out = []
        for child in children:
            path = f'{self.root}/{child}'
            try:
                data, _ = self.client.get(path)
                out.append((path, json.loads(data.decode('utf8'))))
            except NoNodeError:
                continue
            except ValueError:
                log.error('Dropping unreadable trigger event %s', path)
                self.ack(path)
        return out

    def _ack_async(self, paths: list[str]) -> None:
        for path in paths:
            _unless_failed(self.client.delete_async(path), f'the acknowledgement of {path}')

    def ack(self, path: str) -> None:
        try:
            self.client.delete(path)
        except NoNodeError:
            pass

    def ack_many(self, paths: list[str], wait: bool = True) -> None:
        """Delete processed events, in transactions of up to 200. Not
        ``wait``: sent, not waited for (applied after what the session
        sent before; a transaction refused because one event was gone
        already is followed by deletes one by one)."""
        for start in range(0, len(paths), 200):
            chunk = paths[start:start + 200]
            tx = self.client.transaction()
            for path in chunk:
                tx.delete(path)
            if not wait:
                _unless_failed(tx.commit_async(), 'event acknowledgements',
                               then=lambda chunk=chunk: self._ack_async(chunk))
                continue
            if any(isinstance(r, Exception) for r in tx.commit()):
                for path in chunk:      # one was gone already: one by one
                    self.ack(path)
