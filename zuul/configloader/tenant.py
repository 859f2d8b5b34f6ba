"""main.yaml: tenants in the released v3 form (``source: <conn>:
config-projects / untrusted-projects`` with per-project options and
project groups) and the seed's form (``include: [files]``, ``source:
<conn>: repos:``). Errors name the file, line, tenant and reason.
"""

from __future__ import annotations

import os

import re2
import voluptuous as vs

from zuul.configloader import unused
from zuul.configloader.semaphore import SEMAPHORE_SCHEMA
from zuul.lib import authz, yamlutil
from zuul.model.errors import ConfigError, SourceContext
from zuul.model.semaphore import Semaphore
from zuul.model.tenant import ALL_CLASSES, PROVIDER_CLASSES, Tenant, TenantConfig, TenantProject

_str_list = vs.Any(str, [str])
_class_list = vs.Any(str, [str])

PROJECT_OPTIONS = {
    'include': _class_list, 'exclude': _class_list, 'shadow': _str_list,
    'exclude-unprotected-branches': bool, 'exclude-locked-branches': bool,
    'include-branches': _str_list, 'exclude-branches': _str_list, 'extra-config-paths': _str_list,
    'load-branch': str, 'implied-branch-matchers': bool,
    'always-dynamic-branches': _str_list, 'allow-base-jobs': bool,
    'include-provider-config': bool, 'configure-projects': _str_list,
}

_project_entry = vs.Any(str, vs.Schema({str: vs.Any(None, PROJECT_OPTIONS)}))
_group = vs.Schema({vs.Required('projects'): [vs.Any(str, dict)],
                    **{k: v for k, v in PROJECT_OPTIONS.items()}})
_project_list = [vs.Any(str, dict)]

SOURCE_SCHEMA = vs.Schema({str: {
    'config-projects': _project_list,
    'untrusted-projects': _project_list,
    'repos': _project_list,   # seed 000
}})

TENANT_SCHEMA = vs.Schema({
    vs.Required('name'): str,
    'source': SOURCE_SCHEMA,
    'include': _str_list,     # seed 000: files beside main.yaml
    'max-nodes-per-job': int, 'max-job-timeout': int,
    'exclude-unprotected-branches': bool, 'exclude-locked-branches': bool,
    'default-parent': str, 'default-ansible-version': vs.Any(str, int, float),
    'allowed-triggers': _str_list, 'allowed-reporters': _str_list,
    'allowed-labels': _str_list, 'disallowed-labels': _str_list,
    'report-build-page': bool, 'web-root': str,
    'admin-rules': _str_list, 'authentication-realm': str,
    'use-nodepool': bool, 'semaphores': _str_list,
    'access-rules': _str_list, 'max-dependencies': int,
    'max-changes-per-pipeline': int, 'image-build-credentials': dict,
    'infra-failure-patterns': _str_list, 'retry-node-failure': bool,
})
AUTHZ_RULE_SCHEMA = vs.Schema({vs.Required('name'): str,
                               vs.Required('conditions'): vs.Any(list, dict)})
API_ROOT_SCHEMA = vs.Schema({'authentication-realm': str, 'access-rules': _str_list})


class TenantConfigError(ValueError):
    pass


def _as_list(value) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _load_classes(options: dict, trusted: bool) -> frozenset:
    """Object types a project's configuration may define: ``include``
    (default: all, but for untrusted projects not the provider objects),
    plus the provider objects with ``include-provider-config: true``,
    minus ``exclude``."""
    include = options.get('include')
    exclude = options.get('exclude')
    if include is not None:
        classes = set(_as_list(include))
    else:
        classes = set(ALL_CLASSES) if trusted else set(ALL_CLASSES - PROVIDER_CLASSES)
    if options.get('include-provider-config'):
        classes |= PROVIDER_CLASSES
    classes -= set(_as_list(exclude))
    return frozenset(classes)


_REGEX_OPTIONS = ('include-branches', 'exclude-branches', 'always-dynamic-branches',
                  'configure-projects')


def _check_regexes(name: str, options: dict) -> None:
    for key in _REGEX_OPTIONS:
        for pattern in _as_list(options.get(key)):
            try:
                re2.compile(pattern)
            except re2.error as e:
                raise TenantConfigError(f'project {name}: {key}: invalid regular '
                                        f'expression "{pattern}": {e}') from None


