"""What several active schedulers share per tenant in ZooKeeper.

- ``/zuul/events/tenant/<tenant>/trigger/event-<seq>``: the tenant's
  trigger events (JSON, as zuul.zk.pipeline_state's queue), put by
  whichever scheduler received the event and consumed, in order, by the
  scheduler that holds the tenant's lock; deleted once the state they
  produced is saved.
- ``/zuul/events/tenant/<tenant>/management/event-<seq>``: management
  requests (enqueue, dequeue, promote) received by a scheduler that does
  not hold the tenant; the holder carries each out and writes the answer
  into the same znode, which the requester then deletes.
- ``/zuul/tenant/<tenant>/layout``: the tenant's layout version,
  ``{"version": N, "changes": [[N, projects or null], ...]}``, raised by
  every scheduler that reconfigures the tenant after it wrote the new
  configuration into the shared cache (zuul/zk/config_cache.py); the
  projects each version re-read tell another scheduler what to take from
  the cache again (null: all of them).
- ``/zuul/schedulers/<id>``: one ephemeral znode per running scheduler
  (how many share the tenants).
- ``/zuul/locks/tenant/<tenant>``: the kazoo lock a scheduler holds while
  it processes the tenant; its node's data names the holder.
"""

from __future__ import annotations

import json
import urllib.parse

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from zuul.zk.pipeline_state import STATE_ROOT, TriggerEventQueue

TENANT_EVENT_ROOT = '/zuul/events/tenant'
SCHEDULERS_ROOT = '/zuul/schedulers'
TENANT_LOCK_ROOT = '/zuul/locks/tenant'
# Layout changes remembered per tenant (a scheduler further behind
# re-reads every project of the tenant from the cache).
CHANGES_KEPT = 20


def quote(name: str) -> str:
    return urllib.parse.quote(name, safe='')


def tenant_lock_path(tenant: str) -> str:
    return f'{TENANT_LOCK_ROOT}/{quote(tenant)}'


class TenantEventQueues:
    """One durable trigger event queue per tenant."""

    def __init__(self, client, kind: str = 'trigger'):
        self.client = client
        self.kind = kind
        self._queues: dict[str, TriggerEventQueue] = {}

    def root(self, tenant: str) -> str:
        return f'{TENANT_EVENT_ROOT}/{quote(tenant)}/{self.kind}'

    def delete(self, path: str) -> None:
        try:
            self.client.delete(path)
        except NoNodeError:
            pass

    def queue(self, tenant: str) -> TriggerEventQueue:
        queue = self._queues.get(tenant)
        if queue is None:
            queue = self._queues[tenant] = TriggerEventQueue(self.client, self.root(tenant))
        return queue

    def put(self, tenant: str, event: dict) -> str:
        return self.queue(tenant).put(event)

    def children(self, tenant: str) -> list[str]:
        """Paths of the stored events, oldest first."""
        root = self.root(tenant)
        try:
            return [f'{root}/{c}' for c in sorted(self.client.get_children(root))]
        except NoNodeError:
            return []

    def read(self, path: str) -> dict | None:
        """One event; None if it is gone or unreadable (then dropped)."""
        try:
            data, _ = self.client.get(path)
        except NoNodeError:
            return None
        try:
            return json.loads(data.decode('utf8'))
        except ValueError:
            try:
                self.client.delete(path)
            except NoNodeError:
                pass
            return None


class LayoutVersions:
    """Each tenant's layout version in ZooKeeper."""

    def __init__(self, client):
        self.client = client

    def path(self, tenant: str) -> str:
        return f'{STATE_ROOT}/{quote(tenant)}/layout'

    def get(self, tenant: str) -> dict:
        try:
            data, _ = self.client.get(self.path(tenant))
            record = json.loads(data.decode('utf8'))
            if isinstance(record, dict) and isinstance(record.get('version'), int):
                return record
        except (NoNodeError, ValueError, AttributeError):
            pass
        return {'version': 0, 'changes': []}

    def bump(self, tenant: str, projects) -> int:
        """The next version of ``tenant``'s layout (``projects`` re-read,
        None: all); returns it. Safe against concurrent writers."""
        path = self.path(tenant)
        while True:
            try:
                data, stat = self.client.get(path)
                try:
                    record = json.loads(data.decode('utf8'))
                    version = int(record['version'])
                    changes = list(record.get('changes') or [])
                except (ValueError, KeyError, TypeError, AttributeError):
                    version, changes = 0, []
            except NoNodeError:
                record = {'version': 1, 'changes': [[1, _names(projects)]]}
                try:
                    self.client.create(path, json.dumps(record).encode('utf8'),
                                       makepath=True)
                    return 1
                except NodeExistsError:
                    continue
            version += 1
            changes = (changes + [[version, _names(projects)]])[-CHANGES_KEPT:]
            try:
                self.client.set(path, json.dumps({'version': version,
                                                  'changes': changes}).encode('utf8'),
                                version=stat.version)
                return version
            except BadVersionError:
                continue


def _names(projects):
    return None if projects is None else sorted(set(projects))


def projects_since(record: dict, known: int):
    """The projects re-read after version ``known`` (None: all of them,
    or more changes than are remembered)."""
    later = [c for c in record.get('changes') or () if c[0] > known]
    if not later or later[0][0] != known + 1:
        return None
    names: set = set()
    for _, projects in later:
        if projects is None:
            return None
        names.update(projects)
    return sorted(names)
