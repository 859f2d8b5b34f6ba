"""``zuul-admin``: offline administration commands.

- ``tenant-conf-check``: validate zuul.conf and the tenant file it names;
  with ``--src-root``, then check every tenant of it as ``config-check``
  does.
- ``config-check``: load in-repo configuration from local checkouts the
  way the scheduler would, freeze every project-pipeline's job graph and
  print every error (file, line, object, reason) and warning
  (zuul/configloader/admin_check.py says how checkouts are found).

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
import sys

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
        from zuul.zk.key_admin import key_command
        return key_command(args, args.config or DEFAULT_CONFIG, out)
    if args.command == 'create-auth-token':
        from zuul.configloader.zuulconf import ZuulConfError, load_zuul_conf
        from zuul.lib.auth import create_token_command
        try:
            conf = load_zuul_conf(args.config or DEFAULT_CONFIG)
        except ZuulConfError as e:
            print(f'zuul-admin create-auth-token: {e}', file=sys.stderr)
            return 2
        return create_token_command(args, args.config or DEFAULT_CONFIG, conf.auth, out)
    if args.command == 'show-job':
        args.job, args.repos = args.repos[0], args.repos[1:]
    if args.command == 'tenant-conf-check':
        from zuul.configloader.tenant import tenant_conf_check
        args.config = args.config or DEFAULT_CONFIG
        rc = tenant_conf_check(args.config, out=out)
        if rc or not args.src_root:
            return rc
        args.repos, args.tenant, args.tenant_config = [], None, None
    from zuul.configloader.admin_check import run
    return run(args, out)


_KEY_COMMANDS = ('export-keys', 'import-keys', 'delete-keys')


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