def _tenant_project(connection: str, name: str, trusted: bool, options: dict) -> TenantProject:
    _check_regexes(name, options)
    return TenantProject(
        connection=connection, name=name, trusted=trusted,
        load_classes=_load_classes(options, trusted),
        shadow=tuple(_as_list(options.get('shadow'))),
        exclude_unprotected_branches=options.get('exclude-unprotected-branches'),
        exclude_locked_branches=options.get('exclude-locked-branches'),
        include_branches=tuple(_as_list(options.get('include-branches'))),
        exclude_branches=tuple(_as_list(options.get('exclude-branches'))),
        extra_config_paths=tuple(_as_list(options.get('extra-config-paths'))),
        load_branch=options.get('load-branch'),
        implicit_branch_matcher=options.get('implied-branch-matchers'),
        always_dynamic_branches=tuple(_as_list(options.get('always-dynamic-branches'))),
        configure_projects=tuple(_as_list(options.get('configure-projects'))))


def _projects_from_list(connection: str, entries, trusted: bool):
    """Yield TenantProjects from a config-/untrusted-projects list with its
    three spellings: a name, {name: {options}}, or a group
    {projects: [...], <options>}."""
    for entry in entries or ():
        if isinstance(entry, str):
            yield _tenant_project(connection, entry, trusted, {})
        elif 'projects' in entry:
            _group(dict(entry))
            options = {k: v for k, v in entry.items() if k != 'projects'}
            for sub in entry['projects']:
                if isinstance(sub, str):
                    yield _tenant_project(connection, sub, trusted, options)
                else:
                    for name, own in sub.items():
                        yield _tenant_project(connection, name, trusted,
                                              {**options, **(own or {})})
        else:
            _project_entry(dict(entry))
            for name, options in entry.items():
                yield _tenant_project(connection, name, trusted, options or {})


def _parse_infra_failure_keys(t: Tenant, conf: dict) -> None:
    """``infra-failure-patterns`` (RE2, checked here) and
    ``retry-node-failure`` (doc/source/reference/waste.rst)."""
    from zuul.executor.infrafailure import PatternError, compile_patterns
    patterns = _as_list(conf.get('infra-failure-patterns'))
    try:
        compile_patterns(patterns)
    except PatternError as exc:
        raise TenantConfigError(f'tenant {conf["name"]}: {exc}') from None
    t.infra_failure_patterns = patterns
    t.retry_node_failure = bool(conf.get('retry-node-failure', False))


def parse_tenant(conf: dict, connections=None) -> Tenant:
    """One ``- tenant:`` mapping -> Tenant (raises vs.Invalid or
    TenantConfigError)."""
    TENANT_SCHEMA(dict(conf))
    t = Tenant(name=conf['name'], source_line=getattr(conf, 'start_line', None))
    simple = {'max-nodes-per-job': 'max_nodes_per_job', 'max-job-timeout': 'max_job_timeout',
              'max-changes-per-pipeline': 'max_changes_per_pipeline',
              'max-dependencies': 'max_dependencies',
              'exclude-unprotected-branches': 'exclude_unprotected_branches',
              'exclude-locked-branches': 'exclude_locked_branches',
              'default-parent': 'default_parent', 'report-build-page': 'report_build_page',
              'web-root': 'web_root', 'authentication-realm': 'authentication_realm',
              'use-nodepool': 'use_nodepool'}
    for key, attr in simple.items():
        if key in conf:
            setattr(t, attr, conf[key])
    if 'default-ansible-version' in conf:
        t.default_ansible_version = str(conf['default-ansible-version'])
    for key in ('allowed-triggers', 'allowed-reporters', 'allowed-labels',
                'disallowed-labels'):
        if key in conf:
            setattr(t, key.replace('-', '_'), _as_list(conf[key]))
    t.admin_rules = _as_list(conf.get('admin-rules'))
    t.access_rules = _as_list(conf.get('access-rules'))
    t.semaphores = _as_list(conf.get('semaphores'))
    t.include_files = _as_list(conf.get('include'))
    _parse_infra_failure_keys(t, conf)
    for connection, lists in (conf.get('source') or {}).items():
        if connections is not None and connection not in connections:
            raise TenantConfigError(f'unknown connection "{connection}" in source '
                                    '(not defined in zuul.conf)')
        t.projects.extend(_projects_from_list(connection, lists.get('config-projects'), True))
        t.projects.extend(_projects_from_list(
            connection, lists.get('untrusted-projects'), False))
        t.projects.extend(_projects_from_list(connection, lists.get('repos'), False))
    seen = set()
    for p in t.projects:
        key = (p.connection, p.name)
        if key in seen:
            raise TenantConfigError(f'project {p.name} is listed twice')
        seen.add(key)
    return t


def _error(path, obj, reason, tenant=None, severity: str = 'error'):
    line = getattr(obj, 'start_line', None)
    return ConfigError(reason, path=path, line=line, object_type='tenant' if tenant else '',
                       object_name=tenant or '', severity=severity)


