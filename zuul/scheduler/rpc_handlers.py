"""The scheduler's answers to the ``zuul:*`` RPC functions
(zuul/lib/rpc_protocol.py documents each shape). Requests that touch
queues go through the scheduler's management queue; the read-only ones
read the current (immutable) tenant layout directly."""

from __future__ import annotations

import re

from zuul.lib import rpc_protocol as p
from zuul.model.errors import UnknownNameError
from zuul.model.freeze import FreezeError, JobFreezer

_CHANGE = re.compile(r'^\d+,(\d+|[0-9a-f]{7,40})$')   # N,P or a pull request's N,SHA


def handlers(scheduler, layouts, keystore=None) -> dict:
    h = _Handlers(scheduler, layouts, keystore)
    table = {
        p.ENQUEUE: h.enqueue, p.ENQUEUE_REF: h.enqueue_ref, p.DEQUEUE: h.dequeue,
        p.PROMOTE: h.promote, p.STATUS_GET: h.status_get, p.TENANT_LIST: h.tenant_list,
        p.KEY_GET: h.key_get, p.JOB_LIST: h.job_list, p.JOB_GET: h.job_get,
        p.PROJECT_LIST: h.project_list, p.PROJECT_GET: h.project_get,
        p.CONFIG_ERRORS: h.config_errors, p.RECONFIGURE: h.reconfigure,
        p.AUTOHOLD: h.autohold, p.AUTOHOLD_LIST: h.autohold_list,
        p.AUTOHOLD_DELETE: h.autohold_delete, p.AUTH_RULES: h.auth_rules,
        p.PROJECT_SSH_KEY_GET: h.project_ssh_key_get,
    }
    table.update(launcher_handlers(h._layout))
    table[p.LAUNCHER_LABEL_LIST] = label_handler(scheduler, h._layout)
    table.update(semaphore_handlers(scheduler))
    from zuul.scheduler.config_views import config_view_handlers
    table.update(config_view_handlers(scheduler, layouts))
    from zuul.scheduler.images import image_handlers
    table.update(image_handlers(scheduler))
    return table


def launcher_handlers(layout_of) -> dict:
    """The ``zuul:launcher_*_list`` functions: ``layout_of(request)``
    gives the tenant's layout (raising for an unknown tenant)."""
    from zuul.configloader.launcher_objects import object_summaries

    def make(kind):
        return lambda request: object_summaries(layout_of(request), kind)
    return {function: make(kind) for function, kind in p.LAUNCHER_LISTS.items()}


def served_labels(scheduler) -> dict[str, list[str]]:
    """Label -> the nodepool-launcher pools (``provider/pool``) that
    registered it: what the launchers serve right now."""
    zk = getattr(getattr(getattr(scheduler, 'nodes', None), 'client', None), 'zk', None)
    if zk is None:
        return {}
    served: dict[str, set] = {}
    try:
        launchers = zk.get_launchers()
    except Exception:  # ZooKeeper away: the config's labels still list
        return {}
    for launcher in launchers:
        where = f'{launcher.provider}/{launcher.pool}' if launcher.pool else launcher.provider
        for label in launcher.supported_labels or ():
            served.setdefault(label, set()).add(where or launcher.hostname)
    return {label: sorted(pools) for label, pools in served.items()}


def label_handler(scheduler, layout_of):
    """``zuul:launcher_label_list``: the tenant's ``label`` objects (seed
    001) and, as released Zuul lists them, the labels nodepool launchers
    serve (those the tenant's allowed-labels/disallowed-labels let it
    use), each with the launcher pools serving it."""
    from zuul.configloader.launcher_objects import object_summaries
    from zuul.configloader.layout import _label_problem

    def labels(request):
        layout = layout_of(request)
        out = object_summaries(layout, 'labels')
        by_name = {entry['name']: entry for entry in out}
        tenant = getattr(layout, 'tenant', None)
        for name, pools in sorted(served_labels(scheduler).items()):
            if tenant is not None and _label_problem(tenant, name):
                continue
            entry = by_name.get(name)
            if entry is None:
                entry = by_name[name] = {'name': name}
                out.append(entry)
            entry['launchers'] = pools
        return sorted(out, key=lambda e: e['name'])
    return labels


