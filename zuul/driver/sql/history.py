"""Build history in SQL (SQLAlchemy): SQLite by default, PostgreSQL or
MySQL by URL. Table and column names follow released Zuul (``zuul_buildset``,
``zuul_build``, ``zuul_artifact``), with an optional table prefix.

Migrations: a ``<prefix>zuul_schema_version`` table records the schema
version; ``migrate()`` applies every newer step in order, in one
transaction per step. Adding a step never edits an old one.
"""

from __future__ import annotations

import datetime
import logging
import threading

import sqlalchemy as sa

log = logging.getLogger('zuul.driver.sql.history')


def _tables(metadata: sa.MetaData, prefix: str) -> dict[str, sa.Table]:
    buildset = sa.Table(
        f'{prefix}zuul_buildset', metadata,
        sa.Column('id', sa.Integer, primary_key=True),
        sa.Column('uuid', sa.String(36), index=True),
        sa.Column('tenant', sa.String(255), index=True),
        sa.Column('pipeline', sa.String(255), index=True),
        sa.Column('project', sa.String(255), index=True),
        sa.Column('change', sa.Integer, nullable=True, index=True),
        sa.Column('patchset', sa.String(255), nullable=True),
        sa.Column('ref', sa.String(255)),
        sa.Column('oldrev', sa.String(255), nullable=True),
        sa.Column('newrev', sa.String(255), nullable=True),
        sa.Column('branch', sa.String(255), nullable=True),
        sa.Column('ref_url', sa.String(255), nullable=True),
        sa.Column('result', sa.String(255)),
        sa.Column('message', sa.Text),
        sa.Column('event_id', sa.String(255), nullable=True),
        sa.Column('first_build_start_time', sa.DateTime, nullable=True),
        sa.Column('last_build_end_time', sa.DateTime, nullable=True),
        sa.Column('updated', sa.DateTime),
    )
    build = sa.Table(
        f'{prefix}zuul_build', metadata,
        sa.Column('id', sa.Integer, primary_key=True),
        sa.Column('buildset_id', sa.Integer,
                  sa.ForeignKey(f'{prefix}zuul_buildset.id'), index=True),
        sa.Column('uuid', sa.String(36), index=True),
        sa.Column('job_name', sa.String(255), index=True),
        sa.Column('result', sa.String(255), index=True),
        sa.Column('start_time', sa.DateTime, nullable=True),
        sa.Column('end_time', sa.DateTime, nullable=True),
        sa.Column('voting', sa.Boolean),
        sa.Column('log_url', sa.String(255), nullable=True),
        sa.Column('error_detail', sa.Text, nullable=True),
        sa.Column('final', sa.Boolean),
        sa.Column('held', sa.Boolean),
        sa.Column('nodeset', sa.String(255), nullable=True),
    )
    artifact = sa.Table(
        f'{prefix}zuul_artifact', metadata,
        sa.Column('id', sa.Integer, primary_key=True),
        sa.Column('build_id', sa.Integer, sa.ForeignKey(f'{prefix}zuul_build.id'), index=True),
        sa.Column('name', sa.String(255)),
        sa.Column('url', sa.Text),
        sa.Column('meta', sa.Text, nullable=True),
    )
    return {'buildset': buildset, 'build': build, 'artifact': artifact}


def _migration_1(conn, tables, metadata):
    """Initial schema: buildsets, builds, artifacts."""
    metadata.create_all(conn, tables=[tables['buildset'], tables['build'],
                                      tables['artifact']])


MIGRATIONS = [_migration_1]


def _dt(ts: float | None):
    if ts is None:
        return None
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).replace(tzinfo=None)


def _iso(value):
    return value.isoformat() if value is not None else None


