"""The ``nodepool`` CLI's image commands (built images and uploads).

    nodepool dib-image-list [--json]
    nodepool image-list [--json]
    nodepool image-build <image>
    nodepool dib-image-delete <image>-<build id>
    nodepool image-delete --provider P --image I --build-id B --upload-id U
    nodepool image-pause <image> / image-unpause <image>

Deletions only mark the record ``deleting``; nodepool-builder removes the
upload from the provider and the files from its disk.
"""

from __future__ import annotations

import sys

# client imports this module while it loads: use it through the module.
from nodepool.cmd import output
from nodepool.zk.images import (
    BUILDING,
    DELETING,
    UPLOADING,
    ImageBuild,
    ImageUpload,
    parse_build_display_id,
)

# Released Nodepool's columns, with the JSON key of each.
DIB_IMAGE_FIELDS = [
    ('id', 'ID'), ('image', 'Image'), ('builder', 'Builder'), ('formats', 'Formats'),
    ('state', 'State'), ('age', 'Age'),
]
IMAGE_FIELDS = [
    ('build_id', 'Build ID'), ('upload_id', 'Upload ID'), ('provider', 'Provider'),
    ('image', 'Image'), ('external_name', 'Provider Image Name'),
    ('external_id', 'Provider Image ID'), ('state', 'State'), ('age', 'Age'),
]


def _image_names(args, zk) -> list[str]:
    return sorted(set(zk.images.get_image_names()) | set(args.config_obj.diskimages))


def build_objects(args, zk) -> list[dict]:
    objs = []
    for name in _image_names(args, zk):
        for b in zk.images.get_builds(name):
            objs.append({'id': b.display_id, 'image': name, 'builder': b.builder,
                         'builder_id': b.builder_id, 'formats': list(b.formats),
                         'state': b.state, 'age': output.age(b.state_time),
                         'state_time': b.state_time, 'filename': b.filename})
    return objs


def upload_objects(args, zk) -> list[dict]:
    objs = []
    for name in _image_names(args, zk):
        for u in zk.images.get_uploads(name):
            objs.append({'build_id': u.build_id, 'upload_id': u.id,
                         'provider': u.provider_name, 'image': name,
                         'external_name': u.external_name, 'external_id': u.external_id,
                         'state': u.state, 'age': output.age(u.state_time),
                         'state_time': u.state_time, 'format': u.format,
                         'id': u.image_id})
    return objs


def dib_image_table(objs: list[dict]) -> str:
    return _table(objs, DIB_IMAGE_FIELDS)


def image_table(objs: list[dict]) -> str:
    return _table(objs, IMAGE_FIELDS)


def _table(objs: list[dict], fields) -> str:
    rows = [[','.join(o[k]) if isinstance(o[k], list) else o[k] for k, _ in fields]
            for o in objs]
    return output.render_table([h for _, h in fields], rows)


def cmd_dib_image_list(args, zk) -> int:
    objs = build_objects(args, zk)
    if args.json:
        output.print_json(objs)
    else:
        print(_table(objs, DIB_IMAGE_FIELDS))
    return 0


def cmd_image_list(args, zk) -> int:
    objs = upload_objects(args, zk)
    if args.json:
        output.print_json(objs)
    else:
        print(_table(objs, IMAGE_FIELDS))
    return 0


def _configured(args, image: str) -> bool:
    diskimage = args.config_obj.diskimages.get(image)
    if diskimage is None or diskimage.abstract:
        print(f'nodepool: no diskimage {image!r} to build in {args.config}', file=sys.stderr)
        return False
    return True


def cmd_image_build(args, zk) -> int:
    if not _configured(args, args.image):
        return 1
    if zk.images.request_build(args.image):
        print(f'Build of {args.image} requested')
    else:
        print(f'Build of {args.image} was already requested')
    if zk.images.is_image_paused(args.image) or args.config_obj.diskimages[args.image].pause:
        print(f'Note: {args.image} is paused; it is built once unpaused', file=sys.stderr)
    return 0


def cmd_image_pause(args, zk) -> int:
    if not _configured(args, args.image):
        return 1
    if args.verb == 'image-pause':
        zk.images.pause_image(args.image)
        print(f'Image {args.image} paused: no new builds until image-unpause')
    else:
        zk.images.unpause_image(args.image)
        print(f'Image {args.image} unpaused')
    return 0


def cmd_dib_image_delete(args, zk) -> int:
    parsed = parse_build_display_id(args.id)
    if parsed is None:
        print(f'nodepool: {args.id!r} is not a build id (<image>-<build id>, as '
              'dib-image-list shows)', file=sys.stderr)
        return 1
    image, build_id = parsed
    build: ImageBuild | None = zk.images.get_build(image, build_id)
    if build is None:
        print(f'nodepool: no build {args.id}', file=sys.stderr)
        return 1
    if build.state == BUILDING:
        print(f'nodepool: build {args.id} is still building; it cannot be deleted',
              file=sys.stderr)
        return 1
    if build.state != DELETING:
        build.set_state(DELETING)
        zk.images.store_build(image, build)
    print(f'Build {args.id} marked for deletion: its uploads, files and record are '
          'removed by nodepool-builder')
    return 0


def cmd_image_delete(args, zk) -> int:
    upload: ImageUpload | None = zk.images.get_upload(args.image, args.build_id,
                                                      args.provider, args.upload_id)
    what = f'{args.image}-{args.build_id}-{args.upload_id} in {args.provider}'
    if upload is None:
        print(f'nodepool: no upload {what}', file=sys.stderr)
        return 1
    if upload.state == UPLOADING:
        print(f'nodepool: upload {what} is still uploading; it cannot be deleted',
              file=sys.stderr)
        return 1
    if upload.state != DELETING:
        upload.set_state(DELETING)
        zk.images.store_upload(args.image, args.build_id, args.provider, upload)
    print(f'Upload {what} marked for deletion: nodepool-builder removes it from the '
          'provider')
    return 0


def add_image_commands(sub) -> None:
    s = sub.add_parser('dib-image-list', help='list image builds')
    s.add_argument('--json', action='store_true', help='a JSON list of objects')
    s.set_defaults(func=cmd_dib_image_list)
    s = sub.add_parser('image-list', help='list image uploads')
    s.add_argument('--json', action='store_true', help='a JSON list of objects')
    s.set_defaults(func=cmd_image_list)
    s = sub.add_parser('image-build', help='request a build of an image now')
    s.add_argument('image')
    s.set_defaults(func=cmd_image_build)
    s = sub.add_parser('dib-image-delete', help='delete a build (and its uploads)')
    s.add_argument('id', help='<image>-<build id>, as dib-image-list shows')
    s.set_defaults(func=cmd_dib_image_delete)
    s = sub.add_parser('image-delete', help='delete an upload from a provider')
    s.add_argument('--provider', required=True)
    s.add_argument('--image', required=True)
    s.add_argument('--build-id', required=True)
    s.add_argument('--upload-id', required=True)
    s.set_defaults(func=cmd_image_delete)
    for verb, text in (('image-pause', 'stop building an image'),
                       ('image-unpause', 'build an image again')):
        s = sub.add_parser(verb, help=text)
        s.add_argument('image')
        s.set_defaults(func=cmd_image_pause)
