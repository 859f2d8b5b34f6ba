"""``zuul-admin``: offline administration commands.

- ``tenant-conf-check``: validate zuul.conf and the tenant file it names;
  with ``--src-root``, then check every tenant of it as ``config-check``
  does.
- ``config-check``: load in-repo configuration from local checkouts the
  way the scheduler would, freeze the job graph of every project-pipeline
  as the scheduler does for each change (zuul/configloader/check.py), and
  print every error with file, line, object and reason, and every
  warning. With ``--tenant`` the tenant's main.yaml rules apply
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
  know.

Exit status: 0 clean (warnings allowed unless ``--strict``); 1 errors
(or warnings with ``--strict``, or no configuration files at all); 2 a
usage error (a missing path, an unknown tenant, an unreadable zuul.conf).
- ``show-job``: freeze a job for a project and branch from the same
  checkouts and print the result and its inheritance path (seed 003).
- ``export-keys PATH``, ``import-keys [--force] PATH``, ``delete-keys
  CONNECTION PROJECT``: the projects' secret keys in ZooKeeper (zuul.conf's
  ``[zookeeper]`` and ``[keystore] password``; zuul/zk/keys.py). Exit
  status 0 done; 1 it failed (ZooKeeper unreachable, a file that is not a
  key export, a key the password does not open, a different key already
  stored without ``--force``, no key to delete); 2 a usage error (an
  unreadable zuul.conf or key file).
- ``create-auth-token --auth-config NAME --user U [--tenant T]
  [--expires-in S]``: print ``Bearer <token>``, a token signed by the
  ``[auth NAME]`` authenticator of zuul.conf (HS256, or RS256 with a
  private_key) for user U, with ``zuul.admin: [T]`` when a tenant is given
  (it acts where that authenticator has ``allow_authz_override=true``),
  valid S seconds (600 by default). Exit status 1 when the authenticator
  is missing or cannot sign, 2 for an unreadable zuul.conf.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import urllib.parse

from zuul.cmd import DEFAULT_CONFIG


def _config_option(parser, default) -> None:
    parser.add_argument('-c', '--connections', dest='config', default=default,
                        help=f'zuul.conf (default {DEFAULT_CONFIG} for tenant-conf-check '
                        'and the *-keys commands)')


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog='zuul-admin', description=__doc__.split('\n')[0])
    # -c goes before the command, as released Zuul documents it
    # (``zuul-admin -c zuul.conf tenant-conf-check``), or after it: each
    # command takes it too, without overriding one given before.
    _config_option(parser, None)
    sub = parser.add_subparsers(dest='command', required=True)
    tcc = sub.add_parser('tenant-conf-check', help='validate the tenant configuration file')
    _config_option(tcc, argparse.SUPPRESS)
    tcc.add_argument('--src-root', help='also check every tenant from the checkouts under '
                     'this directory (<root>/<project name>), as config-check does')
    tcc.add_argument('--branch', default='master', help='branch the checkouts are on')
    tcc.add_argument('--strict', action='store_true', help='warnings fail the check too')

    def repo_options(p, job=False):
        if job:
            # One positional list (argparse cannot split JOB from the
            # checkouts when options come between them).
            p.add_argument('repos', nargs='+', metavar='JOB [NAME=]DIR',
                           help='the job, then checkouts of projects')
        else:
            p.add_argument('repos', nargs='*', metavar='[NAME=]PATH',
                           help='a checkout of a project, or a configuration file (NAME '
                           'defaults to the directory name)')
        p.add_argument('--tenant', help='load as this tenant of main.yaml (needs -c or '
                       '--tenant-config)')
        p.add_argument('--tenant-config', help='main.yaml (default: from zuul.conf)')
        p.add_argument('--src-root', help='directory holding checkouts as <root>/<project>')
        p.add_argument('--branch', default='master', help='branch the checkouts are on')
        _config_option(p, argparse.SUPPRESS)

    check = sub.add_parser('config-check', help='load in-repo configuration and report '
                           'errors')
    repo_options(check)
    check.add_argument('--warnings', action='store_true',
                       help='accepted for compatibility: warnings are always printed')
    check.add_argument('--strict', action='store_true', help='warnings fail the check too')

    show = sub.add_parser('show-job', help='freeze a job for a project and print it')
    show.add_argument('--project', required=True)
    show.add_argument('--pipeline', help='apply this pipeline\'s project-pipeline '
                      'variants')
    repo_options(show, job=True)
    _key_commands(sub)
    token = sub.add_parser('create-auth-token', help='print a bearer token for zuul-web')
    token.add_argument('--auth-config', required=True,
                       help='the [auth NAME] section of zuul.conf that signs the token')
    token.add_argument('--user', required=True, help="the user's name (the sub claim)")
    token.add_argument('--tenant', help='add the zuul.admin claim for this tenant')
    token.add_argument('--expires-in', type=int, default=600,
                       help='seconds the token is valid (default 600)')
    _config_option(token, argparse.SUPPRESS)
    return parser


def _key_commands(sub) -> None:
    export = sub.add_parser('export-keys', help='write every project secret key (as '
                            'stored: encrypted with [keystore] password) to a file')
    export.add_argument('path', help='the file to write (mode 0600)')
    imp = sub.add_parser('import-keys', help='store the keys of an export-keys file in '
                         'ZooKeeper')
    imp.add_argument('--force', action='store_true',
                     help='replace a different key already stored for a project')
    imp.add_argument('path', help='a file written by export-keys')
    delete = sub.add_parser('delete-keys', help="delete a project's secret keys from "
                            'ZooKeeper')
    delete.add_argument('connection', help='the connection of the project')
    delete.add_argument('project', help='the project name')
    for p in (export, imp, delete):
        _config_option(p, argparse.SUPPRESS)


def main(argv=None, out=None) -> int:
    out = out or sys.stdout
    args = _parser().parse_args(argv)
    if args.command in _KEY_COMMANDS:
        return _key_command(args, args.config or DEFAULT_CONFIG, out)
    if args.command == 'create-auth-token':
        return _create_auth_token(args, args.config or DEFAULT_CONFIG, out)
    if args.command == 'show-job':
        args.job, args.repos = args.repos[0], args.repos[1:]
    if args.command == 'tenant-conf-check':
        from zuul.configloader.tenant import tenant_conf_check
        args.config = args.config or DEFAULT_CONFIG
        rc = tenant_conf_check(args.config, out=out)
        if rc or not args.src_root:
            return rc
        args.repos, args.tenant, args.tenant_config = [], None, None
    try:
        if args.command == 'show-job':
            layout, tenant = _load(args, out)
        else:
            return _check(args, out)
    except _UsageError as e:
        print(f'zuul-admin {args.command}: {e}', file=sys.stderr)
        return 2
    except _NoConfigurationError as e:
        print(f'zuul-admin {args.command}: {e}', file=out)
        return 1
    return _show_job(layout, tenant, args, out)


_KEY_COMMANDS = ('export-keys', 'import-keys', 'delete-keys')


def _create_auth_token(args, config: str, out) -> int:
    from zuul.configloader.zuulconf import ZuulConfError, load_zuul_conf
    from zuul.lib.auth import AuthenticationError, Authenticators
    try:
        conf = load_zuul_conf(config)
    except ZuulConfError as e:
        print(f'zuul-admin create-auth-token: {e}', file=sys.stderr)
        return 2
    authenticator = Authenticators(conf.auth).by_name.get(args.auth_config)
    if authenticator is None:
        print(f'zuul-admin create-auth-token: no [auth {args.auth_config}] section in '
              f'{config} (there are: {", ".join(conf.auth) or "none"})', file=sys.stderr)
        return 1
    if args.expires_in <= 0:
        print('zuul-admin create-auth-token: --expires-in must be a positive number of '
              'seconds', file=sys.stderr)
        return 1
    try:
        token = authenticator.create_token(args.user, args.tenant, args.expires_in)
    except (AuthenticationError, OSError, ValueError) as e:
        print(f'zuul-admin create-auth-token: {e}', file=sys.stderr)
        return 1
    print(f'Bearer {token}', file=out)
    return 0


class _UsageError(Exception):
    pass


class _NoConfigurationError(Exception):
    """Nothing to check: the check fails rather than passing vacuously."""


_LOOKED_FOR = 'looked for zuul.yaml, zuul.d/, .zuul.yaml and .zuul.d/'


def _key_command(args, config: str, out) -> int:
    """export-keys, import-keys, delete-keys: against the ZooKeeper of
    ``config``."""
    from kazoo.exceptions import KazooException

    from zuul.configloader.zuulconf import ZuulConfError, load_zuul_conf
    from zuul.zk import keys
    err = f'zuul-admin {args.command}'
    try:
        conf = load_zuul_conf(config)
        records = keys.read_export(args.path) if args.command == 'import-keys' else None
    except (ZuulConfError, OSError) as e:
        print(f'{err}: {_os_error(e)}', file=sys.stderr)
        return 2
    except keys.KeyStoreError as e:
        print(f'{err}: {e}', file=sys.stderr)
        return 1
    client = _zookeeper(conf, err)
    if client is None:
        return 1
    try:
        return _run_key_command(args, conf, client, records, err, out)
    except keys.KeyStoreError as e:
        print(f'{err}: {e}', file=sys.stderr)
        return 1
    except OSError as e:
        print(f'{err}: {_os_error(e)}', file=sys.stderr)
        return 2
    except KazooException as e:
        print(f'{err}: ZooKeeper at {conf.zookeeper.hosts}: {type(e).__name__} {e}',
              file=sys.stderr)
        return 1
    finally:
        client.stop()
        client.close()


def _os_error(e) -> str:
    if isinstance(e, OSError) and e.filename:
        return f'{e.filename}: {e.strerror}'
    return str(e)


def _zookeeper(conf, err):
    """A started client for ``[zookeeper]``, or None (the error printed)."""
    from nodepool.zk.api import connect
    zk = conf.zookeeper
    try:
        return connect(zk.hosts, timeout=zk.session_timeout, tls=zk.tls(),
                       start_timeout=zk.session_timeout)
    except Exception as e:
        timed_out = 'time' in type(e).__name__.lower()
        why = f'no answer within {zk.session_timeout:g}s' if timed_out else \
            f'{type(e).__name__} {e}'
        print(f'{err}: cannot reach ZooKeeper at {zk.hosts} ([zookeeper] hosts of '
              f'{conf.path}): {why}', file=sys.stderr)
        return None


def _run_key_command(args, conf, client, records, err, out) -> int:
    from zuul.zk import keys
    if args.command == 'export-keys':
        count = keys.export_keys(client, args.path)
        print(f'exported the keys of {count} project(s) to {args.path}', file=out)
        return 0
    if args.command == 'import-keys':
        result = keys.import_keys(client, records, conf.keystore.password, force=args.force)
        print(f'imported the keys of {len(result.imported)} project(s), replaced '
              f'{len(result.replaced)}, {len(result.unchanged)} already present', file=out)
        for name in result.replaced:
            print(f'replaced the key of {name}', file=out)
        return 0
    if not keys.delete_keys(client, args.connection, args.project):
        print(f'{err}: no keys stored for project {args.project} (connection '
              f'{args.connection})', file=sys.stderr)
        return 1
    print(f'deleted the keys of project {args.project} (connection {args.connection})',
          file=out)
    from zuul.lib.keystore import KeyStore
    try:
        legacy = KeyStore(conf.scheduler.state_dir).path(args.connection, args.project)
    except ValueError:
        return 0
    if os.path.exists(legacy):
        print(f'warning: {legacy} (the key file of an earlier release) is still there: a '
              'scheduler imports it again on next use; remove it too', file=out)
    return 0


def _connections(args):
    """(connection -> driver, connection -> canonical hostname, zuul conf)."""
    if not args.config:
        return None, {}, None
    from zuul.configloader.zuulconf import ZuulConfError, load_zuul_conf
    try:
        conf = load_zuul_conf(args.config)
    except ZuulConfError as e:
        raise _UsageError(str(e)) from None
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
                raise _UsageError(f'{path}: {name or parent} is also given as a directory')
            files.append(path)
            continue
        if not os.path.isdir(path):
            raise _UsageError(f'{path}: no such file or directory')
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
        raise _UsageError(f'not projects of tenant {tenant.name}: '
                          f'{", ".join(sorted(dirs))}')
    if not files and not file_errors:
        where = f' under {args.src_root}' if args.src_root else ''
        raise _NoConfigurationError(f'tenant {tenant.name}: no configuration files found in the '
                               f'checkouts of its projects{where} ({_LOOKED_FOR})')
    return loader.load(tenant, files, file_errors=file_errors), tenant


def _load_checkouts(args, loader, dirs):
    from zuul.model.tenant import Tenant, TenantProject
    if not dirs:
        raise _UsageError('name at least one checkout ([NAME=]DIR), or --tenant')
    tenant = Tenant(name='')
    files, file_errors = [], []
    for name, path in dirs.items():
        tp = TenantProject(connection='', name=name, trusted=_config_project(path))
        f, e = _read(tp, path, args.branch)
        if not f and not e:
            raise _NoConfigurationError(f'{path}: no configuration files found ({_LOOKED_FOR})')
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
            raise _UsageError('the tenant file defines no tenant')
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
        raise _UsageError(f'{what} needs the tenant file: -c zuul.conf or --tenant-config')
    return load_tenant_config(path, set(conf.connections) if conf else None), path


def _tenant(args, conf):
    result, path = _tenant_file(args, conf)
    if args.tenant not in result.tenants:
        problems = '; '.join(str(e) for e in result.errors)
        raise _UsageError(f'no tenant "{args.tenant}" in {path}' +
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


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
