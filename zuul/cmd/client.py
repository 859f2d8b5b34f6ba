"""The ``zuul`` command line client.

    zuul [-c zuul.conf] enqueue --tenant T --pipeline P --project PR --change N,P
    zuul enqueue-ref --tenant T --pipeline P --project PR --ref REF [--oldrev] [--newrev]
    zuul dequeue --tenant T --pipeline P --project PR (--change N,P | --ref REF)
    zuul promote --tenant T --pipeline P --changes N,P [N,P ...]
    zuul autohold --tenant T --project PR --job J [--change N,P | --ref RE] --reason R
                  [--count N] [--node-hold-expiration SECONDS]
    zuul autohold-list --tenant T
    zuul encrypt --tenant T --project PR [--infile F] [--outfile F]
                 [--secret-name N] [--field-name F] [--public-key FILE]
    zuul show [queues|running-jobs] --tenant T [--pipeline P]
    zuul flavor-list|label-list|provider-list --tenant T
    zuul image-build --tenant T --image I;  zuul image-list|image-upload-list --tenant T
    zuul image-delete --tenant T --build UUID
    zuul reproduce --tenant T UUID [--workdir DIR] [--host USER@ADDR | --prepare-only]
                   [--secret NAME=FILE ...] [--skip-trusted] [--git-url CONN=URL]

Commands other than ``encrypt`` talk to the scheduler over Gearman RPC
([gearman] in zuul.conf, or --gearman-server). ``reproduce`` fetches what
a build ran with from zuul-web (zuul/client/reproduce.py); ``encrypt`` fetches the
project's public key from zuul-web (--zuul-url, or [web] root / [webclient]
url in zuul.conf) unless --public-key names a PEM file. Errors print one
line on stderr and exit 1.
"""

from __future__ import annotations

import argparse
import re
import sys

from zuul.client.commands import COMMANDS, CLIError, cmd_image, read_config
from zuul.client.reproduce import add_parser as add_reproduce_parser
from zuul.client.reproduce import cmd_reproduce
from zuul.cmd import image_commands

# N,P: a change and patchset; N,SHA: a GitHub pull request and its head.
_CHANGE_RE = re.compile(r'^\d+,(\d+|[0-9a-f]{7,40})$')
_REV_RE = re.compile(r'^[0-9a-f]{40}$')


def change_id(value: str) -> str:
    if not _CHANGE_RE.match(value):
        raise argparse.ArgumentTypeError(
            f'malformed change "{value}": expected NUMBER,PATCHSET (e.g. 1234,2), or '
            'NUMBER,SHA for a GitHub pull request')
    return value


def revision(value: str) -> str:
    if not _REV_RE.match(value):
        raise argparse.ArgumentTypeError(f'malformed revision "{value}": expected 40 hex digits')
    return value


def ref_name(value: str) -> str:
    if not value.startswith('refs/'):
        raise argparse.ArgumentTypeError(f'malformed ref "{value}": expected refs/...')
    return value


# -- argument parsing --------------------------------------------------------------


def _req(sub, *names):
    for name in names:
        sub.add_argument(f'--{name}', required=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog='zuul', description='Zuul command line client.')
    parser.add_argument('-c', dest='config', help='zuul.conf (default /etc/zuul/zuul.conf)')
    parser.add_argument('--gearman-server', help='HOST[:PORT] of the Gearman server')
    parser.add_argument('--zuul-url', help='zuul-web base URL (encrypt)')
    parser.add_argument('--timeout', type=float, default=300.0,
                        help='seconds to wait for the scheduler')
    subs = parser.add_subparsers(dest='command', required=True, metavar='COMMAND')

    sub = subs.add_parser('enqueue', help='enqueue a change into a pipeline')
    _req(sub, 'tenant', 'pipeline', 'project')
    sub.add_argument('--change', required=True, type=change_id)

    sub = subs.add_parser('enqueue-ref', help='enqueue a ref (branch or tag) into a pipeline')
    _req(sub, 'tenant', 'pipeline', 'project')
    sub.add_argument('--ref', required=True, type=ref_name)
    sub.add_argument('--oldrev', type=revision)
    sub.add_argument('--newrev', type=revision)

    sub = subs.add_parser('dequeue', help='remove a change or ref from a pipeline')
    _req(sub, 'tenant', 'pipeline', 'project')
    target = sub.add_mutually_exclusive_group(required=True)
    target.add_argument('--change', type=change_id)
    target.add_argument('--ref', type=ref_name)

    sub = subs.add_parser('promote', help='move changes to the head of their shared queue')
    _req(sub, 'tenant', 'pipeline')
    sub.add_argument('--changes', required=True, nargs='+', type=change_id)

    sub = subs.add_parser('autohold', help="keep the nodes of a job's next failing build")
    _req(sub, 'tenant', 'project', 'job', 'reason')
    target = sub.add_mutually_exclusive_group()
    target.add_argument('--change', type=change_id)
    target.add_argument('--ref', help='regex matched against the build ref')
    sub.add_argument('--count', type=int, default=1)
    sub.add_argument('--node-hold-expiration', type=int, default=86400,
                     help='seconds to keep the nodes (0: until deleted)')

    sub = subs.add_parser('autohold-list', help='list autohold requests')
    _req(sub, 'tenant')

    _add_launcher_list_parsers(subs)
    image_commands.add_parsers(subs)

    sub = subs.add_parser('encrypt', help='encrypt a secret for a project')
    _req(sub, 'tenant', 'project')
    sub.add_argument('--infile', help='read the secret from this file (default stdin)')
    sub.add_argument('--outfile', help='write the stanza here (default stdout)')
    sub.add_argument('--secret-name', default='secret_name')
    sub.add_argument('--field-name', default='secret')
    sub.add_argument('--public-key', help='PEM file to use instead of asking zuul-web')

    add_reproduce_parser(subs)

    sub = subs.add_parser('show', help='show queues or running jobs')
    sub.add_argument('what', nargs='?', default='queues', choices=('queues', 'running-jobs'))
    _req(sub, 'tenant')
    sub.add_argument('--pipeline')
    return parser

def _add_launcher_list_parsers(subs) -> None:
    for verb, what in (('flavor-list', 'flavor'), ('label-list', 'label'),
                       ('provider-list', 'provider')):
        sub = subs.add_parser(verb, help=f'list the {what} objects of a tenant')
        _req(sub, 'tenant')


def main(argv=None, out=None) -> int:
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    commands = {**COMMANDS, **dict.fromkeys(image_commands.VERBS, cmd_image),
                'reproduce': cmd_reproduce}
    try:
        config = read_config(args.config)
        code = commands[args.command](args, config, out)
    except CLIError as e:
        print(f'zuul: error: {e}', file=sys.stderr)
        return 1
    # reproduce: the exit status of the reproduced run
    return code if args.command == 'reproduce' else 0


if __name__ == '__main__':
    raise SystemExit(main())
