"""Build history in SQL (SQLAlchemy): SQLite by default, PostgreSQL or
MySQL by URL. Table and column names follow released Zuul (``zuul_buildset``,
``zuul_build``, ``zuul_artifact``), with an optional table prefix.

Migrations: a ``<prefix>zuul_schema_version`` table records the schema
version; ``migrate()`` applies every newer step in order, in one
transaction per step. Adding a step never edits an old one.
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
from dataclasses import dataclass, fields

import sqlalchemy as sa

from zuul.driver.sql.migration_lock import lock_step, migration_lock
from zuul.lib.ordered_worker import ReportWorker
from zuul.lib.urls import safe_link

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
        *_waste_columns(),
        sa.Column('nodes', sa.Text, nullable=True),
    )
    artifact = sa.Table(
        f'{prefix}zuul_artifact', metadata,
        sa.Column('id', sa.Integer, primary_key=True),
        sa.Column('build_id', sa.Integer, sa.ForeignKey(f'{prefix}zuul_build.id'), index=True),
        sa.Column('name', sa.String(255)),
        sa.Column('url', sa.Text),
        sa.Column('meta', sa.Text, nullable=True),
    )
    # What a build ran with, secrets left out (zuul.lib.reproduction):
    # written when it is launched, served by /build/<uuid>/reproduction.
    reproduction = sa.Table(
        f'{prefix}zuul_build_reproduction', metadata,
        sa.Column('id', sa.Integer, primary_key=True),
        sa.Column('uuid', sa.String(36), index=True),
        sa.Column('tenant', sa.String(255)),
        sa.Column('created', sa.DateTime),
        sa.Column('data', sa.Text),
    )
    return {'buildset': buildset, 'build': build, 'artifact': artifact,
            'reproduction': reproduction}


def _waste_columns() -> list:
    """Issue 21 (doc/source/reference/waste.rst): the content hash of a
    build's inputs, its failure class, the build whose result it reused."""
    return [sa.Column('input_hash', sa.String(64), nullable=True),
            sa.Column('failure_class', sa.Text, nullable=True),
            sa.Column('reused_from', sa.String(36), nullable=True)]


def _migration_1(conn, tables, metadata):
    """Initial schema: buildsets, builds, artifacts."""
    metadata.create_all(conn, tables=[tables['buildset'], tables['build'],
                                      tables['artifact']])


# Indexes for the web's queries (builds and buildsets of a tenant, newest
# first, narrowed by any filter): each leads with what a filter pins and
# ends with the id the newest-first order walks.
_INDEXES = {
    'buildset': [('tenant', 'id'), ('tenant', 'project', 'id'), ('tenant', 'pipeline', 'id'),
                 ('tenant', 'change', 'patchset'), ('tenant', 'ref'), ('tenant', 'newrev'),
                 ('tenant', 'branch', 'id'), ('tenant', 'result', 'id')],
    'build': [('job_name', 'id'), ('result', 'id'), ('buildset_id', 'job_name'),
              ('end_time',), ('start_time',)],
}


def _migration_2(conn, tables, metadata):
    """Indexes for the build and buildset queries of zuul-web."""
    for key, column_sets in _INDEXES.items():
        table = tables[key]
        for columns in column_sets:
            name = f'{table.name}_{"_".join(columns)}_idx'
            sa.Index(name, *(table.c[c] for c in columns)).create(conn)


def _migration_3(conn, tables, metadata):
    """Builds: input_hash (indexed, for result reuse), failure_class,
    reused_from."""
    table = tables['build']
    present = {c['name'] for c in sa.inspect(conn).get_columns(table.name)}
    preparer = conn.dialect.identifier_preparer
    for column in _waste_columns():
        if column.name not in present:
            kind = column.type.compile(dialect=conn.dialect)
            conn.execute(sa.text(f'ALTER TABLE {preparer.quote(table.name)} ADD COLUMN '
                                 f'{preparer.quote(column.name)} {kind}'))
    sa.Index(f'{table.name}_input_hash_idx', table.c.input_hash).create(conn)


def _migration_4(conn, tables, metadata):
    """Builds: the nodes they ran on (JSON: name, label, provider...)."""
    table = tables['build']
    present = {c['name'] for c in sa.inspect(conn).get_columns(table.name)}
    if 'nodes' not in present:
        preparer = conn.dialect.identifier_preparer
        kind = sa.Text().compile(dialect=conn.dialect)
        conn.execute(sa.text(f'ALTER TABLE {preparer.quote(table.name)} ADD COLUMN '
                             f'{preparer.quote("nodes")} {kind}'))


