"""``zuul-admin config-check``, ``tenant-conf-check --src-root`` and
``show-job``: in-repo configuration loaded from local checkouts the way
the scheduler would, every project-pipeline's job graph frozen as the
scheduler does for each change (zuul/configloader/check.py), every error
printed with file, line, object and reason, and every warning; or one
job frozen for a project and branch with its inheritance path (seed
003).  With ``--tenant`` the tenant's main.yaml rules apply
(trusted/untrusted, include/exclude, shadow, limits) and each project's
checkout is found under ``--src-root`` (``<root>/<project name>``) or
named by ``NAME=DIR``; with ``--src-root`` and neither ``--tenant`` nor
checkouts, every tenant of the tenant file is checked; otherwise each
``[NAME=]DIR`` is loaded as its configuration files say, by the
released convention: ``zuul.yaml``/``zuul.d/`` make a config project,
``.zuul.yaml``/``.zuul.d/`` an untrusted project (single files: a
config project).  When no config project is among them (a project's
own repository checked alone), what it names that only the tenant's
config project can define -- a pipeline, a nodeset, a parent job, a
secret, a semaphore, a project-template -- is reported as a warning, not
an error: check with ``--tenant`` and the config project's checkout to
know.  zuul/cmd/admin.py parses
the arguments and calls ``run``."""

from __future__ import annotations

import os
import re
import sys
import urllib.parse


def run(args, out) -> int:
    """config-check or show-job (``args.command``): the exit status."""
    try:
        if args.command == 'show-job':
            layout, tenant = _load(args, out)
        else:
            return _check(args, out)
    except UsageError as e:
        print(f'zuul-admin {args.command}: {e}', file=sys.stderr)
        return 2
    except NoConfigurationError as e:
        print(f'zuul-admin {args.command}: {e}', file=out)
        return 1
    return _show_job(layout, tenant, args, out)


class UsageError(Exception):
    pass


class NoConfigurationError(Exception):
    """Nothing to check: the check fails rather than passing vacuously."""


_LOOKED_FOR = 'looked for zuul.yaml, zuul.d/, .zuul.yaml and .zuul.d/'


def _connections(args):
    """(connection -> driver, connection -> canonical hostname, zuul conf)."""
    if not args.config:
        return None, {}, None
    from zuul.configloader.zuulconf import ZuulConfError, load_zuul_conf
    try:
        conf = load_zuul_conf(args.config)
    except ZuulConfError as e:
        raise UsageError(str(e)) from None
    drivers, hostnames = {}, {}
    for name, connection in conf.connections.items():
        drivers[name] = connection.driver
        options = connection.options
        host = options.get('canonical_hostname') or options.get('server')
        if not host and options.get('baseurl'):
            host = urllib.parse.urlparse(options['baseurl']).hostname
        if host:
            hostnames[name] = host
    return drivers, hostnames, conf


def _repo_dirs(args) -> dict[str, str]:
    """NAME -> checkout directory, or -> [files] for paths that are files."""
    dirs: dict = {}
    for spec in args.repos:
        name, _, path = spec.rpartition('=')
        if os.path.isfile(path):
            parent = os.path.dirname(os.path.abspath(path))
            if os.path.basename(parent) in ('zuul.d', '.zuul.d'):
                parent = os.path.dirname(parent)
            files = dirs.setdefault(name or os.path.basename(parent), [])
            if not isinstance(files, list):
                raise UsageError(f'{path}: {name or parent} is also given as a directory')
            files.append(path)
            continue
        if not os.path.isdir(path):
            raise UsageError(f'{path}: no such file or directory')
        dirs[name or os.path.basename(os.path.abspath(path).rstrip('/'))] = path
    return dirs


def _read(tp, path, branch, extra=()):
    from zuul.configloader.layout import ConfigFile, read_repo_config
    if isinstance(path, list):
        files = []
        for name in path:
            with open(name, encoding='utf-8', errors='replace') as f:
                files.append(ConfigFile(path=name, text=f.read(), project=tp, branch=branch))
        return files, []
    _ROOTS[tp.name] = path
    return read_repo_config(path, tp, branch, extra)


# project name -> its checkout, so errors can name the file on disk
_ROOTS: dict[str, str] = {}


