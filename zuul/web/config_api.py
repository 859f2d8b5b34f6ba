"""zuul-web's configuration views under /api/tenant/<t>/ that the
config pages read (zuul/web/static/{jobs,job,projects,project,...}.js):

    info                     the tenant's capabilities (released shape)
    config-errors            ?project=&branch=&severity=&limit=&skip=
    semaphores               each semaphore with its holders
    nodes                    Nodepool's nodes (not those of other tenants)
    autohold                 ?project= (the hold requests of one project)
    pipeline/<p>/project/<project>/branch/<branch>/freeze-jobs
                             the project-pipeline's job graph
    project-ssh-key/<project>.pub

The listing endpoints the views also use (jobs, job/<name>, projects,
project/<name>, labels, pipelines, key/<project>.pub) stay in api.py.
ZuulWebAPI checks the tenant's access rules before any of these run.
"""

from __future__ import annotations

from zuul.lib import rpc_protocol as p
from zuul.web.errors import HTTPError, TextResult, int_param

SEVERITIES = ('error', 'warning')
CONFIG_ERROR_FILTERS = ('project', 'branch', 'severity', 'limit', 'skip')


def _single(kw, name):
    value = kw.get(name)
    if isinstance(value, list):
        raise HTTPError(400, f'give {name} once')
    return value or None


def _unexpected(kw, allowed=()):
    unknown = set(kw) - set(allowed)
    if unknown:
        raise HTTPError(400, f'unexpected parameter(s): {", ".join(sorted(unknown))}')


def _short_project(name: str) -> str:
    """``review.example.com/org/project`` -> ``org/project``."""
    head, _, rest = name.partition('/')
    return rest if rest and '.' in head else name


class ConfigViewsAPI:
    """``route`` answers the paths above, or None for any other path."""

    def __init__(self, api):
        self.api = api   # the ZuulWebAPI (RPC calls, tenant checks, auth info)

    def route(self, tenant: str, what: str, rest: list[str], kw: dict):
        if not rest:
            plain = {'info': self.info, 'config-errors': self.config_errors,
                     'semaphores': self.semaphores, 'nodes': self.nodes,
                     'autohold': self.autoholds}
            if what in plain:
                return plain[what](tenant, kw)
            return None
        if what == 'pipeline':
            return self.freeze_jobs(tenant, rest, kw)
        if what == 'project-ssh-key':
            return self.project_ssh_key(tenant, rest, kw)
        return None

    def info(self, tenant, kw):
        _unexpected(kw)
        self.api._check_tenant(tenant)
        auth = self.api._auth_info()
        if self.api.enforce_access:
            rules = self.api.access_policy().fetch_rules()
            realm = ((rules.get('tenants') or {}).get(tenant) or {}).get(
                'authentication_realm')
            if realm:
                auth['default_realm'] = realm
        return {'info': {'capabilities': {'job_history': self.api.history is not None,
                                          'auth': auth},
                         'tenant': tenant}}

    def config_errors(self, tenant, kw):
        _unexpected(kw, CONFIG_ERROR_FILTERS)
        project, branch = _single(kw, 'project'), _single(kw, 'branch')
        severity = _single(kw, 'severity')
        if severity is not None and severity not in SEVERITIES:
            raise HTTPError(400, f'severity must be one of {", ".join(SEVERITIES)}, '
                                 f'not "{severity}"')
        _single(kw, 'limit'), _single(kw, 'skip')
        limit = int_param(kw, 'limit', None, 1, 10000)
        skip = int_param(kw, 'skip', 0, 0, 10 ** 6)
        errors = self.api._call(p.CONFIG_ERRORS, tenant=tenant)
        if project is not None:
            short = _short_project(project)
            errors = [e for e in errors if (e.get('source_context') or {}).get('project')
                      in (project, short)]
        if branch is not None:
            errors = [e for e in errors
                      if (e.get('source_context') or {}).get('branch') == branch]
        if severity is not None:
            errors = [e for e in errors if (e.get('severity') or 'error') == severity]
        errors = errors[skip:]
        return errors if limit is None else errors[:limit]

    def semaphores(self, tenant, kw):
        _unexpected(kw)
        return self.api._call(p.SEMAPHORE_LIST, tenant=tenant)

    def nodes(self, tenant, kw):
        _unexpected(kw)
        return self.api._call(p.NODE_LIST, tenant=tenant)

    def autoholds(self, tenant, kw):
        _unexpected(kw, ('project',))
        project = _single(kw, 'project')
        holds = self.api._call(p.AUTOHOLD_LIST, tenant=tenant)
        if project is None:
            return holds
        wanted = {project, _short_project(project)}
        return [h for h in holds if h['project'] in wanted
                or _short_project(h['project']) in wanted]

    def freeze_jobs(self, tenant, rest, kw):
        """``pipeline/<p>/project/<name...>/branch/<branch...>/freeze-jobs``."""
        _unexpected(kw)
        if len(rest) < 6 or rest[1] != 'project' or rest[-1] != 'freeze-jobs' \
                or 'branch' not in rest[3:-2]:
            raise HTTPError(404, 'no such endpoint: /api/tenant/{}/pipeline/{}'.format(
                tenant, '/'.join(rest)))
        at = rest.index('branch', 3)
        project, branch = '/'.join(rest[2:at]), '/'.join(rest[at + 1:-1])
        if not project or not branch:
            raise HTTPError(400, 'a project and a branch are required')
        return self.api._call(p.FREEZE_JOBS, tenant=tenant, pipeline=rest[0],
                              project=project, branch=branch)

    def project_ssh_key(self, tenant, rest, kw):
        _unexpected(kw)
        name = '/'.join(rest)
        if not name.endswith('.pub') or name == '.pub':
            raise HTTPError(404, 'the key URL is project-ssh-key/<project>.pub')
        return TextResult(self.api._call(p.PROJECT_SSH_KEY_GET, tenant=tenant,
                                         project=name[:-len('.pub')]))