def _migration_5(conn, tables, metadata):
    """What each build ran with (issue 32: ``zuul reproduce``)."""
    tables['reproduction'].create(conn, checkfirst=True)


MIGRATIONS = [_migration_1, _migration_2, _migration_3, _migration_4, _migration_5]

# Results a build or buildset can record (released Zuul's names); a
# query for any other answers 400 rather than an empty list.
BUILD_RESULTS = frozenset({
    'SUCCESS', 'FAILURE', 'ERROR', 'POST_FAILURE', 'RETRY_LIMIT', 'TIMED_OUT',
    'NODE_FAILURE', 'MERGER_FAILURE', 'MERGE_CONFLICT', 'MERGE_FAILURE', 'CONFIG_ERROR',
    'SKIPPED', 'CANCELED', 'ABORTED', 'RETRY', 'DISK_FULL', 'LOST', 'NO_JOBS', 'DEQUEUED',
    'DISABLED'})
BUILDSET_RESULTS = BUILD_RESULTS | {'DEQUEUE', 'START', 'ENQUEUE', 'MESSAGE'}
# sort=<key> (ascending) or sort=-<key> (descending) of the builds list.
BUILD_SORT_KEYS = ('id', 'start_time', 'end_time', 'duration', 'job_name', 'result',
                   'project', 'pipeline', 'change')
BUILDSET_SORT_KEYS = ('id', 'first_build_start_time', 'last_build_end_time', 'duration',
                      'project', 'pipeline', 'change', 'result')


@dataclass
class BuildQuery:
    """Filters of a builds or buildsets query; None means "any".

    ``voting``, ``held``, ``final`` and ``complete`` are booleans;
    ``complete`` false asks for builds without a result.  ``sort`` is a
    key of BUILD_SORT_KEYS (BUILDSET_SORT_KEYS), ``-`` first for
    descending; the default is newest first."""

    project: str | None = None
    pipeline: str | None = None
    job_name: str | None = None
    change: int | None = None
    patchset: str | None = None
    ref: str | None = None
    newrev: str | None = None
    branch: str | None = None
    result: str | None = None
    uuid: str | None = None
    buildset_uuid: str | None = None
    nodeset: str | None = None
    voting: bool | None = None
    held: bool | None = None
    final: bool | None = None
    complete: bool | None = None
    sort: str = '-id'
    limit: int = 50
    offset: int = 0


def _dt(ts: float | None):
    if ts is None:
        return None
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).replace(tzinfo=None)


def _waste_values(build) -> dict:
    reused = getattr(build, 'reused_from', None) or {}
    return {'input_hash': getattr(build, 'input_hash', None),
            'failure_class': getattr(build, 'failure_class', None),
            'reused_from': reused.get('uuid')}


def _artifact_data(rows: list[dict]) -> dict:
    """``zuul_return`` data holding a recorded build's artifacts."""
    if not rows:
        return {}
    return {'zuul': {'artifacts': [{'name': r['name'], 'url': r['url']} for r in rows]}}


def _json_list(text) -> list:
    try:
        value = json.loads(text) if text else []
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def _iso(value):
    return value.isoformat() if value is not None else None


def buildset_rows(tenant: str, pipeline, item, result: str, message: str = '') -> dict:
    """The rows recording a reported item and its builds, taken now (on
    the thread that owns the item) so that they can be written later on
    another thread (zuul.driver.sql.writer)."""
    change = item.change
    bs = item.current_build_set
    builds = list(bs.builds.values())
    starts = [b.start_time for b in builds if b.start_time]
    ends = [b.end_time for b in builds if b.end_time]
    buildset = dict(
        uuid=bs.uuid, tenant=tenant, pipeline=getattr(pipeline, 'name', pipeline),
        project=change.project, change=getattr(change, 'number', None),
        patchset=str(change.patchset) if getattr(change, 'patchset', None) else None,
        ref=change.ref, oldrev=getattr(change, 'oldrev', None),
        newrev=getattr(change, 'newrev', None), branch=getattr(change, 'branch', None),
        ref_url=getattr(change, 'url', None), result=result.upper().replace('-', '_'),
        message=message, event_id=item.event_id,
        first_build_start_time=_dt(min(starts)) if starts else None,
        last_build_end_time=_dt(max(ends)) if ends else None,
        updated=_dt(item.dequeue_time or item.enqueue_time))
    rows = [build_row(build) for build in builds]
    rows += [build_row(build, final=False)
             for build in getattr(bs, 'retried_builds', None) or ()]
    return {'buildset': buildset, 'builds': rows}


