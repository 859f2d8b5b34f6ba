"""Tenant layouts for the scheduler: loading them through mergers,
speculative layouts for changes that edit configuration, and turning a
layout's objects into what pipeline managers use (trigger filters,
requirements, reporters, shared queues, frozen jobs).

Config files are read through a ConfigFetcher (mergers, over Gearman),
many projects at once, and cached per project branch, in memory and (with
``shared_cache``, zuul/zk/config_cache.py) in ZooKeeper: a reconfiguration
for one project re-reads only that project, and a scheduler that starts
builds its layouts from ZooKeeper without asking the mergers again. A
change whose merge touches configuration is tested with a layout built
from the files as they are after the speculative merge (the merger
returns them); errors that the change introduces are reported on the
change and nothing runs.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from zuul.configloader.layout import (
    CONFIG_NAMES,
    ConfigFile,
    LayoutLoader,
    filter_branches,
    is_always_dynamic,
    select_config_files,
)
from zuul.configloader.tenant import load_tenant_config, unprotected_branch_warnings
from zuul.executor import protocol as ep
from zuul.model import item as m
from zuul.model.errors import ConfigError, UnknownNameError
from zuul.model.events import REF_UPDATE_EVENTS
from zuul.model.freeze import freeze_job_graph
from zuul.scheduler.merge_modes import merge_mode_errors
from zuul.scheduler.semaphores import GlobalSemaphoreHolders

log = logging.getLogger('zuul.scheduler.layouts')

READ_PATHS = ('zuul.yaml', 'zuul.d/', '.zuul.yaml', '.zuul.d/')
# Projects read through the mergers at once when loading layouts.
PARALLEL_READS = 16


class ConfigFetchError(Exception):
    pass


class MergerConfigFetcher:
    """Branches and config files of projects, read by mergers."""

    def __init__(self, merge_client, timeout: float = 300.0, attempts: int = 3):
        self.client = merge_client
        self.timeout = timeout
        self.attempts = max(1, attempts)

    def _wait(self, submit):
        """Submit a read and wait for its answer.  Reads are idempotent, so
        a request that got no answer within its share of ``timeout`` (a job
        lost between Gearman and a merger) is submitted again, up to
        ``attempts`` times in all.  The first answer of any submission wins;
        the others are canceled.  (A read lost with a Gearman server that
        restarted is submitted again by the merge client itself, at once.)"""
        done = threading.Event()
        box = {}
        handles = []

        def callback(result):
            box.setdefault('result', result)
            done.set()
        try:
            for attempt in range(1, self.attempts + 1):
                handles.append(submit(callback))
                if done.wait(self.timeout / self.attempts):
                    return box['result']
                if attempt < self.attempts:
                    log.warning('No merger answered a configuration read in %.0f s; '
                                'submitting it again (attempt %d of %d)',
                                self.timeout / self.attempts, attempt + 1, self.attempts)
            raise ConfigFetchError('no merger answered in time')
        finally:
            for handle in handles:
                if handle is not None and not getattr(handle, 'done', True):
                    handle.cancel()

    def branches(self, connection: str, project: str) -> list[str]:
        from zuul.merger.protocol import MergeItem
        result = self._wait(lambda cb: self.client.get_repo_state(
            [MergeItem(connection=connection, project=project)], cb))
        if result.error:
            raise ConfigFetchError(result.error)
        refs = (result.repo_state.get(connection) or {}).get(project) or {}
        return sorted(r[len('refs/heads/'):] for r in refs if r.startswith('refs/heads/'))

    def files(self, connection: str, project: str, branch: str, paths) -> dict[str, str]:
        result = self._wait(lambda cb: self.client.get_files(connection, project, branch,
                                                             list(paths), cb))
        if result.error:
            raise ConfigFetchError(result.error)
        return dict(result.files)


@dataclass
class _ProjectCache:
    branches: list[str] = field(default_factory=list)
    # branch -> {path: text} of its config files
    files: dict[str, dict] = field(default_factory=dict)
    errors: list = field(default_factory=list)


class Layouts:
    """What the scheduler calls ``layouts`` (zuul/scheduler/scheduler.py).

    ``connections`` is the scheduler's ConnectionRegistry; ``drivers`` a
    DriverRegistry; ``connection_drivers`` maps connection names to
    driver names; ``keystore`` decrypts secrets for jobs."""

    def __init__(self, tenant_config_path: str, connections, drivers, fetcher,
                 connection_drivers: dict, canonical_hostnames: dict, keystore=None):
        self.tenant_config_path = tenant_config_path
        self.connections = connections
        self.drivers = drivers
        self.fetcher = fetcher
        self.connection_drivers = connection_drivers
        self.canonical_hostnames = canonical_hostnames
        self.keystore = keystore
        # zuul.conf's ``[scheduler] default_ansible_version`` (set by the daemon).
        self.default_ansible_version: str | None = None
        self.loader = LayoutLoader(drivers, connection_drivers, canonical_hostnames)
        self.tenant_config = None
        self._cache: dict[tuple, _ProjectCache] = {}
        # zuul.zk.config_cache.ConfigCacheStore (None: memory only).
        self.shared_cache = None
        # Projects read through mergers (not found in a cache), in all.
        self.fetched_projects = 0
        self._pipeline_objects: dict[int, dict] = {}
        # Branch heads produced by submits we saw as change-merged events.
        self._merged_revs: dict[str, None] = {}
        # Holders of the tenant file's global semaphores, shared by every
        # tenant's layout (zuul/scheduler/semaphores.py).
        self.global_semaphore_holders = GlobalSemaphoreHolders()

    # -- loading --------------------------------------------------------------

    def load(self, tenant_names=None, projects=None, keep_shared: bool = False) -> dict:
        """Layouts of ``tenant_names`` (all when None), re-reading the
        config of ``projects`` (all when None, or only those not cached).
        A full load (neither given) also empties the shared cache unless
        ``keep_shared`` (a scheduler starting: it builds from the cache).
        With ``keep_shared``, ``projects`` are taken from the shared cache
        as another scheduler refreshed them (following its
        reconfiguration); without, their entries are read again."""
        self.tenant_config = load_tenant_config(self.tenant_config_path,
                                                set(self.connection_drivers))
        for error in self.tenant_config.errors:
            log.error('Tenant configuration: %s', error)
        for warning in self.tenant_config.warnings + unprotected_branch_warnings(
                self.tenant_config, self.connection_drivers, self.drivers):
            log.warning('Tenant configuration: %s', warning)
        if projects is None and tenant_names is None:
            self._cache.clear()
            if self.shared_cache is not None and not keep_shared:
                self.shared_cache.clear()
        for name in projects or ():
            self._forget(name, shared=not keep_shared)
        tenants = {name: tenant for name, tenant in self.tenant_config.tenants.items()
                   if tenant_names is None or name in tenant_names}
        self._prefetch([tp for tenant in tenants.values() for tp in tenant.projects])
        return {name: self._load_tenant(tenant) for name, tenant in tenants.items()}

    def _forget(self, name: str, shared: bool = True) -> None:
        """Drop ``name``'s cached config, here and (``shared``) in
        ZooKeeper, before it is read again, so no scheduler builds from
        the old files."""
        for key in [k for k in self._cache if k[1] == name or self._short(k[1]) == name]:
            del self._cache[key]
        if self.shared_cache is None or not shared:
            return
        keys = {(tp.connection, tp.name) for tenant in self.tenant_config.tenants.values()
                for tp in tenant.projects if name in (tp.name, self._short(tp.name))}
        for connection, project in keys:
            self.shared_cache.delete(connection, project)

    def _prefetch(self, tps) -> None:
        """Fill the cache for every project of ``tps`` not in it: from
        ZooKeeper where it has them, the rest read through the mergers,
        ``PARALLEL_READS`` at a time (one by one, 2,000 projects were
        4,000 merger round trips in a row)."""
        missing, seen = [], set()
        for tp in tps:
            key = (tp.connection, tp.name)
            if key in self._cache or key in seen:
                continue
            seen.add(key)
            if not self._from_shared(tp):
                missing.append(tp)
        if not missing:
            return
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=min(PARALLEL_READS, len(missing)),
                                thread_name_prefix='config-read') as pool:
            list(pool.map(self._project_cache, missing))

    def _from_shared(self, tp) -> bool:
        if self.shared_cache is None:
            return False
        try:
            entry = self.shared_cache.get(tp.connection, tp.name)
        except Exception:
            log.exception('Unable to read the cached configuration of %s', tp.name)
            return False
        if entry is None:
            return False
        self._cache[(tp.connection, tp.name)] = _ProjectCache(
            branches=list(entry['branches']), files=dict(entry['files']))
        return True

    @staticmethod
    def _short(name: str) -> str:
        return name.split('/', 1)[1] if '/' in name and '.' in name.split('/')[0] else name

    def _protected_only(self, tp, branches: list[str]) -> list[str]:
        """With ``exclude-unprotected-branches`` (the project's, else its
        tenant's) and a connection that knows branch protection (GitHub):
        only the protected branches; with ``exclude-locked-branches``,
        not the locked (read-only) ones."""
        connection = self.connections.get(tp.connection) if self.connections else None
        protected = getattr(connection, 'protected_branches', None)
        if protected is not None and self._tenant_option(tp, 'exclude_unprotected_branches'):
            keep = set(protected(tp.name))
            branches = [b for b in branches if b in keep]
        locked = getattr(connection, 'locked_branches', None)
        if locked is not None and self._tenant_option(tp, 'exclude_locked_branches'):
            drop = set(locked(tp.name))
            branches = [b for b in branches if b not in drop]
        return branches

    def _tenant_option(self, tp, attr: str) -> bool:
        wanted = getattr(tp, attr, None)
        if wanted is None:
            tenants = self.tenant_config.tenants.values() if self.tenant_config else ()
            wanted = any(getattr(t, attr, False) for t in tenants
                         if any(p is tp for p in t.projects))
        return bool(wanted)

    def _project_cache(self, tp) -> _ProjectCache:
        key = (tp.connection, tp.name)
        cache = self._cache.get(key)
        if cache is not None:
            return cache
        cache = _ProjectCache()
        try:
            branches = self.fetcher.branches(tp.connection, tp.name)
            cache.branches = filter_branches(tp, self._protected_only(tp, branches))
            if tp.load_branch:
                cache.branches = [b for b in cache.branches if b == tp.load_branch]
            paths = READ_PATHS + tuple(tp.extra_config_paths)
            for branch in cache.branches:
                cache.files[branch] = self.fetcher.files(tp.connection, tp.name, branch,
                                                         paths)
        except Exception as e:
            log.error('Unable to read the configuration of %s: %s', tp.name, e)
            cache.errors.append((tp, '', '', f'unable to read the configuration of '
                                 f'{tp.name}: {e}'))
            # Not cached: the next reconfiguration tries again.
            return cache
        self._cache[key] = cache
        self.fetched_projects += 1
        if self.shared_cache is not None:
            try:
                self.shared_cache.put(tp.connection, tp.name, cache.branches, cache.files)
            except Exception:
                log.exception('Unable to cache the configuration of %s in ZooKeeper', tp.name)
        return cache

    def _files_for(self, tenant, overrides=None):
        files, errors, branches = [], [], {}
        for tp in tenant.projects:
            cache = self._project_cache(tp)
            errors.extend(cache.errors)
            branches[(tp.connection, tp.name)] = list(cache.branches)
            dynamic = [b for (c, p, b) in overrides or () if (c, p) == (tp.connection, tp.name)
                       and b not in cache.branches and is_always_dynamic(tp, b)]
            branches[(tp.connection, tp.name)].extend(dynamic)
            for branch in list(cache.branches) + dynamic:
                contents = cache.files.get(branch, {})
                if overrides and (tp.connection, tp.name, branch) in overrides:
                    contents = overrides[(tp.connection, tp.name, branch)]
                chosen, problem = select_config_files(contents, tp.extra_config_paths)
                if problem:
                    errors.append((tp, branch, '', problem))
                files.extend(ConfigFile(p, contents[p], tp, branch) for p in chosen)
        for path in tenant.include_files:
            try:
                with open(path, encoding='utf-8') as f:
                    files.append(ConfigFile(path, f.read()))
            except OSError as e:
                errors.append((None, '', path, f'unable to read {path}: {e}'))
        return files, errors, branches

    def _load_tenant(self, tenant, overrides=None):
        files, errors, branches = self._files_for(tenant, overrides)
        layout = self.loader.load(tenant, files, branches, file_errors=errors)
        layout.tenant = tenant
        layout.global_semaphore_holders = self.global_semaphore_holders
        layout.errors.extend(merge_mode_errors(layout, tenant, self.connections))
        for error in layout.errors:
            if overrides is None:
                log.warning('Tenant %s: %s', tenant.name, error)
        return layout

    # -- queries ----------------------------------------------------------------

    def project_branches(self, tp) -> list[str]:
        cache = self._cache.get((tp.connection, tp.name))
        return list(cache.branches) if cache else []

    def pipelines(self, layout):
        return list(layout.pipelines.values())

    def project_count(self, layout) -> int:
        return len(layout.tenant.projects)

    def _tenant_project(self, layout, connection, project):
        """The tenant's project named ``project`` (its name or canonical
        name; on ``connection`` if given), the first in the tenant's
        order; None if it has none. Looked up in an index made once per
        layout: every event and merge asks, and a tenant may hold
        thousands of projects."""
        for tp in self._project_index(layout).get(project, ()):
            if connection is None or tp.connection == connection:
                return tp
        return None

    def _project_index(self, layout) -> dict:
        projects = layout.tenant.projects
        cached = getattr(layout, '_project_index', None)
        if cached is not None and cached[0] is projects and cached[1] == len(projects):
            return cached[2]
        index: dict = {}
        for tp in projects:
            canonical = f'{self.canonical_hostnames.get(tp.connection)}/{tp.name}'
            for key in dict.fromkeys((tp.name, canonical)):
                index.setdefault(key, []).append(tp)
        layout._project_index = (projects, len(projects), index)
        return index

    def has_project(self, layout, connection, project) -> bool:
        return self._tenant_project(layout, connection, project) is not None

    def find_project(self, layout, project):
        tp = self._tenant_project(layout, None, project) if project else None
        if tp is None:
            raise UnknownNameError(f'Unknown project "{project}" in tenant '
                                   f'"{layout.tenant.name}"')
        return tp.connection, tp.name

    # -- pipeline objects ---------------------------------------------------------

    def _objects(self, pipeline) -> dict:
        objects = self._pipeline_objects.get(id(pipeline))
        if objects is not None and objects['pipeline'] is pipeline:
            return objects
        objects = {'pipeline': pipeline, 'triggers': [], 'requirements': [],
                   'reporters': {}}
        for connection, entries in pipeline.triggers.items():
            driver = self._driver(connection)
            if driver is not None and hasattr(driver, 'get_trigger'):
                try:
                    filters = driver.get_trigger(connection, entries)
                    for f in filters:
                        if hasattr(f, 'pipeline_name'):
                            f.pipeline_name = pipeline.name
                    objects['triggers'].extend(filters)
                except NotImplementedError:
                    log.warning('Driver of %s has no trigger filters yet', connection)
        for connection in set(pipeline.require) | set(pipeline.reject):
            driver = self._driver(connection)
            if driver is None or not hasattr(driver, 'get_requirement'):
                continue
            require = pipeline.require.get(connection)
            reject = pipeline.reject.get(connection)
            objects['requirements'].append((
                connection,
                driver.get_requirement(require) if require is not None else None,
                driver.get_requirement(reject, reject=True) if reject is not None else None))
        for action, by_connection in pipeline.reporters.items():
            reporters = []
            for connection, config in by_connection.items():
                driver = self._driver(connection)
                live = self.connections.get(connection)
                if live is None and getattr(driver, 'reports_without_connection', False):
                    live = connection  # the zuul driver: no zuul.conf connection
                if driver is None or live is None or not hasattr(driver, 'get_reporter'):
                    continue
                try:
                    reporters.append(driver.get_reporter(live, pipeline, config))
                except NotImplementedError:
                    # e.g. the sql "reporter": build history is recorded
                    # for every pipeline anyway when [database] is set.
                    log.debug('Driver of %s reports nothing itself', connection)
            objects['reporters'][action] = reporters
        self._pipeline_objects[id(pipeline)] = objects
        return objects

    def _driver(self, connection: str):
        name = self.connection_drivers.get(connection, connection)
        return self.drivers.get(name) if name in self.drivers else None

    def trigger_filters(self, pipeline):
        return self._objects(pipeline)['triggers']

    def requirements(self, pipeline):
        return self._objects(pipeline)['requirements']

    def reporters(self, pipeline, action: str):
        reporters = self._objects(pipeline)['reporters']
        if action in ('merge-failure', 'merge-conflict'):
            return reporters.get('merge-conflict') or reporters.get('failure') or []
        if action == 'config-error':
            return reporters.get('config-error') or reporters.get('failure') or []
        return reporters.get(action) or []

    # -- queues -------------------------------------------------------------------

    def queue_config(self, layout, pipeline, change):
        """(shared queue name or None, projects in it) for ``change``."""
        name = None
        ppc = layout.get_project_pipeline_config(change.project, pipeline.name,
                                                 getattr(change, 'branch', None))
        if ppc is not None:
            name = ppc.queue_name
        if name is None:
            name = layout.get_project_metadata(change.project)['queue_name']
        if not name:
            return None, [change.project]
        projects = []
        for tp in layout.tenant.projects:
            other = layout.get_project_pipeline_config(tp.name, pipeline.name, None)
            meta = layout.get_project_metadata(tp.name)['queue_name']
            if (other is not None and other.queue_name == name) or meta == name:
                projects.append(tp.name)
        if change.project not in projects:
            projects.append(change.project)
        queue = layout.queues.get(name)
        if queue is not None and queue.per_branch:
            name = f'{name}:{getattr(change, "branch", "")}'
        return name, projects

    def merge_mode(self, layout, project: str) -> str:
        return layout.get_project_metadata(project)['merge_mode']

    # -- config changes -------------------------------------------------------------

    @staticmethod
    def touches_config(files, extra_paths=()) -> bool:
        for f in files or ():
            top = f.split('/', 1)[0]
            if top in CONFIG_NAMES or any(f == p or (p.endswith('/') and f.startswith(p))
                                          for p in extra_paths):
                return True
        return False

    def event_updates_config(self, layout, event, change, later=None) -> bool:
        """Whether ``event`` changed configuration (reconfigure now).

        A branch update without a file list (a submit's ref-updated, a
        direct push) is judged by reading the branch's config files and
        comparing them with the cache; with ``later`` given, that read
        happens off the scheduler thread and ``later()`` is called if the
        files changed (the answer now is False)."""
        files = getattr(change, 'files', None)
        tp = self._tenant_project(layout, change.connection, change.project)
        if event.type == 'change-merged' and event.newrev:
            # Its ref-updated twin is judged by this change's files.
            self._merged_revs[event.newrev] = None
            while len(self._merged_revs) > 1000:
                self._merged_revs.pop(next(iter(self._merged_revs)))
        if event.type in REF_UPDATE_EVENTS and event.newrev in self._merged_revs:
            return False
        if event.type in REF_UPDATE_EVENTS and files is None:
            if tp is None or not (event.ref or '').startswith('refs/heads/'):
                return False
            branch = event.ref[len('refs/heads/'):]
            cache = self._cache.get((tp.connection, tp.name))
            if cache is None or branch not in cache.files:
                return True
            if later is None:
                return self._branch_config_changed(tp, branch, cache)

            def check():
                if self._branch_config_changed(tp, branch, cache):
                    later()
            threading.Thread(target=check, name='config-check', daemon=True).start()
            return False
        return self.touches_config(files, tp.extra_config_paths if tp else ())

    def _branch_config_changed(self, tp, branch: str, cache) -> bool:
        try:
            current = self.fetcher.files(tp.connection, tp.name, branch,
                                         READ_PATHS + tuple(tp.extra_config_paths))
        except Exception:
            log.exception('Unable to read the configuration of %s %s', tp.name, branch)
            return True
        return current != cache.files.get(branch)

    def read_paths(self, layout, project) -> list[str]:
        tp = self._tenant_project(layout, None, project)
        return list(READ_PATHS) + list(tp.extra_config_paths if tp else ())

    def speculative_layout(self, layout, item):
        """The layout ``item`` is tested with: the tenant's, or one built
        from the config files as the speculative merge left them when this
        item or one ahead of it changes configuration. Returns (layout,
        errors the items introduce)."""
        bs = item.current_build_set
        items = list(bs.dependent_items) + [item]
        if not any(self.touches_config(getattr(i.change, 'files', None) or
                                       i.current_build_set.files) or
                   self._on_always_dynamic_branch(layout, i.change)
                   for i in items):
            return layout, []
        overrides = {}
        for pf in getattr(bs, 'read_files', None) or ():
            overrides[(pf.connection, pf.project, pf.branch)] = dict(pf.files)
        if not overrides:
            return layout, []
        dynamic = self._load_tenant(layout.tenant, overrides)
        touched = {(pf[1], pf[2]) for pf in overrides}
        before = {self._error_key(e) for e in layout.errors}
        new = [e for e in dynamic.errors if e.severity == 'error' and
               (e.project, e.branch) in touched and self._error_key(e) not in before]
        return dynamic, new

    def _on_always_dynamic_branch(self, layout, change) -> bool:
        tp = self._tenant_project(layout, getattr(change, 'connection', None),
                                  getattr(change, 'project', None))
        return is_always_dynamic(tp, getattr(change, 'branch', None))

    @staticmethod
    def _error_key(e: ConfigError):
        return (e.project, e.branch, e.path, e.object_type, e.object_name, e.reason)

    # -- freezing -----------------------------------------------------------------------

    def freeze_jobs(self, layout, pipeline, item):
        """(list of JobRef, errors) for ``item`` in ``pipeline``."""
        layout, errors = self.speculative_layout(layout, item)
        bs = item.current_build_set
        bs.layout = layout
        if errors:
            return [], errors
        change = item.change
        branch = getattr(change, 'branch', None)
        ppc = layout.get_project_pipeline_config(change.project, pipeline.name, branch)
        if ppc is None:
            return [], []
        files = getattr(change, 'files', None) or bs.files
        bs.fail_fast = bool(ppc.fail_fast)
        # The project-pipeline's ``debug``: why each job runs or not, in
        # the report.
        # A trigger's ``debug`` asks the same for the items it enqueues.
        debug = ppc.debug or getattr(getattr(item, 'event', None), 'debug', False)
        bs.debug_messages = [] if debug else None
        graph, problems = freeze_job_graph(layout, change.project, pipeline, branch, files,
                                           layout.tenant.default_parent, ppc.job_list,
                                           debug=bs.debug_messages)
        if problems:
            return [], problems
        jobs = []
        for name in graph.order:
            frozen = graph.jobs[name]
            deps = graph.dependencies.get(name, [])
            nodes = self._nodes(layout, frozen)
            jobs.append(m.JobRef(
                name=name, voting=frozen.voting,
                hard_dependencies=tuple(d for d, soft in deps if not soft),
                soft_dependencies=tuple(d for d, soft in deps if soft),
                attempts=int(frozen.get('attempts') or 3),
                nodes=tuple((n.name, n.label) for n in nodes.nodes) if nodes else (),
                semaphores=tuple(frozen.get('semaphores') or ()),
                hold_following_changes=bool(frozen.get('hold_following_changes')),
                frozen=frozen))
            frozen.nodeset_object = nodes
        # An image event's item runs only the jobs of its image.
        from zuul.scheduler.images import filter_image_jobs
        return filter_image_jobs(item, jobs), []

    @staticmethod
    def _nodes(layout, frozen):
        from zuul.configloader.nodeset import NodesetParser
        value = frozen.get('nodeset')
        if value is None:
            return None
        if isinstance(value, str):
            return layout.nodesets.get(value)
        if isinstance(value, list):
            value = {'nodes': value}
        return NodesetParser().parse(value, frozen.source_context, anonymous=True)

    # -- executor payloads --------------------------------------------------------------

    def job_spec_for(self, job: m.JobRef, item) -> ep.JobSpec:
        frozen = job.frozen
        layout = item.current_build_set.layout
        nodes = getattr(frozen, 'nodeset_object', None)

        def playbooks(phase):
            specs = []
            for ref in frozen.get(phase) or ():
                sc = ref.source_context
                specs.append(ep.PlaybookSpec(
                    connection=sc.connection, project=sc.project, branch=sc.branch,
                    path=ref.path, trusted=sc.trusted,
                    roles=[self._role(layout, r, sc) for r in ref.roles],
                    secrets=self._secrets(layout, ref, frozen),
                    semaphores=list(ref.semaphores), cleanup=bool(ref.cleanup)))
            return specs
        required = []
        for rp in frozen.get('required_projects') or ():
            tp = self._tenant_project(layout, None, rp.name)
            if tp is not None:
                required.append(ep.RequiredProject(tp.connection, tp.name,
                                                   rp.override_checkout))
        return ep.JobSpec(
            name=frozen.name, voting=frozen.voting, timeout=frozen.get('timeout'),
            post_timeout=frozen.get('post_timeout'),
            attempts=int(frozen.get('attempts') or 3),
            pre_run=playbooks('pre_run'), run=playbooks('run'),
            post_run=playbooks('post_run'), cleanup_run=playbooks('cleanup_run'),
            vars=self._job_vars(layout, item, frozen),
            extra_vars=_plain(frozen.get('extra_vars') or {}),
            host_vars=_plain(frozen.get('host_vars') or {}),
            group_vars=_plain(frozen.get('group_vars') or {}),
            required_projects=required,
            override_checkout=frozen.get('override_checkout'),
            groups=[ep.GroupSpec(g.name, list(g.nodes)) for g in nodes.groups]
            if nodes else [],
            inheritance_path=list(frozen.inheritance_path),
            tags=sorted({str(t) for t in frozen.get('tags') or ()}),
            pre_timeout=frozen.get('pre_timeout'),
            failure_output=[str(p) for p in frozen.get('failure_output') or ()],
            workspace_scheme=frozen.get('workspace_scheme') or 'golang',
            ansible_split_streams=bool(frozen.get('ansible_split_streams')),
            ansible_version=self._ansible_version(layout, frozen),
            include_vars=[dict(v) if isinstance(v, dict) else {'name': str(v)}
                          for v in frozen.get('include_vars') or ()])

    def _ansible_version(self, layout, frozen) -> str | None:
        """The job's ``ansible-version``, else the tenant's
        ``default-ansible-version``, else zuul.conf's."""
        version = frozen.get('ansible_version')
        if version:
            return str(version)
        tenants = self.tenant_config.tenants if self.tenant_config else {}
        tenant = tenants.get(getattr(layout, 'tenant_name', None))
        version = getattr(tenant, 'default_ansible_version', None)
        if version:
            return str(version)
        return self.default_ansible_version

    @staticmethod
    def _job_vars(layout, item, frozen) -> dict:
        """The project's ``vars`` under the job's own (job vars win)."""
        from zuul.model.freeze import deep_merge
        project_vars = _plain(layout.get_project_metadata(item.change.project)['variables'])
        return deep_merge(project_vars, _plain(frozen.get('vars') or {}))

    def _role(self, layout, role, sc) -> ep.RoleSpec:
        tp = self._tenant_project(layout, None, role.project) if role.project else None
        if tp is not None:
            return ep.RoleSpec(connection=tp.connection, project=tp.name,
                               target_name=role.name)
        return ep.RoleSpec(connection=role.connection or sc.connection,
                           project=role.project or '', target_name=role.name)

    def _secrets(self, layout, playbook_ref, frozen) -> dict:
        """Secrets bound to the playbook's variant, decrypted."""
        out = {}
        for use in playbook_ref.secrets:
            secret = layout.secrets.get(use.name)
            if secret is None or self.keystore is None:
                continue
            sc = secret.source_context
            out[use.alias] = _decrypt(self.keystore, sc.connection, sc.project,
                                      secret.data)
        return out


def _decrypt(keystore, connection, project, value):
    from zuul.lib.yamlutil import EncryptedPKCS1OAEP, UnsafeStr, to_wire
    if isinstance(value, EncryptedPKCS1OAEP):
        # Secret values are never templated by Ansible (released behaviour).
        return to_wire(UnsafeStr(keystore.decrypt(connection, project, value.ciphertext)))
    if isinstance(value, dict):
        return {k: _decrypt(keystore, connection, project, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decrypt(keystore, connection, project, v) for v in value]
    if isinstance(value, str):
        # Plain (unencrypted) text of a secret is never templated either.
        return to_wire(UnsafeStr(value))
    return value


def _plain(value):
    """Wire form of job variables: wrappers removed, ``!unsafe`` strings
    kept unsafe (zuul.lib.yamlutil.to_wire) so Ansible never templates
    them."""
    from zuul.lib import yamlutil
    value = yamlutil.unwrap(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return yamlutil.to_wire(value)