def _loader(args):
    from zuul.configloader.layout import LayoutLoader
    from zuul.driver.registry import default_registry
    drivers, hostnames, conf = _connections(args)
    return LayoutLoader(default_registry(), drivers, hostnames), conf


def _load(args, out):
    """The layout of one tenant (``--tenant``) or of the checkouts given:
    (layout, tenant)."""
    loader, conf = _loader(args)
    dirs = _repo_dirs(args)
    if args.tenant:
        return _load_tenant(args, loader, _tenant(args, conf), dirs)
    return _load_checkouts(args, loader, dirs)


def _load_tenant(args, loader, tenant, dirs):
    from zuul.configloader.layout import ConfigFile
    dirs = dict(dirs)
    files, file_errors = [], []
    for tp in tenant.projects:
        path = dirs.pop(tp.name, None)
        if path is None and args.src_root:
            candidate = os.path.join(args.src_root, tp.name)
            path = candidate if os.path.isdir(candidate) else None
        if path is None:
            continue
        f, e = _read(tp, path, args.branch, tp.extra_config_paths)
        files += f
        file_errors += e
    for path in tenant.include_files:
        with open(path, encoding='utf-8') as fh:
            files.append(ConfigFile(path=path, text=fh.read()))
    if dirs:
        raise UsageError(f'not projects of tenant {tenant.name}: '
                          f'{", ".join(sorted(dirs))}')
    if not files and not file_errors:
        where = f' under {args.src_root}' if args.src_root else ''
        raise NoConfigurationError(f'tenant {tenant.name}: no configuration files found in the '
                               f'checkouts of its projects{where} ({_LOOKED_FOR})')
    return loader.load(tenant, files, file_errors=file_errors), tenant


def _load_checkouts(args, loader, dirs):
    from zuul.model.tenant import Tenant, TenantProject
    if not dirs:
        raise UsageError('name at least one checkout ([NAME=]DIR), or --tenant')
    tenant = Tenant(name='')
    files, file_errors = [], []
    for name, path in dirs.items():
        tp = TenantProject(connection='', name=name, trusted=_config_project(path))
        f, e = _read(tp, path, args.branch)
        if not f and not e:
            raise NoConfigurationError(f'{path}: no configuration files found ({_LOOKED_FOR})')
        files += f
        file_errors += e
    return loader.load(None, files, file_errors=file_errors), tenant


def _config_project(path) -> bool:
    """A checkout given without a tenant is a config project when its
    configuration is ``zuul.yaml`` / ``zuul.d/`` (released convention);
    ``.zuul.yaml`` / ``.zuul.d/`` make it an untrusted project."""
    if isinstance(path, list):
        return True
    hidden = any(os.path.exists(os.path.join(path, n)) for n in ('.zuul.yaml', '.zuul.d'))
    plain = any(os.path.exists(os.path.join(path, n)) for n in ('zuul.yaml', 'zuul.d'))
    return plain or not hidden


# What only a tenant's config project (or another project) may define: a
# project checked alone names them without defining them.
_ELSEWHERE = re.compile(r'unknown (nodeset|parent|job|secret|semaphore|project-template|'
                        r'pipeline)|is neither a project attribute nor a pipeline')


def _defined_elsewhere(layout, dirs: dict) -> None:
    """Checkouts without a config project among them: references to
    what the tenant's config project defines are warnings."""
    if any(_config_project(path) for path in dirs.values()):
        return
    for error in layout.errors:
        if error.severity == 'error' and _ELSEWHERE.search(error.reason or ''):
            error.severity = 'warning'
            error.reason += (' (not in the checkouts given: the tenant\'s config project '
                             'may define it; check with --tenant and its checkout)')


