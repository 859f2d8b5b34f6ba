"""``zuul`` CLI commands for image builds of ``type: zuul`` images
(seed 001), over the scheduler's ``zuul:image_*`` RPC functions (the
parsers; zuul/client/commands.py ``cmd_image`` runs them)::

    zuul image-build --tenant T --image NAME     (alias: build-image)
    zuul image-list --tenant T [--image NAME]
    zuul image-upload-list --tenant T [--image NAME]
    zuul image-delete --tenant T --build UUID
"""

from __future__ import annotations

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
