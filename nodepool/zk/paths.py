"""Where Nodepool keeps things in ZooKeeper (seed 000), and where
zuul-launcher keeps the same kinds of records (seed 001).

The module-level names are Nodepool's tree.  ``ZKPaths`` names one tree
of requests/nodes/launchers; ``NODEPOOL`` is Nodepool's and
``ZUUL_LAUNCHER`` is zuul-launcher's (``/zuul/node-requests``,
``/zuul/nodes``), so the same typed API (nodepool/zk/api.py) and the same
requestor client (nodepool/zk/requestor.py) serve both systems.
"""

from dataclasses import dataclass

ROOT = '/nodepool'
REQUEST_ROOT = f'{ROOT}/requests'
REQUEST_LOCK_ROOT = f'{ROOT}/requests-lock'
NODE_ROOT = f'{ROOT}/nodes'
LAUNCHER_ROOT = f'{ROOT}/launchers'


def request_path(request_id: str) -> str:
    return f'{REQUEST_ROOT}/{request_id}'


def request_lock_path(request_id: str) -> str:
    return f'{REQUEST_LOCK_ROOT}/{request_id}'


def node_path(node_id: str) -> str:
    return f'{NODE_ROOT}/{node_id}'


def node_lock_path(node_id: str) -> str:
    return f'{NODE_ROOT}/{node_id}/lock'


def launcher_path(launcher_id: str) -> str:
    return f'{LAUNCHER_ROOT}/{launcher_id}'


# -- images (seed 002) ---------------------------------------------------------

IMAGE_ROOT = f'{ROOT}/image'


def image_path(image: str) -> str:
    return f'{IMAGE_ROOT}/{image}'


def builds_path(image: str) -> str:
    return f'{IMAGE_ROOT}/{image}/builds'


def build_path(image: str, build_id: str) -> str:
    return f'{IMAGE_ROOT}/{image}/builds/{build_id}'


def build_lock_path(image: str) -> str:
    """Held by the one builder building ``image`` right now."""
    return f'{IMAGE_ROOT}/{image}/builds/lock'


def request_build_path(image: str) -> str:
    """The on-demand flag: present while a build has been asked for."""
    return f'{IMAGE_ROOT}/{image}/request-build'


def image_pause_path(image: str) -> str:
    """Present while ``nodepool image-pause`` holds the image's builds."""
    return f'{IMAGE_ROOT}/{image}/pause'


def build_providers_path(image: str, build_id: str) -> str:
    return f'{IMAGE_ROOT}/{image}/builds/{build_id}/provider'


def uploads_path(image: str, build_id: str, provider: str) -> str:
    return f'{IMAGE_ROOT}/{image}/builds/{build_id}/provider/{provider}/images'


def upload_path(image: str, build_id: str, provider: str, upload_id: str) -> str:
    return f'{uploads_path(image, build_id, provider)}/{upload_id}'


def upload_lock_path(image: str, build_id: str, provider: str) -> str:
    """Held while one builder uploads (or deletes) this build in this provider."""
    return f'{uploads_path(image, build_id, provider)}/lock'


# -- one tree of requests and nodes ------------------------------------------------


@dataclass(frozen=True)
class ZKPaths:
    """The request, node and launcher roots of one node system."""

    request_root: str
    request_lock_root: str
    node_root: str
    launcher_root: str

    def request_path(self, request_id: str) -> str:
        return f'{self.request_root}/{request_id}'

    def request_lock_path(self, request_id: str) -> str:
        return f'{self.request_lock_root}/{request_id}'

    def node_path(self, node_id: str) -> str:
        return f'{self.node_root}/{node_id}'

    def node_lock_path(self, node_id: str) -> str:
        return f'{self.node_root}/{node_id}/lock'

    def launcher_path(self, launcher_id: str) -> str:
        return f'{self.launcher_root}/{launcher_id}'


NODEPOOL = ZKPaths(REQUEST_ROOT, REQUEST_LOCK_ROOT, NODE_ROOT, LAUNCHER_ROOT)

ZUUL_ROOT = '/zuul'
ZUUL_LAUNCHER = ZKPaths(request_root=f'{ZUUL_ROOT}/node-requests',
                        request_lock_root=f'{ZUUL_ROOT}/node-requests-lock',
                        node_root=f'{ZUUL_ROOT}/nodes',
                        launcher_root=f'{ZUUL_ROOT}/launchers')
