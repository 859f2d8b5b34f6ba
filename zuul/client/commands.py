"""What the ``zuul`` command does (zuul/cmd/client.py parses its
arguments): each command's RPC call to the scheduler over Gearman
([gearman] in zuul.conf, or --gearman-server) and what it prints;
``encrypt`` fetches the project's public key from zuul-web (--zuul-url,
or [web] root / [webclient] url in zuul.conf) unless --public-key names
a PEM file.  A command raises CLIError with one line to print."""

from __future__ import annotations

import configparser
import json
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from zuul.lib import rpc_protocol as p


class CLIError(Exception):
    pass


def read_config(path: str | None) -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    if path and not config.read(path):
        raise CLIError(f'cannot read {path}')
    if not path:
        config.read('/etc/zuul/zuul.conf')
    return config


def gearman_address(args, config) -> tuple[str, int]:
    if args.gearman_server:
        host, _, port = args.gearman_server.partition(':')
        return host, int(port or 4730)
    if not config.has_section('gearman'):
        raise CLIError('no Gearman server: give -c zuul.conf or --gearman-server')
    return (config.get('gearman', 'server', fallback='127.0.0.1'),
            config.getint('gearman', 'port', fallback=4730))


def web_url(args, config) -> str:
    """--zuul-url, [webclient] url, [web] root; else, with a [web]
    section (zuul-web runs on this host on that zuul.conf, as in the
    quickstart), the address and port it listens on."""
    url = args.zuul_url or config.get('webclient', 'url', fallback=None) or \
        config.get('web', 'root', fallback=None)
    if not url and config.has_section('web'):
        host = config.get('web', 'listen_address', fallback='127.0.0.1')
        if host in ('', '0.0.0.0', '::'):
            host = '127.0.0.1'
        if ':' in host:
            host = f'[{host}]'
        url = f'http://{host}:{config.getint("web", "port", fallback=9000)}'
    if not url:
        raise CLIError('no zuul-web URL: give --zuul-url or [web] root in zuul.conf')
    return url.rstrip('/')


# -- RPC commands --------------------------------------------------------------------


def rpc_call(args, config, function, **fields):
    from zuul.lib.gearlib import GearTLS
    from zuul.lib.rpc import RPCClient
    host, port = gearman_address(args, config)
    try:
        client = RPCClient(host, port, timeout=args.timeout, tls=GearTLS.from_config(config))
    except Exception as e:
        raise CLIError(f'cannot reach the Gearman server at {host}:{port}: {e}') from None
    try:
        return client.call(function, p.RPCRequest(**fields))
    except (p.RPCError, TimeoutError) as e:
        raise CLIError(str(e)) from None
    finally:
        client.shutdown()


def cmd_enqueue(args, config, out):
    rpc_call(args, config, p.ENQUEUE, tenant=args.tenant, pipeline=args.pipeline,
             project=args.project, change=args.change)
    print(f'Enqueued {args.change} of {args.project} into {args.pipeline}', file=out)


def cmd_enqueue_ref(args, config, out):
    rpc_call(args, config, p.ENQUEUE_REF, tenant=args.tenant, pipeline=args.pipeline,
             project=args.project, ref=args.ref, oldrev=args.oldrev, newrev=args.newrev)
    print(f'Enqueued {args.ref} of {args.project} into {args.pipeline}', file=out)


def cmd_dequeue(args, config, out):
    rpc_call(args, config, p.DEQUEUE, tenant=args.tenant, pipeline=args.pipeline,
             project=args.project, change=args.change, ref=args.ref)
    print(f'Dequeued {args.change or args.ref} from {args.pipeline}', file=out)


def cmd_promote(args, config, out):
    rpc_call(args, config, p.PROMOTE, tenant=args.tenant, pipeline=args.pipeline,
             changes=args.changes)
    print(f'Promoted {" ".join(args.changes)} in {args.pipeline}', file=out)