def semaphore_handlers(scheduler) -> dict:
    """``zuul:semaphore_acquire``/``_release`` for playbook semaphores."""
    from zuul.scheduler import semaphores

    def key_of(r):
        if not r.tenant or not r.build or not r.playbook:
            raise p.RPCError('a tenant, a build and a playbook are required')
        return semaphores.playbook_holder_key(r.build, r.playbook)

    def acquire(r):
        key = key_of(r)
        layout = scheduler.get_tenant(r.tenant).layout
        if not r.semaphores:
            raise p.RPCError('no semaphores to acquire')
        handler = scheduler.semaphore_handler(r.tenant)
        if handler.acquire_key(layout, key, r.semaphores):
            return {'acquired': True, 'waiting_for': []}
        return {'acquired': False, 'waiting_for': handler.blocking(layout, key, r.semaphores)}

    def release(r):
        key = key_of(r)
        scheduler.get_tenant(r.tenant)
        return {'released': scheduler.semaphore_handler(r.tenant).release_key(key)}
    return {p.SEMAPHORE_ACQUIRE: acquire, p.SEMAPHORE_RELEASE: release}


def _source_context(sc) -> dict | None:
    if sc is None:
        return None
    return {'project': sc.project, 'branch': sc.branch, 'path': sc.path}


def _names(values) -> list[str]:
    out = []
    for v in values or ():
        out.append(getattr(v, 'path', None) or getattr(v, 'name', None) or str(v))
    return out


def variant_dict(job) -> dict:
    a = job.attributes
    nodeset = a.get('nodeset')
    return {
        'name': job.name, 'parent': job.parent, 'description': a.get('description'),
        'branches': list(job.branch_patterns),
        'source_context': _source_context(job.source_context),
        'abstract': job.abstract, 'final': job.final, 'protected': job.protected,
        'voting': a.get('voting', True), 'timeout': a.get('timeout'),
        'attempts': a.get('attempts', 3),
        'nodeset': nodeset if isinstance(nodeset, (str, dict)) or nodeset is None
        else {'nodes': nodeset},
        'run': _names(a.get('run')), 'pre_run': _names(a.get('pre_run')),
        'post_run': _names(a.get('post_run')),
        'roles': [{'project': r.project, 'name': r.name} for r in a.get('roles') or ()],
        'required_projects': _names(a.get('required_projects')),
        'dependencies': _names(a.get('dependencies')),
        'variables': _shown(a.get('vars') or {}),
        'secrets': [s.alias for s in job.secrets],
        'semaphores': list(a.get('semaphores') or ()),
        'tags': list(a.get('tags') or ()), 'files': list(a.get('files') or ()),
        'irrelevant_files': list(a.get('irrelevant_files') or ()),
    }


