"""zuul-web's image build endpoints (seed 001), read-only::

    GET /api/tenant/<tenant>/image-builds[?image=NAME]
    GET /api/tenant/<tenant>/image-uploads[?image=NAME]

answered over the scheduler's ``zuul:image_build_list`` and
``zuul:image_upload_list`` RPC functions.  Building and deleting are
CLI commands (``zuul image-build``, ``zuul image-delete``): this web
server has no authentication, so it offers no write endpoints.
(``/images`` lists the image *objects* of the tenant's configuration.)
"""

from __future__ import annotations

from zuul.scheduler import rpc_protocol as p

ROUTES = {'image-builds': p.IMAGE_BUILD_LIST, 'image-uploads': p.IMAGE_UPLOAD_LIST}


def image_route(api, tenant: str, what: str, kw: dict):
    from zuul.web.api import HTTPError
    unknown = set(kw) - {'image'}
    if unknown:
        raise HTTPError(400, f'unexpected parameter(s): {", ".join(sorted(unknown))}')
    image = kw.get('image') or None
    if image is not None and not isinstance(image, str):
        raise HTTPError(400, 'give image once')
    return api._call(ROUTES[what], tenant=tenant, image=image)
