"""Job semaphores: at most ``max`` jobs holding a semaphore run at once
in a tenant, whatever pipeline or change they belong to.

A job that names semaphores acquires all of them (all or none) before
its nodes are requested, and gives them back when its build completes,
its node request fails, or its build set is cancelled or reset.  The
holders are kept per tenant across reconfigurations; the limits are read
from the tenant's current layout (a semaphore that is not defined counts
as ``max: 1``).

A ``global-semaphore`` of the tenant file (listed in a tenant's
``semaphores``) is counted across tenants: its holders live in one
GlobalSemaphoreHolders shared by every tenant's handler, which the
layout carries (``layout.global_semaphore_holders``, set by
zuul/scheduler/layouts.py) so that it outlives reconfigurations.

A playbook entry's ``semaphores`` are held only while that playbook
runs: the executor asks for them over RPC (``zuul:semaphore_acquire``)
before the playbook and gives them back after it
(``zuul:semaphore_release``).  They are counted in the same tables as
the jobs' (holder key: the build's uuid and ``playbook <phase> <index>``),
so a job and a playbook taking one semaphore count against one ``max``.
When a build completes, the scheduler releases whatever its playbooks
still hold (``release_build_playbooks``), so an executor that died
cannot keep them.  The RPC listener and the scheduler's event loop run
on different threads: every change to the holders takes ``LOCK``.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger('zuul.scheduler.semaphores')

# One lock for every tenant's holders (global semaphores are shared).
LOCK = threading.RLock()

PLAYBOOK_PREFIX = 'playbook '


def holder_key(build_set, job_name: str) -> tuple[str, str]:
    return (build_set.uuid, job_name)


def playbook_holder_key(build_uuid: str, playbook: str) -> tuple[str, str]:
    """The holder of a playbook's semaphores: ``playbook`` names it in
    its build (e.g. ``run 0``)."""
    return (build_uuid, PLAYBOOK_PREFIX + playbook)


class GlobalSemaphoreHolders:
    """Holders of the global semaphores, for all tenants of a scheduler."""

    def __init__(self):
        # semaphore name -> holder keys, in the order they acquired it
        self.holders: dict[str, list[tuple[str, str]]] = {}
        # holder key -> tenant name (for status)
        self.tenants: dict[tuple[str, str], str] = {}


class SemaphoreHandler:
    """The semaphores of one tenant and who holds them."""

    def __init__(self, tenant_name: str):
        self.tenant_name = tenant_name
        # semaphore name -> holder keys, in the order they acquired it
        self.holders: dict[str, list[tuple[str, str]]] = {}
        # The shared holders of global semaphores, once a layout gave them.
        self.shared: GlobalSemaphoreHolders | None = None
        # Called when a global semaphore is released: items of other
        # tenants may take it now (the scheduler processes them all).
        self.on_shared_release = None

    @staticmethod
    def limit(layout, name: str) -> int:
        sem = (getattr(layout, 'semaphores', None) or {}).get(name)
        return max(int(getattr(sem, 'max', 1) or 1), 1) if sem is not None else 1

    def _table(self, layout, name: str) -> dict:
        """Where the holders of ``name`` are counted: across tenants for
        a global semaphore, in this tenant otherwise."""
        sem = (getattr(layout, 'semaphores', None) or {}).get(name)
        shared = getattr(layout, 'global_semaphore_holders', None)
        if getattr(sem, 'is_global', False) and shared is not None:
            self.shared = shared
            return shared.holders
        return self.holders

    def acquire(self, layout, build_set, job_name: str, names) -> bool:
        """Take every semaphore in ``names`` for this job, or none of them."""
        return self.acquire_key(layout, holder_key(build_set, job_name), names)

    def acquire_key(self, layout, key: tuple[str, str], names) -> bool:
        """Take every semaphore in ``names`` for holder ``key``, or none."""
        with LOCK:
            wanted = [(n, self._table(layout, n)) for n in dict.fromkeys(names)]
            wanted = [(n, table) for n, table in wanted if key not in table.get(n, ())]
            for name, table in wanted:
                if len(table.get(name, ())) >= self.limit(layout, name):
                    log.debug('Semaphore %s of tenant %s is full (%d); %s of %s waits', name,
                              self.tenant_name, self.limit(layout, name), key[1], key[0])
                    return False
            for name, table in wanted:
                table.setdefault(name, []).append(key)
                if table is not self.holders:
                    self.shared.tenants[key] = self.tenant_name
                log.info('Semaphore %s of tenant %s acquired by %s (%s)', name,
                         self.tenant_name, key[1], key[0])
            return True

    def blocking(self, layout, key: tuple[str, str], names) -> list[str]:
        """Which of ``names`` are full for ``key`` (held by others)."""
        with LOCK:
            return [n for n in dict.fromkeys(names)
                    if key not in self._table(layout, n).get(n, ())
                    and len(self._table(layout, n).get(n, ())) >= self.limit(layout, n)]

    def release(self, build_set, job_name: str) -> bool:
        """Give back whatever this job holds; True if it held anything."""
        return self.release_key(holder_key(build_set, job_name))

    def release_key(self, key: tuple[str, str]) -> bool:
        """Give back whatever holder ``key`` holds; True if it held any."""
        released = shared = False
        with LOCK:
            tables = [self.holders] + ([self.shared.holders] if self.shared else [])
            for table in tables:
                for name, holders in list(table.items()):
                    if key in holders:
                        holders.remove(key)
                        released = True
                        shared |= table is not self.holders
                        log.info('Semaphore %s of tenant %s released by %s (%s)',
                                 name, self.tenant_name, key[1], key[0])
                    if not holders:
                        del table[name]
            if self.shared is not None:
                self.shared.tenants.pop(key, None)
        if shared and self.on_shared_release is not None:
            self.on_shared_release()
        return released

    def _keys(self, match) -> set:
        with LOCK:
            tables = [self.holders] + ([self.shared.holders] if self.shared else [])
            return {key for table in tables for holders in table.values()
                    for key in holders if match(key)}

    def release_build_set(self, build_set) -> None:
        for key in self._keys(lambda k: k[0] == build_set.uuid):
            self.release_key(key)

    def release_build_playbooks(self, build_uuid: str) -> bool:
        """Give back what the playbooks of build ``build_uuid`` hold."""
        keys = self._keys(lambda k: k[0] == build_uuid and k[1].startswith(PLAYBOOK_PREFIX))
        for key in keys:
            self.release_key(key)
        return bool(keys)

    def held(self, name: str, layout=None) -> int:
        with LOCK:
            table = self._table(layout, name) if layout is not None else self.holders
            return len(table.get(name, ()))

    def status(self, layout) -> list[dict]:
        names = set(self.holders) | set(getattr(layout, 'semaphores', None) or {})
        return [{'name': n, 'max': self.limit(layout, n), 'held': self.held(n, layout),
                 'global': bool(getattr((getattr(layout, 'semaphores', None) or {}).get(n),
                                        'is_global', False))}
                for n in sorted(names)]


def release_build_playbooks(scheduler, build_uuid: str) -> bool:
    """A build completed: what its playbooks still hold, in any tenant,
    is given back (its executor may have died while holding them)."""
    released = False
    for tenant_name in list(getattr(scheduler, 'tenants', None) or {}):
        handler = scheduler.semaphore_handler(tenant_name)
        released = handler.release_build_playbooks(build_uuid) or released
    return released