def cmd_autohold(args, config, out):
    if args.count < 1:
        raise CLIError('--count must be at least 1')
    if args.node_hold_expiration < 0:
        raise CLIError('--node-hold-expiration must not be negative')
    if args.ref:
        try:
            re.compile(args.ref)
        except re.error as e:
            raise CLIError(f'--ref is not a valid regular expression: {e}') from None
    result = rpc_call(args, config, p.AUTOHOLD, tenant=args.tenant, project=args.project,
                      job=args.job, change=args.change, ref=args.ref, reason=args.reason,
                      count=args.count, node_hold_expiration=args.node_hold_expiration)
    print(f'Autohold request {result["id"]}: nodes of the next {args.count} failing '
          f'build(s) of {args.job} on {args.project} ({result["ref_filter"]}) will be held',
          file=out)


def cmd_autohold_list(args, config, out):
    holds = rpc_call(args, config, p.AUTOHOLD_LIST, tenant=args.tenant)
    rows = [(h['id'], h['project'], h['job'], h['ref_filter'],
             f'{h["current_count"]}/{h["max_count"]}', h.get('reason', '')) for h in holds]
    print_table(('ID', 'Project', 'Job', 'Ref filter', 'Count', 'Reason'), rows, out)


# -- seed 001's node and image objects ---------------------------------------------------

# verb -> (RPC function, table headers, row of one entry)
LAUNCHER_LISTS = {
    'flavor-list': (p.LAUNCHER_FLAVOR_LIST, ('Name', 'Canonical name', 'Description'),
                    lambda e: (e['name'], e['canonical_name'], e.get('description'))),
    'label-list': (p.LAUNCHER_LABEL_LIST,
                   ('Name', 'Image', 'Flavor', 'Min ready', 'Canonical name'),
                   lambda e: (e['name'], e.get('image'), e.get('flavor'),
                              e.get('min_ready', 0), e['canonical_name'])),
    'provider-list': (p.LAUNCHER_PROVIDER_LIST,
                      ('Name', 'Section', 'Connection', 'Labels', 'Canonical name'),
                      lambda e: (e['name'], e['section'], e.get('connection'),
                                 ' '.join(e.get('labels') or ()), e['canonical_name'])),
}




def cmd_launcher_list(args, config, out):
    function, headers, row = LAUNCHER_LISTS[args.command]
    entries = rpc_call(args, config, function, tenant=args.tenant)
    print_table(headers, [row(e) for e in entries], out)


# -- show ----------------------------------------------------------------------------------