def _shown(value):
    """Variables as the API shows them: the values as written (an unsafe
    string, which Ansible will not template, is still just its text)."""
    from zuul.lib import yamlutil
    value = yamlutil.unwrap(value)
    if isinstance(value, dict):
        return {k: _shown(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_shown(v) for v in value]
    return str(value) if isinstance(value, str) else value


class _Handlers:
    def __init__(self, scheduler, layouts, keystore):
        self.scheduler = scheduler
        self.layouts = layouts
        self.keystore = keystore
        from zuul.zk.keys import ZooKeeperKeyStore
        from zuul.zk.ssh_keys import ProjectSshKeys
        self.ssh_keys = ProjectSshKeys(keystore) \
            if isinstance(keystore, ZooKeeperKeyStore) else None

    # -- helpers --------------------------------------------------------------

    def _tenant(self, request):
        if not request.tenant:
            raise p.RPCError('a tenant is required')
        return self.scheduler.get_tenant(request.tenant)

    def _layout(self, request):
        return self._tenant(request).layout

    def _project(self, layout, name):
        if not name:
            raise p.RPCError('a project is required')
        return self.layouts.find_project(layout, name)

    @staticmethod
    def _change(spec):
        if not spec or not _CHANGE.match(spec):
            raise p.RPCError(f'Malformed change "{spec}": expected N,P (change number, '
                             'patchset number) or, for a GitHub pull request, N,SHA')
        return spec

    # -- queue requests ---------------------------------------------------------

    def enqueue(self, r):
        state = self._tenant(r)
        self.scheduler.get_manager(r.tenant, r.pipeline)
        _, project = self._project(state.layout, r.project)
        self._change(r.change)
        self.scheduler.management('enqueue', tenant=r.tenant, pipeline=r.pipeline,
                                  project=project, change=r.change)
        return {'tenant': r.tenant, 'pipeline': r.pipeline, 'project': project,
                'change': r.change}

    def enqueue_ref(self, r):
        state = self._tenant(r)
        self.scheduler.get_manager(r.tenant, r.pipeline)
        _, project = self._project(state.layout, r.project)
        if not r.ref:
            raise p.RPCError('a ref is required')
        self.scheduler.management('enqueue_ref', tenant=r.tenant, pipeline=r.pipeline,
                                  project=project, ref=r.ref,
                                  oldrev=r.oldrev or '0' * 40, newrev=r.newrev)
        return {'tenant': r.tenant, 'pipeline': r.pipeline, 'project': project,
                'ref': r.ref}

    def dequeue(self, r):
        state = self._tenant(r)
        self.scheduler.get_manager(r.tenant, r.pipeline)
        _, project = self._project(state.layout, r.project)
        if r.change:
            self._change(r.change)
        try:
            self.scheduler.management('dequeue', tenant=r.tenant, pipeline=r.pipeline,
                                      project=project, change=r.change, ref=r.ref)
        except UnknownNameError:
            raise UnknownNameError(f'Change {r.change or r.ref} not found in pipeline '
                                   f'{r.pipeline}') from None
        return {'tenant': r.tenant, 'pipeline': r.pipeline, 'project': project,
                'dequeued': r.change or r.ref}

    def promote(self, r):
        self._tenant(r)
        self.scheduler.get_manager(r.tenant, r.pipeline)
        for change in r.changes:
            self._change(change)
        self.scheduler.management('promote', tenant=r.tenant, pipeline=r.pipeline,
                                  changes=list(r.changes))
        return {'tenant': r.tenant, 'pipeline': r.pipeline, 'promoted': list(r.changes)}

    def status_get(self, r):
        self._tenant(r)
        return self.scheduler.management('status_get', tenant=r.tenant)

    def tenant_list(self, r):
        return self.scheduler.management('tenant_list')

    def reconfigure(self, r):
        tenants = [r.tenant] if r.tenant else None
        if r.tenant:
            self._tenant(r)
        self.scheduler.management('reconfigure', tenants=tenants, timeout=600)
        return {'reconfigured': tenants or sorted(self.scheduler.tenants)}

    def autohold(self, r):
        from zuul.scheduler.autohold import AutoholdRequest
        state = self._tenant(r)
        _, project = self._project(state.layout, r.project)
        if not r.job or r.job not in state.layout.jobs:
            raise UnknownNameError(f'Unknown job "{r.job}" in tenant "{r.tenant}"')
        if r.change:
            number = self._change(r.change).split(',')[0]
            ref_filter = f'refs/changes/{int(number) % 100:02d}/{number}/.*'
        else:
            ref_filter = r.ref or '.*'
        try:
            request = self.scheduler.autoholds.add(AutoholdRequest(
                tenant=r.tenant, project=project, job=r.job, ref_filter=ref_filter,
                reason=r.reason, max_count=r.count,
                node_hold_expiration=r.node_hold_expiration))
        except ValueError as e:
            raise p.RPCError(str(e)) from None
        return {'id': request.id, 'tenant': r.tenant, 'project': project, 'job': r.job,
                'ref_filter': ref_filter, 'count': request.max_count}

    def autohold_list(self, r):
        self._tenant(r)
        return [{'id': h.id, 'tenant': h.tenant, 'project': h.project, 'job': h.job,
                 'ref_filter': h.ref_filter, 'reason': h.reason, 'max_count': h.max_count,
                 'current_count': h.current_count,
                 'node_hold_expiration': h.node_hold_expiration, 'nodes': list(h.nodes)}
                for h in self.scheduler.autoholds.list(r.tenant)]

    def autohold_delete(self, r):
        self._tenant(r)
        store = self.scheduler.autoholds
        request = next((h for h in store.list(r.tenant) if h.id == r.build), None)
        if request is None:
            raise UnknownNameError(f'Unknown autohold request "{r.build}" in tenant '
                                   f'"{r.tenant}"')
        # AutoholdStore has no removal of its own yet: drop the cached
        # request and its ZooKeeper node under the store's lock.
        from zuul.scheduler.autohold import ROOT
        with store.lock:
            store.requests.pop(request.id, None)
            if store.zk is not None and store.zk.exists(f'{ROOT}/{request.id}'):
                store.zk.delete(f'{ROOT}/{request.id}')
        return {'id': request.id, 'tenant': r.tenant}

    def auth_rules(self, r):
        config = self.layouts.tenant_config
        tenants = config.tenants if config is not None else {}
        return {
            'tenants': {name: {'admin_rules': list(t.admin_rules),
                               'access_rules': list(t.access_rules),
                               'authentication_realm': t.authentication_realm}
                        for name, t in tenants.items() if name in self.scheduler.tenants},
            'rules': dict(config.admin_rules) if config is not None else {},
            'api_root': None if config is None or config.api_root is None else {
                'access_rules': list(config.api_root['access_rules']),
                'authentication_realm': config.api_root['authentication_realm']},
        }

    # -- read-only views of the layout ---------------------------------------------

    def key_get(self, r):
        layout = self._layout(r)
        connection, project = self._project(layout, r.project)
        if self.keystore is None:
            raise p.RPCError('this scheduler has no key store')
        return self.keystore.get_public_key_pem(connection, project)

    def project_ssh_key_get(self, r):
        layout = self._layout(r)
        connection, project = self._project(layout, r.project)
        if self.ssh_keys is None:
            raise p.RPCError('this scheduler keeps no project keys in ZooKeeper')
        return self.ssh_keys.public_key(connection, project) + '\n'

    def job_list(self, r):
        layout = self._layout(r)
        out = []
        for name in sorted(layout.jobs):
            variants = layout.jobs[name]
            out.append({
                'name': name,
                'description': next((v.attributes.get('description') for v in variants
                                     if v.attributes.get('description')), None),
                'tags': sorted({t for v in variants for t in v.attributes.get('tags') or ()}),
                'variants': [{'parent': v.parent, 'branches': list(v.branch_patterns),
                              'source_context': _source_context(v.source_context)}
                             for v in variants]})
        return out

    def job_get(self, r):
        layout = self._layout(r)
        if not r.job or r.job not in layout.jobs:
            raise UnknownNameError(f'Unknown job "{r.job}" in tenant "{r.tenant}"')
        if not r.project:
            return [variant_dict(v) for v in layout.jobs[r.job]]
        _, project = self._project(layout, r.project)
        branch = r.branch or layout.get_project_metadata(project)['default_branch']
        project_variants = ()
        if r.pipeline:
            self.scheduler.get_manager(r.tenant, r.pipeline)
            ppc = layout.get_project_pipeline_config(project, r.pipeline, branch)
            project_variants = [v for v in (ppc.job_list if ppc else ()) if v.name == r.job]
        try:
            frozen = JobFreezer(layout, branch, None, layout.tenant.default_parent).freeze(
                r.job, project_variants)
        except FreezeError as e:
            raise p.RPCError(e.reason) from None
        if frozen is None:
            raise p.RPCError(f'Job "{r.job}" does not run on branch {branch} of {project}')
        merged = variant_dict(frozen.variants[-1]) if frozen.variants else {}
        for key, value in frozen.to_dict().items():
            key = 'variables' if key == 'vars' else key   # the variant dict's name
            if key in merged and key not in ('name', 'source_context', 'branches'):
                merged[key] = value
        return {'job': r.job, 'project': project, 'branch': branch, 'pipeline': r.pipeline,
                'inheritance_path': list(frozen.inheritance_path), 'frozen': merged}

    def _project_entry(self, layout, tp) -> dict:
        host = self.layouts.canonical_hostnames.get(tp.connection, tp.connection)
        return {'name': tp.name, 'canonical_name': f'{host}/{tp.name}',
                'connection_name': tp.connection,
                'type': 'config' if tp.trusted else 'untrusted'}

    def project_list(self, r):
        layout = self._layout(r)
        return sorted((self._project_entry(layout, tp) for tp in layout.tenant.projects),
                      key=lambda e: e['name'])

    def project_get(self, r):
        layout = self._layout(r)
        connection, project = self._project(layout, r.project)
        tp = next(t for t in layout.tenant.projects
                  if t.connection == connection and t.name == project)
        entry = self._project_entry(layout, tp)
        meta = layout.get_project_metadata(project)
        entry['configs'] = [{
            'source_context': _source_context(c.source_context),
            'templates': list(c.templates),
            'default_branch': c.default_branch or meta['default_branch'],
            'merge_mode': c.merge_mode or meta['merge_mode'],
            'pipelines': [{'name': name, 'queue_name': ppc.queue_name,
                           'jobs': [[variant_dict(j)] for j in ppc.job_list]}
                          for name, ppc in c.pipelines.items()],
        } for c in layout.get_project_configs(project)]
        return entry

    def config_errors(self, r):
        layout = self._layout(r)
        out = []
        for e in layout.errors:
            out.append({'source_context': {'project': e.project, 'branch': e.branch,
                                           'path': e.path} if e.path else None,
                        'line': e.line, 'error': str(e), 'short_error': e.reason,
                        'severity': e.severity})
        return out
