"""Pipeline state as plain data, for ZooKeeper (zuul.zk.pipeline_state).

``snapshot(manager, nodes)`` turns a pipeline manager's queues into JSON-able
data; ``restore(manager, state, ...)`` puts them back into a fresh manager
after a scheduler restart or takeover:

- items come back in the same queues and order, with their ids, enqueue
  times, events and report flags (so no second start/enqueue report);
- changes are looked up again at their source (a change merged or closed
  meanwhile is not restored: its final report was already made);
- a finished speculative merge comes back as it was (same commits, so
  builds already run stay valid); one that was in flight is requested
  again;
- finished builds keep their results; running builds are followed
  through their ZooKeeper records (zuul.zk.builds): adopted if their
  executor lives, retried (counted as an attempt) if not;
- node requests in flight were ephemeral and went with the old session:
  the jobs ask again. Nodes of running builds are locked again and
  returned when the build ends.

Jobs are frozen again from the same layout when the item is next
processed; restored builds are bound to the frozen jobs then.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging

from zuul.lib.wire import field_names
from zuul.model import item as m
from zuul.model.change import Branch, Change, Ref
from zuul.model.events import TriggerEvent

log = logging.getLogger('zuul.scheduler.state')

# 2: items carry their dependency cycle (``bundle``) and build sets the
# jobs deduplicated to another item's build (``deduplicated``); state of
# version 1 has neither and is read as such.
VERSION = 2
READABLE_VERSIONS = (1, 2)
# Changes looked up at their source at the same time while restoring, and
# how often a lookup that failed for another reason than "no such change"
# (the code-review system unreachable, a dropped connection) is tried.
LOOKUP_THREADS = 4
LOOKUP_TRIES = 5


class RestoreError(Exception):
    """Saved state that cannot be put back now (its source cannot be
    reached): the scheduler must not start, or it would save an empty
    pipeline over it."""


# -- snapshot ----------------------------------------------------------------

def _change_data(change) -> dict:
    if isinstance(change, Change):
        return {'kind': 'change', 'connection': change.connection,
                'project': change.project, 'number': change.number,
                'patchset': change.patchset}
    if type(change) in (Ref, Branch):
        return {'kind': type(change).__name__.lower(),
                **{f.name: getattr(change, f.name) for f in dataclasses.fields(change)}}
    cls = type(change)
    return {'kind': 'object', 'class': f'{cls.__module__}:{cls.__qualname__}',
            'fields': {f.name: getattr(change, f.name) for f in dataclasses.fields(change)}}


def _event_data(event) -> dict | None:
    """The item's event as saved, without the raw payload (logs only, and
    large) and the change read ahead (used once, when it arrived). Made
    once per event (an event does not change once its item is enqueued,
    and a save snapshots every item)."""
    if event is None or not dataclasses.is_dataclass(event):
        return None
    data = getattr(event, '_saved_data', None)
    if data is None:
        data = {name: getattr(event, name) for name in field_names(type(event))
                if name not in ('data', 'change_data', 'needed_data')}
        event._saved_data = data
    return data


def event_data(event) -> dict | None:
    """A trigger event as JSON-able data (with its raw payload)."""
    if not dataclasses.is_dataclass(event):
        return None
    return {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}


def event_from_data(data: dict | None):
    if not data:
        return None
    names = {f.name for f in dataclasses.fields(TriggerEvent)}
    return TriggerEvent(**{k: v for k, v in data.items() if k in names})


def _build_data(build: m.Build) -> dict:
    return {'uuid': build.uuid, 'result': build.result, 'url': build.url,
            'log_url': build.log_url, 'start_time': build.start_time,
            'end_time': build.end_time, 'executor': build.executor,
            'result_data': build.result_data, 'error_detail': build.error_detail,
            'canceled': build.canceled, 'nodeset': build.nodeset, 'nodes': build.nodes}


def _buildset_data(bs: m.BuildSet, nodes) -> dict:
    merged = bs.merge_state == m.MERGE_COMPLETE
    data = {
        'uuid': bs.uuid,
        'merge_state': m.MERGE_COMPLETE if merged else m.MERGE_NEW,
        'dependent_items': [i.id for i in bs.dependent_items],
        'tries': dict(bs.tries), 'skipped': dict(bs.skipped),
        'builds': {name: _build_data(b) for name, b in bs.builds.items()},
        'deduplicated': {name: owner.item.id for name, owner in bs.deduplicated.items()},
        'nodesets': {},
    }
    if merged:
        data.update(repo_state=bs.repo_state, commit=bs.commit, files=bs.files,
                    unable_to_merge=bs.unable_to_merge, merge_error=bs.merge_error,
                    read_files=_read_files_data(bs))
    for name, nodeset in bs.nodesets.items():
        build = bs.builds.get(name)
        if build is not None and not build.finished and nodes is not None:
            saved = nodes.nodeset_data(nodeset)
            if saved is not None:
                data['nodesets'][name] = saved
    return data


def _read_files_data(bs: m.BuildSet) -> list | None:
    """The files a merge read, as data: made once per list (they do not
    change once read; a save snapshots every item), shallow (the JSON
    encoding copies them anyway)."""
    read = bs.read_files
    if read is None:
        return None
    cached = getattr(bs, '_read_files_data', None)
    if cached is not None and cached[0] is read and cached[1] == len(read):
        return cached[2]
    data = [{name: getattr(pf, name) for name in field_names(type(pf))}
            if dataclasses.is_dataclass(pf) else pf for pf in read]
    bs._read_files_data = (read, len(read), data)
    return data


def _item_data(item: m.QueueItem, nodes) -> dict:
    return {'id': item.id, 'change': _change_data(item.change),
            'event': _event_data(item.event), 'live': item.live, 'quiet': item.quiet,
            'enqueue_time': item.enqueue_time, 'reported': item.reported,
            'reported_start': item.reported_start,
            'reporting': getattr(item, 'reporting', None),
            'reporting_time': getattr(item, 'reporting_time', None),
            'dequeued_missing_requirements': item.dequeued_missing_requirements,
            'ahead': item.item_ahead.id if item.item_ahead is not None else None,
            'bundle': item.bundle.id if item.bundle is not None else None,
            'buildset': _buildset_data(item.current_build_set, nodes)}


def _pipeline_head_data(manager) -> dict:
    return {'version': VERSION, 'disabled': manager.disabled,
            'consecutive_failures': manager.consecutive_failures}


def _queue_head_data(q: m.ChangeQueue) -> dict:
    return {'name': q.name, 'projects': list(q.projects), 'branch': q.branch,
            'window': q.window, 'dynamic': q.dynamic}


def snapshot(manager, nodes=None) -> dict:
    """The pipeline's state as data, made afresh (``encode_snapshot`` is
    its JSON, made from cached encodings)."""
    return {**_pipeline_head_data(manager),
            'queues': [{**_queue_head_data(q), 'items': [_item_data(i, nodes) for i in q.queue]}
                       for q in manager.queues]}


_encode = json.JSONEncoder(separators=(',', ':')).encode


def _item_json(item: m.QueueItem, nodes) -> str:
    """The item's data as JSON, encoded again only when the data differs
    from the last encoding's. Comparing costs far less than encoding:
    most of the data is the same objects as last time (the event's data,
    the files read, the repository state), which compare by identity.
    Nothing the data holds is changed in place (a build's result data, a
    merge's repository state and files are replaced, never edited), so an
    equal comparison means equal JSON."""
    data = _item_data(item, nodes)
    cached = getattr(item, '_saved_json', None)
    if cached is not None and cached[0] == data:
        return cached[1]
    raw = _encode(data)
    item._saved_json = (data, raw)
    return raw


def _queue_head_json(q: m.ChangeQueue) -> str:
    """A queue's own fields as JSON, encoded again only when they changed
    (a shared gate queue lists every project of the queue)."""
    data = _queue_head_data(q)
    cached = getattr(q, '_saved_head', None)
    if cached is not None and cached[0] == data:
        return cached[1]
    raw = _encode(data)
    q._saved_head = (data, raw)
    return raw


def encode_snapshot(manager, nodes=None) -> bytes:
    """``json.dumps(snapshot(manager, nodes), separators=(',', ':'))``,
    byte for byte, made from each item's cached JSON: a save costs the
    items that changed, not every item of the pipeline."""
    queues = []
    for q in manager.queues:
        items = ','.join([_item_json(i, nodes) for i in q.queue])
        queues.append(f'{_queue_head_json(q)[:-1]},"items":[{items}]}}')
    head = _encode(_pipeline_head_data(manager))
    return f'{head[:-1]},"queues":[{",".join(queues)}]}}'.encode('utf8')


# -- restore -----------------------------------------------------------------

def _change_from_data(data: dict, connections):
    kind = data.get('kind')
    if kind == 'change':
        connection = connections.get(data['connection'])
        if connection is None:
            raise LookupError(f'unknown connection {data["connection"]}')
        return connection.lookup_change(data['project'],
                                        f'{data["number"]},{data["patchset"]}')
    if kind == 'ref':
        return Ref(**{k: v for k, v in data.items() if k != 'kind'})
    if kind == 'branch':
        return Branch(**{k: v for k, v in data.items() if k != 'kind'})
    module, _, name = data['class'].partition(':')
    cls = getattr(importlib.import_module(module), name)
    return cls(**data['fields'])


class Restorer:
    """Puts one pipeline's saved state back into its (new) manager."""

    def __init__(self, manager, connections, executor=None, nodes=None):
        self.manager = manager
        self.connections = connections
        self.executor = executor
        self.nodes = nodes
        self.followed: list[m.Build] = []
        self._looked_up: dict = {}

    def restore(self, state: dict) -> int:
        if state.get('version') not in READABLE_VERSIONS:
            raise ValueError(f'pipeline state version {state.get("version")} is not one of '
                             f'{", ".join(map(str, READABLE_VERSIONS))}')
        manager = self.manager
        self._prefetch(state)
        manager.disabled = bool(state.get('disabled'))
        manager.consecutive_failures = int(state.get('consecutive_failures') or 0)
        by_id: dict[str, m.QueueItem] = {}
        saved: list[tuple[m.QueueItem, dict]] = []
        for qdata in state.get('queues', ()):
            # One saved queue comes back as one queue: the first item's
            # (an independent pipeline makes a new one per change tested;
            # a dependent one finds its shared queue).
            holder: list = []
            for idata in qdata.get('items', ()):
                item = self._item(manager, holder, idata)
                if item is not None:
                    by_id[item.id] = item
                    saved.append((item, idata))
            for queue in manager.queues:
                if qdata.get('window') and queue.name == qdata['name'] and queue.window:
                    queue.window = qdata['window']
        _restore_bundles(saved)
        for item, idata in saved:
            ahead = by_id.get(idata.get('ahead'))
            if item.queue is not None and ahead is not None and ahead.queue is item.queue:
                item.queue.move_item(item, ahead)
            self._buildset(item, idata['buildset'], by_id)
        for item, idata in saved:
            _restore_deduplicated(item, idata['buildset'], by_id)
        return len(saved)

    def _prefetch(self, state: dict) -> None:
        """Look every change up at its source at once (each lookup is a
        round trip to the code-review system; a few hundred one after the
        other would hold up the start)."""
        from concurrent.futures import ThreadPoolExecutor
        keys = {}
        for qdata in state.get('queues', ()):
            for idata in qdata.get('items', ()):
                keys.setdefault(json.dumps(idata['change'], sort_keys=True), idata['change'])

        def lookup(data):
            import time
            for attempt in range(1, LOOKUP_TRIES + 1):
                try:
                    return _change_from_data(data, self.connections), None
                except LookupError as exc:
                    return None, exc        # the change is gone
                except Exception as exc:
                    if attempt == LOOKUP_TRIES:
                        return None, RestoreError(
                            f'unable to look up {data} at its source: {exc!r}')
                    time.sleep(0.5 * 2 ** (attempt - 1))
        with ThreadPoolExecutor(max_workers=LOOKUP_THREADS) as pool:
            self._looked_up = dict(zip(keys, pool.map(lookup, keys.values())))

    def _lookup(self, data: dict):
        change, error = self._looked_up.get(json.dumps(data, sort_keys=True)) or \
            (None, None)
        if isinstance(error, RestoreError):
            raise RestoreError(f'pipeline {self.manager.name}: {error}')
        if error is not None:
            raise error
        return change if change is not None else _change_from_data(data, self.connections)

    def _item(self, manager, holder: list, idata: dict) -> m.QueueItem | None:
        if idata.get('reporting') == 'dequeue' or (
                idata.get('reporting') and idata.get('dequeued_missing_requirements')):
            log.info('Not restoring item %s of %s: it was being dequeued',
                     idata.get('id'), manager.name)
            return None
        try:
            change = self._lookup(idata['change'])
        except RestoreError:
            raise
        except Exception as exc:
            log.warning('Not restoring item %s of %s: its change is gone (%s)',
                        idata.get('id'), manager.name, exc)
            return None
        if isinstance(change, Change) and (change.is_merged or not change.is_open):
            log.info('Not restoring %s in %s: it is %s now', change.describe(),
                     manager.name, change.status.lower())
            return None
        if idata.get('reporting') and idata.get('reporting_time') and \
                self._report_landed(change, idata['reporting_time']):
            log.info('Not restoring %s in %s: its %s report was made before the previous '
                     'scheduler stopped', change.describe(), manager.name, idata['reporting'])
            return None
        if not holder:
            queue = manager.get_queue(change)
            if queue is None:
                log.warning('Not restoring %s: pipeline %s has no queue for it now',
                            change.describe(), manager.name)
                return None
            holder.append(queue)
        queue = holder[0]
        item = m.QueueItem(change=change, event=event_from_data(idata.get('event')),
                           live=idata.get('live', True), quiet=idata.get('quiet', False),
                           enqueue_time=idata.get('enqueue_time'), id=idata['id'])
        item.reported = idata.get('reported', False)
        item.reported_start = idata.get('reported_start', False)
        item.reporting = idata.get('reporting')
        queue.enqueue_item(item)
        log.info('[e: %s] Restored %s in %s queue %s', item.event_id, change.describe(),
                 manager.name, queue.name or '<independent>')
        return item

    def _report_landed(self, change, since: float) -> bool:
        connection = self.connections.get(getattr(change, 'connection', None) or '')
        check = getattr(connection, 'report_landed', None)
        if check is None:
            return False
        try:
            return bool(check(change, since))
        except Exception:
            log.exception('Unable to tell whether the report on %s was made',
                          change.describe())
            return False

    def _buildset(self, item: m.QueueItem, data: dict, by_id: dict) -> None:
        bs = item.current_build_set
        bs.uuid = data.get('uuid') or bs.uuid
        bs.dependent_items = tuple(by_id[i] for i in data.get('dependent_items', ())
                                   if i in by_id)
        if len(bs.dependent_items) != len(data.get('dependent_items', ())):
            return      # built on an item that is gone: test it afresh
        if data.get('merge_state') != m.MERGE_COMPLETE:
            return      # the merge is requested again
        bs.merge_state = m.MERGE_COMPLETE
        bs.repo_state = data.get('repo_state') or {}
        bs.commit = data.get('commit')
        bs.files = data.get('files')
        bs.unable_to_merge = bool(data.get('unable_to_merge'))
        bs.merge_error = data.get('merge_error')
        if data.get('read_files') is not None:
            from zuul.merger.protocol import ProjectFiles
            bs.read_files = [ProjectFiles(**pf) if isinstance(pf, dict) else pf
                             for pf in data['read_files']]
        bs.tries = {k: int(v) for k, v in (data.get('tries') or {}).items()}
        bs.skipped = dict(data.get('skipped') or {})
        for name, bdata in (data.get('builds') or {}).items():
            build = m.Build(m.JobRef(name), bs, uuid=bdata['uuid'], result=bdata.get('result'),
                            url=bdata.get('url'), log_url=bdata.get('log_url'),
                            start_time=bdata.get('start_time'),
                            end_time=bdata.get('end_time'), executor=bdata.get('executor'),
                            result_data=bdata.get('result_data') or {},
                            error_detail=bdata.get('error_detail'),
                            canceled=bool(bdata.get('canceled')),
                            nodeset=bdata.get('nodeset'), nodes=bdata.get('nodes') or [])
            bs.builds[name] = build
            if build.finished:
                continue
            saved_nodes = (data.get('nodesets') or {}).get(name)
            if saved_nodes is not None and self.nodes is not None:
                nodeset = self.nodes.restore_nodeset(saved_nodes)
                if nodeset is not None:
                    bs.nodesets[name] = nodeset
            self.followed.append(build)

    def follow_builds(self) -> None:
        """After the restored state is in place: running builds are
        adopted through their records (or retried when lost)."""
        follow = getattr(self.executor, 'follow', None)
        for build in self.followed:
            if follow is not None:
                follow(build, lost_detail='lost while no scheduler ran')
        self.followed = []



def _restore_bundles(saved) -> None:
    """Items saved with the same bundle id are one bundle again, in their
    queue order. A bundle that lost an item (its change merged or closed
    meanwhile) is not whole: its items are left out of the bundle and
    the dependency checks of the pipeline dequeue them."""
    bundles: dict[str, m.Bundle] = {}
    for item, idata in saved:
        bundle_id = idata.get('bundle')
        if bundle_id:
            bundle = bundles.setdefault(bundle_id, m.Bundle(id=bundle_id))
            bundle.add(item)
    for bundle in bundles.values():
        if len(bundle.items) < 2:
            for item in bundle.items:
                item.bundle = None


def _restore_deduplicated(item: m.QueueItem, data: dict, by_id: dict) -> None:
    """Jobs of ``item`` whose build is another bundle item's: linked to
    that item's (restored) build set again."""
    bs = item.current_build_set
    if bs.merge_state != m.MERGE_COMPLETE:
        return      # tested afresh: the jobs are deduplicated again
    for name, owner_id in (data.get('deduplicated') or {}).items():
        owner = by_id.get(owner_id)
        if owner is not None and owner.bundle is item.bundle and item.bundle is not None:
            bs.deduplicated[name] = owner.current_build_set
