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
"""

from __future__ import annotations

import logging

log = logging.getLogger('zuul.scheduler.semaphores')


def holder_key(build_set, job_name: str) -> tuple[str, str]:
    return (build_set.uuid, job_name)


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
        key = holder_key(build_set, job_name)
        wanted = [(n, self._table(layout, n)) for n in dict.fromkeys(names)]
        wanted = [(n, table) for n, table in wanted if key not in table.get(n, ())]
        for name, table in wanted:
            if len(table.get(name, ())) >= self.limit(layout, name):
                log.debug('Semaphore %s of tenant %s is full (%d); %s waits', name,
                          self.tenant_name, self.limit(layout, name), job_name)
                return False
        for name, table in wanted:
            table.setdefault(name, []).append(key)
            if table is not self.holders:
                self.shared.tenants[key] = self.tenant_name
            log.info('Semaphore %s of tenant %s acquired by %s (build set %s)', name,
                     self.tenant_name, job_name, build_set.uuid)
        return True

    def release(self, build_set, job_name: str) -> bool:
        """Give back whatever this job holds; True if it held anything."""
        key = holder_key(build_set, job_name)
        released = False
        tables = [self.holders] + ([self.shared.holders] if self.shared else [])
        for table in tables:
            for name, holders in list(table.items()):
                if key in holders:
                    holders.remove(key)
                    released = True
                    log.info('Semaphore %s of tenant %s released by %s (build set %s)',
                             name, self.tenant_name, job_name, build_set.uuid)
                if not holders:
                    del table[name]
        if self.shared is not None:
            self.shared.tenants.pop(key, None)
        return released

    def release_build_set(self, build_set) -> None:
        tables = [self.holders] + ([self.shared.holders] if self.shared else [])
        keys = {key for table in tables for holders in table.values() for key in holders
                if key[0] == build_set.uuid}
        for key in keys:
            self.release(build_set, key[1])

    def held(self, name: str, layout=None) -> int:
        table = self._table(layout, name) if layout is not None else self.holders
        return len(table.get(name, ()))

    def status(self, layout) -> list[dict]:
        names = set(self.holders) | set(getattr(layout, 'semaphores', None) or {})
        return [{'name': n, 'max': self.limit(layout, n), 'held': self.held(n, layout),
                 'global': bool(getattr((getattr(layout, 'semaphores', None) or {}).get(n),
                                        'is_global', False))}
                for n in sorted(names)]