def build_row(build, final: bool = True) -> dict:
    """One build's row and its artifacts' rows (see buildset_rows)."""
    row = dict(
        uuid=build.uuid, job_name=build.job.name,
        result=build.result, start_time=_dt(build.start_time),
        end_time=_dt(build.end_time), voting=build.job.voting, log_url=build.log_url,
        error_detail=build.error_detail, final=final,
        held=bool(getattr(build, 'held', False)),
        nodeset=getattr(build, 'nodeset', None),
        nodes=json.dumps(getattr(build, 'nodes', None) or []),
        **_waste_values(build))
    artifacts = (build.result_data.get('zuul') or {}).get('artifacts') or []
    return {'build': row, 'artifacts': [
        dict(name=art.get('name'), url=art.get('url'),
             meta=str(art.get('metadata')) if art.get('metadata') else None)
        for art in artifacts]}


class BuildHistory(ReportWorker):
    """Records finished buildsets and answers the web API's queries. As
    the connection of an ``sql`` reporter, its reports are written on its
    own thread (ReportWorker), not on the scheduler's loop."""

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

    def stop(self) -> None:
        """Write the reports queued (as an ``sql`` reporter's connection)."""
        self.stop_reports()

    # -- schema -------------------------------------------------------------

    def schema_version(self) -> int:
        with self.engine.connect() as conn:
            if not sa.inspect(conn).has_table(self.version_table.name):
                return 0
            row = conn.execute(sa.select(self.version_table.c.version)).first()
            return row[0] if row else 0

    def migrate(self) -> int:
        """Bring the schema up to date; returns the version reached.  Safe
        when any number of schedulers and webs do it at once
        (zuul.driver.sql.migration_lock): each step re-reads the version
        under the lock and applies only what nobody has yet."""
        with self._lock, migration_lock(self.engine):
            while True:
                with self.engine.begin() as conn:
                    lock_step(conn)
                    self.metadata.create_all(conn, tables=[self.version_table])
                    row = conn.execute(sa.select(self.version_table.c.version)).first()
                    current = row[0] if row else 0
                    if current >= len(MIGRATIONS):
                        return current
                    MIGRATIONS[current](conn, self.tables, self.metadata)
                    conn.execute(sa.delete(self.version_table))
                    conn.execute(sa.insert(self.version_table).values(version=current + 1))
                log.info('Build history schema migrated to version %d', current + 1)

    # -- writing --------------------------------------------------------------

    def record_buildset(self, tenant: str, pipeline, item, result: str,
                        message: str = '') -> int:
        """Store a reported item and its builds; returns the buildset id."""
        return self.write_buildset(buildset_rows(tenant, pipeline, item, result, message))

    def write_buildset(self, rows: dict) -> int:
        """Store what :func:`buildset_rows` took of a reported item."""
        t = self.tables
        with self.engine.begin() as conn:
            buildset_id = conn.execute(sa.insert(t['buildset']).values(
                **rows['buildset'])).inserted_primary_key[0]
            for build in rows['builds']:
                self._insert_build(conn, buildset_id, build)
        return buildset_id

    def record_build(self, buildset_uuid: str, build, final: bool = False) -> bool:
        """Add one build to a recorded buildset: an earlier attempt of a
        retried job (``final`` False), so the build page can link the
        reruns. False when no buildset ``buildset_uuid`` is recorded."""
        return self.write_build(buildset_uuid, build_row(build, final))

    def write_build(self, buildset_uuid: str, row: dict) -> bool:
        s = self.tables['buildset']
        with self.engine.begin() as conn:
            found = conn.execute(sa.select(s.c.id).where(s.c.uuid == buildset_uuid)).first()
            if found is None:
                return False
            self._insert_build(conn, found[0], row)
        return True

    def _insert_build(self, conn, buildset_id: int, row: dict) -> None:
        t = self.tables
        build_id = conn.execute(sa.insert(t['build']).values(
            buildset_id=buildset_id, **row['build'])).inserted_primary_key[0]
        for art in row['artifacts']:
            conn.execute(sa.insert(t['artifact']).values(build_id=build_id, **art))

    def record_reproduction(self, tenant: str, uuid: str, data: dict) -> None:
        """Keep what build ``uuid`` was launched with (a retried build's
        new attempt has a new uuid). ``data`` must hold no secret; it may
        be a function returning it, called here (on the writer's thread
        when written through zuul.driver.sql.writer)."""
        if callable(data):
            data = data()
        with self.engine.begin() as conn:
            conn.execute(sa.insert(self.tables['reproduction']).values(
                uuid=uuid, tenant=tenant, data=json.dumps(data),
                created=datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)))

    def add_reproduction_outcome(self, uuid: str, outcome: dict) -> bool:
        """Add what the executor reported (``executor``: the merged state,
        its git identity) to build ``uuid``'s record; False if none."""
        t = self.tables['reproduction']
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(t.c.id, t.c.data).where(t.c.uuid == uuid)
                               .order_by(t.c.id.desc()).limit(1)).first()
            if row is None:
                return False
            data = json.loads(row[1])
            data['executor'] = outcome
            conn.execute(sa.update(t).where(t.c.id == row[0]).values(data=json.dumps(data)))
        return True

    def get_reproduction(self, tenant: str, uuid: str) -> dict | None:
        """What build ``uuid`` of ``tenant`` was launched with, or None."""
        t = self.tables['reproduction']
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(t.c.data).where(t.c.uuid == uuid)
                               .where(t.c.tenant == tenant)
                               .order_by(t.c.id.desc()).limit(1)).first()
        return json.loads(row[0]) if row else None

    # -- reading --------------------------------------------------------------

    def _duration(self, start, end):
        """end - start as a sortable number (seconds or days) on this engine."""
        dialect = self.engine.dialect.name
        if dialect == 'sqlite':
            return sa.func.julianday(end) - sa.func.julianday(start)
        if dialect == 'mysql':
            return sa.func.timestampdiff(sa.text('SECOND'), start, end)
        return end - start

    @staticmethod
    def _query(query: BuildQuery | None, filters: dict) -> BuildQuery:
        query = query or BuildQuery()
        if filters:
            names = {f.name for f in fields(BuildQuery)}
            unknown = set(filters) - names
            if unknown:
                raise TypeError(f'unknown build filter(s): {", ".join(sorted(unknown))}')
            query = BuildQuery(**{**query.__dict__, **filters})
        return query

    @staticmethod
    def _order(query: BuildQuery, columns: dict, newest: list):
        """ORDER BY of ``query.sort``; ``newest`` (the ``id`` order) breaks
        ties.  Builds are "newest" by buildset, then by build: the same as
        by build id but for reruns recorded later, and it lets the
        database walk the buildset indexes and stop after one page."""
        key = query.sort.lstrip('-')
        if key not in columns:
            raise ValueError(f'cannot sort by {key!r}')
        descending = query.sort.startswith('-')
        order = [] if key == 'id' else [columns[key]]
        return [c.desc() if descending else c.asc() for c in order + newest]

    def get_builds(self, tenant: str, query: BuildQuery | None = None,
                   **filters) -> list[dict]:
        """Builds of ``tenant`` matching ``query`` (or the same fields
        given as keywords), as dicts of the web API."""
        query = self._query(query, filters)
        b, s = self.tables['build'], self.tables['buildset']
        q = sa.select(b, s.c.tenant, s.c.pipeline, s.c.project, s.c.change, s.c.patchset,
                      s.c.ref, s.c.branch, s.c.ref_url, s.c.newrev, s.c.event_id,
                      s.c.uuid.label('buildset_uuid')).join(s, b.c.buildset_id == s.c.id)
        q = q.where(s.c.tenant == tenant)
        for column, value in ((s.c.project, query.project), (s.c.pipeline, query.pipeline),
                              (b.c.job_name, query.job_name), (s.c.change, query.change),
                              (s.c.patchset, query.patchset), (s.c.ref, query.ref),
                              (s.c.newrev, query.newrev), (b.c.result, query.result),
                              (b.c.uuid, query.uuid), (s.c.branch, query.branch),
                              (s.c.uuid, query.buildset_uuid), (b.c.nodeset, query.nodeset),
                              (b.c.voting, query.voting), (b.c.held, query.held),
                              (b.c.final, query.final)):
            if value is not None:
                q = q.where(column == value)
        if query.complete is not None:
            q = q.where(b.c.result.is_not(None) if query.complete else b.c.result.is_(None))
        columns = {'id': b.c.id, 'start_time': b.c.start_time, 'end_time': b.c.end_time,
                   'duration': self._duration(b.c.start_time, b.c.end_time),
                   'job_name': b.c.job_name, 'result': b.c.result, 'project': s.c.project,
                   'pipeline': s.c.pipeline, 'change': s.c.change}
        order = self._order(query, columns, [s.c.id, b.c.id])
        q = q.order_by(*order).limit(query.limit).offset(query.offset)
        with self.engine.connect() as conn:
            return [self._build_dict(row._mapping) for row in conn.execute(q)]

    def _build_dict(self, row) -> dict:
        d = {k: row[k] for k in ('uuid', 'job_name', 'result', 'voting', 'log_url',
                                 'error_detail', 'final', 'held', 'nodeset', 'tenant',
                                 'pipeline', 'project', 'change', 'patchset', 'ref',
                                 'branch', 'ref_url', 'newrev', 'event_id')}
        for key in ('input_hash', 'failure_class', 'reused_from'):
            d[key] = row.get(key)
        d['nodes'] = _json_list(row.get('nodes'))
        d['start_time'] = _iso(row['start_time'])
        d['end_time'] = _iso(row['end_time'])
        if row['start_time'] and row['end_time']:
            d['duration'] = (row['end_time'] - row['start_time']).total_seconds()
        else:
            d['duration'] = None
        d['buildset'] = {'uuid': row['buildset_uuid']}
        # Checked again when served: rows written before links were checked.
        d['log_url'] = safe_link(d['log_url'])
        d['ref_url'] = safe_link(d['ref_url'])
        return d

    def get_buildsets(self, tenant: str, query: BuildQuery | None = None,
                      **filters) -> list[dict]:
        """Buildsets of ``tenant`` matching ``query`` (job, voting, held,
        final and nodeset do not apply to buildsets)."""
        query = self._query(query, filters)
        s = self.tables['buildset']
        q = sa.select(s).where(s.c.tenant == tenant)
        for column, value in ((s.c.project, query.project), (s.c.pipeline, query.pipeline),
                              (s.c.change, query.change), (s.c.patchset, query.patchset),
                              (s.c.ref, query.ref), (s.c.newrev, query.newrev),
                              (s.c.result, query.result), (s.c.uuid, query.uuid),
                              (s.c.branch, query.branch)):
            if value is not None:
                q = q.where(column == value)
        if query.complete is not None:
            q = q.where(s.c.result.is_not(None) if query.complete else s.c.result.is_(None))
        columns = {'id': s.c.id, 'first_build_start_time': s.c.first_build_start_time,
                   'last_build_end_time': s.c.last_build_end_time,
                   'duration': self._duration(s.c.first_build_start_time,
                                              s.c.last_build_end_time),
                   'project': s.c.project, 'pipeline': s.c.pipeline, 'change': s.c.change,
                   'result': s.c.result}
        order = self._order(query, columns, [s.c.id])
        q = q.order_by(*order).limit(query.limit).offset(query.offset)
        with self.engine.connect() as conn:
            rows = [dict(r._mapping) for r in conn.execute(q)]
        for r in rows:
            r.pop('id')
            start, end = r['first_build_start_time'], r['last_build_end_time']
            r['duration'] = (end - start).total_seconds() if start and end else None
            for k in ('first_build_start_time', 'last_build_end_time', 'updated'):
                r[k] = _iso(r[k])
        return rows

    def find_build_by_input_hash(self, tenant: str, input_hash: str) -> dict | None:
        """The newest SUCCESS build of ``tenant`` that ran (was not itself
        reused) with ``input_hash``, for result reuse: {uuid, job, log_url,
        url, change, patchset, result_data} or None."""
        b, s = self.tables['build'], self.tables['buildset']
        q = sa.select(b.c.uuid, b.c.job_name, b.c.log_url, b.c.id, s.c.change,
                      s.c.patchset, s.c.ref).join(s, b.c.buildset_id == s.c.id).where(
            s.c.tenant == tenant, b.c.input_hash == input_hash, b.c.result == 'SUCCESS',
            b.c.reused_from.is_(None)).order_by(b.c.id.desc()).limit(1)
        with self.engine.connect() as conn:
            row = conn.execute(q).first()
        if row is None:
            return None
        return {'uuid': row.uuid, 'job': row.job_name, 'log_url': row.log_url,
                'url': row.log_url, 'change': row.change or row.ref,
                'patchset': row.patchset, 'result_data': _artifact_data(
                    self.get_build_artifacts(row.uuid))}

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
