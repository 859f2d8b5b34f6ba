"""Where Nodepool keeps things in ZooKeeper (seed 000)."""

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
