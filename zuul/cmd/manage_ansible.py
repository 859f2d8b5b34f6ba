"""zuul-manage-ansible: install the Ansible versions jobs may ask for.

    zuul-manage-ansible [-v] [-u] [-r ROOT] [VERSION ...]
    zuul-manage-ansible -l

Each supported version goes into a virtual environment
``ROOT/<ansible-core major.minor>`` (ROOT defaults to
``<prefix>/lib/zuul/ansible``, where the executor looks first; set
``[executor] ansible_root`` to ROOT for any other place). The logic lives
in zuul.executor.ansible_versions.
"""

from __future__ import annotations

import argparse
import sys
import textwrap

from zuul.executor import ansible_versions as av

EPILOG = textwrap.dedent('''\
    Extra pip requirements for the installs (space-separated):
      ANSIBLE_EXTRA_PACKAGES            added to every version
      ANSIBLE_<VERSION>_EXTRA_PACKAGES  added to one version, named as -l
                                        lists it without dots
                                        (ANSIBLE_9_EXTRA_PACKAGES or
                                        ANSIBLE_216_EXTRA_PACKAGES)
    ''')


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog='zuul-manage-ansible', epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description='Install or upgrade the supported Ansible versions so the '
                    'executor can run jobs with any of them.')
    parser.add_argument('-v', dest='verbose', action='store_true',
                        help="verbose output (pip's own)")
    parser.add_argument('-u', dest='upgrade', action='store_true',
                        help='upgrade installed versions to their newest bugfix release')
    parser.add_argument('-l', dest='list_supported', action='store_true',
                        help='list the supported versions and exit')
    parser.add_argument('-r', dest='install_root', default=None,
                        help='installation root (default: '
                             f'{av.default_install_root()})')
    parser.add_argument('versions', nargs='*', metavar='VERSION',
                        help='install only these versions (default: all supported)')
    return parser


def list_supported(root: str) -> str:
    lines = []
    for major, core in av.SUPPORTED.items():
        path = av.install_dir(root, core)
        state = f'installed in {path}' if av.is_installed(path) else 'not installed'
        lines.append(f'{major} (ansible-core {core}): {state}')
    return '\n'.join(lines)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    root = args.install_root or av.default_install_root()
    if args.list_supported:
        print(list_supported(root))
        return 0
    try:
        for version in args.versions:
            av.core_version(version)
        av.install(root, args.versions, upgrade=args.upgrade, verbose=args.verbose)
    except (av.UnknownAnsibleVersionError, av.InstallError, OSError) as exc:
        print(f'zuul-manage-ansible: error: {exc}', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
