"""The scheduler's answers for zuul-web's configuration views that need
more than the layout tables rpc_handlers.py lists: a project-pipeline's
job graph, the semaphores with their holders, and Nodepool's nodes.
zuul/lib/rpc_protocol.py documents each shape."""

from __future__ import annotations

from zuul.lib import rpc_protocol as p
from zuul.model.freeze import freeze_job_graph
from zuul.scheduler.semaphores import LOCK, PLAYBOOK_PREFIX


def config_view_handlers(scheduler, layouts) -> dict:
    views = ConfigViews(scheduler, layouts)
    return {p.FREEZE_JOBS: views.freeze_jobs, p.SEMAPHORE_LIST: views.semaphore_list,
            p.NODE_LIST: views.node_list}


class ConfigViews:
    def __init__(self, scheduler, layouts):
        self.scheduler = scheduler
        self.layouts = layouts

    def _layout(self, r):
        if not r.tenant:
            raise p.RPCError('a tenant is required')
        return self.scheduler.get_tenant(r.tenant).layout

    # -- job graph -------------------------------------------------------------------

    def freeze_jobs(self, r):
        layout = self._layout(r)
        if not r.pipeline:
            raise p.RPCError('a pipeline is required')
        self.scheduler.get_manager(r.tenant, r.pipeline)
        if not r.project:
            raise p.RPCError('a project is required')
        _, project = self.layouts.find_project(layout, r.project)
        branch = r.branch or layout.get_project_metadata(project)['default_branch']
        graph, errors = freeze_job_graph(layout, project, r.pipeline, branch,
                                         default_parent=layout.tenant.default_parent)
        if errors:
            raise p.RPCError('; '.join(errors))
        return [{'name': name,
                 'dependencies': [{'name': dep, 'soft': soft}
                                  for dep, soft in graph.dependencies[name]]}
                for name in graph.order]

    # -- semaphores ------------------------------------------------------------------

    def semaphore_list(self, r):
        layout = self._layout(r)
        handler = self.scheduler.semaphore_handler(r.tenant)
        defined = getattr(layout, 'semaphores', None) or {}
        out = []
        with LOCK:
            for name in sorted(set(defined) | set(handler.holders)):
                sem = defined.get(name)
                is_global = bool(getattr(sem, 'is_global', False))
                out.append({'name': name, 'global': is_global,
                            'max': handler.limit(layout, name),
                            'holders': self._holders(handler, layout, name, is_global)})
        return out

    def _holders(self, handler, layout, name, is_global) -> dict:
        shared = getattr(layout, 'global_semaphore_holders', None)
        if is_global and shared is not None:
            keys = list(shared.holders.get(name, ()))
            mine = [k for k in keys if shared.tenants.get(k) == handler.tenant_name]
        else:
            keys = list(handler.holders.get(name, ()))
            mine = keys
        return {'count': len(keys), 'this_tenant': [_holder(k) for k in mine],
                'other_tenants': len(keys) - len(mine)}

    # -- nodes -----------------------------------------------------------------------

    def _nodepool(self):
        client = getattr(getattr(self.scheduler, 'nodes', None), 'client', None)
        return getattr(client, 'zk', None)

    def node_list(self, r):
        self._layout(r)
        zk = self._nodepool()
        if zk is None:
            return []
        out = []
        for node in sorted(zk.get_nodes(), key=lambda n: n.id):
            if node.tenant_name and node.tenant_name != r.tenant:
                continue
            out.append({'id': node.id, 'type': [node.type] if node.type else [],
                        'label': node.type, 'provider': node.provider,
                        'connection_type': node.connection_type,
                        'external_id': node.external_id, 'state': node.state,
                        'state_time': node.state_time, 'comment': node.comment,
                        'hold_job': node.hold_job})
        return out


def _holder(key) -> dict:
    """A holder key as released Zuul shows it: a job's build set and job
    name, or for a playbook's semaphores the build and the playbook."""
    owner, what = key
    if what.startswith(PLAYBOOK_PREFIX):
        return {'build_uuid': owner, 'playbook': what[len(PLAYBOOK_PREFIX):]}
    return {'buildset_uuid': owner, 'job_name': what}