def print_table(headers, rows, out):
    rows = [tuple('' if c is None else str(c) for c in row) for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    for row in [tuple(headers)] + rows:
        print('  '.join(c.ljust(w) for c, w in zip(row, widths)).rstrip(), file=out)


def _age(ms):
    if not ms:
        return ''
    seconds = int(time.time() - ms / 1000)
    return f'{seconds // 3600}h{seconds // 60 % 60:02d}m' if seconds >= 3600 else \
        f'{seconds // 60}m{seconds % 60:02d}s'


def _walk(status, pipeline_filter):
    for pl in status['pipelines']:
        if pipeline_filter and pl['name'] != pipeline_filter:
            continue
        for queue in pl['change_queues']:
            for head in queue['heads']:
                position = 0
                for item in head:
                    position += 1 if item.get('live', True) else 0
                    yield pl, queue, position, item


def cmd_show(args, config, out):
    status = rpc_call(args, config, p.STATUS_GET, tenant=args.tenant)
    names = [pl['name'] for pl in status['pipelines']]
    if args.pipeline and args.pipeline not in names:
        raise CLIError(f'Unknown pipeline {args.pipeline} in tenant {args.tenant}')
    if args.what == 'queues':
        rows = [(pl['name'], q['name'], pos if item.get('live', True) else '-', item['id'],
                 item['project'], _age(item.get('enqueue_time')),
                 sum(1 for j in item['jobs'] if j.get('result')), len(item['jobs']))
                for pl, q, pos, item in _walk(status, args.pipeline)]
        rows = [r[:6] + (f'{r[6]}/{r[7]}',) for r in rows]
        print_table(('Pipeline', 'Queue', 'Pos', 'Change', 'Project', 'Age', 'Jobs done'),
                    rows, out)
        return
    rows = []
    for pl, _, _, item in _walk(status, args.pipeline):
        for job in item['jobs']:
            if job.get('start_time') and not job.get('result'):
                rows.append((pl['name'], item['id'], item['project'], job['name'],
                             job.get('uuid'), _age(job['start_time']), job.get('url')))
    print_table(('Pipeline', 'Change', 'Project', 'Job', 'Build', 'Elapsed', 'Live log'),
                rows, out)


# -- encrypt -------------------------------------------------------------------------------


def fetch_public_key(args, config) -> bytes:
    if args.public_key:
        with open(args.public_key, 'rb') as f:
            return f.read()
    base = web_url(args, config)
    url = (f'{base}/api/tenant/{urllib.parse.quote(args.tenant, safe="")}/key/'
           f'{urllib.parse.quote(args.project, safe="/")}.pub')
    try:
        with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310
            return response.read()
    except urllib.error.HTTPError as e:
        try:
            message = json.loads(e.read()).get('error', e.reason)
        except ValueError:
            message = e.reason
        raise CLIError(f'cannot get the public key of {args.project}: {message}') from None
    except OSError as e:
        raise CLIError(f'cannot reach zuul-web at {base}: {e}') from None


def encrypt_chunks(public_pem: bytes, plaintext: bytes) -> list[str]:
    """RSA-OAEP chunks (base64) of ``plaintext`` for the PEM public key."""
    from zuul.lib import encryption
    try:
        key = encryption.deserialize_public_key(public_pem)
    except ValueError as e:
        raise CLIError(f'not a PEM public key: {e}') from None
    return encryption.encrypt_chunks(plaintext, key)


def secret_stanza(name: str, field: str, chunks: list[str]) -> str:
    lines = ['- secret:', f'    name: {name}', '    data:',
             f'      {field}: !encrypted/pkcs1-oaep']
    lines += [f'        - {chunk}' for chunk in chunks]
    return '\n'.join(lines) + '\n'


def cmd_encrypt(args, config, out):
    pem = fetch_public_key(args, config)
    if args.infile:
        with open(args.infile, 'rb') as f:
            plaintext = f.read()
    else:
        plaintext = sys.stdin.buffer.read()
    stanza = secret_stanza(args.secret_name, args.field_name, encrypt_chunks(pem, plaintext))
    if args.outfile:
        with open(args.outfile, 'w', encoding='utf-8') as f:
            f.write(stanza)
    else:
        out.write(stanza)


def _image_time(ts) -> str:
    return time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(ts)) if ts else ''


def cmd_image(args, config, out) -> int:
    from zuul.lib import rpc_protocol as p
    verb = args.command
    if verb in ('image-build', 'build-image'):
        result = rpc_call(args, config, p.IMAGE_BUILD, tenant=args.tenant, image=args.image)
        print(f'Image build of {result["image"]} requested (event {result["event_id"]})',
              file=out)
    elif verb == 'image-list':
        builds = rpc_call(args, config, p.IMAGE_BUILD_LIST, tenant=args.tenant,
                          image=args.image)
        print_table(('UUID', 'Image', 'Build', 'State', 'Validated', 'Formats', 'Uploads',
                     'Created'),
                    [(b['uuid'], b['image_name'], b['build_id'], b['state'], b['validated'],
                      ','.join(sorted(b['artifacts'])), len(b['uploads']),
                      _image_time(b.get('created'))) for b in builds], out)
    elif verb == 'image-upload-list':
        uploads = rpc_call(args, config, p.IMAGE_UPLOAD_LIST, tenant=args.tenant,
                           image=args.image)
        print_table(('UUID', 'Image', 'Build', 'Provider', 'State', 'Validated',
                     'External id'),
                    [(u['uuid'], u['image_name'], u['build_id'], u['provider'], u['state'],
                      u['validated'], u.get('external_id')) for u in uploads], out)
    else:
        rpc_call(args, config, p.IMAGE_DELETE, tenant=args.tenant, build=args.build)
        print(f'Image build {args.build} will be deleted', file=out)
    return 0


COMMANDS = {
    'enqueue': cmd_enqueue, 'enqueue-ref': cmd_enqueue_ref, 'dequeue': cmd_dequeue,
    'promote': cmd_promote, 'autohold': cmd_autohold, 'autohold-list': cmd_autohold_list,
    'show': cmd_show, 'encrypt': cmd_encrypt,
}
COMMANDS.update(dict.fromkeys(LAUNCHER_LISTS, cmd_launcher_list))