class BuildHistory:
    """Records finished buildsets and answers the web API's queries."""

    def __init__(self, dburi: str = 'sqlite://', table_prefix: str = ''):
        kwargs = {}
        if dburi.startswith('sqlite'):
            kwargs['connect_args'] = {'check_same_thread': False}
            if dburi in ('sqlite://', 'sqlite:///:memory:'):
                kwargs['poolclass'] = sa.pool.StaticPool
        self.engine = sa.create_engine(dburi, future=True, **kwargs)
        self.prefix = table_prefix
        self.metadata = sa.MetaData()
        self.tables = _tables(self.metadata, table_prefix)
        self.version_table = sa.Table(
            f'{table_prefix}zuul_schema_version', self.metadata,
            sa.Column('version', sa.Integer, nullable=False))
        self._lock = threading.Lock()

    # -- schema -------------------------------------------------------------

    def schema_version(self) -> int:
        with self.engine.connect() as conn:
            if not sa.inspect(conn).has_table(self.version_table.name):
                return 0
            row = conn.execute(sa.select(self.version_table.c.version)).first()
            return row[0] if row else 0

    def migrate(self) -> int:
        """Bring the schema up to date; returns the version reached."""
        with self._lock:
            current = self.schema_version()
            for number, step in enumerate(MIGRATIONS, start=1):
                if number <= current:
                    continue
                with self.engine.begin() as conn:
                    self.metadata.create_all(conn, tables=[self.version_table])
                    step(conn, self.tables, self.metadata)
                    conn.execute(sa.delete(self.version_table))
                    conn.execute(sa.insert(self.version_table).values(version=number))
                log.info('Build history schema migrated to version %d', number)
                current = number
            return current

    # -- writing --------------------------------------------------------------

    def record_buildset(self, tenant: str, pipeline, item, result: str,
                        message: str = '') -> int:
        """Store a reported item and its builds; returns the buildset id."""
        change = item.change
        bs = item.current_build_set
        builds = list(bs.builds.values())
        starts = [b.start_time for b in builds if b.start_time]
        ends = [b.end_time for b in builds if b.end_time]
        t = self.tables
        with self.engine.begin() as conn:
            buildset_id = conn.execute(sa.insert(t['buildset']).values(
                uuid=bs.uuid, tenant=tenant, pipeline=getattr(pipeline, 'name', pipeline),
                project=change.project, change=getattr(change, 'number', None),
                patchset=str(change.patchset) if getattr(change, 'patchset', None) else None,
                ref=change.ref, oldrev=getattr(change, 'oldrev', None),
                newrev=getattr(change, 'newrev', None), branch=getattr(change, 'branch', None),
                ref_url=getattr(change, 'url', None), result=result.upper().replace('-', '_'),
                message=message, event_id=item.event_id,
                first_build_start_time=_dt(min(starts)) if starts else None,
                last_build_end_time=_dt(max(ends)) if ends else None,
                updated=_dt(item.dequeue_time or item.enqueue_time))).inserted_primary_key[0]
            for build in builds:
                self._insert_build(conn, buildset_id, build)
        return buildset_id

    def _insert_build(self, conn, buildset_id: int, build) -> None:
        t = self.tables
        build_id = conn.execute(sa.insert(t['build']).values(
            buildset_id=buildset_id, uuid=build.uuid, job_name=build.job.name,
            result=build.result, start_time=_dt(build.start_time),
            end_time=_dt(build.end_time), voting=build.job.voting, log_url=build.log_url,
            error_detail=build.error_detail, final=True, held=False,
            nodeset=None)).inserted_primary_key[0]
        artifacts = (build.result_data.get('zuul') or {}).get('artifacts') or []
        for art in artifacts:
            conn.execute(sa.insert(t['artifact']).values(
                build_id=build_id, name=art.get('name'), url=art.get('url'),
                meta=str(art.get('metadata')) if art.get('metadata') else None))

    # -- reading --------------------------------------------------------------

    def get_builds(self, tenant: str, project=None, pipeline=None, job_name=None,
                   change=None, patchset=None, result=None, uuid=None, branch=None,
                   limit: int = 50, offset: int = 0) -> list[dict]:
        b, s = self.tables['build'], self.tables['buildset']
        q = sa.select(b, s.c.tenant, s.c.pipeline, s.c.project, s.c.change, s.c.patchset,
                      s.c.ref, s.c.branch, s.c.ref_url, s.c.newrev, s.c.event_id,
                      s.c.uuid.label('buildset_uuid')).join(s, b.c.buildset_id == s.c.id)
        q = q.where(s.c.tenant == tenant)
        for column, value in ((s.c.project, project), (s.c.pipeline, pipeline),
                              (b.c.job_name, job_name), (s.c.change, change),
                              (s.c.patchset, patchset), (b.c.result, result),
                              (b.c.uuid, uuid), (s.c.branch, branch)):
            if value is not None:
                q = q.where(column == value)
        q = q.order_by(b.c.id.desc()).limit(limit).offset(offset)
        with self.engine.connect() as conn:
            return [self._build_dict(row._mapping) for row in conn.execute(q)]

    def _build_dict(self, row) -> dict:
        d = {k: row[k] for k in ('uuid', 'job_name', 'result', 'voting', 'log_url',
                                 'error_detail', 'final', 'held', 'nodeset', 'tenant',
                                 'pipeline', 'project', 'change', 'patchset', 'ref',
                                 'branch', 'ref_url', 'newrev', 'event_id')}
        d['start_time'] = _iso(row['start_time'])
        d['end_time'] = _iso(row['end_time'])
        if row['start_time'] and row['end_time']:
            d['duration'] = (row['end_time'] - row['start_time']).total_seconds()
        else:
            d['duration'] = None
        d['buildset'] = {'uuid': row['buildset_uuid']}
        return d

    def get_buildsets(self, tenant: str, project=None, pipeline=None, change=None,
                      result=None, uuid=None, branch=None, limit: int = 50,
                      offset: int = 0) -> list[dict]:
        s = self.tables['buildset']
        q = sa.select(s).where(s.c.tenant == tenant)
        for column, value in ((s.c.project, project), (s.c.pipeline, pipeline),
                              (s.c.change, change), (s.c.result, result),
                              (s.c.uuid, uuid), (s.c.branch, branch)):
            if value is not None:
                q = q.where(column == value)
        q = q.order_by(s.c.id.desc()).limit(limit).offset(offset)
        with self.engine.connect() as conn:
            rows = [dict(r._mapping) for r in conn.execute(q)]
        for r in rows:
            r.pop('id')
            for k in ('first_build_start_time', 'last_build_end_time', 'updated'):
                r[k] = _iso(r[k])
        return rows

    def get_build_artifacts(self, build_uuid: str) -> list[dict]:
        a, b = self.tables['artifact'], self.tables['build']
        q = sa.select(a.c.name, a.c.url, a.c.meta).join(b, a.c.build_id == b.c.id).where(
            b.c.uuid == build_uuid)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def recent_durations(self, tenant: str, job_name: str, project=None, branch=None,
                         limit: int = 10) -> list[float]:
        """Durations in seconds of the newest successful builds of a job
        (on a project and branch when given), newest first."""
        b, s = self.tables['build'], self.tables['buildset']
        q = sa.select(b.c.start_time, b.c.end_time).join(s, b.c.buildset_id == s.c.id).where(
            s.c.tenant == tenant, b.c.job_name == job_name, b.c.result == 'SUCCESS',
            b.c.start_time.is_not(None), b.c.end_time.is_not(None))
        for column, value in ((s.c.project, project), (s.c.branch, branch)):
            if value is not None:
                q = q.where(column == value)
        q = q.order_by(b.c.id.desc()).limit(limit)
        with self.engine.connect() as conn:
            return [(r.end_time - r.start_time).total_seconds() for r in conn.execute(q)]

    def average_duration(self, tenant: str, job_name: str, project=None,
                         branch=None) -> float | None:
        """Mean duration of recent successful builds (status progress bars)."""
        durations = self.recent_durations(tenant, job_name, project, branch)
        return sum(durations) / len(durations) if durations else None
