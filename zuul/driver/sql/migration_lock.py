"""One migration at a time, across processes and machines.

Every scheduler and zuul-web migrates the history schema when it starts;
started together on a fresh database, two of them would both create the
tables and one would die (``index ... already exists``).  The migration
runs under a lock the database itself provides, and each step re-reads
the schema version once it holds the lock, so whoever comes second finds
the work done:

* PostgreSQL: a transaction-scoped advisory lock
  (``pg_advisory_xact_lock``), taken at the start of each step's
  transaction (PostgreSQL runs DDL inside transactions);
* MySQL/MariaDB: a named lock (``GET_LOCK``) held on one connection for
  the whole migration (MySQL commits DDL at once);
* SQLite: an exclusive ``flock`` on ``<database file>.migrate-lock``
  beside the file (processes on one machine share it); an in-memory
  database belongs to one process and needs none.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

import sqlalchemy as sa

# Any constant the installation does not use for another advisory lock:
# the bytes of "zuul" as an integer.
ADVISORY_KEY = 0x7A75756C
MYSQL_LOCK = 'zuul_schema_migration'
MYSQL_TIMEOUT = 600


class MigrationLockError(RuntimeError):
    """The lock could not be taken (another migration holds it too long)."""


@contextlib.contextmanager
def migration_lock(engine):
    """Held while a process migrates: a file lock (SQLite) or a named lock
    (MySQL); PostgreSQL's is taken per step by ``lock_step``."""
    dialect = engine.dialect.name
    if dialect == 'sqlite':
        path = engine.url.database
        if not path or path == ':memory:':
            yield
            return
        fd = os.open(f'{os.path.abspath(path)}.migrate-lock', os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)
        return
    if dialect in ('mysql', 'mariadb'):
        with engine.connect() as conn:
            got = conn.execute(sa.text('SELECT GET_LOCK(:name, :timeout)'),
                               {'name': MYSQL_LOCK, 'timeout': MYSQL_TIMEOUT}).scalar()
            if got != 1:
                raise MigrationLockError(f'another process held the schema migration lock '
                                         f'for more than {MYSQL_TIMEOUT} s')
            try:
                yield
            finally:
                conn.execute(sa.text('SELECT RELEASE_LOCK(:name)'), {'name': MYSQL_LOCK})
        return
    yield


def lock_step(conn) -> None:
    """At the start of one migration step's transaction (PostgreSQL)."""
    if conn.dialect.name == 'postgresql':
        conn.execute(sa.text('SELECT pg_advisory_xact_lock(:key)'), {'key': ADVISORY_KEY})