def load_tenant_config(path: str, connections=None) -> TenantConfig:
    """Parse main.yaml; errors are collected, valid tenants still load."""
    result = TenantConfig(path=path)
    try:
        data = yamlutil.load_file(path)
    except yamlutil.YAMLSyntaxError as e:
        result.errors.append(ConfigError(e.reason, path=path, line=e.line))
        return result
    except OSError as e:
        result.errors.append(ConfigError(f'cannot read tenant config: {e}', path=path))
        return result
    if not isinstance(data, list):
        result.errors.append(ConfigError('the tenant config must be a list of objects',
                                         path=path, line=1))
        return result
    for obj in data:
        _load_object(path, obj, result, connections)
    _grant_global_semaphores(path, result)
    _check_rule_names(path, result)
    return result


def _load_global_semaphore(path, body, result: TenantConfig) -> None:
    """A ``global-semaphore``: one semaphore whose holders are counted
    across every tenant that lists it."""
    try:
        if not isinstance(body, dict):
            raise TenantConfigError('a global-semaphore must be a mapping')
        SEMAPHORE_SCHEMA(dict(body))
        if body.get('max', 1) < 1:
            raise TenantConfigError('max must be at least 1')
    except vs.Invalid as e:
        where = '.'.join(str(p) for p in e.path)
        result.errors.append(_error(path, body, f'global-semaphore: {e.msg} "{where}"'))
        return
    except TenantConfigError as e:
        result.errors.append(_error(path, body, f'global-semaphore: {e}'))
        return
    name = body['name']
    if name in result.global_semaphores:
        result.errors.append(_error(path, body, f'global-semaphore "{name}" defined twice'))
        return
    result.global_semaphores[name] = Semaphore(
        name=name, source_context=SourceContext(path=path, trusted=True),
        start_line=getattr(body, 'start_line', None), max=body.get('max', 1),
        is_global=True)


def _load_authz_rule(path, kind, body, result: TenantConfig) -> None:
    """An ``authorization-rule`` (or its older name ``admin-rule``): a
    named list of conditions on a token's claims (zuul/lib/authz.py)."""
    try:
        if not isinstance(body, dict):
            raise TenantConfigError('it must be a mapping with name and conditions')
        AUTHZ_RULE_SCHEMA(dict(body))
        conditions = authz.check_conditions(body['conditions'])
    except vs.Invalid as e:
        where = '.'.join(str(p) for p in e.path)
        result.errors.append(_error(path, body, f'{kind}: {e.msg} "{where}"'))
        return
    except (TenantConfigError, authz.RuleError) as e:
        result.errors.append(_error(path, body, f'{kind}: {e}'))
        return
    name = body['name']
    if name in result.admin_rules:
        result.errors.append(_error(path, body, f'{kind} "{name}" defined twice'))
        return
    result.admin_rules[name] = conditions


def _load_api_root(path, body, result: TenantConfig) -> None:
    """The one ``api-root`` object: access rules and realm of the API
    outside any tenant (the tenant list)."""
    if result.api_root is not None:
        result.errors.append(_error(path, body, 'api-root: defined more than once'))
        return
    try:
        API_ROOT_SCHEMA(dict(body or {}))
    except (vs.Invalid, TypeError, ValueError) as e:
        result.errors.append(_error(path, body, f'api-root: {getattr(e, "msg", e)}'))
        return
    result.api_root = {'access_rules': _as_list((body or {}).get('access-rules')),
                       'authentication_realm': (body or {}).get('authentication-realm'),
                       'source_line': getattr(body, 'start_line', None)}


def _check_rule_names(path, result: TenantConfig) -> None:
    """A tenant's (or the api-root's) ``admin-rules``/``access-rules``
    must name rules of the file; an unknown one is an error (and matches
    nobody, so it never opens anything)."""
    owners = [(f'tenant {t.name}', t.source_line, {'admin-rules': t.admin_rules,
                                                   'access-rules': t.access_rules})
              for t in result.tenants.values()]
    if result.api_root is not None:
        owners.append(('api-root', result.api_root['source_line'],
                       {'access-rules': result.api_root['access_rules']}))
    for owner, line, lists in owners:
        for key, names in lists.items():
            for name in names:
                if name not in result.admin_rules:
                    result.errors.append(ConfigError(
                        f'{owner}: {key}: unknown authorization-rule "{name}"', path=path,
                        line=line))


def _grant_global_semaphores(path, result: TenantConfig) -> None:
    """Give each tenant the global semaphores its ``semaphores`` names
    (they may be defined anywhere in the file); an unknown name is an
    error of that tenant."""
    for tenant in result.tenants.values():
        for name in tenant.semaphores:
            sem = result.global_semaphores.get(name)
            if sem is None:
                result.errors.append(ConfigError(
                    f'semaphores: unknown global-semaphore "{name}"', path=path,
                    line=tenant.source_line, object_type='tenant', object_name=tenant.name))
                continue
            tenant.global_semaphores[name] = sem