def _check(args, out) -> int:
    """config-check (and tenant-conf-check --src-root): load, freeze every
    project-pipeline, report."""
    from zuul.configloader.check import FreezeStats, check_job_graphs, project_names
    loader, conf = _loader(args)
    dirs = _repo_dirs(args)
    if args.tenant:
        tenants = [_tenant(args, conf)]
    elif not dirs and args.src_root:
        tenants = list(_tenant_file(args, conf)[0].tenants.values())
        if not tenants:
            raise UsageError('the tenant file defines no tenant')
    else:
        tenants = [None]
    totals = FreezeStats()
    errors = warnings = projects = 0
    for tenant in tenants:
        alone = tenant is None
        if alone:
            layout, tenant = _load_checkouts(args, loader, dirs)
        else:
            layout, tenant = _load_tenant(args, loader, tenant, dirs)
        names = project_names(layout, tenant)
        freeze_errors, stats = check_job_graphs(layout, names, args.branch,
                                                tenant.default_parent or 'base')
        for e in freeze_errors:
            layout.errors.add(e)
        if alone:
            _defined_elsewhere(layout, dirs)
        e, w = _report(layout, tenant.name, out)
        errors += e
        warnings += w
        projects += len(names)
        totals.project_pipelines += stats.project_pipelines
        totals.jobs += stats.jobs
    print(f'{len(tenants)} tenant(s), {projects} project(s), {totals.jobs} job(s) frozen in '
          f'{totals.project_pipelines} project-pipeline(s): {errors} errors, '
          f'{warnings} warnings', file=out)
    return 1 if errors or (warnings and args.strict) else 0


def _tenant_file(args, conf):
    from zuul.configloader.tenant import load_tenant_config
    path = args.tenant_config or (conf.scheduler.tenant_config if conf else None)
    if not path:
        what = '--tenant' if args.tenant else '--src-root without checkouts'
        raise UsageError(f'{what} needs the tenant file: -c zuul.conf or --tenant-config')
    return load_tenant_config(path, set(conf.connections) if conf else None), path


def _tenant(args, conf):
    result, path = _tenant_file(args, conf)
    if args.tenant not in result.tenants:
        problems = '; '.join(str(e) for e in result.errors)
        raise UsageError(f'no tenant "{args.tenant}" in {path}' +
                          (f' ({problems})' if problems else ''))
    return result.tenants[args.tenant]


def _location(e) -> str:
    """The file on disk (so an editor can jump to it) and the line."""
    root = _ROOTS.get(e.project)
    if root and e.path and not os.path.isabs(e.path):
        return f'{os.path.join(root, e.path)}:{e.line}' if e.line else \
            os.path.join(root, e.path)
    return e.location()


def _report(layout, tenant_name: str, out) -> tuple[int, int]:
    """Print every error and warning of ``layout`` and its counts:
    (errors, warnings)."""
    errors = [e for e in layout.errors if e.severity == 'error']
    for e in layout.errors:
        what = f'{e.object_type} "{e.object_name}"' if e.object_name else e.object_type
        prefix = '' if e.severity == 'error' else f'{e.severity}: '
        print(f'{_location(e)}: {prefix}' + (f'in {what}: ' if what else '') + e.reason,
              file=out)
    projects = len(layout.project_configs) + len(layout.project_regexes)
    label = f'tenant {tenant_name}: ' if tenant_name else ''
    print(f'{label}{len(layout.pipelines)} pipelines, {len(layout.jobs)} jobs, '
          f'{len(layout.project_templates)} project-templates, {projects} projects, '
          f'{len(layout.nodesets)} nodesets, {len(layout.secrets)} secrets', file=out)
    return len(errors), len(layout.errors) - len(errors)


def _show_job(layout, tenant, args, out) -> int:
    from zuul.lib import yamlutil
    from zuul.model.freeze import FreezeError, JobFreezer
    if args.job not in layout.jobs:
        print(f'job "{args.job}" is not defined', file=out)
        return 1
    project_variants = ()
    if args.pipeline:
        ppc = layout.get_project_pipeline_config(args.project, args.pipeline, args.branch)
        if ppc is None:
            print(f'project {args.project} has no jobs in pipeline {args.pipeline}',
                  file=out)
            return 1
        project_variants = [v for v in ppc.job_list if v.name == args.job]
    freezer = JobFreezer(layout, args.branch, None, tenant.default_parent or 'base')
    try:
        frozen = freezer.freeze(args.job, project_variants)
    except FreezeError as e:
        print(f'job "{args.job}" cannot run: {e.reason}', file=out)
        return 1
    if frozen is None:
        print(f'job "{args.job}" does not run on branch {args.branch}', file=out)
        return 1
    data = frozen.to_dict()
    path = data.pop('inheritance_path')
    print('inheritance path:', file=out)
    for step in path:
        print(f'  - {step}', file=out)
    print(yamlutil.dump(data), file=out, end='')
    return 0

