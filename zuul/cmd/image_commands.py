"""``zuul`` CLI commands for image builds of ``type: zuul`` images
(seed 001), over the scheduler's ``zuul:image_*`` RPC functions::

    zuul image-build --tenant T --image NAME     (alias: build-image)
    zuul image-list --tenant T [--image NAME]
    zuul image-upload-list --tenant T [--image NAME]
    zuul image-delete --tenant T --build UUID
"""

from __future__ import annotations

import time

from zuul.scheduler import rpc_protocol as p

VERBS = ('image-build', 'build-image', 'image-list', 'image-upload-list', 'image-delete')


def add_parsers(subs) -> None:
    sub = subs.add_parser('image-build', aliases=['build-image'],
                          help='build an image now (emit an image-build event)')
    sub.add_argument('--tenant', required=True)
    sub.add_argument('--image', required=True, help='the image name')
    for verb, what in (('image-list', 'builds'), ('image-upload-list', 'uploads')):
        sub = subs.add_parser(verb, help=f'list the image {what} of a tenant')
        sub.add_argument('--tenant', required=True)
        sub.add_argument('--image', help='only this image')
    sub = subs.add_parser('image-delete', help='delete an image build (and its uploads)')
    sub.add_argument('--tenant', required=True)
    sub.add_argument('--build', required=True, help='the build uuid (see image-list)')


def _when(ts) -> str:
    return time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(ts)) if ts else ''


def cmd_image(args, config, out) -> int:
    from zuul.cmd.client import print_table, rpc_call
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
                      _when(b.get('created'))) for b in builds], out)
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