def _load_object(path, obj, result: TenantConfig, connections) -> None:
    if not isinstance(obj, dict) or len(obj) != 1:
        result.errors.append(_error(path, obj, 'each entry must be a single-key mapping '
                                               '(tenant, admin-rule, ...)'))
        return
    kind, body = next(iter(obj.items()))
    if kind == 'global-semaphore':
        _load_global_semaphore(path, body, result)
        return
    if kind in unused.TENANT_OBJECTS:
        result.warnings.append(_error(path, body, f'{kind}: {unused.TENANT_OBJECTS[kind]}',
                                      severity='warning'))
    if kind in ('admin-rule', 'authorization-rule'):
        _load_authz_rule(path, kind, body, result)
        return
    if kind == 'api-root':
        _load_api_root(path, body, result)
        return
    if kind != 'tenant':
        result.errors.append(_error(path, obj, f'unknown object type "{kind}"'))
        return
    name = (body or {}).get('name') if isinstance(body, dict) else None
    for warning in unused.tenant_warnings(body):
        result.warnings.append(_error(path, body, f'tenant {name}: {warning}',
                                      severity='warning'))
    try:
        if not isinstance(body, dict):
            raise TenantConfigError('a tenant must be a mapping')
        tenant = parse_tenant(body, connections)
    except vs.Invalid as e:
        where = '.'.join(str(p) for p in e.path)
        msg = 'unknown attribute' if e.msg == 'extra keys not allowed' else e.msg
        reason = f'{msg} "{where}"' if where else msg
        if e.msg == 'required key not provided':
            reason = f'required attribute "{where}" missing'
        result.errors.append(_error(path, body, reason, name or '<unnamed>'))
        return
    except TenantConfigError as e:
        result.errors.append(_error(path, body, str(e), name))
        return
    if tenant.name in result.tenants:
        result.errors.append(_error(path, body, f'tenant "{tenant.name}" defined twice',
                                    tenant.name))
        return
    base = os.path.dirname(os.path.abspath(path))
    tenant.include_files = [f if os.path.isabs(f) else os.path.join(base, f)
                            for f in tenant.include_files]
    result.tenants[tenant.name] = tenant


def tenant_conf_check(zuul_conf_path: str, out=None) -> int:
    """``zuul-admin tenant-conf-check``: load zuul.conf and its tenant
    config; print each error as ``file:line: message``; 0 when clean."""
    import sys

    from zuul.configloader.zuulconf import ZuulConfError, load_zuul_conf
    out = out or sys.stdout
    try:
        conf = load_zuul_conf(zuul_conf_path)
    except ZuulConfError as e:
        print(str(e), file=out)
        return 1
    if not conf.scheduler.tenant_config:
        print(f'{zuul_conf_path}: [scheduler] tenant_config is not set', file=out)
        return 1
    result = load_tenant_config(conf.scheduler.tenant_config, set(conf.connections))
    for error in result.errors:
        print(str(error), file=out)
    drivers = {name: c.driver for name, c in conf.connections.items()}
    for warning in result.warnings + unprotected_branch_warnings(result, drivers):
        print(f'warning: {warning}', file=out)
    for warning in unused.zuul_conf_warnings(zuul_conf_path):
        print(f'warning: {warning}', file=out)
    if result.errors:
        return 1
    print(f'{conf.scheduler.tenant_config}: {len(result.tenants)} tenant(s) OK', file=out)
    return 0


def unprotected_branch_warnings(result: TenantConfig, connection_drivers: dict,
                                registry=None) -> list[ConfigError]:
    """``exclude-unprotected-branches`` acts only on connections whose
    code-review system has branch protection (GitHub and GitLab in released
    Zuul; a driver says so with ``supports_branch_protection``). Gerrit and
    plain git have none: there the setting changes nothing and every branch
    is loaded. One warning per tenant and such connection."""
    if registry is None:
        from zuul.driver.registry import default_registry
        registry = default_registry()
    out = []
    for tenant in result.tenants.values():
        seen = set()
        for tp in tenant.projects:
            wanted = tp.exclude_unprotected_branches
            if wanted is None:
                wanted = tenant.exclude_unprotected_branches
            driver_name = connection_drivers.get(tp.connection, tp.connection)
            driver = registry.get(driver_name) if driver_name in registry else None
            if not wanted or getattr(driver, 'supports_branch_protection', False) or \
                    tp.connection in seen:
                continue
            seen.add(tp.connection)
            out.append(ConfigError(
                f'exclude-unprotected-branches acts only on connections with branch '
                f'protection; connection "{tp.connection}" (driver {driver_name}) has '
                'none, so all of its branches are loaded', path=result.path,
                line=tenant.source_line, object_type='tenant', object_name=tenant.name,
                severity='warning'))
    return out
