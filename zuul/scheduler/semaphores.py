"""Job semaphores: at most ``max`` jobs holding a semaphore run at once
in a tenant, whatever pipeline or change they belong to.

A job that names semaphores acquires all of them (all or none) before
its nodes are requested, and gives them back when its build completes,
its node request fails, or its build set is cancelled or reset.  The
holders are kept per tenant across reconfigurations; the limits are read
from the tenant's current layout (a semaphore that is not defined counts
as ``max: 1``).
"""

from __future__ import annotations

import logging

log = logging.getLogger('zuul.scheduler.semaphores')


def holder_key(build_set, job_name: str) -> tuple[str, str]:
    return (build_set.uuid, job_name)


class SemaphoreHandler:
    """The semaphores of one tenant and who holds them."""

    def __init__(self, tenant_name: str):
        self.tenant_name = tenant_name
        # semaphore name -> holder keys, in the order they acquired it
        self.holders: dict[str, list[tuple[str, str]]] = {}

    @staticmethod
    def limit(layout, name: str) -> int:
        sem = (getattr(layout, 'semaphores', None) or {}).get(name)
        return max(int(getattr(sem, 'max', 1) or 1), 1) if sem is not None else 1

    def acquire(self, layout, build_set, job_name: str, names) -> bool:
        """Take every semaphore in ``names`` for this job, or none of them."""
        key = holder_key(build_set, job_name)
        wanted = [n for n in dict.fromkeys(names) if key not in self.holders.get(n, ())]
        for name in wanted:
            if len(self.holders.get(name, ())) >= self.limit(layout, name):
                log.debug('Semaphore %s of tenant %s is full (%d); %s waits', name,
                          self.tenant_name, self.limit(layout, name), job_name)
                return False
        for name in wanted:
            self.holders.setdefault(name, []).append(key)
            log.info('Semaphore %s of tenant %s acquired by %s (build set %s)', name,
                     self.tenant_name, job_name, build_set.uuid)
        return True

    def release(self, build_set, job_name: str) -> bool:
        """Give back whatever this job holds; True if it held anything."""
        key = holder_key(build_set, job_name)
        released = False
        for name, holders in list(self.holders.items()):
            if key in holders:
                holders.remove(key)
                released = True
                log.info('Semaphore %s of tenant %s released by %s (build set %s)', name,
                         self.tenant_name, job_name, build_set.uuid)
            if not holders:
                del self.holders[name]
        return released

    def release_build_set(self, build_set) -> None:
        for holders in list(self.holders.values()):
            for key in list(holders):
                if key[0] == build_set.uuid:
                    self.release(build_set, key[1])

    def held(self, name: str) -> int:
        return len(self.holders.get(name, ()))

    def status(self, layout) -> list[dict]:
        names = set(self.holders) | set(getattr(layout, 'semaphores', None) or {})
        return [{'name': n, 'max': self.limit(layout, n), 'held': self.held(n)}
                for n in sorted(names)]
